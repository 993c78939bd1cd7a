"""Batched entropic optimal transport (Sinkhorn) with masks and warm starts.

Both solvers solve, independently for every batch element,

    T* = argmin_{T in Pi(a, b)} <T, C> + eps * KL(T | a b^T)

with the POT convention: the dual potentials (f, g) give the plan
T[t, j] = exp((f_t + g_j - C[t, j]) / eps + log a_t + log b_j). Shapes, with ``...`` any batch shape:
log_a (..., n), log_b (..., k), cost (..., n, k), eps broadcastable to (...). Padding rows carry log a_t = -inf
(and any finite cost), so they receive no mass. Every batch element needs at least one valid row.

``sinkhorn_solve`` solves them with one of two solvers (``SOLVERS``; ``sinkhorn_log`` and ``sinkhorn_scaling`` are it
with the solver set). The log solver iterates the potentials in the log domain (robust, one log-sum-exp per half
step). The scaling solver absorbs the potentials into a kernel every ``absorb_every`` iterations and iterates plain
scalings in between (matrix-vector products only): the same fixed point, several times faster, because the exp is
taken once per absorption instead of twice per iteration (docs/method.md, "Transport and convergence").
Both check the marginal error only every ``check_every`` iterations (one host sync each) and accept warm-start
potentials, which is what makes a ~20-iteration cap per barycenter iteration enough. The stop is per batch element:
an element whose row-marginal error is below ``tol`` at a check keeps its potentials from then on, so its result
does not depend on which other problems share the batch. Both run with fp32 denormals flushed to zero.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = [
    "SOLVERS",
    "SinkhornResult",
    "denormals_flushed",
    "flush_denormals",
    "plan_from_potentials",
    "sinkhorn_log",
    "sinkhorn_scaling",
    "sinkhorn_solve",
]

# exp(-80) ~ 1.8e-35 is still a normal fp32 number: clamping exp arguments here keeps kernels out of the denormal
# range, which made one CPU prototype run 50x slower (docs/method.md).
_MIN_EXP_ARG = -80.0


@dataclass
class SinkhornResult:
    """Output of a Sinkhorn solve.

    plan (..., n, k); f (..., n) and g (..., k) the dual potentials (warm start for the next call);
    iterations: the number of full (f, g) iterations run (by the slowest element); marginal_error (...,): L1 error
    of the row marginal sum_t |T 1 - a|_t (the column marginal is exact after the last g update); fallback: the
    scaling solver's scalings overflowed and the result comes from the log-domain solver instead.
    """

    plan: Tensor
    f: Tensor
    g: Tensor
    iterations: int
    marginal_error: Tensor
    fallback: bool = False


def denormals_flushed() -> bool:
    """Whether fp32 denormals are flushed to zero right now (torch has no getter: half of a denormal is 0 then)."""
    return bool(torch.tensor([1e-39], dtype=torch.float32).mul(0.5).item() == 0.0)


@contextlib.contextmanager
def flush_denormals() -> Iterator[None]:
    """Flush fp32 denormals to zero on CPU inside the block (no-op where unsupported); nests, and on exit the
    caller's setting is back, whatever it was."""
    before = denormals_flushed()
    enabled = torch.set_flush_denormal(True)
    try:
        yield
    finally:
        if enabled and not before:
            torch.set_flush_denormal(False)


def plan_from_potentials(log_a: Tensor, log_b: Tensor, cost: Tensor, eps: Tensor, f: Tensor, g: Tensor) -> Tensor:
    """T[t, j] = exp((f_t + g_j - C[t, j]) / eps + log a_t + log b_j); shapes as in the module docstring."""
    eps = eps[..., None, None]
    log_plan = (f[..., :, None] + g[..., None, :] - cost) / eps + log_a[..., :, None] + log_b[..., None, :]
    return torch.exp(log_plan)


def _as_eps(eps: Tensor | float, batch_shape: torch.Size, ref: Tensor) -> Tensor:
    """Broadcast eps to the batch shape (...,) in the cost's dtype and device."""
    return torch.as_tensor(eps, dtype=ref.dtype, device=ref.device).expand(batch_shape).clone()


def _init_potentials(f: Tensor | None, g: Tensor | None, cost: Tensor) -> tuple[Tensor, Tensor]:
    """Zero potentials unless warm-start potentials are given (shapes (..., n) and (..., k))."""
    f = torch.zeros(cost.shape[:-1], dtype=cost.dtype, device=cost.device) if f is None else f
    g = torch.zeros(cost.shape[:-2] + cost.shape[-1:], dtype=cost.dtype, device=cost.device) if g is None else g
    return f, g


def _log_update_f(log_b: Tensor, cost: Tensor, eps: Tensor, g: Tensor) -> Tensor:
    """f_t <- -eps * LSE_j(log b_j + (g_j - C[t, j]) / eps); (..., n)."""
    e = eps[..., None, None]
    return -eps[..., None] * torch.logsumexp(log_b[..., None, :] + (g[..., None, :] - cost) / e, dim=-1)


def _log_update_g(log_a: Tensor, cost: Tensor, eps: Tensor, f: Tensor) -> Tensor:
    """g_j <- -eps * LSE_t(log a_t + (f_t - C[t, j]) / eps); (..., k)."""
    e = eps[..., None, None]
    return -eps[..., None] * torch.logsumexp(log_a[..., :, None] + (f[..., :, None] - cost) / e, dim=-2)


@dataclass(frozen=True)
class _Problem:
    """One batch of transport problems (shapes in the module docstring), eps broadcast to the batch shape (...,)."""

    log_a: Tensor
    log_b: Tensor
    cost: Tensor
    eps: Tensor


@dataclass(frozen=True)
class _Stop:
    """When a solve stops: after ``max_iter`` iterations, or per element at a check (every ``check_every``
    iterations) whose row-marginal L1 error is below ``tol``; ``absorb_every``: iterations between the scaling
    solver's absorptions."""

    max_iter: int
    tol: float
    check_every: int
    absorb_every: int


def _plan_and_error(p: _Problem, f: Tensor, g: Tensor) -> tuple[Tensor, Tensor]:
    """The plan (..., n, k) and its L1 row-marginal error sum_t |sum_j T[t, j] - a_t| (...,)."""
    plan = plan_from_potentials(p.log_a, p.log_b, p.cost, p.eps, f, g)
    return plan, (plan.sum(-1) - p.log_a.exp()).abs().sum(-1)


def sinkhorn_solve(
    log_a: Tensor,
    log_b: Tensor,
    cost: Tensor,
    eps: Tensor | float,
    f: Tensor | None = None,
    g: Tensor | None = None,
    max_iter: int = 1000,
    tol: float = 1e-6,
    check_every: int = 10,
    absorb_every: int = 10,
    active: Tensor | None = None,
    *,
    solver: str = "log",
) -> SinkhornResult:
    """Entropic OT of every batch element (module docstring) by ``solver`` (a name of :data:`SOLVERS`). f, g:
    warm-start potentials (None: zero). An element stops when its row-marginal L1 error < tol, checked every
    ``check_every`` iterations; ``absorb_every``: iterations between the scaling solver's absorptions (the log
    solver ignores it). active (...,) bool: elements to iterate at all (None: every one; the others keep their
    start potentials)."""
    if solver not in _SOLVER_BODIES:
        raise ValueError(f"solver must be one of {sorted(_SOLVER_BODIES)}, got {solver!r}")
    with flush_denormals():
        problem = _Problem(log_a, log_b, cost, _as_eps(eps, cost.shape[:-2], cost))
        stop = _Stop(max_iter, tol, check_every, absorb_every)
        return _SOLVER_BODIES[solver](problem, f, g, _live(active, problem.eps), stop)


def _solve_log(p: _Problem, f: Tensor | None, g: Tensor | None, live: Tensor, stop: _Stop) -> SinkhornResult:
    """Log-domain iterations (module docstring)."""
    f, g = _init_potentials(f, g, p.cost)
    done = 0
    while done < stop.max_iter:
        f = torch.where(live[..., None], _log_update_f(p.log_b, p.cost, p.eps, g), f)
        g = torch.where(live[..., None], _log_update_g(p.log_a, p.cost, p.eps, f), g)
        done += 1
        if done % stop.check_every == 0 and done < stop.max_iter:  # one host sync per check
            live = live & ~(_plan_and_error(p, f, g)[1] < stop.tol)
            if not bool(live.any()):
                break
    plan, error = _plan_and_error(p, f, g)
    return SinkhornResult(plan, f, g, done, error)


def _live(active: Tensor | None, eps: Tensor) -> Tensor:
    """The elements (...,) still iterating: all, or a copy of ``active``."""
    return torch.ones(eps.shape, dtype=torch.bool, device=eps.device) if active is None else active.bool().clone()


def _scaling_cycle(
    a: Tensor, b: Tensor, kernel: Tensor, iters: int, want_error: bool
) -> tuple[Tensor, Tensor, Tensor | None]:
    """Run ``iters`` scaling iterations u <- 1 / (K (b v)), v <- 1 / (K^T (a u)) from v = 1.

    a (..., n), b (..., k), kernel (..., n, k). Returns u (..., n), v (..., k) and, if asked, the row-marginal error
    measured before the last u update (free: that product is needed for the update anyway). Both products are
    written as batched row-vector times matrix (1, k) @ (k, n) and (1, n) @ (n, k): on CPU this is several times
    faster than the equivalent matrix-vector bmm, so K is also kept transposed.
    """
    batch, n, k = a.shape[:-1], kernel.shape[-2], kernel.shape[-1]
    kern = kernel.reshape(-1, n, k)
    kern_t = kern.transpose(1, 2).contiguous()
    a2, b2 = a.reshape(-1, 1, n), b.reshape(-1, 1, k)
    v = torch.ones_like(b2)
    u = error = None
    for i in range(iters):
        row = torch.bmm(b2 * v, kern_t)  # (B, 1, n): K (b v)
        if want_error and i == iters - 1 and u is not None:
            error = (a2 * u * row - a2).abs().sum(-1).reshape(batch)
        u = 1.0 / row
        v = 1.0 / torch.bmm(a2 * u, kern)  # (B, 1, k): K^T (a u)
    return u.reshape(*batch, n), v.reshape(*batch, k), error


def _solve_scaling(p: _Problem, f: Tensor | None, g: Tensor | None, live: Tensor, stop: _Stop) -> SinkhornResult:
    """Scaling-domain iterations with absorption (stabilized as in Schmitzer 2019).

    With absorbed potentials (f, g) the kernel is K~[t, j] = exp((f_t + g_j - C[t, j]) / eps) and the plan is
    T = diag(a u) K~ diag(b v). Every ``absorb_every`` iterations f += eps log u, g += eps log v and K~ is rebuilt,
    so u, v stay near 1 and fp32 never overflows. One log-domain iteration first makes every kernel row hold
    mass (no all-zero row after underflow); a warm start skips it. If scalings still become non-finite, the
    log-domain solver runs from the same start and its result comes back (``fallback`` in it says so). The tol
    check is at the end of the first absorption cycle after every ``check_every`` iterations.
    """
    warm = f is not None and g is not None
    f0, g0 = _init_potentials(f, g, p.cost)
    f, g, done = f0, g0, 0
    if not warm:  # cold start: one log-domain iteration so that no kernel row underflows entirely
        f = torch.where(live[..., None], _log_update_f(p.log_b, p.cost, p.eps, g0), f0)
        g = torch.where(live[..., None], _log_update_g(p.log_a, p.cost, p.eps, f), g0)
        done = 1
    f, g, done = _scaling_loop(p, f, g, live, done, stop)
    if not (torch.isfinite(f).all() and torch.isfinite(g).all()):
        res = _solve_log(p, f0, g0, live, stop)
        res.fallback = True
        return res
    plan, error = _plan_and_error(p, f, g)
    return SinkhornResult(plan, f, g, done, error)


def _scaling_loop(
    p: _Problem, f: Tensor, g: Tensor, live: Tensor, done: int, stop: _Stop
) -> tuple[Tensor, Tensor, int]:
    """The absorption cycles of :func:`_solve_scaling` from potentials (f, g) after ``done`` iterations."""
    a, b, e = p.log_a.exp(), p.log_b.exp(), p.eps[..., None]
    period, next_check = max(1, min(stop.absorb_every, stop.check_every)), stop.check_every
    while done < stop.max_iter:
        iters = min(period, stop.max_iter - done)
        arg = (f[..., :, None] + g[..., None, :] - p.cost) / e[..., None]
        kernel = torch.exp(arg.clamp_min(_MIN_EXP_ARG))
        u, v, error = _scaling_cycle(a, b, kernel, iters, want_error=done + iters >= next_check)
        f = torch.where(live[..., None], f + e * torch.log(u), f)
        g = torch.where(live[..., None], g + e * torch.log(v), g)
        done += iters
        if error is not None:  # one host sync per check
            next_check += stop.check_every
            live = live & ~(error < stop.tol)
            if not bool(live.any()):
                break
    return f, g, done


SinkhornSolver = Callable[..., SinkhornResult]

_SOLVER_BODIES = {"log": _solve_log, "scaling": _solve_scaling}

#: Solvers by name: :func:`sinkhorn_solve` with its ``solver`` set, so all take the same arguments.
SOLVERS: dict[str, SinkhornSolver] = {name: functools.partial(sinkhorn_solve, solver=name) for name in _SOLVER_BODIES}
#: Log-domain Sinkhorn (robust, one log-sum-exp per half step).
sinkhorn_log = SOLVERS["log"]
#: Scaling-domain Sinkhorn with absorption (:func:`_solve_scaling`), falling back to the log domain on overflow.
sinkhorn_scaling = SOLVERS["scaling"]
