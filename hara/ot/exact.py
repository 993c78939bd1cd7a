"""Exact FGW reference with POT's conditional-gradient solvers, behind the barycenter interface.

The "exact FGW" ablation of HarA and the reference for checks. Per outcome group it calls
``ot.gromov.fgw_barycenters`` (fixed structure C_B[j,j'] = |s_j - s_j'|, supports initialised like the linearized
loop, ``stop_criterion='loss'`` because with a fixed structure POT otherwise stops after one iteration) and then
``ot.gromov.fused_gromov_wasserstein`` of every rollout against the final barycenter, minimising

    F_r(T) = (1 - alpha) <T, M_r> + alpha * sum (C_r[t,t'] - C_B[j,j'])^2 T[t,j] T[t',j'],  T in Pi(a_r, q).

The returned ``cost`` is the local FGW cost (1 - alpha) M + alpha L(T), L(T)[t,j] = sum (C_r - C_B)^2 T[t',j'],
so <T, cost> = F_r(T) and token novelty sum_j T cost / a_t has the same meaning as in the linearized path.
alpha = 0 is the Wasserstein (W) variant, alpha = 1 the Gromov-Wasserstein (GW) variant. This runs on the CPU in
float64 (POT's numpy backend) and is orders of magnitude slower than :mod:`hara.ot.barycenter`.

Structures (``BarycenterConfig.structure``, :data:`STRUCTURES`): "position", C_r[t,t'] = |p_t - p_t'| against the
fixed C_B[j,j'] = |s_j - s_j'| (the structure training uses, and the only one the linearization supports), or
"hidden", the usual FGW structure matrix: distances between a rollout's own (whitened) hidden states,
C_r[t,t'] = ||h_t - h_t'|| / max, against a barycenter structure that POT learns along with the features. With
positional structures the GW term, and so the GW variant, sees only lengths; with "hidden" it sees the states.
"""

from __future__ import annotations

import importlib
import time
from types import ModuleType
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from hara.ot.barycenter import BarycenterConfig, BarycenterResult, GroupedStates, init_support
from hara.ot.diagnostics import order_reversing_mass
from hara.ot.linearized import support_positions, token_log_weights, token_positions

__all__ = ["FGW_VARIANTS", "STRUCTURES", "exact_barycenter", "exact_fgw", "hidden_structure", "structure_matrix"]

if TYPE_CHECKING:  # annotations only: numpy and POT are imported where the exact backend runs (below)
    import numpy as np


def _pot() -> ModuleType:
    """POT (``import ot``), imported on first use: the linearized path (hara.novelty, hara.weighting) needs torch
    only, so it runs where POT and numpy are absent (e.g. benchmarks/gpu_check.py on a bare GPU machine)."""
    try:
        return importlib.import_module("ot")
    except ImportError as err:
        raise ImportError(
            "the exact FGW backend needs POT (pip install pot==0.9.7.post1) and numpy; the linearized backend does not"
        ) from err


def _numpy() -> ModuleType:
    """numpy, imported on first use (torch does not require it)."""
    return importlib.import_module("numpy")


#: The ablation variants of HarA as FGW trade-offs alpha.
FGW_VARIANTS: dict[str, float] = {"fgw": 0.5, "w": 0.0, "gw": 1.0}


def structure_matrix(positions: np.ndarray) -> np.ndarray:
    """C[t, t'] = |p_t - p_t'| for positions (n,) -> (n, n)."""
    np = _numpy()
    return np.abs(positions[:, None] - positions[None, :])


def hidden_structure(h: np.ndarray) -> np.ndarray:
    """C[t, t'] = ||h_t - h_t'|| / max_{t,t'} ||h_t - h_t'|| for hidden states (n, d) -> (n, n): in [0, 1] like the
    positional structure, so alpha weighs the two terms alike (all zeros when the states coincide)."""
    np, ot = _numpy(), _pot()
    dist = np.sqrt(np.maximum(ot.dist(h, h), 0.0))
    top = dist.max()
    return dist / top if top > 0 else dist


#: Structure matrices by name: rollout (hidden states h (n, d), positions p (n,)) -> C (n, n).
STRUCTURES = {"position": lambda h, p: structure_matrix(p), "hidden": lambda h, p: hidden_structure(h)}


def exact_fgw(
    h: np.ndarray,
    x: np.ndarray,
    p: np.ndarray,
    s: np.ndarray,
    alpha: float,
    max_iter: int = 100,
    tol: float = 1e-9,
    c_r: np.ndarray | None = None,
    c_b: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, float]:
    """Exact FGW between a rollout (h (n, d), p (n,), a = 1/n) and a barycenter (x (k, d), s (k,), q = 1/k).

    c_r (n, n) / c_b (k, k): the structures (default: the positional ones of p and s). Returns the plan T (n, k),
    the local cost (1 - alpha) M + alpha L(T) (n, k) and F(T) = <T, cost> (float).
    """
    ot = _pot()
    n, k = h.shape[0], x.shape[0]
    a, q = ot.unif(n), ot.unif(k)
    c_r = structure_matrix(p) if c_r is None else c_r
    c_b = structure_matrix(s) if c_b is None else c_b
    m = ot.dist(h, x)  # squared Euclidean, POT's default metric
    plan = ot.gromov.fused_gromov_wasserstein(
        m, c_r, c_b, a, q, loss_fun="square_loss", alpha=alpha, max_iter=max_iter, tol_rel=tol, tol_abs=0.0
    )
    const_c, h_c1, h_c2 = ot.gromov.init_matrix(c_r, c_b, a, q, loss_fun="square_loss")
    local = (1.0 - alpha) * m + alpha * ot.gromov.tensor_product(const_c, h_c1, h_c2, plan)
    return plan, local, float((plan * local).sum())


def _group_barycenter(
    hs: list[np.ndarray], cs: list[np.ndarray], x0: np.ndarray, cfg: BarycenterConfig
) -> tuple[np.ndarray, np.ndarray, int]:
    """POT's FGW barycenter of one group: features X (k, d), structure C_B (k, k) and its iterations. With the
    positional structure C_B stays the fixed 1-D one; with "hidden" POT learns it, starting from X0's own."""
    ot = _pot()
    fixed = cfg.structure == "position"
    s = support_positions(cfg.barycenter_size, dtype=torch.float64).numpy()
    init_c = structure_matrix(s) if fixed else hidden_structure(x0)
    x, c_b, log = ot.gromov.fgw_barycenters(
        cfg.barycenter_size,
        hs,
        cs,
        [ot.unif(len(c)) for c in cs],
        alpha=cfg.alpha,
        fixed_structure=fixed,
        init_C=init_c,
        init_X=x0,
        loss_fun="square_loss",
        max_iter=cfg.exact_max_iter,
        tol=cfg.exact_tol,
        stop_criterion="loss",
        warmstartT=True,
        log=True,
    )
    return x, c_b, len(log["loss"])


@torch.no_grad()
def exact_barycenter(states: GroupedStates, config: BarycenterConfig = BarycenterConfig()) -> BarycenterResult:
    """Exact counterpart of :func:`hara.ot.barycenter.linearized_barycenter` (same arguments and result type;
    ``states.sqnorm`` is not needed). Plans, costs and R(T) come back as fp32 tensors on h's device."""
    if config.leave_one_out:
        raise ValueError("leave_one_out is only implemented for the linearized barycenter")
    _pot()  # a clear error before any work when POT is missing
    start, cfg, k = time.perf_counter(), config, config.barycenter_size
    h, group, num_groups, shift, scale = states.h, states.group, states.num_groups, states.shift, states.scale
    mask = states.mask.bool()
    p, s = token_positions(mask), support_positions(k, device=h.device)
    x0 = init_support(h, mask, p, group, num_groups, k, shift, scale)
    s_np = s.double().cpu().numpy()
    plan = torch.zeros(*mask.shape, k, dtype=torch.float64)
    cost = torch.zeros(*mask.shape, k, dtype=torch.float64)
    iters = 0
    for g in range(num_groups):
        rows = torch.nonzero(group == g).flatten().tolist()
        hs = [_whitened_row(h[b], mask[b], g, shift, scale) for b in rows]
        ps = [p[b][mask[b]].double().cpu().numpy() for b in rows]
        cs = [STRUCTURES[cfg.structure](hb, pb) for hb, pb in zip(hs, ps)]
        x, structure, its = _group_barycenter(hs, cs, x0[g].double().cpu().numpy(), cfg)
        iters = max(iters, its)
        for b, hb, pb, cb in zip(rows, hs, ps, cs):
            t_b, c_b, _ = exact_fgw(hb, x, pb, s_np, cfg.alpha, c_r=cb, c_b=structure)
            valid = mask[b].cpu()
            plan[b, valid], cost[b, valid] = torch.from_numpy(t_b), torch.from_numpy(c_b)
        x0[g] = torch.from_numpy(x).to(x0)
    row_error = plan.sum(-1) - token_log_weights(mask).exp().double().cpu() * mask.any(-1, keepdim=True).cpu()
    plan, cost = plan.float().to(h.device), cost.float().to(h.device)
    info = {
        "barycenter_iters": float(iters),
        "sinkhorn_iters": 0.0,
        "sinkhorn_marginal_error": float(row_error.abs().sum(-1).max()) if plan.numel() else 0.0,
        "sinkhorn_unconverged": 0.0,
        "solver_fallbacks": 0.0,
        "time_s": time.perf_counter() - start,
    }
    eps = torch.zeros(num_groups, device=h.device)
    return BarycenterResult(x0, plan, cost, eps, p, order_reversing_mass(plan, p, s), info)


def _whitened_row(h: Tensor, mask: Tensor, g: int, shift: Tensor | None, scale: Tensor | None) -> np.ndarray:
    """The valid tokens of one row as float64 numpy, whitened with its group's shift and scale."""
    x = h[mask].double()
    if shift is not None:
        x = x - shift[g].double()
    if scale is not None:
        x = x * scale[g].double()
    return x.cpu().numpy()
