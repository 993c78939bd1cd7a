"""The one signature of the advantage transforms and the one call that applies a method's: its transform is the
function its :class:`~hara.methods.MethodSpec` names (``weighting``, "module:function", imported on first use),
called with the method's knobs read into its params dataclass (``params``; hara/knobs.py). hara.methods declares
the rest of a method: its config section, context needs, metric namespace and kind."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from hara.methods import get_method

__all__ = ["WeightingContext", "WeightingFn", "apply_weighting", "get_weighting", "require_context"]


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
    params: the method's knobs, a flat mapping as the config holds them; :func:`apply_weighting` hands the transform
    an instance of the method's params dataclass instead (or the mapping, for a method that declares none).
    """

    hidden_states: Tensor | None = None
    token_entropies: Tensor | None = None
    error_starts: Tensor | None = None
    error_ends: Tensor | None = None
    error_steps: Tensor | None = None
    loss_type: str = "grpo"
    params: Any = field(default_factory=dict)


WeightingFn = Callable[[Tensor, Tensor, Tensor, Tensor, WeightingContext], tuple[Tensor, dict[str, float]]]


def get_weighting(name: str) -> WeightingFn:
    """The transform of method ``name`` (an UnknownNameError listing the methods for another name)."""
    return get_method(name).load_weighting()


def apply_weighting(
    name: str,
    advantages: Tensor,
    completion_mask: Tensor,
    group_ids: Tensor,
    rewards: Tensor,
    context: WeightingContext | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Apply method ``name``'s transform with its knobs typed (the one call a trainer adapter needs): an unknown knob
    raises a ValueError naming it."""
    spec = get_method(name)
    context = context or WeightingContext()
    context = dataclasses.replace(context, params=spec.read_params(context.params))
    return spec.load_weighting()(advantages, completion_mask, group_ids, rewards, context)


def require_context(tensor: Tensor | None, what: str, method: str) -> Tensor:
    """Clear error when a transform's context input is missing."""
    if tensor is None:
        raise ValueError(f"weighting {method!r} needs context.{what}")
    return tensor
