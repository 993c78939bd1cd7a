"""The host losses' own token weighting omega: how much one token's advantage counts in GRPO, Dr.GRPO and DAPO.
HarA keeps each sign subset's advantage mass under it (hara.weighting.hara)."""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor

__all__ = ["HOST_TOKEN_WEIGHTS", "host_token_weights"]


def _per_sequence_mean(mask: Tensor) -> Tensor:
    """GRPO: sequence mean of token means, so a token of rollout r weighs 1 / n_r."""
    m = mask.float()
    return m / m.sum(-1, keepdim=True).clamp_min(1.0)


#: omega (B, T) of each host loss: how much one token's advantage counts in the loss.
HOST_TOKEN_WEIGHTS: dict[str, Callable[[Tensor], Tensor]] = {
    "grpo": _per_sequence_mean,
    "dr_grpo": lambda mask: mask.float(),  # token sums / a constant
    "dapo": lambda mask: mask.float(),  # token mean over the batch
}


def host_token_weights(completion_mask: Tensor, loss_type: str) -> Tensor:
    """omega (B, T) for the host loss ``loss_type`` (0 on padding)."""
    if loss_type not in HOST_TOKEN_WEIGHTS:
        raise ValueError(f"loss_type must be one of {sorted(HOST_TOKEN_WEIGHTS)}, got {loss_type!r}")
    return HOST_TOKEN_WEIGHTS[loss_type](completion_mask.bool())
