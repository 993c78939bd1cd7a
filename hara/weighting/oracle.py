"""The step oracle's controls: credit placed by what only the synthetic world knows, where a rollout first goes wrong.

For each incorrect rollout the oracle (hara/data/steps.py, run by the trainer) gives the tokens of its first wrong
step: ``context.error_starts`` (its first token), ``context.error_ends`` (one past its last: the next step's start,
or the boxed value of a wrong answer step) and ``context.error_steps`` (its index in the chain). Correct rollouts,
and incorrect ones where no wrong step was located, keep the host algorithm's advantage. Four modes, one method each
(kind oracle: kept out of the claims, corrected in a family of their own):

- ``oracle_steps`` (suffix, the first control): the negative advantage goes on the tokens from the wrong step on (the
  step, the steps computed from it and the answer template), the tokens before it keep ``prefix_share`` of it; the
  mass of every (prompt, outcome, sign) subset stays the host's, as in HarA, so penalty also moves between rollouts.
- ``oracle_step``: the negative advantage only on the wrong step's tokens; each rollout keeps its own penalty mass
  (under the host loss's token weighting), so the step carries what the whole rollout carried.
- ``oracle_reversed`` (a sabotage that must lose): the penalty only on the right steps before the mistake, none on the
  mistake or after; a rollout wrong from its first step gets no penalty at all. Each rollout keeps its mass.
- ``oracle_process``: a dense min-form step reward: an incorrect rollout's right steps before the mistake get +s,
  the wrong step -s, the later tokens nothing, also in groups where every rollout is wrong and the outcome gives no
  signal; s is the rollout's |advantage|, or ``process_scale`` where the host gave it none.

Why ``step`` and ``reversed`` keep each rollout's mass while ``suffix`` keeps each subset's: a span a tenth of the
rollout then carries ten times the weight per token, so moving the credit does not also shrink it; no weight exceeds
``span_max_weight`` (the capped-off mass is dropped: ``oracle/mass_kept``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from hara.groups import GroupOps, prompt_index
from hara.knobs import knob
from hara.weighting.hara import cap_weights
from hara.weighting.host import host_token_weights
from hara.weighting.interface import WeightingContext, require_context

__all__ = [
    "FIRST_WRONG_BUCKETS",
    "ORACLE_MODES",
    "OracleParams",
    "WrongSteps",
    "oracle_process",
    "oracle_reversed",
    "oracle_step",
    "oracle_steps",
]

#: The first-wrong-step histogram's buckets: steps 0 .. FIRST_WRONG_BUCKETS - 2, and the last for every later step.
FIRST_WRONG_BUCKETS = 10


@dataclass(frozen=True)
class OracleParams:
    """prefix_share: suffix mode, weight of the tokens before an incorrect rollout's first wrong step (before
    renormalisation); outcome_threshold: reward above which a rollout is correct; max_weight: suffix mode, no token's
    weight exceeds it; span_max_weight: step and reversed modes, the same bound; process_scale: process mode, the
    credit's size in a rollout whose host advantage is 0 (a group with no outcome signal)."""

    prefix_share: float = knob(
        0.0,
        "Weight of the tokens before the first wrong step, before the group's mass is restored (0 = not penalised).",
        minimum=0,
        maximum=1,
    )
    outcome_threshold: float = knob(0.5, "Reward above which a rollout counts as correct.", minimum=-1000, maximum=1000)
    max_weight: float = knob(
        5.0,
        "oracle_steps (suffix) only: no token's weight exceeds it (the mass the cap removes goes to the subset's "
        "other tokens).",
        minimum=1,
        maximum=1000,
    )
    span_max_weight: float = knob(
        20.0,
        "oracle_step and oracle_reversed: no token's weight exceeds it (a rollout's mass on a short span is capped "
        "there; the mass removed is dropped, metric oracle/mass_kept).",
        minimum=1,
        maximum=1000,
    )
    process_scale: float = knob(
        1.0,
        "oracle_process: the size of the step credit in a rollout whose host advantage is 0 (a group with no outcome "
        "signal); elsewhere it is the rollout's own |advantage|.",
        minimum=0,
        maximum=1000,
    )

    def __post_init__(self) -> None:
        if not 0.0 <= self.prefix_share <= 1.0:
            raise ValueError(f"prefix_share must be in [0, 1], got {self.prefix_share}")
        for name in ("max_weight", "span_max_weight"):
            if getattr(self, name) < 1.0:
                raise ValueError(f"{name} must be >= 1 (weights have mean 1), got {getattr(self, name)}")
        if self.process_scale < 0.0:
            raise ValueError(f"process_scale must be >= 0, got {self.process_scale}")


@dataclass(frozen=True)
class WrongSteps:
    """The oracle's answer for a batch, as the modes read it: the token span [start, end) of each rollout's first
    wrong step (B,), ``located`` (B,) for the incorrect rollouts whose mistake was found, and the token positions
    (1, T)."""

    start: Tensor
    end: Tensor
    located: Tensor
    positions: Tensor

    def before(self) -> Tensor:
        """(B, T): the tokens before the wrong step, on located rows."""
        return self.located[:, None] & (self.positions < self.start[:, None])

    def inside(self) -> Tensor:
        """(B, T): the wrong step's tokens, on located rows."""
        return self.located[:, None] & (self.positions >= self.start[:, None]) & (self.positions < self.end[:, None])


def _normalised(raw: Tensor, omega: Tensor, subset: Tensor, num_subsets: int, cap: float) -> tuple[Tensor, Tensor]:
    """``raw`` rescaled to omega-weighted mean 1 within each subset, capped at ``cap``; 1 outside the subsets."""
    ops = GroupOps(subset, omega, num_subsets)
    w = torch.where(ops.valid, raw / ops.mean(raw).clamp_min(1e-30), torch.ones_like(raw))
    w, capped = cap_weights(w, ops, cap)
    return torch.where(ops.valid, w, torch.ones_like(w)), capped & ops.valid


@dataclass(frozen=True)
class Batch:
    """What every mode reads: host advantages (B,), mask (B, T), omega (B, T), incorrect (B,), the oracle's spans,
    the prompt index (B,) and the knobs."""

    advantages: Tensor
    mask: Tensor
    omega: Tensor
    incorrect: Tensor
    wrong: WrongSteps
    prompt: Tensor
    params: OracleParams


def _suffix(batch: Batch) -> tuple[Tensor, dict[str, float]]:
    """``prefix_share`` before the wrong step of each penalised located rollout, 1 elsewhere, then rescaled to an
    omega |A|-weighted mean of 1 per (prompt, outcome, sign) subset and capped at ``max_weight``."""
    negative = batch.advantages < 0
    before = batch.wrong.before() & negative[:, None]
    raw = torch.where(before, torch.full_like(batch.omega, batch.params.prefix_share), torch.ones_like(batch.omega))
    subset = batch.prompt * 4 + (~batch.incorrect).long() * 2 + negative.long()
    num = int(subset.max()) + 1 if subset.numel() else 0
    omega = batch.omega * batch.advantages.abs().float()[:, None]
    w, capped = _normalised(raw, omega, subset, num, batch.params.max_weight)
    return batch.advantages.float()[:, None] * w, {"oracle/capped_tokens": float(capped.sum())}


def _own_mass(batch: Batch, chosen: Tensor) -> tuple[Tensor, dict[str, float]]:
    """Each penalised located rollout's negative advantage on its ``chosen`` (B, T) tokens only, rescaled so the
    rollout keeps its omega-weighted mass (capped at span_max_weight); a rollout with no chosen token gets none."""
    relocate = batch.wrong.located & (batch.advantages < 0)
    rows = torch.arange(relocate.shape[0], device=relocate.device)
    subset = torch.where(relocate & chosen.any(-1), rows, -1)
    w, capped = _normalised(chosen.float(), batch.omega, subset, relocate.shape[0], batch.params.span_max_weight)
    w = torch.where(relocate[:, None] & (subset[:, None] < 0), torch.zeros_like(w), w)
    token = batch.advantages.float()[:, None] * w
    info = {"oracle/capped_tokens": float(capped.sum()), "oracle/mass_kept": _mass_kept(batch, token, relocate)}
    return token, info


def _mass_kept(batch: Batch, token: Tensor, rows: Tensor) -> float:
    """The share of the ``rows``' host penalty mass (under omega) that their token advantages still carry."""
    host = (batch.omega * batch.advantages.abs().float()[:, None])[rows].sum()
    return float((batch.omega * token.abs())[rows].sum() / host) if float(host) > 0 else 1.0


def _step(batch: Batch) -> tuple[Tensor, dict[str, float]]:
    return _own_mass(batch, batch.wrong.inside())


def _reversed(batch: Batch) -> tuple[Tensor, dict[str, float]]:
    return _own_mass(batch, batch.wrong.before())


def _process(batch: Batch) -> tuple[Tensor, dict[str, float]]:
    advantages = batch.advantages.float()
    size = torch.where(advantages != 0, advantages.abs(), torch.full_like(advantages, batch.params.process_scale))
    dense = batch.wrong.before().float() - batch.wrong.inside().float()
    token = torch.where(batch.wrong.located[:, None], size[:, None] * dense, advantages[:, None].expand_as(dense))
    silent = batch.wrong.located & (advantages == 0)
    return token, {"oracle/silent_rollouts_credited": float(silent.sum())}


#: method name -> mode: how an incorrect rollout's credit is placed from its first wrong step (module docstring).
ORACLE_MODES: dict[str, Callable[[Batch], tuple[Tensor, dict[str, float]]]] = {
    "oracle_steps": _suffix,
    "oracle_step": _step,
    "oracle_reversed": _reversed,
    "oracle_process": _process,
}


def _batch(advantages, completion_mask, group_ids, rewards, context, method: str) -> Batch:
    params: OracleParams = context.params
    starts = require_context(context.error_starts, "error_starts (B,)", method).long()
    ends = context.error_ends.long() if context.error_ends is not None else torch.full_like(starts, -1)
    mask = completion_mask.bool()
    incorrect = rewards <= params.outcome_threshold
    positions = torch.arange(mask.shape[1], device=mask.device)[None, :]
    # a span with no end known (a caller giving starts only) runs to the end of the completion
    ends = torch.where(ends < 0, torch.full_like(ends, mask.shape[1]), ends)
    wrong = WrongSteps(starts, ends, incorrect & (starts >= 0), positions)
    omega = host_token_weights(mask, context.loss_type)
    return Batch(advantages, mask, omega, incorrect, wrong, prompt_index(group_ids)[0], params)


def _diagnostics(batch: Batch, context: WeightingContext) -> dict[str, float]:
    """What every mode logs: how often the oracle found the mistake, where (share of the completion, and the step
    histogram), and the share of groups whose outcomes are all equal (no outcome signal)."""
    lengths = batch.mask.sum(-1).clamp_min(1)
    wrong = batch.wrong
    info = {
        "oracle/located_fraction": _mean(wrong.located[batch.incorrect].float()),
        "oracle/error_position": _mean((wrong.start.float() / lengths)[wrong.located]),
        "oracle/no_signal_groups": _no_signal_share(batch),
    }
    steps = context.error_steps
    if steps is not None:
        located = steps.long()[wrong.located].clamp_max(FIRST_WRONG_BUCKETS - 1)
        counts = torch.bincount(located, minlength=FIRST_WRONG_BUCKETS).float() / max(located.numel(), 1)
        info |= {f"oracle/first_wrong_step_{k}": float(share) for k, share in enumerate(counts)}
    return info


def _no_signal_share(batch: Batch) -> float:
    """Share of the prompts whose rollouts' outcomes are all equal (GRPO gives them no advantage)."""
    if not batch.prompt.numel():
        return 0.0
    num = int(batch.prompt.max()) + 1
    wrong = torch.zeros(num).index_add_(0, batch.prompt.cpu(), batch.incorrect.float().cpu())
    total = torch.bincount(batch.prompt.cpu(), minlength=num).float()
    return float(((wrong == 0) | (wrong == total)).float().mean())


def _transform(method: str) -> Callable:
    mode = ORACLE_MODES[method]

    def oracle(
        advantages: Tensor, completion_mask: Tensor, group_ids: Tensor, rewards: Tensor, context: WeightingContext
    ) -> tuple[Tensor, dict[str, float]]:
        batch = _batch(advantages, completion_mask, group_ids, rewards, context, method)
        token, info = mode(batch)
        return token * batch.mask, {**_diagnostics(batch, context), **info}

    oracle.__doc__ = f"{method}: credit from the step oracle's first wrong step (hara/weighting/oracle.py)."
    return oracle


oracle_steps = _transform("oracle_steps")
oracle_step = _transform("oracle_step")
oracle_reversed = _transform("oracle_reversed")
oracle_process = _transform("oracle_process")


def _mean(values: Tensor) -> float:
    """Mean of a 1-D tensor, 0 when empty (a step with no incorrect rollout)."""
    return float(values.mean()) if values.numel() else 0.0
