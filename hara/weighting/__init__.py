"""Advantage transforms: HarA and the credit-assignment baselines, behind one signature.

Every transform is a pure function

    fn(advantages (B,), completion_mask (B, T), group_ids (B,), rewards (B,), context: WeightingContext)
        -> (token_advantages (B, T), info: dict[str, float])

where group_ids is the prompt id of each rollout and the token advantages are 0 on padding and prompt tokens.
A method's :class:`~hara.methods.MethodSpec` names its transform ("module:function", imported on first use) and its
params dataclass; :func:`apply_weighting` hands the transform ``context.params`` as that dataclass, read from the
config's flat mapping of knobs (unknown keys raise, naming the key).

HarA [R] (docs/method.md, "From novelty to weights"): A_hat[r, t] = A_r * w[r, t] with w >= 0 computed from novelty per
outcome group, normalised so that the group's advantage mass under the host loss's own token weighting omega is
unchanged: GRPO weighs a token by 1/n_r (sequence mean of token means), Dr.GRPO and DAPO by 1. The normalisation
weight of a token is omega * |A_r|, and the normalisation runs separately over the rollouts with A > 0 and those with
A < 0 of each outcome group: sum omega A w = sum omega A then holds for each sign subset, and so for the group, also
where shaping gives one outcome group both signs (DAPO's overlong penalty makes a correct but overlong rollout's
A negative). No single weight exceeds ``max_weight``.

The package: interface.py (the one signature, the context and the one call), host.py (the host losses' token
weighting omega), hara.py (HarA's formulas, normalisation, knobs and transforms), baselines.py (`none` and the
credit-assignment baselines), oracle.py (the step oracle's controls, `oracle_steps` and its modes: step-level credit
from the synthetic world's step oracle); group operations shared with hara.novelty and the trainer live in
hara/groups.py.
"""

from __future__ import annotations

from hara.weighting.baselines import EntropyShapingParams, ForkingParams, PositionParams, ShearParams
from hara.weighting.hara import FORMULAS, HaraParams, ReweightParams, group_weights, novelty_weights
from hara.weighting.host import HOST_TOKEN_WEIGHTS, host_token_weights
from hara.weighting.interface import WeightingContext, WeightingFn, apply_weighting, get_weighting
from hara.weighting.oracle import OracleParams

__all__ = [
    "FORMULAS",
    "HOST_TOKEN_WEIGHTS",
    "EntropyShapingParams",
    "ForkingParams",
    "HaraParams",
    "OracleParams",
    "PositionParams",
    "ReweightParams",
    "ShearParams",
    "WeightingContext",
    "WeightingFn",
    "apply_weighting",
    "get_weighting",
    "group_weights",
    "host_token_weights",
    "novelty_weights",
]
