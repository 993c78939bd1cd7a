"""Host RLVR algorithms as data: GRPO, Dr.GRPO and DAPO are presets of one clipped policy-gradient loss.

Every factor that distinguishes them is a field of :class:`RLVRPreset` and a key of the config's ``rlvr.<preset>``
section (whose schema defaults equal the values here; a test keeps them in sync):

==================  ==============  ==============  ==================
factor              grpo            dr_grpo         dapo
==================  ==============  ==============  ==================
std scaling         per group       none            per group
loss aggregation    seq-mean of     token sum /     token mean over
(TRL loss_type)     token-mean      (B * L_max)     the batch
clip eps low/high   0.2 / 0.2       0.2 / 0.2       0.2 / 0.28
dynamic sampling    no              no              yes (masked, below)
overlong shaping    no              no              yes (band L_cache = overlong_cache)
KL beta             0.0             0.0             0.0
==================  ==============  ==============  ==================

KL: the GRPO paper used beta = 0.04; TRL (and Dr.GRPO, DAPO) default to 0, which also saves the reference model's
forward pass. The HarA paper does not state it, so beta = 0 for all three and the config can set it.

DAPO dynamic sampling. DAPO drops groups whose accuracy is all 1 or all 0 and samples more prompts until the batch is
full. TRL's loop generates exactly one generation batch per step and offers no refill hook, so here those groups
are *masked out of the loss* instead: their advantage is already 0 (no policy gradient), and removing their tokens
from the loss mask also removes them from DAPO's token-mean denominator, so the remaining groups get the weight they
would have in a batch of only informative groups. The batch is smaller rather than refilled; the fraction dropped is
logged as ``train/dynamic_sampling_dropped``.

Soft overlong punishment (DAPO) is an extra reward term added to the correctness reward:
R_len(|y|) = 0 if |y| <= L_max - L_cache, ((L_max - L_cache) - |y|) / L_cache inside the cache band, -1 beyond L_max.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hara.plugins import Registry

__all__ = [
    "PRESETS",
    "RLVRPreset",
    "config_preset",
    "get_preset",
    "grpo_config_kwargs",
    "overlong_penalty",
    "soft_overlong_reward",
]


@dataclass(frozen=True)
class RLVRPreset:
    """One host algorithm.

    scale_rewards: TRL's std scaling of group advantages ("group": (R - mean) / (std + delta), "none": R - mean,
    "batch": batch std). loss_type: TRL's loss aggregation ("grpo": sequence mean of token means, "dr_grpo": token
    sum / (B * max_completion_length), "dapo": token mean over the generation batch, "bnpo": token mean over the
    micro-batch). epsilon_low / epsilon_high: clip range of the importance ratio. beta: KL coefficient to the
    reference model (0 = no reference model). dynamic_sampling: mask all-equal-reward groups out of the loss.
    overlong_shaping: add the soft overlong punishment with cache band ``overlong_cache`` tokens.
    """

    scale_rewards: str
    loss_type: str
    epsilon_low: float = 0.2
    epsilon_high: float = 0.2
    beta: float = 0.0
    dynamic_sampling: bool = False
    overlong_shaping: bool = False
    overlong_cache: int = 32

    def __post_init__(self) -> None:
        if self.scale_rewards not in ("group", "batch", "none"):
            raise ValueError(f"scale_rewards must be group, batch or none, got {self.scale_rewards!r}")
        if self.loss_type not in ("grpo", "bnpo", "dr_grpo", "dapo"):
            raise ValueError(f"loss_type must be grpo, bnpo, dr_grpo or dapo, got {self.loss_type!r}")
        if not (0.0 <= self.epsilon_low < 1.0 and self.epsilon_high >= 0.0 and self.beta >= 0.0):
            raise ValueError("need 0 <= epsilon_low < 1, epsilon_high >= 0 and beta >= 0")
        if self.overlong_cache < 0:
            raise ValueError(f"overlong_cache must be >= 0, got {self.overlong_cache}")


#: The host algorithms by name (the ``--rlvr`` choices).
PRESETS: Registry[RLVRPreset] = Registry(
    "preset",
    {
        "grpo": RLVRPreset(scale_rewards="group", loss_type="grpo"),
        "dr_grpo": RLVRPreset(scale_rewards="none", loss_type="dr_grpo"),
        "dapo": RLVRPreset(
            scale_rewards="group", loss_type="dapo", epsilon_high=0.28, dynamic_sampling=True, overlong_shaping=True
        ),
    },
)


def get_preset(name: str, overrides: Mapping[str, Any] | None = None) -> RLVRPreset:
    """The preset ``name`` with ``overrides`` (e.g. the config's ``rlvr.<name>`` section) applied.

    An unknown name raises an UnknownNameError (a ValueError) listing the valid ones, unknown override keys a
    ValueError naming them.
    """
    preset = PRESETS.get(name)
    known = {f.name for f in dataclasses.fields(RLVRPreset)}
    unknown = set(overrides or {}) - known
    if unknown:
        raise ValueError(f"unknown rlvr.{name} key(s) {sorted(unknown)}; known: {sorted(known)}")
    return dataclasses.replace(preset, **dict(overrides or {}))


def config_preset(config: Mapping, name: str) -> RLVRPreset:
    """The preset ``name`` with the config's ``rlvr.<name>`` factors (a preset without a schema section: as
    registered)."""
    return get_preset(name, config["rlvr"].get(name))


def grpo_config_kwargs(preset: RLVRPreset) -> dict[str, Any]:
    """The GRPOConfig arguments a preset sets (dynamic sampling and overlong shaping live in the trainer)."""
    return {
        "scale_rewards": preset.scale_rewards,
        "loss_type": preset.loss_type,
        "epsilon": preset.epsilon_low,
        "epsilon_high": preset.epsilon_high,
        "beta": preset.beta,
    }


def overlong_penalty(length: int, l_max: int, l_cache: int) -> float:
    """DAPO's soft overlong punishment of a completion of ``length`` tokens (0, linear in the band, -1 beyond)."""
    threshold = l_max - l_cache
    if length <= threshold:
        return 0.0
    if length <= l_max:
        return (threshold - length) / max(l_cache, 1)
    return -1.0


def soft_overlong_reward(l_max: int, l_cache: int) -> Callable[..., list[float]]:
    """A TRL reward function (uses ``completion_ids``) returning :func:`overlong_penalty` per completion."""
    if not 0 <= l_cache <= l_max:
        raise ValueError(f"need 0 <= overlong_cache ({l_cache}) <= max_completion_length ({l_max})")

    def overlong(completions: Sequence[Any], completion_ids: Sequence[Sequence[int]], **kwargs: Any) -> list[float]:
        return [overlong_penalty(len(ids), l_max, l_cache) for ids in completion_ids]

    overlong.__name__ = "soft_overlong"
    return overlong
