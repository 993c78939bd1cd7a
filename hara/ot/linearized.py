"""Anchor-guided linearized FGW cost between rollouts and a barycenter [R].

A rollout with n valid tokens is the measure mu = sum_t a_t delta(h_t, p_t), a_t = 1/n, p_t = (t-1)/(n-1); the
barycenter has k supports x_j at s_j = (j-1)/(k-1) with weights q_j = 1/k. Exact FGW (POT convention) is

    F(T) = (1 - alpha) <T, M> + alpha * sum_{t,t',j,j'} (|p_t - p_t'| - |s_j - s_j'|)^2 T[t,j] T[t',j'],

M[t, j] = ||h_t - x_j||^2. Fixing the second plan of the quadratic term at the anchor plan A (first token <-> first
support, last token <-> last support, mass 1/2 each) and taking the first-order expansion around A
(Q(T) ~ 2 <T, L(A)> - Q(A), with L(A)[t, j] = (p_t - s_j)^2 and Q(A) = 0) gives the linear cost

    K[t, j] = (1 - alpha) ||h_t - x_j||^2 + 2 alpha (p_t - s_j)^2,

the squared distance between lifted points (sqrt(1-alpha) h, sqrt(2 alpha) p). Building K is one GEMM, O(n k d).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = [
    "anchor_plan",
    "centered_sqnorm",
    "lifted_points",
    "linearized_cost",
    "position_cost",
    "support_positions",
    "token_log_weights",
    "token_positions",
]


def token_positions(mask: Tensor) -> Tensor:
    """p_t = (rank_t - 1) / (n - 1) over the valid tokens of each row; 0 on padding and when n = 1.

    mask (..., n) bool -> p (..., n) fp32. Ranks count only valid tokens, so masked tokens in the middle of a row
    (or left padding) do not shift the positions of the others.
    """
    mask = mask.bool()
    rank = torch.cumsum(mask.to(torch.float32), dim=-1) - 1.0
    n = mask.sum(-1, keepdim=True).to(torch.float32)
    p = rank / (n - 1.0).clamp_min(1.0)
    return torch.where(mask, p, torch.zeros_like(p))


def support_positions(k: int, device: torch.device | None = None, dtype: torch.dtype = torch.float32) -> Tensor:
    """s_j = (j - 1) / (k - 1), shape (k,); s = [0] when k = 1."""
    if k == 1:
        return torch.zeros(1, device=device, dtype=dtype)
    return torch.linspace(0.0, 1.0, k, device=device, dtype=dtype)


def token_log_weights(mask: Tensor) -> Tensor:
    """log a_t = -log n on valid tokens, -inf on padding. mask (..., n) bool -> (..., n) fp32.

    Rows without any valid token get uniform weights over all n positions instead (a harmless dummy problem, so a
    batched Sinkhorn never sees an empty marginal); callers drop those rows.
    """
    mask = mask.bool()
    n = mask.sum(-1, keepdim=True)
    empty = n == 0
    valid = mask | empty
    count = torch.where(empty, torch.full_like(n, mask.shape[-1]), n).to(torch.float32)
    log_a = (-torch.log(count)).expand(mask.shape)
    return torch.where(valid, log_a, torch.full_like(log_a, float("-inf")))


def position_cost(p: Tensor, s: Tensor, alpha: float) -> Tensor:
    """2 alpha (p_t - s_j)^2: p (..., n), s (k,) -> (..., n, k). The structural part of K."""
    return 2.0 * alpha * (p[..., :, None] - s) ** 2


def centered_sqnorm(h: Tensor, shift: Tensor | None = None) -> Tensor:
    """||h[b, t] - shift[b]||^2: h (N, n, d), shift (N, d) or None -> (N, n).

    Computed one row at a time so the centred copy never exists in full (a full-size temporary of h costs more
    than the arithmetic on CPU), and exactly (no ||h||^2 - 2 h.mu + ||mu||^2 cancellation).
    """
    if shift is None:
        return torch.linalg.vector_norm(h, dim=-1).square()
    return torch.stack([torch.linalg.vector_norm(row - mu, dim=-1) for row, mu in zip(h, shift)]).square()


def linearized_cost(
    h: Tensor,
    x: Tensor,
    pos_cost: Tensor,
    alpha: float,
    shift: Tensor | None = None,
    scale: Tensor | None = None,
    h_sqnorm: Tensor | None = None,
) -> Tensor:
    """K[b,t,j] = (1 - alpha) ||c_b (h[b,t] - mu_b) - x[b,j]||^2 + pos_cost[b,t,j].

    h (N, n, d) raw rows; x (N, k, d) the supports each row is compared with (whitened space); pos_cost (N, n, k)
    from :func:`position_cost`; shift mu (N, d) and scale c (N,) the per-row whitening (None: identity);
    h_sqnorm (N, n) = ||h - mu||^2 if already known. Returns (N, n, k).
    Whitening is applied inside the expansion c^2 ||h - mu||^2 + ||x||^2 - 2 c (h.x - mu.x), so the only
    O(n k d) work is one batched GEMM h @ x^T on the raw rows and no whitened copy of h is ever made. Rounding can
    make the expansion slightly negative, hence the clamp.
    """
    cross = torch.bmm(h, x.transpose(1, 2))  # (N, n, k)
    if shift is not None:
        cross = cross - torch.bmm(x, shift[:, :, None]).transpose(1, 2)  # - mu.x_j
    h_sq = centered_sqnorm(h, shift) if h_sqnorm is None else h_sqnorm
    c = torch.ones(h.shape[0], device=h.device) if scale is None else scale
    sq = (c * c)[:, None, None] * h_sq[..., None] + (x * x).sum(-1)[:, None, :] - 2.0 * c[:, None, None] * cross
    return (1.0 - alpha) * sq.clamp_min(0.0) + pos_cost


def lifted_points(h: Tensor, p: Tensor, alpha: float) -> Tensor:
    """(sqrt(1 - alpha) h, sqrt(2 alpha) p): h (..., d), p (...,) -> (..., d + 1).

    ||lift(h, p) - lift(x, s)||^2 equals K; used to document and test the closed form.
    """
    return torch.cat([(1.0 - alpha) ** 0.5 * h, (2.0 * alpha) ** 0.5 * p[..., None]], dim=-1)


def anchor_plan(n: int, k: int, dtype: torch.dtype = torch.float64) -> Tensor:
    """The anchor plan A (n, k): A[0, 0] = A[n-1, k-1] = 1/2 (all mass on [0, 0] when n = 1 or k = 1)."""
    plan = torch.zeros(n, k, dtype=dtype)
    plan[0, 0] += 0.5
    plan[n - 1, k - 1] += 0.5
    return plan
