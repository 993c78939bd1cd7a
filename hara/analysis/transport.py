"""Transport plans of sampled rollouts against their problem's barycenter, for the W / GW / FGW variants [R].

The same barycenter loop as training (:func:`hara.ot.barycenter.linearized_barycenter`) with the same per-prompt
whitening (:func:`hara.novelty.whitening_stats`), but one group per *problem* (all its rollouts, whatever their
outcome): the interpretability study asks what the supports of a problem's barycenter stand for, and an outcome
split would leave groups of one rollout on problems the model always or never solves.

Two structures (:data:`hara.ot.exact.STRUCTURES`): "position", training's 1-D structure, under which GW (alpha = 1)
sees only rollout lengths and positions, never the hidden states; and "hidden", distances between a rollout's own
hidden states, solved exactly with POT (the linearization needs 1-D structures), under which GW sees the states.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor

from hara.novelty import whitening_stats
from hara.ot.barycenter import BarycenterConfig, GroupedStates, linearized_barycenter
from hara.ot.exact import FGW_VARIANTS, exact_barycenter

__all__ = [
    "STRUCTURE_LABELS",
    "VARIANT_LABELS",
    "first_rollouts",
    "problem_plans",
    "variant_alphas",
    "variant_key",
    "variant_label",
]

#: Display names of the variants (hara.ot.exact.FGW_VARIANTS keys).
VARIANT_LABELS = {"w": "W (α=0)", "gw": "GW (α=1)", "fgw": "FGW"}
#: What each structure is, for tables and figures.
STRUCTURE_LABELS = {"position": "positional structure", "hidden": "hidden-state structure, exact"}
#: The barycenter solver each structure is computed with.
_BACKENDS = {"position": linearized_barycenter, "hidden": exact_barycenter}


def variant_key(variant: str, structure: str) -> str:
    """``w`` for the positional structure (training's, the study's names so far), ``w_hidden`` otherwise."""
    return variant if structure == "position" else f"{variant}_{structure}"


def variant_label(variant: str, structure: str) -> str:
    """Display name of a variant under a structure."""
    return VARIANT_LABELS[variant] if structure == "position" else f"{VARIANT_LABELS[variant]}, {structure} C"


def variant_alphas(variants: list[str], fgw_alpha: float) -> dict[str, float]:
    """alpha of each variant: W = 0 and GW = 1 by definition, FGW = the config's hara.hara.alpha."""
    unknown = [v for v in variants if v not in FGW_VARIANTS]
    if unknown:
        raise ValueError(f"unknown variant(s) {unknown}; known: {sorted(FGW_VARIANTS)}")
    return {v: (fgw_alpha if v == "fgw" else FGW_VARIANTS[v]) for v in variants}


@torch.no_grad()
def problem_plans(
    h: Tensor, mask: Tensor, problem: Tensor, alpha: float, config: BarycenterConfig | None = None
) -> Tensor:
    """Plans T (N, n, k) of every rollout against its problem's barycenter at FGW trade-off ``alpha``.

    h (N, n, d) hidden states (finite; padding ignored), mask (N, n) valid completion tokens (>= 2 per row),
    problem (N,) long in [0, P). Whitening per problem as in training. ``config``: the barycenter knobs (default:
    docs/method.md's); its alpha is replaced by ``alpha``; its structure picks the solver (module docstring).
    """
    config = config or BarycenterConfig()
    _, index = torch.unique(problem, return_inverse=True)
    groups = int(index.max()) + 1
    mask = mask.bool()
    h = h.float().masked_fill(~mask[..., None], 0.0)
    mean, inv_rms, h_sq = whitening_stats(h, mask, index, groups, torch.ones(h.shape[0], dtype=torch.bool))
    states = GroupedStates(h, mask, index, groups, mean, inv_rms, h_sq)
    result = _BACKENDS[config.structure](states, dataclasses.replace(config, alpha=alpha))
    return result.plan


def first_rollouts(problem: Tensor, count: int) -> Tensor:
    """Row indices of the first ``count`` rollouts (in row order) of every problem."""
    keep = torch.zeros(problem.numel(), dtype=torch.bool)
    for value in torch.unique(problem).tolist():
        keep[torch.nonzero(problem == value).flatten()[:count]] = True
    return torch.nonzero(keep).flatten()
