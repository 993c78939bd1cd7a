"""``oracle_steps``: step-level credit from the synthetic world's step oracle, the positive control of the harness.

For each incorrect rollout the oracle (hara/data/steps.py, run by the trainer) gives the completion token where the
first wrong step starts (``context.error_starts``); that rollout's negative advantage goes on the tokens from there
on, and the tokens before it keep ``prefix_share`` of it (0: the right steps before the mistake are not penalised).
Correct rollouts, and incorrect ones where no wrong step was located, keep the host algorithm's advantage.

The advantage mass of every outcome group's sign subset stays the host algorithm's, as in HarA
(hara/weighting/__init__.py): the weights are rescaled to an omega |A|-weighted mean of 1 per (prompt, outcome,
sign) subset and capped at ``max_weight`` (the mass the cap removes goes to the subset's other tokens). So a rollout
that goes wrong late puts its whole penalty on its few last tokens, up to the cap.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from hara.groups import GroupOps, prompt_index
from hara.weighting.hara import cap_weights
from hara.weighting.host import host_token_weights
from hara.weighting.registry import WeightingContext, parse_params, register, require_context

__all__ = ["OracleParams", "oracle_weights"]


@dataclass(frozen=True)
class OracleParams:
    """prefix_share: weight of the tokens before an incorrect rollout's first wrong step (before renormalisation);
    outcome_threshold: reward above which a rollout is correct; max_weight: no token's weight exceeds it."""

    prefix_share: float = 0.0
    outcome_threshold: float = 0.5
    max_weight: float = 5.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.prefix_share <= 1.0:
            raise ValueError(f"prefix_share must be in [0, 1], got {self.prefix_share}")
        if self.max_weight < 1.0:
            raise ValueError(f"max_weight must be >= 1 (weights have mean 1), got {self.max_weight}")


def oracle_weights(
    starts: Tensor, relocate: Tensor, omega: Tensor, subset: Tensor, num_subsets: int, params: OracleParams
) -> tuple[Tensor, Tensor]:
    """Weights (B, T): ``prefix_share`` before ``starts`` (B,) on the ``relocate`` (B,) rows, 1 elsewhere, then
    rescaled to omega-weighted mean 1 within each subset (B,) in [0, num_subsets) and capped. Returns w and the
    capped flags."""
    positions = torch.arange(omega.shape[1], device=omega.device)[None, :]
    before = relocate[:, None] & (positions < starts[:, None])
    raw = torch.where(before, torch.full_like(omega, params.prefix_share), torch.ones_like(omega))
    ops = GroupOps(subset, omega, num_subsets)
    w = torch.where(ops.valid, raw / ops.mean(raw).clamp_min(1e-30), torch.ones_like(raw))
    w, capped = cap_weights(w, ops, params.max_weight)
    return torch.where(ops.valid, w, torch.ones_like(w)), capped & ops.valid


@register("oracle_steps")
def oracle_steps(
    advantages: Tensor, completion_mask: Tensor, group_ids: Tensor, rewards: Tensor, context: WeightingContext
) -> tuple[Tensor, dict[str, float]]:
    """Step-level credit for incorrect rollouts from the step oracle (module docstring)."""
    p = parse_params(OracleParams, context.params, "oracle_steps")
    starts = require_context(context.error_starts, "error_starts (B,)", "oracle_steps").long()
    mask = completion_mask.bool()
    incorrect = rewards <= p.outcome_threshold
    relocate = incorrect & (starts >= 0) & (advantages < 0)
    prompt, _ = prompt_index(group_ids)
    subset = prompt * 4 + (~incorrect).long() * 2 + (advantages < 0).long()
    omega = host_token_weights(mask, context.loss_type) * advantages.abs().float()[:, None]
    w, capped = oracle_weights(starts, relocate, omega, subset, int(subset.max()) + 1 if subset.numel() else 0, p)
    token_adv = advantages.float()[:, None] * w * mask
    lengths = mask.sum(-1).clamp_min(1)
    wrong = incorrect & (advantages < 0)
    info = {
        "oracle/located_fraction": _mean(relocate[wrong].float()),
        "oracle/error_position": _mean((starts.float() / lengths)[relocate]),
        "oracle/capped_tokens": float(capped.sum()),
    }
    return token_adv, info


def _mean(values: Tensor) -> float:
    """Mean of a 1-D tensor, 0 when empty (a step with no incorrect rollout)."""
    return float(values.mean()) if values.numel() else 0.0
