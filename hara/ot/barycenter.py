"""Batched linearized FGW barycenters of outcome groups [R].

Input: N rollout rows h (N, n, d) with a token mask (N, n) and the outcome group of every row, group (N,) in
[0, G) (groups may have different sizes; no padding slots). Optional per-group whitening (shift mu (G, d), scale
c (G,)): the problem is solved for h' = c (h - mu) without materialising h' (see
:func:`hara.ot.linearized.linearized_cost`). Per group, under no_grad:

1. init X (G, k, d) by position-binned means (token t goes to the grid point nearest to p_t; empty bins are
   filled by linear interpolation along j);
2. repeat up to ``barycenter_iters`` times, stopping when ||X_new - X|| / ||X|| < ``barycenter_tol`` in every group:
   K_r from X, T_r = Sinkhorn(a_r, q, K_r, eps) warm-started from the previous potentials, and
   X_j = sum_r sum_t T_r[t,j] h'_{r,t} / sum_r sum_t T_r[t,j] (barycentric projection);
3. final plans with the final X (optionally leave-one-out: each rollout against the barycenter of the others).

eps = eps_rel * mean(K) per group, fixed at the first iteration. Each group stops on its own (its rows are frozen
once its support has settled), and the final plans are solved until every row's marginal error is below
``marginal_tol``; Sinkhorn budgets grow as 1 / eps_rel, since the iterations Sinkhorn needs do. fp32 or fp64 (the
accumulators follow the input), device-agnostic. The O(n k d) work is one
cost GEMM and one projection GEMM per iteration (plus one binning GEMM for the init and the final cost GEMM);
Sinkhorn is O(n k) per iteration. benchmarks/bench_novelty.py times it against exactly these GEMMs.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch
from torch import Tensor

from hara.knobs import knob
from hara.ot.diagnostics import order_reversing_mass
from hara.ot.linearized import (
    centered_sqnorm,
    linearized_cost,
    position_cost,
    support_positions,
    token_log_weights,
    token_positions,
)
from hara.ot.sinkhorn import SOLVERS, SinkhornResult, flush_denormals

__all__ = [
    "BarycenterConfig",
    "BarycenterResult",
    "GroupedStates",
    "barycentric_projection",
    "init_support",
    "linearized_barycenter",
]


#: The eps_rel at which the Sinkhorn budgets of BarycenterConfig are stated (docs/method.md, "Transport and convergence").
BUDGET_EPS_REL = 0.05


@dataclass(frozen=True)
class BarycenterConfig:
    """Knobs of the barycenter loop; defaults are docs/method.md's choices.

    barycenter_size: k supports. alpha: FGW trade-off (0 = W, 1 = GW). eps_rel: eps = eps_rel * mean(K).
    barycenter_iters / barycenter_tol: iterations I_b and the relative-change stop (per group: a settled group's
    rows are not iterated again). sinkhorn_max_iter: cap per barycenter iteration at eps_rel >= 0.05
    (warm-started; the novelty ranking is stable after ~20), multiplied by 0.05 / eps_rel below it.
    sinkhorn_tol / check_every: marginal-error stop of those solves (per row), checked every few iterations.
    marginal_tol / final_max_iter: the final plans run until each row's L1 row-marginal error is below
    marginal_tol, within final_max_iter iterations (at eps_rel >= 0.05, scaled like sinkhorn_max_iter); a row that
    misses it is counted as unconverged. absorb_every: absorption period of the scaling solver. solver: "scaling"
    (default, fast) or "log". leave_one_out: final plans against the barycenter of the other rollouts.
    exact_max_iter / exact_tol: budget of POT's barycenter solver in the exact backend (:mod:`hara.ot.exact`).
    structure: the FGW structure matrices, "position" (1-D, |p_t - p_t'|; what the linearization needs) or
    "hidden" (distances between a rollout's own hidden states; exact backend only, see :mod:`hara.ot.exact`).
    """

    barycenter_size: int = knob(16, "k, the number of barycenter supports.", minimum=2, maximum=4096)
    alpha: float = knob(0.5, "FGW trade-off (0 = W, 1 = GW).", minimum=0, maximum=1)
    eps_rel: float = knob(
        0.05, "Sinkhorn epsilon relative to the mean cost (eps = eps_rel * mean(K)).", exclusiveMinimum=0, maximum=10
    )
    barycenter_iters: int = knob(5, "Barycenter iterations I_b.", minimum=1, maximum=1000)
    barycenter_tol: float = knob(1e-3, "Relative-change stop of the barycenter loop.", minimum=0, maximum=1)
    sinkhorn_max_iter: int = knob(
        20,
        "Sinkhorn iterations cap per barycenter iteration (warm-started) at eps_rel >= 0.05; multiplied by 0.05 / "
        "eps_rel below it.",
        minimum=1,
        maximum=100000,
    )
    sinkhorn_tol: float = knob(
        1e-4, "Sinkhorn marginal-error stop of the barycenter iterations (per row).", minimum=0, maximum=1
    )
    marginal_tol: float = knob(
        5e-3,
        "The final plans are solved until each rollout's L1 row-marginal error is below this; rows that miss it "
        "within final_max_iter are counted (hara/sinkhorn_unconverged) and warned about once per run.",
        exclusiveMinimum=0,
        maximum=1,
    )
    final_max_iter: int = knob(
        1000,
        "Sinkhorn budget of the final plans at eps_rel >= 0.05; multiplied by 0.05 / eps_rel below it.",
        minimum=1,
        maximum=1000000,
    )
    check_every: int = knob(10, "Sinkhorn error check period (iterations).", minimum=1, maximum=10000)
    absorb_every: int = knob(10, "Absorption period of the scaling solver.", minimum=1, maximum=10000)
    solver: str = knob("scaling", "Sinkhorn solver: scaling (fast) or log.", enum=["scaling", "log"])
    leave_one_out: bool = knob(False, "Final plans against the barycenter of the other rollouts.")
    exact_max_iter: int = knob(
        20, "Iteration budget of POT's barycenter solver (exact backend: hara_exact_*).", minimum=1, maximum=100000
    )
    exact_tol: float = knob(1e-5, "Tolerance of POT's barycenter solver (exact backend).", minimum=0, maximum=1)
    structure: str = knob(
        "position",
        "FGW structure matrices - position (1-D |p_t - p_t'|, the only one the linearization supports) or hidden "
        "(distances between a rollout's own hidden states, learned barycenter structure; hara_exact_* only).",
        enum=["position", "hidden"],
    )

    def __post_init__(self) -> None:
        if self.barycenter_size < 2:
            raise ValueError(f"barycenter_size must be >= 2, got {self.barycenter_size}")
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {self.alpha}")
        if min(self.barycenter_iters, self.sinkhorn_max_iter, self.final_max_iter) < 1:
            raise ValueError("barycenter_iters, sinkhorn_max_iter and final_max_iter must be >= 1")
        if self.structure not in ("position", "hidden"):
            raise ValueError(f"structure must be 'position' or 'hidden', got {self.structure!r}")
        if self.marginal_tol <= 0:
            raise ValueError(f"marginal_tol must be > 0, got {self.marginal_tol}")
        if self.eps_rel <= 0:
            raise ValueError(f"eps_rel must be > 0, got {self.eps_rel}")
        if self.solver not in SOLVERS:
            raise ValueError(f"solver must be one of {sorted(SOLVERS)}, got {self.solver!r}")

    def budget(self, iterations: int) -> int:
        """A Sinkhorn budget stated at eps_rel = BUDGET_EPS_REL, scaled for this eps_rel: the iterations Sinkhorn
        needs to reach a given marginal error grow as 1 / eps (at eps_rel 0.005 the 20-iteration cap left row
        errors of 0.26-0.39 and rank agreement with the converged novelty of 0.79)."""
        return math.ceil(iterations * max(1.0, BUDGET_EPS_REL / self.eps_rel))


@dataclass(frozen=True)
class GroupedStates:
    """The hidden-state trajectories a barycenter loop averages, per group, and how each group is whitened.

    h (N, n, d) fp32 or fp64 and finite everywhere (padding included: padding is multiplied by zero weights, never
    selected, so it must not hold NaN/Inf), mask (N, n) bool, group (N,) long in [0, num_groups), shift (G, d) and
    scale (G,) the whitening of each group (None: identity), sqnorm (N, n) = ||h - shift||^2 if already known.
    """

    h: Tensor
    mask: Tensor
    group: Tensor
    num_groups: int
    shift: Tensor | None = None
    scale: Tensor | None = None
    sqnorm: Tensor | None = None


@dataclass
class BarycenterResult:
    """support X (G, k, d) in whitened space; plan T (N, n, k); cost K (N, n, k) whose <T, K> is the novelty;
    eps (G,); positions p (N, n); order_reversing_mass R(T) (N,); info: floats (iterations, errors, time)."""

    support: Tensor
    plan: Tensor
    cost: Tensor
    eps: Tensor
    positions: Tensor
    order_reversing_mass: Tensor
    info: dict[str, float] = field(default_factory=dict)


def barycentric_projection(plan: Tensor, h: Tensor, group: Tensor, num_groups: int) -> tuple[Tensor, ...]:
    """Per-row sums sum_t T[b,t,j] h[b,t] (N, k, d) and masses sum_t T[b,t,j] (N, k), and their group totals
    (G, k, d), (G, k). plan (N, n, k), h (N, n, d), group (N,). One (k, n) @ (n, d) GEMM per row."""
    row_num, row_mass = torch.bmm(plan.transpose(1, 2), h), plan.sum(1)
    num = row_num.new_zeros(num_groups, *row_num.shape[1:]).index_add_(0, group, row_num)
    mass = row_mass.new_zeros(num_groups, row_mass.shape[1]).index_add_(0, group, row_mass)
    return num, mass, row_num, row_mass


def _whiten_means(num: Tensor, mass: Tensor, shift: Tensor | None, scale: Tensor | None) -> Tensor:
    """c (num / mass - mu): raw-space weighted means (..., k, d) mapped to whitened space; shift (..., d)."""
    mean = num / mass.clamp_min(1e-30)[..., None]
    if shift is not None:
        mean = mean - shift[..., None, :]
    return mean if scale is None else mean * scale[..., None, None]


def init_support(
    h: Tensor,
    mask: Tensor,
    p: Tensor,
    group: Tensor,
    num_groups: int,
    k: int,
    shift: Tensor | None = None,
    scale: Tensor | None = None,
) -> Tensor:
    """Position-binned means X0 (G, k, d) (whitened space) of the valid tokens of each group.

    h (N, n, d), mask (N, n), p (N, n), group (N,). Bin j collects tokens with round(p (k-1)) = j: a 0/1 "plan"
    fed to the barycentric projection. An empty bin is linearly interpolated between the nearest non-empty bins
    on each side (or copies the one that exists).
    """
    bins = torch.round(p * (k - 1)).long().clamp(0, k - 1)
    onehot = torch.nn.functional.one_hot(bins, k).to(h.dtype) * mask[..., None].to(h.dtype)
    num, counts, _, _ = barycentric_projection(onehot, h, group, num_groups)
    return _interpolate_empty(_whiten_means(num, counts, shift, scale), counts > 0)


def _interpolate_empty(means: Tensor, filled: Tensor) -> Tensor:
    """Fill bins with filled = False (G, k) by interpolating means (G, k, d) between neighbouring filled bins."""
    G, k, d = means.shape
    j = torch.arange(k, device=means.device)
    prev = torch.cummax(torch.where(filled, j, torch.full_like(j, -1)), dim=1).values
    nxt = torch.where(filled, j, torch.full_like(j, k)).flip(1).cummin(dim=1).values.flip(1)
    has_prev, has_next = prev >= 0, nxt < k
    prev_c, next_c = prev.clamp(0, k - 1), nxt.clamp(0, k - 1)
    span = (next_c - prev_c).clamp_min(1).to(means.dtype)
    w = torch.where(has_prev & has_next, (j - prev_c).to(means.dtype) / span, (~has_prev).to(means.dtype))
    x_prev = torch.gather(means, 1, prev_c[..., None].expand(G, k, d))
    x_next = torch.gather(means, 1, next_c[..., None].expand(G, k, d))
    return (1.0 - w)[..., None] * x_prev + w[..., None] * x_next


def _group_mean_cost(cost: Tensor, mask: Tensor, group: Tensor, num_groups: int) -> Tensor:
    """Mean of K over the valid (t, j) entries of each group: cost (N, n, k), mask (N, n) -> (G,)."""
    m = mask.to(cost.dtype)
    total = cost.new_zeros(num_groups).index_add_(0, group, (cost * m[..., None]).sum((1, 2)))
    count = cost.new_zeros(num_groups).index_add_(0, group, m.sum(1) * cost.shape[-1])
    return total / count.clamp_min(1.0)


def _solve(
    cfg: BarycenterConfig,
    log_a: Tensor,
    log_q: Tensor,
    cost: Tensor,
    eps: Tensor,
    warm: SinkhornResult | None,
    active: Tensor,
    final: bool = False,
) -> SinkhornResult:
    """One warm-started Sinkhorn solve of the active rows (N,) bool, eps (N,) per row: capped (a barycenter
    iteration) or until the marginal tolerance (``final``)."""
    f, g = (warm.f, warm.g) if warm is not None else (None, None)
    max_iter, tol = (cfg.final_max_iter, cfg.marginal_tol) if final else (cfg.sinkhorn_max_iter, cfg.sinkhorn_tol)
    return SOLVERS[cfg.solver](
        log_a,
        log_q,
        cost,
        eps,
        f,
        g,
        max_iter=cfg.budget(max_iter),
        tol=tol,
        check_every=cfg.check_every,
        absorb_every=cfg.absorb_every,
        active=active,
    )


@dataclass
class _Problem:
    """Everything about the rows that stays fixed during the loop (shapes in GroupedStates)."""

    h: Tensor
    mask: Tensor
    group: Tensor
    num_groups: int
    shift: Tensor | None  # (N, d): the whitening of each row's group
    scale: Tensor | None  # (N,)
    group_shift: Tensor | None  # (G, d)
    group_scale: Tensor | None  # (G,)
    h_sq: Tensor  # (N, n) ||h - mu||^2
    pos: Tensor  # (N, n, k)
    log_a: Tensor  # (N, n)
    log_q: Tensor  # (N, k)

    def cost(self, x_rows: Tensor, alpha: float) -> Tensor:
        """K (N, n, k) against the supports of each row, 0 on padding (whatever finite values padding holds)."""
        cost = linearized_cost(self.h, x_rows, self.pos, alpha, self.shift, self.scale, self.h_sq)
        return cost.masked_fill(~self.mask[..., None], 0.0)


def _leave_one_out_support(prob: _Problem, num: Tensor, mass: Tensor, row_num: Tensor, row_mass: Tensor) -> Tensor:
    """X^{-r} (N, k, d): the projection with row r's own contribution removed (one-step leave-one-out)."""
    g = prob.group
    return _whiten_means(num[g] - row_num, mass[g] - row_mass, prob.shift, prob.scale)


@dataclass
class _Warm:
    """The last barycenter iteration: its Sinkhorn result (warm start) and projection sums."""

    solve: SinkhornResult
    projection: tuple[Tensor, ...]


def _support_loop(
    cfg: BarycenterConfig, prob: _Problem, x: Tensor, has_tokens: Tensor
) -> tuple[Tensor, _Warm, Tensor, dict[str, float]]:
    """Step 2 of the module docstring: X (G, k, d) refined until each group's relative change is below
    barycenter_tol (a settled group keeps X, and its rows are not solved again) or for barycenter_iters."""
    group, num_groups = prob.group, prob.num_groups
    settled = torch.zeros(num_groups, dtype=torch.bool, device=x.device)
    warm, eps, iters, sk_iters, fallbacks = None, None, 0, 0, 0
    for iters in range(1, cfg.barycenter_iters + 1):
        cost = prob.cost(x[group], cfg.alpha)
        if eps is None:
            eps = (cfg.eps_rel * _group_mean_cost(cost, prob.mask, group, num_groups)).clamp_min(1e-12)
        solve = _solve(cfg, prob.log_a, prob.log_q, cost, eps[group], warm and warm.solve, has_tokens & ~settled[group])
        sk_iters, fallbacks = sk_iters + solve.iterations, fallbacks + solve.fallback
        projection = barycentric_projection(
            solve.plan * has_tokens[:, None, None].to(x.dtype), prob.h, group, num_groups
        )
        x_new = _whiten_means(projection[0], projection[1], prob.group_shift, prob.group_scale)
        change = (x_new - x).flatten(1).norm(dim=1) / x.flatten(1).norm(dim=1).clamp_min(1e-30)
        x = torch.where(settled[:, None, None], x, x_new)
        if warm is not None:  # a settled group keeps the sums of the iteration that settled it
            flags = (settled, settled, settled[group], settled[group])  # (num, mass) per group, then per row
            projection = tuple(
                torch.where(flag.reshape(-1, *[1] * (new.dim() - 1)), old, new)
                for flag, old, new in zip(flags, warm.projection, projection)
            )
        warm = _Warm(solve, projection)
        settled = settled | (torch.nan_to_num(change, nan=0.0) < cfg.barycenter_tol)
        if bool(settled.all()):  # one host sync per iteration
            break
    return (
        x,
        warm,
        eps,
        {"barycenter_iters": float(iters), "sinkhorn_iters": float(sk_iters), "solver_fallbacks": float(fallbacks)},
    )


def _plan_info(final: SinkhornResult, stats: dict[str, float], has_tokens: Tensor, tol: float) -> dict[str, float]:
    """Iterations, worst row-marginal error and unconverged rows of the final plans, fallbacks of all solves."""
    err = torch.where(
        has_tokens,
        torch.nan_to_num(final.marginal_error, nan=float("inf")),
        torch.zeros((), device=has_tokens.device, dtype=final.marginal_error.dtype),
    )
    worst, unconverged = (
        torch.stack([err.max(), (err >= tol).sum().to(err.dtype)]).tolist() if err.numel() else (0.0, 0.0)
    )
    return {
        "sinkhorn_iters": stats["sinkhorn_iters"] + final.iterations,
        "sinkhorn_marginal_error": worst,
        "sinkhorn_unconverged": unconverged,
        "solver_fallbacks": stats["solver_fallbacks"] + final.fallback,
    }


@torch.no_grad()
def linearized_barycenter(states: GroupedStates, config: BarycenterConfig = BarycenterConfig()) -> BarycenterResult:
    """Linearized FGW barycenter loop (module docstring) of each group of ``states``."""
    start, cfg, k = time.perf_counter(), config, config.barycenter_size
    if cfg.structure != "position":
        raise ValueError(
            f"structure {cfg.structure!r}: the anchor-guided linearization needs the 1-D positional "
            "structure; other structures are solved exactly (the exact backend, hara_exact_*)"
        )
    h, mask, group, shift, scale = states.h, states.mask.bool(), states.group, states.shift, states.scale
    dev = h.device
    p, s = token_positions(mask), support_positions(k, device=dev)
    row_shift = None if shift is None else shift[group]
    row_scale = None if scale is None else scale[group]
    prob = _Problem(
        h,
        mask,
        group,
        states.num_groups,
        row_shift,
        row_scale,
        shift,
        scale,
        centered_sqnorm(h, row_shift) if states.sqnorm is None else states.sqnorm,
        position_cost(p, s, cfg.alpha).to(h.dtype),
        token_log_weights(mask).to(h.dtype),
        torch.full((h.shape[0], k), -math.log(k), device=dev, dtype=h.dtype),
    )
    has_tokens = mask.any(-1)  # rows without tokens carry no plan
    x = init_support(h, mask, p, group, states.num_groups, k, shift, scale)
    with flush_denormals():
        x, warm, eps, stats = _support_loop(cfg, prob, x, has_tokens)
        x_rows = _leave_one_out_support(prob, *warm.projection) if cfg.leave_one_out else x[group]
        cost = prob.cost(x_rows, cfg.alpha)
        final = _solve(cfg, prob.log_a, prob.log_q, cost, eps[group], warm.solve, has_tokens, final=True)
    plan = final.plan * has_tokens[:, None, None].to(h.dtype)
    info = {**stats, **_plan_info(final, stats, has_tokens, cfg.marginal_tol)}
    info["time_s"] = time.perf_counter() - start
    return BarycenterResult(x, plan, cost, eps, p, order_reversing_mass(plan, p, s), info)
