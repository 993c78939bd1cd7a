"""Optimal-transport core of HarA: Sinkhorn, the anchor-guided linearized FGW cost, batched barycenters,
diagnostics (marginal errors, order-reversing mass R(T)) and the exact POT reference behind the same interface.

Pure tensor code: no I/O, device-agnostic, fp32 (the POT reference runs in float64 on the CPU). Importing it needs
torch only: POT and numpy are imported when the exact reference runs (tests/ot/test_ot_exact.py checks this).
"""

from hara.ot.barycenter import (
    BarycenterConfig,
    BarycenterResult,
    GroupedStates,
    barycentric_projection,
    init_support,
    linearized_barycenter,
)
from hara.ot.diagnostics import marginal_errors, order_reversing_mass
from hara.ot.exact import FGW_VARIANTS, STRUCTURES, exact_barycenter, exact_fgw, hidden_structure, structure_matrix
from hara.ot.linearized import (
    anchor_plan,
    centered_sqnorm,
    lifted_points,
    linearized_cost,
    position_cost,
    support_positions,
    token_log_weights,
    token_positions,
)
from hara.ot.sinkhorn import (
    SOLVERS,
    SinkhornResult,
    flush_denormals,
    plan_from_potentials,
    sinkhorn_log,
    sinkhorn_scaling,
    sinkhorn_solve,
)

__all__ = [
    "FGW_VARIANTS",
    "SOLVERS",
    "STRUCTURES",
    "BarycenterConfig",
    "BarycenterResult",
    "GroupedStates",
    "SinkhornResult",
    "anchor_plan",
    "barycentric_projection",
    "centered_sqnorm",
    "exact_barycenter",
    "exact_fgw",
    "flush_denormals",
    "hidden_structure",
    "init_support",
    "lifted_points",
    "linearized_barycenter",
    "linearized_cost",
    "marginal_errors",
    "order_reversing_mass",
    "plan_from_potentials",
    "position_cost",
    "sinkhorn_log",
    "sinkhorn_scaling",
    "sinkhorn_solve",
    "structure_matrix",
    "support_positions",
    "token_log_weights",
    "token_positions",
]
