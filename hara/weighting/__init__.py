"""Advantage transforms: HarA and the credit-assignment baselines, behind one registry and one signature.

Every entry is a pure function

    fn(advantages (B,), completion_mask (B, T), group_ids (B,), rewards (B,), context: WeightingContext)
        -> (token_advantages (B, T), info: dict[str, float])

where group_ids is the prompt id of each rollout and the token advantages are 0 on padding and prompt tokens.
``context.params`` holds the method's knobs as a flat dict (unknown keys raise, naming the key).

HarA [R] (docs/method.md, "From novelty to weights"): A_hat[r, t] = A_r * w[r, t] with w >= 0 computed from novelty per
outcome group, normalised so that the group's advantage mass under the host loss's own token weighting omega is
unchanged: GRPO weighs a token by 1/n_r (sequence mean of token means), Dr.GRPO and DAPO by 1. The normalisation
weight of a token is omega * |A_r|, and the normalisation runs separately over the rollouts with A > 0 and those with
A < 0 of each outcome group: sum omega A w = sum omega A then holds for each sign subset, and so for the group, also
where shaping gives one outcome group both signs (DAPO's overlong penalty makes a correct but overlong rollout's
A negative). No single weight exceeds ``max_weight``.

The package: registry.py (the registry and the one signature), host.py (the host losses' token weighting omega),
hara.py (HarA's formulas, normalisation and transforms), baselines.py (`none` and the credit-assignment baselines),
oracle.py (the step oracle's controls, `oracle_steps` and its modes: step-level credit from the synthetic world's
step oracle);
group operations shared with hara.novelty and the trainer live in hara/groups.py. Importing the package registers
every built-in transform; plug-in methods register on first use (hara/methods.py).
"""

from __future__ import annotations

from hara.weighting.baselines import EntropyShapingParams, ForkingParams, PositionParams, ShearParams
from hara.weighting.hara import FORMULAS, ReweightParams, group_weights, novelty_weights
from hara.weighting.host import HOST_TOKEN_WEIGHTS, host_token_weights
from hara.weighting.oracle import OracleParams
from hara.weighting.registry import (
    WEIGHTINGS,
    WeightingContext,
    WeightingFn,
    apply_weighting,
    available_weightings,
    get_weighting,
    register,
)

__all__ = [
    "FORMULAS",
    "HOST_TOKEN_WEIGHTS",
    "WEIGHTINGS",
    "EntropyShapingParams",
    "ForkingParams",
    "OracleParams",
    "PositionParams",
    "ReweightParams",
    "ShearParams",
    "WeightingContext",
    "WeightingFn",
    "apply_weighting",
    "available_weightings",
    "get_weighting",
    "group_weights",
    "host_token_weights",
    "novelty_weights",
    "register",
]
