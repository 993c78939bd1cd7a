"""Operations over groups of rollouts: a prompt's rollouts, an outcome group, a sign subset.

The one home of the index, reduce and broadcast helpers that the novelty (hara.novelty), the advantage transforms
(hara.weighting) and the trainer (hara.rlvr.trainer) share. Pure torch, below all three. A group index is a (B,)
long tensor in [0, G) (-1: in no group, where a function says so).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["GroupOps", "group_all", "group_any", "group_max", "group_min", "live_prompts", "prompt_index"]


def prompt_index(group_ids: Tensor) -> tuple[Tensor, int]:
    """Prompt index (B,) in [0, P) of arbitrary prompt ids (B,), and P."""
    _, prompt = torch.unique(group_ids, return_inverse=True)
    return prompt, int(prompt.max()) + 1 if prompt.numel() else 0


def group_max(values: Tensor, index: Tensor, size: int) -> Tensor:
    """max of values (B,) per index (B,) in [0, size) -> (size,); -inf for empty groups."""
    out = torch.full((size,), float("-inf"), device=values.device, dtype=values.dtype)
    return out.scatter_reduce(0, index, values, reduce="amax", include_self=True)


def group_min(values: Tensor, index: Tensor, size: int) -> Tensor:
    """min of values (B,) per index (B,) in [0, size) -> (size,); +inf for empty groups."""
    out = torch.full((size,), float("inf"), device=values.device, dtype=values.dtype)
    return out.scatter_reduce(0, index, values, reduce="amin", include_self=True)


def group_all(flags: Tensor, index: Tensor, size: int) -> Tensor:
    """(size,) bool: every row of the group has its flag (B,) set (True for empty groups)."""
    unset = torch.zeros(size, device=flags.device).index_add_(0, index, (~flags).float())
    return unset == 0


def group_any(flags: Tensor, index: Tensor, size: int) -> Tensor:
    """(size,) bool: some row of the group has its flag (B,) set."""
    return ~group_all(~flags, index, size)


def live_prompts(advantages: Tensor, prompt: Tensor, num_prompts: int, atol: float = 1e-8) -> Tensor:
    """Rows (B,) bool whose prompt has a non-zero advantage somewhere (all-equal rewards carry no signal)."""
    return (group_max(advantages.abs().float(), prompt, num_prompts) > atol)[prompt]


class GroupOps:
    """omega-weighted statistics of token values (B, T) within groups, broadcast back to the tokens.

    index (B,) group in [0, G) or -1; omega (B, T) >= 0; tokens with omega = 0 or index = -1 do not count.
    """

    def __init__(self, index: Tensor, omega: Tensor, num_groups: int) -> None:
        self.valid = (omega > 0) & (index[:, None] >= 0)
        self.slot = torch.where(self.valid, index[:, None].expand_as(omega), num_groups).flatten()
        self.omega, self.size = omega.flatten(), num_groups + 1  # the extra slot collects invalid tokens

    def mean(self, v: Tensor) -> Tensor:
        num = torch.zeros(self.size, device=v.device).index_add_(0, self.slot, (v.flatten() * self.omega))
        den = torch.zeros(self.size, device=v.device).index_add_(0, self.slot, self.omega)
        return (num / den.clamp_min(1e-30))[self.slot].view_as(v)

    def std(self, v: Tensor) -> Tensor:
        return (self.mean((v - self.mean(v)).square())).sqrt()

    def max(self, v: Tensor) -> Tensor:
        kept = torch.where(self.valid, v, float("-inf")).flatten()
        return group_max(kept, self.slot, self.size)[self.slot].view_as(v)

    def min(self, v: Tensor) -> Tensor:
        kept = torch.where(self.valid, v, float("inf")).flatten()
        return group_min(kept, self.slot, self.size)[self.slot].view_as(v)
