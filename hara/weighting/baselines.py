"""The credit-assignment baselines HarA is compared with (docs/method.md, "Baselines"), and `none`, the host
algorithm as is: each a transform with its parameter dataclass (their specs: hara/methods.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from hara.groups import live_prompts, prompt_index
from hara.knobs import knob
from hara.ot.linearized import token_positions
from hara.ot.sinkhorn import sinkhorn_log
from hara.weighting.interface import WeightingContext, require_context

__all__ = [
    "EntropyShapingParams",
    "ForkingParams",
    "PositionParams",
    "ShearParams",
    "forking_tokens",
    "grpo_s",
    "gtpo",
    "none",
    "position",
    "shear",
]


def none(
    advantages: Tensor, completion_mask: Tensor, group_ids: Tensor, rewards: Tensor, context: WeightingContext
) -> tuple[Tensor, dict[str, float]]:
    """The host algorithm as is: every valid token carries its rollout's advantage."""
    return advantages.float()[:, None] * completion_mask.float(), {}


# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ForkingParams:
    """top_fraction: share of the batch's valid tokens (highest entropy) that keep their gradient."""

    top_fraction: float = knob(
        0.2,
        "Share of the batch's valid tokens (highest entropy) that keep their gradient.",
        exclusiveMinimum=0,
        maximum=1,
    )


def forking_tokens(
    advantages: Tensor, completion_mask: Tensor, group_ids: Tensor, rewards: Tensor, context: WeightingContext
) -> tuple[Tensor, dict[str, float]]:
    """Beyond the 80/20 rule (arXiv 2506.01939): only tokens in the batch's top-20% entropy get gradient.

    w = 1[H >= threshold] with the threshold the ceil(top_fraction * N)-th largest entropy among the N valid
    tokens (ties may keep slightly more); non-finite entropies are never kept. No renormalisation (as published).
    """
    p: ForkingParams = context.params
    mask = completion_mask.bool()
    ent = require_context(context.token_entropies, "token_entropies (B, T)", "forking_tokens").float()
    ent = torch.where(torch.isfinite(ent) & mask, ent, float("-inf"))
    count = int(mask.sum())
    if count == 0:
        return torch.zeros(mask.shape, device=mask.device), {"forking/kept_fraction": 0.0}
    kth = max(1, math.ceil(p.top_fraction * count))
    threshold = torch.topk(ent.flatten(), kth).values[-1]
    keep = (ent >= threshold) & mask & torch.isfinite(threshold)
    info = {"forking/kept_fraction": float(keep.sum()) / count, "forking/entropy_threshold": float(threshold)}
    return advantages.float()[:, None] * keep, info


@dataclass(frozen=True)
class EntropyShapingParams:
    """GTPO / GRPO-S knobs (arXiv 2508.04349): alpha1 (outcome reward weight), alpha2 (entropy bonus weight),
    outcome_threshold (correct = reward above it), normalization "joint" (one mean/std over the prompt's shaped
    rewards) or "separate" (over correct and incorrect rollouts separately), eps (divisions)."""

    alpha1: float = knob(1.0, "Outcome reward weight.", minimum=0, maximum=100)
    alpha2: float = knob(0.1, "Entropy bonus weight.", minimum=0, maximum=100)
    outcome_threshold: float = knob(0.5, "Reward above which a rollout counts as correct.", minimum=-1000, maximum=1000)
    normalization: str = knob(
        "joint",
        "joint (one mean/std over the prompt's shaped rewards) or separate (per outcome).",
        enum=["joint", "separate"],
    )
    eps: float = knob(1e-8, "Guard of divisions.", exclusiveMinimum=0, maximum=1)


def _shaped_rewards(
    h: Tensor, valid: Tensor, correct: Tensor, rewards: Tensor, prompt: Tensor, P: int, p: EntropyShapingParams
) -> Tensor:
    """Entropy-shaped rewards (B, L) for values h (B, L) >= 0 at aligned positions (tokens, or L = 1 for sequences):
    correct:   alpha1 r_i + alpha2 * H_i / sum_{k in O+} H_k * |O+|          (high entropy favoured),
    incorrect: -alpha1   - alpha2 * (1/H_j) / sum_{k in O-} (1/H_k) * |O-|   (confident errors penalised more),
    sums and counts per prompt and position over the rollouts active there."""

    def per_prompt_sum(v: Tensor) -> Tensor:  # (B, L) -> (B, L): sum over rollouts of the same prompt
        return torch.zeros(P, v.shape[1], device=v.device).index_add_(0, prompt, v)[prompt]

    pos, neg = valid & correct[:, None], valid & ~correct[:, None]
    inv = 1.0 / (h + p.eps)
    share_pos = h * pos / per_prompt_sum(h * pos).clamp_min(p.eps) * per_prompt_sum(pos.float())
    share_neg = inv * neg / per_prompt_sum(inv * neg).clamp_min(p.eps) * per_prompt_sum(neg.float())
    r_pos = p.alpha1 * rewards.float()[:, None] + p.alpha2 * share_pos
    r_neg = -p.alpha1 - p.alpha2 * share_neg
    return torch.where(correct[:, None], r_pos, r_neg) * valid


def _normalise(r: Tensor, valid: Tensor, key: Tensor, size: int, eps: float, unbiased: bool) -> Tensor:
    """(r - mean) / (std + eps) over the valid entries sharing a key (B,) in [0, size); 0 elsewhere."""
    m = valid.float()
    cnt = torch.zeros(size, device=r.device).index_add_(0, key, m.sum(1))
    mean = torch.zeros(size, device=r.device).index_add_(0, key, (r * m).sum(1)) / cnt.clamp_min(1.0)
    dev = (r - mean[key][:, None]) * m
    var = torch.zeros(size, device=r.device).index_add_(0, key, dev.square().sum(1))
    var = var / (cnt - 1.0 if unbiased else cnt).clamp_min(1.0)
    return dev / (var.sqrt()[key][:, None] + eps)


def _entropy_shaping(
    level: str,
    advantages: Tensor,
    completion_mask: Tensor,
    group_ids: Tensor,
    rewards: Tensor,
    context: WeightingContext,
    method: str,
) -> tuple[Tensor, dict[str, float]]:
    """Shared body of gtpo (level "token") and grpo_s (level "sequence")."""
    p: EntropyShapingParams = context.params
    if p.normalization not in ("joint", "separate"):
        raise ValueError(f"normalization must be 'joint' or 'separate', got {p.normalization!r}")
    mask = completion_mask.bool()
    ent = require_context(context.token_entropies, "token_entropies (B, T)", method).float()
    ent = torch.where(mask & torch.isfinite(ent), ent.clamp_min(0.0), 0.0)
    prompt, P = prompt_index(group_ids)
    correct = rewards > p.outcome_threshold
    if level == "token":
        values, valid = ent, mask
    else:  # mean token entropy of each rollout, one "position"
        values = (ent.sum(1) / mask.sum(1).clamp_min(1))[:, None]
        valid = mask.any(1, keepdim=True)
    shaped = _shaped_rewards(values, valid, correct, rewards, prompt, P, p)
    key, size = (prompt, P) if p.normalization == "joint" else (prompt * 2 + correct.long(), 2 * P)
    adv = _normalise(shaped, valid, key, size, p.eps, unbiased=level == "sequence")
    adv = adv * live_prompts(advantages, prompt, P)[:, None]  # all-equal rewards carry no signal (w = 1 of 0)
    return adv.expand(mask.shape) * mask, {
        f"{method}/shaped_reward_mean": float(shaped[valid].mean()) if bool(valid.any()) else 0.0
    }


def gtpo(
    advantages: Tensor, completion_mask: Tensor, group_ids: Tensor, rewards: Tensor, context: WeightingContext
) -> tuple[Tensor, dict[str, float]]:
    """GTPO (arXiv 2508.04349): entropy-shaped token rewards normalised per prompt into token advantages.

    The input advantages only decide which prompts carry signal; the host's advantage formula is replaced.
    """
    return _entropy_shaping("token", advantages, completion_mask, group_ids, rewards, context, "gtpo")


def grpo_s(
    advantages: Tensor, completion_mask: Tensor, group_ids: Tensor, rewards: Tensor, context: WeightingContext
) -> tuple[Tensor, dict[str, float]]:
    """GRPO-S (arXiv 2508.04349): the same shaping on each rollout's mean token entropy, GRPO-normalised."""
    return _entropy_shaping("sequence", advantages, completion_mask, group_ids, rewards, context, "grpo_s")


@dataclass(frozen=True)
class PositionParams:
    """beta: slope of the linear position weight."""

    beta: float = knob(1.0, "Slope of the linear position weight.", minimum=0, maximum=100)


def position(
    advantages: Tensor, completion_mask: Tensor, group_ids: Tensor, rewards: Tensor, context: WeightingContext
) -> tuple[Tensor, dict[str, float]]:
    """Position stand-in [R]: w = (1 + beta u_t) / (1 + beta / 2), u_t = (t-1)/(n-1) (u = 1/2 when n = 1).

    The mean of w over a rollout's tokens is exactly 1, so every host loss keeps its advantage mass.
    """
    p: PositionParams = context.params
    mask = completion_mask.bool()
    u = token_positions(mask)
    u = torch.where(mask.sum(1, keepdim=True) == 1, 0.5, u)
    w = (1.0 + p.beta * u) / (1.0 + p.beta / 2.0)
    return advantages.float()[:, None] * w * mask, {}


@dataclass(frozen=True)
class ShearParams:
    """SHEAR knobs: span_width / span_stride of the sliding spans (in valid tokens), eps_rel (entropic
    regulariser relative to the mean pair cost), sinkhorn_iters, outcome_threshold (correct = reward above it),
    chunk_elements (memory bound of one batched cost tensor)."""

    span_width: int = knob(100, "Sliding span width in valid tokens.", minimum=1, maximum=100000)
    span_stride: int = knob(25, "Sliding span stride in valid tokens.", minimum=1, maximum=100000)
    eps_rel: float = knob(0.05, "Entropic regulariser relative to the mean pair cost.", exclusiveMinimum=0, maximum=10)
    sinkhorn_iters: int = knob(100, "Sinkhorn iterations.", minimum=1, maximum=100000)
    outcome_threshold: float = knob(0.5, "Reward above which a rollout counts as correct.", minimum=-1000, maximum=1000)
    chunk_elements: int = knob(
        1 << 22, "Memory bound of one batched cost tensor (elements).", minimum=1024, maximum=4294967296
    )


def _spans(
    h: Tensor, mask: Tensor, rows: list[int], width: int, stride: int, w_max: int
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """All sliding spans of the given rows, padded to ``w_max`` tokens: features (S, w_max, d), span mask
    (S, w_max), batch column of each span token (S, w_max) and owner row (S,). Spans cover every valid token;
    a completion shorter than ``width`` is one span."""
    feats, masks, cols, owners = [], [], [], []
    for b in rows:
        idx = torch.nonzero(mask[b]).flatten()
        n, w = idx.numel(), min(width, idx.numel())
        starts = list(range(0, n - w + 1, stride))
        starts += [n - w] if starts[-1] + w < n else []
        for s in starts:
            col = torch.cat([idx[s : s + w], idx[:1].expand(w_max - w)])
            feats.append(h[b, col].float())
            masks.append(torch.arange(w_max, device=h.device) < w)
            cols.append(col)
            owners.append(b)
    return torch.stack(feats), torch.stack(masks), torch.stack(cols), torch.tensor(owners, device=h.device)


def _entropic_w1(a: Tensor, ma: Tensor, b: Tensor, mb: Tensor, p: ShearParams) -> Tensor:
    """Entropic W1 <T, C> (Sa, Sb) between all spans a (Sa, W, d) and b (Sb, W, d) with uniform token weights,
    C = Euclidean distance, eps = eps_rel * mean(C) per pair; batched over pairs in memory-bounded chunks."""
    Sa, W, _ = a.shape
    Sb = b.shape[0]
    log_a = torch.where(ma, -torch.log(ma.sum(1, keepdim=True).float()), float("-inf"))
    log_b = torch.where(mb, -torch.log(mb.sum(1, keepdim=True).float()), float("-inf"))
    chunk = max(1, p.chunk_elements // max(1, Sb * W * W))
    out = []
    for i in range(0, Sa, chunk):
        ac, mac = a[i : i + chunk], ma[i : i + chunk]
        sq = (
            ac.square().sum(-1)[:, None, :, None]
            + b.square().sum(-1)[None, :, None, :]
            - 2.0
            * (ac.reshape(-1, ac.shape[-1]) @ b.reshape(-1, b.shape[-1]).T)
            .reshape(ac.shape[0], W, Sb, W)
            .transpose(1, 2)
        )
        cost = sq.clamp_min(0.0).sqrt()
        pair = (mac[:, None, :, None] & mb[None, :, None, :]).float()
        eps = p.eps_rel * (cost * pair).sum((-1, -2)) / pair.sum((-1, -2)).clamp_min(1.0)
        cost = cost * pair  # padded entries carry no mass; keep them finite
        res = sinkhorn_log(
            log_a[i : i + chunk, None].expand(-1, Sb, -1),
            log_b[None].expand(ac.shape[0], -1, -1),
            cost,
            eps.clamp_min(1e-12),
            max_iter=p.sinkhorn_iters,
            tol=1e-4,
        )
        out.append((res.plan * cost).sum((-1, -2)))
    return torch.cat(out)


def _shear_prompt(h: Tensor, mask: Tensor, good: list[int], bad: list[int], p: ShearParams, w: Tensor) -> None:
    """Fill w (B, T) for one prompt with both outcomes present: each span's distance to the closest span of the
    opposite outcome, max over the spans covering a token, divided by the prompt's mean hidden-state norm."""
    # One span width for both outcomes (the pairwise costs are one batched tensor): the longest span of either.
    w_max = min(p.span_width, int(mask[good + bad].sum(1).max()))
    fa, ma, ca, oa = _spans(h, mask, good, p.span_width, p.span_stride, w_max)
    fb, mb, cb, ob = _spans(h, mask, bad, p.span_width, p.span_stride, w_max)
    dist = _entropic_w1(fa, ma, fb, mb, p)
    rows = good + bad
    norm = torch.linalg.vector_norm(h[rows].float(), dim=-1)[mask[rows]].mean().clamp_min(1e-12)
    flat = torch.zeros(w.numel(), device=w.device)
    for score, m, col, owner in ((dist.min(1).values, ma, ca, oa), (dist.min(0).values, mb, cb, ob)):
        index = (owner[:, None] * w.shape[1] + col)[m]
        flat.scatter_reduce_(0, index, score[:, None].expand_as(m)[m], reduce="amax")
    rows_t = torch.tensor(rows, device=w.device)
    w[rows_t] = flat.view_as(w)[rows_t] / norm


def shear(
    advantages: Tensor, completion_mask: Tensor, group_ids: Tensor, rewards: Tensor, context: WeightingContext
) -> tuple[Tensor, dict[str, float]]:
    """SHEAR (arXiv 2604.23318; docs/method.md, "Baselines"): span-level entropic W1 between a rollout's sliding
    spans (last-layer hidden states) and the closest span of any rollout of the opposite outcome; a token's weight
    is the max over the spans covering it, divided by the mean hidden-state norm; w = 1 when the opposite outcome
    group is empty. Not renormalised."""
    p: ShearParams = context.params
    h = require_context(context.hidden_states, "hidden_states (B, T, d)", "shear")
    mask = completion_mask.bool() & torch.isfinite(h).all(-1)
    prompt, P = prompt_index(group_ids)
    correct = (rewards > p.outcome_threshold).tolist()
    w = torch.ones(mask.shape, device=mask.device)
    has_tokens = mask.any(1).tolist()
    for q in range(P):
        rows = [b for b in torch.nonzero(prompt == q).flatten().tolist() if has_tokens[b]]
        good, bad = [b for b in rows if correct[b]], [b for b in rows if not correct[b]]
        if good and bad:
            _shear_prompt(h, mask, good, bad, p, w)
    return advantages.float()[:, None] * w * mask, {"shear/w_mean": float(w[mask].mean()) if bool(mask.any()) else 1.0}
