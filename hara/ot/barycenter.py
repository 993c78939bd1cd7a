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

eps = eps_rel * mean(K) per group, fixed at the first iteration. fp32, device-agnostic. The O(n k d) work is one
cost GEMM and one projection GEMM per iteration (plus one binning GEMM for the init and the final cost GEMM);
Sinkhorn is O(n k) per iteration. benchmarks/bench_novelty.py times it against exactly these GEMMs.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch
from torch import Tensor

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
    "barycentric_projection",
    "init_support",
    "linearized_barycenter",
]


@dataclass(frozen=True)
class BarycenterConfig:
    """Knobs of the barycenter loop; defaults are method.md's [R] choices.

    barycenter_size: k supports. alpha: FGW trade-off (0 = W, 1 = GW). eps_rel: eps = eps_rel * mean(K).
    barycenter_iters / barycenter_tol: iterations I_b and the relative-change stop (checked over the whole batch:
    the loop runs until every group meets it). sinkhorn_max_iter: cap per barycenter iteration (warm-started; the
    novelty ranking is stable after ~20). sinkhorn_tol / check_every: marginal-error stop, checked every few
    iterations (also batch-wide). absorb_every: absorption period of the scaling solver. solver: "scaling"
    (default, fast) or "log". leave_one_out: final plans against the barycenter of the other rollouts.
    exact_max_iter / exact_tol: budget of POT's barycenter solver in the exact backend (:mod:`hara.ot.exact`).
    """

    barycenter_size: int = 16
    alpha: float = 0.5
    eps_rel: float = 0.05
    barycenter_iters: int = 5
    barycenter_tol: float = 1e-3
    sinkhorn_max_iter: int = 20
    sinkhorn_tol: float = 1e-4
    check_every: int = 10
    absorb_every: int = 10
    solver: str = "scaling"
    leave_one_out: bool = False
    exact_max_iter: int = 20
    exact_tol: float = 1e-5

    def __post_init__(self) -> None:
        if self.barycenter_size < 2:
            raise ValueError(f"barycenter_size must be >= 2, got {self.barycenter_size}")
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {self.alpha}")
        if self.barycenter_iters < 1 or self.sinkhorn_max_iter < 1:
            raise ValueError("barycenter_iters and sinkhorn_max_iter must be >= 1")
        if self.eps_rel <= 0:
            raise ValueError(f"eps_rel must be > 0, got {self.eps_rel}")
        if self.solver not in SOLVERS:
            raise ValueError(f"solver must be one of {sorted(SOLVERS)}, got {self.solver!r}")


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
    num = torch.zeros(num_groups, *row_num.shape[1:], device=h.device, dtype=h.dtype).index_add_(0, group, row_num)
    mass = torch.zeros(num_groups, row_mass.shape[1], device=h.device, dtype=h.dtype).index_add_(0, group, row_mass)
    return num, mass, row_num, row_mass


def _whiten_means(num: Tensor, mass: Tensor, shift: Tensor | None, scale: Tensor | None) -> Tensor:
    """c (num / mass - mu): raw-space weighted means (..., k, d) mapped to whitened space; shift (..., d)."""
    mean = num / mass.clamp_min(1e-30)[..., None]
    if shift is not None:
        mean = mean - shift[..., None, :]
    return mean if scale is None else mean * scale[..., None, None]


def init_support(h: Tensor, mask: Tensor, p: Tensor, group: Tensor, num_groups: int, k: int,
                 shift: Tensor | None = None, scale: Tensor | None = None) -> Tensor:
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
    total = torch.zeros(num_groups, device=cost.device).index_add_(0, group, (cost * m[..., None]).sum((1, 2)))
    count = torch.zeros(num_groups, device=cost.device).index_add_(0, group, m.sum(1) * cost.shape[-1])
    return total / count.clamp_min(1.0)


def _solve(cfg: BarycenterConfig, log_a: Tensor, log_q: Tensor, cost: Tensor, eps: Tensor,
           warm: SinkhornResult | None) -> SinkhornResult:
    """One capped, warm-started Sinkhorn solve over the N rows; eps (N,) per row."""
    f, g = (warm.f, warm.g) if warm is not None else (None, None)
    return SOLVERS[cfg.solver](
        log_a, log_q, cost, eps, f, g, max_iter=cfg.sinkhorn_max_iter, tol=cfg.sinkhorn_tol,
        check_every=cfg.check_every, absorb_every=cfg.absorb_every,
    )


@dataclass
class _Problem:
    """Everything about the rows that stays fixed during the loop (shapes in linearized_barycenter)."""

    h: Tensor
    mask: Tensor
    group: Tensor
    num_groups: int
    shift: Tensor | None  # (N, d): the whitening of each row's group
    scale: Tensor | None  # (N,)
    h_sq: Tensor  # (N, n) ||h - mu||^2
    pos: Tensor  # (N, n, k)
    log_a: Tensor  # (N, n)
    log_q: Tensor  # (N, k)

    def cost(self, x_rows: Tensor, alpha: float) -> Tensor:
        """K (N, n, k) against the supports of each row, 0 on padding (whatever finite values padding holds)."""
        cost = linearized_cost(self.h, x_rows, self.pos, alpha, self.shift, self.scale, self.h_sq)
        return cost.masked_fill(~self.mask[..., None], 0.0)


def _leave_one_out_support(prob: _Problem, num: Tensor, mass: Tensor, row_num: Tensor, row_mass: Tensor,
                           group_shift: Tensor | None, group_scale: Tensor | None) -> Tensor:
    """X^{-r} (N, k, d): the projection with row r's own contribution removed (one-step leave-one-out)."""
    g = prob.group
    shift = None if group_shift is None else group_shift[g]
    scale = None if group_scale is None else group_scale[g]
    return _whiten_means(num[g] - row_num, mass[g] - row_mass, shift, scale)


@torch.no_grad()
def linearized_barycenter(
    h: Tensor, mask: Tensor, group: Tensor, num_groups: int, config: BarycenterConfig = BarycenterConfig(),
    shift: Tensor | None = None, scale: Tensor | None = None, h_sqnorm: Tensor | None = None,
) -> BarycenterResult:
    """Linearized FGW barycenter loop (module docstring).

    h (N, n, d) fp32 and finite everywhere (padding included: padding is multiplied by zero weights, never
    selected, so it must not hold NaN/Inf), mask (N, n) bool, group (N,) long in [0, num_groups), shift (G, d) and
    scale (G,) the whitening of each group (None: identity), h_sqnorm (N, n) = ||h - shift||^2 if already known.
    """
    start, cfg, k = time.perf_counter(), config, config.barycenter_size
    mask, dev = mask.bool(), h.device
    p, s = token_positions(mask), support_positions(k, device=dev)
    row_shift = None if shift is None else shift[group]
    row_scale = None if scale is None else scale[group]
    prob = _Problem(h, mask, group, num_groups, row_shift, row_scale,
                    centered_sqnorm(h, row_shift) if h_sqnorm is None else h_sqnorm,
                    position_cost(p, s, cfg.alpha), token_log_weights(mask),
                    torch.full((h.shape[0], k), -math.log(k), device=dev))
    row_ok = mask.any(-1)[:, None, None].to(h.dtype)  # rows without tokens carry no plan
    x = init_support(h, mask, p, group, num_groups, k, shift, scale)
    warm, eps, iters, sk_iters = None, None, 0, 0
    with flush_denormals():
        for iters in range(1, cfg.barycenter_iters + 1):
            cost = prob.cost(x[group], cfg.alpha)
            if eps is None:
                eps = (cfg.eps_rel * _group_mean_cost(cost, mask, group, num_groups)).clamp_min(1e-12)
            warm = _solve(cfg, prob.log_a, prob.log_q, cost, eps[group], warm)
            sk_iters += warm.iterations
            proj = barycentric_projection(warm.plan * row_ok, h, group, num_groups)
            x_new = _whiten_means(proj[0], proj[1], shift, scale)
            change = (x_new - x).flatten(1).norm(dim=1) / x.flatten(1).norm(dim=1).clamp_min(1e-30)
            x = x_new
            if bool((torch.nan_to_num(change, nan=0.0) < cfg.barycenter_tol).all()):  # one host sync per iteration
                break
        x_rows = _leave_one_out_support(prob, *proj, shift, scale) if cfg.leave_one_out else x[group]
        cost = prob.cost(x_rows, cfg.alpha)
        final = _solve(cfg, prob.log_a, prob.log_q, cost, eps[group], warm)
    plan = final.plan * row_ok
    err = torch.where(row_ok[:, 0, 0] > 0, final.marginal_error, torch.zeros((), device=dev))
    info = {"barycenter_iters": float(iters), "sinkhorn_iters": float(sk_iters + final.iterations),
            "marginal_error": float(torch.nan_to_num(err, nan=float("inf")).max()) if err.numel() else 0.0}
    info["time_s"] = time.perf_counter() - start
    return BarycenterResult(x, plan, cost, eps, p, order_reversing_mass(plan, p, s), info)
