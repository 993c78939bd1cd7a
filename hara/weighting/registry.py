"""The registry of advantage transforms: one signature for all, looked up by name (hara.methods declares the rest
of a method: its config section, context needs, metric namespace and kind)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from torch import Tensor

from hara.methods import methods
from hara.plugins import Registry

__all__ = [
    "WEIGHTINGS",
    "WeightingContext",
    "WeightingFn",
    "apply_weighting",
    "available_weightings",
    "get_weighting",
    "parse_params",
    "register",
    "require_context",
]


@dataclass
class WeightingContext:
    """What a transform may need beyond the advantages.

    hidden_states (B, T, d): one layer's hidden states aligned with the completion tokens (HarA, shear).
    token_entropies (B, T): sampling-policy entropy per token at temperature 1 (forking_tokens, gtpo, grpo_s).
    error_starts (B,): completion token where each rollout's first wrong step starts, -1 where none was located
    (the synthetic world's step oracle, hara/data/steps.py; the oracle methods, hara/weighting/oracle.py).
    error_ends (B,): one past that step's last token (-1 where none; absent: the span runs to the completion's end).
    error_steps (B,): that step's index in the rollout's chain of steps (-1 where none).
    loss_type: the host loss, a key of :data:`hara.weighting.host.HOST_TOKEN_WEIGHTS` ("grpo", "dr_grpo", "dapo").
    params: the method's knobs (flat dict; see each method's parameter dataclass for names and defaults).
    """

    hidden_states: Tensor | None = None
    token_entropies: Tensor | None = None
    error_starts: Tensor | None = None
    error_ends: Tensor | None = None
    error_steps: Tensor | None = None
    loss_type: str = "grpo"
    params: dict[str, Any] = field(default_factory=dict)


WeightingFn = Callable[[Tensor, Tensor, Tensor, Tensor, WeightingContext], tuple[Tensor, dict[str, float]]]


def _plugin_transform(name: str) -> WeightingFn | None:
    """A plug-in method's transform (its spec's ``weighting`` reference, imported now); None for any other name."""
    spec = methods().get(name)
    return spec.load_weighting() if spec is not None and spec.weighting is not None else None


#: Every transform: the built-ins (registered by importing hara.weighting), and a plug-in method's on first use.
WEIGHTINGS: Registry[WeightingFn] = Registry("weighting", fallback=_plugin_transform)
get_weighting = WEIGHTINGS.get


def register(name: str) -> Callable[[WeightingFn], WeightingFn]:
    """Decorator adding a transform under ``name``; registering a different function under a taken name raises."""
    return lambda fn: WEIGHTINGS.register(fn, name)


def available_weightings() -> list[str]:
    """Sorted names of all registered transforms."""
    return sorted(WEIGHTINGS.names())


def apply_weighting(
    name: str,
    advantages: Tensor,
    completion_mask: Tensor,
    group_ids: Tensor,
    rewards: Tensor,
    context: WeightingContext | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Look up ``name`` and apply it (the one call a trainer adapter needs)."""
    return get_weighting(name)(advantages, completion_mask, group_ids, rewards, context or WeightingContext())


# ---------------------------------------------------------------------------------------------------------------
# Helpers of the transforms: their knobs from the flat params dict, their required context
# ---------------------------------------------------------------------------------------------------------------


def parse_params(cls: type, params: dict[str, Any], method: str, exclude: tuple[str, ...] = ()) -> Any:
    """Build a parameter dataclass from a flat dict, naming unknown keys in the error."""
    known = {f.name for f in fields(cls)} - set(exclude)
    unknown = set(params) - known
    if unknown:
        raise ValueError(f"unknown parameter(s) {sorted(unknown)} for weighting {method!r}; known: {sorted(known)}")
    return cls(**params)


def require_context(tensor: Tensor | None, what: str, method: str) -> Tensor:
    """Clear error when a transform's context input is missing."""
    if tensor is None:
        raise ValueError(f"weighting {method!r} needs context.{what}")
    return tensor
