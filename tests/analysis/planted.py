"""Synthetic hidden states with planted reasoning stages (block-structured features along positions).

Every rollout of n tokens walks through S = 4 stages in order; the stage boundaries move from rollout to rollout
(so position alone cannot tell a token's stage near a boundary) and stages 0 and 2 share one feature prototype (so
features alone cannot tell them apart). Only features and positions together (FGW) recover every stage.
"""

from __future__ import annotations

import torch

NUM_STAGES = 4


def planted_rollouts(
    problems: int = 8, rollouts: int = 8, d: int = 16, seed: int = 0, structured: bool = True, noise: float = 0.35
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(h (N, n_max, d), mask (N, n_max), stages (N, n_max) with -1 on padding, problem (N,)), N = problems x
    rollouts. ``structured=False``: features are pure noise and stage labels are drawn independently per token."""
    gen = torch.Generator().manual_seed(seed)
    n_max = 48
    rows = problems * rollouts
    h = torch.zeros(rows, n_max, d)
    mask = torch.zeros(rows, n_max, dtype=torch.bool)
    stages = torch.full((rows, n_max), -1, dtype=torch.long)
    for p in range(problems):
        proto = torch.randn(NUM_STAGES, d, generator=gen) * 1.5
        proto[2] = proto[0]  # stages 0 and 2 look alike: features alone confuse them
        offset = torch.randn(d, generator=gen) * 3.0  # per-problem shift: removed by the whitening
        for r in range(rollouts):
            row = p * rollouts + r
            n = int(torch.randint(36, n_max + 1, (1,), generator=gen))
            share = torch.rand(NUM_STAGES, generator=gen) + 0.6  # stage lengths vary by a factor up to 2.7
            bounds = torch.round(torch.cumsum(share, 0) / share.sum() * n).long()
            label = torch.bucketize(torch.arange(n), bounds, right=True).clamp_max(NUM_STAGES - 1)
            if structured:
                feats = proto[label] + noise * torch.randn(n, d, generator=gen)
            else:
                feats = torch.randn(n, d, generator=gen)
                label = torch.randint(0, NUM_STAGES, (n,), generator=gen)
            h[row, :n], mask[row, :n], stages[row, :n] = feats + offset, True, label
    problem = torch.arange(problems).repeat_interleave(rollouts)
    return h, mask, stages, problem
