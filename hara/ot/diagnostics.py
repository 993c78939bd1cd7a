"""Diagnostics of transport plans: marginal errors and the order-reversing mass R(T).

For 1-D structures C[t,t'] = |p_t - p_t'|, C_B[j,j'] = |s_j - s_j'| and any plan T of total mass 1,

    Q(T) = sum (C[t,t'] - C_B[j,j'])^2 T[t,j] T[t',j'] = 2 <T, P> - 2 (pbar - sbar)^2 - R(T),
    R(T) = 4 sum T[t,j] T[t',j'] [(p_t - p_t')(s_j - s_j')]_-  >= 0,

with P[t,j] = (p_t - s_j)^2, pbar = sum T p, sbar = sum T s. Hence F(T) = F_lin(T) - alpha R(T) for plans with
the right marginals, and the linearization error is bounded by alpha R at the FGW-optimal plan.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["marginal_errors", "order_reversing_mass"]


def _suffix_rows(x: Tensor) -> Tensor:
    """S[t] = sum_{t' > t} x[t'] along dim -2 (strictly later rows)."""
    total = x.sum(-2, keepdim=True)
    return total - torch.cumsum(x, dim=-2)


def _prefix_cols(x: Tensor) -> Tensor:
    """S[j] = sum_{j' < j} x[j'] along dim -1 (strictly earlier columns)."""
    return torch.cumsum(x, dim=-1) - x


def order_reversing_mass(plan: Tensor, p: Tensor, s: Tensor) -> Tensor:
    """R(T) in O(n k) with 2-D prefix sums.

    plan (..., n, k) with rows ordered by non-decreasing p among rows that carry mass (padding rows must carry
    none); p (..., n); s (k,) increasing. Returns R (...,).
    Only pairs with t < t' and j > j' reverse order, and R counts each unordered pair twice, so
    R = 8 sum_{t,j} T[t,j] sum_{t' > t, j' < j} T[t',j'] (p_t' - p_t)(s_j - s_j'); expanding the product needs the
    four 2-D partial sums of T, T p, T s and T p s over the quadrant {t' > t, j' < j}.
    Positions are centred first (R only depends on differences) to limit cancellation in fp32.
    """
    p = p - 0.5
    s = (s - 0.5).to(plan.dtype)
    pp, ss = p[..., :, None], s
    quadrant = lambda x: _prefix_cols(_suffix_rows(x))
    s0, sp = quadrant(plan), quadrant(plan * pp)
    s_s, sps = quadrant(plan * ss), quadrant(plan * pp * ss)
    inner = ss * sp - sps - pp * ss * s0 + pp * s_s
    return (8.0 * plan * inner).sum((-2, -1)).clamp_min(0.0)


def marginal_errors(plan: Tensor, a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """L1 errors of both marginals: (sum_t |T 1 - a|, sum_j |T^T 1 - b|); plan (..., n, k), a (..., n), b (..., k)."""
    return (plan.sum(-1) - a).abs().sum(-1), (plan.sum(-2) - b).abs().sum(-1)
