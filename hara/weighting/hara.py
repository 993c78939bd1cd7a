"""HarA's weights (docs/method.md, "From novelty to weights"): the novelty -> weight formulas E1-E3, their group
normalisation per sign subset with a weight cap, HarA's knobs (:class:`HaraParams`) and the transforms hara_tok /
hara_seq / hara_hier / hara_exact_tok / hara_exact_seq (their specs: hara/methods.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from hara.groups import GroupOps, group_all, group_any
from hara.knobs import knob, knob_group
from hara.novelty import NoveltyParams, NoveltyResult, compute_novelty
from hara.weighting.host import host_token_weights
from hara.weighting.interface import WeightingContext, WeightingFn

__all__ = [
    "FORMULAS",
    "HaraParams",
    "ReweightParams",
    "cap_weights",
    "group_weights",
    "hara_exact_seq",
    "hara_exact_tok",
    "hara_hier",
    "hara_seq",
    "hara_tok",
    "novelty_weights",
]


@dataclass(frozen=True)
class ReweightParams:
    """Knobs of the novelty -> weight map [R].

    formula: "mean_ratio" (E1, default), "affine_z" (E2) or "softmax" (E3). clip_min/clip_max and renorm_iters:
    E1's clip and renormalise loop. beta and clip_c: E2's slope and clip half-width. sign_mode: "magnitude" (same
    map for both outcomes) or "explore" (incorrect rollouts use 1/x: typical wrong reasoning is penalised more
    than novel wrong reasoning); explore_floor: before that inversion x is raised to at least this fraction of
    its group's mean, so 1/x stays within 1/explore_floor of the inverse mean and a token with novelty ~0 cannot
    take its group's whole mass (0.2 mirrors E1's clip_min). zero_spread_rtol: a group whose x spread is below
    this fraction of its mean gets w = 1 exactly. max_weight: no token's weight exceeds it, for every formula (the
    mass the cap removes goes to the group's other tokens, so the group's mass is kept); 5 is E1's clip_max, so
    the default binds only E3 (unbounded otherwise) and E1's final renormalisation overshoot.
    """

    formula: str = knob(
        "mean_ratio",
        "Novelty -> weight map: mean_ratio (E1, default), affine_z (E2), softmax (E3).",
        enum=["mean_ratio", "affine_z", "softmax"],
    )
    clip_min: float = knob(0.2, "E1 lower clip of w.", minimum=0, maximum=1)
    clip_max: float = knob(5.0, "E1 upper clip of w.", minimum=1, maximum=1000)
    renorm_iters: int = knob(3, "E1 clip-and-renormalise rounds.", minimum=1, maximum=100)
    beta: float = knob(0.5, "E2 slope.", minimum=0, maximum=100)
    clip_c: float = knob(0.8, "E2 clip half-width (w in [1-c, 1+c]).", minimum=0, maximum=1)
    sign_mode: str = knob(
        "magnitude",
        "magnitude (same map for both outcomes) or explore (incorrect rollouts use 1/x).",
        enum=["magnitude", "explore"],
    )
    explore_floor: float = knob(
        0.2,
        "Explore mode floors x at this fraction of its group's mean before taking 1/x, so a token with novelty near 0 "
        "cannot take its group's mass (0.2 mirrors clip_min).",
        exclusiveMinimum=0,
        maximum=1,
    )
    zero_spread_rtol: float = knob(
        1e-4, "A group whose novelty spread is below this fraction of its mean gets w = 1.", minimum=0, maximum=1
    )
    max_weight: float = knob(
        5.0,
        "Cap on any single token weight, for every formula (the capped mass goes to the group's other tokens); 5 = "
        "E1's clip_max, so by default it binds E3 and E1's renormalisation overshoot only.",
        minimum=1,
        maximum=1000,
    )

    def __post_init__(self) -> None:
        if self.formula not in FORMULAS:
            raise ValueError(f"formula must be one of {sorted(FORMULAS)}, got {self.formula!r}")
        if self.sign_mode not in ("magnitude", "explore"):
            raise ValueError(f"sign_mode must be 'magnitude' or 'explore', got {self.sign_mode!r}")
        if not 0.0 <= self.clip_min <= 1.0 <= self.clip_max or not 0.0 <= self.clip_c <= 1.0:
            raise ValueError("need 0 <= clip_min <= 1 <= clip_max and 0 <= clip_c <= 1 (weights stay >= 0)")
        if self.max_weight < 1.0:
            raise ValueError(f"max_weight must be >= 1 (weights have mean 1), got {self.max_weight}")
        if not 0.0 < self.explore_floor <= 1.0:
            raise ValueError(f"explore_floor must be in (0, 1], got {self.explore_floor}")


def _clip_renorm(w: Tensor, ops: GroupOps, lo: float, hi: float, iters: int) -> tuple[Tensor, Tensor]:
    """Clip to [lo, hi] and renormalise to omega-weighted mean 1, ``iters`` times (ends renormalised: exact mass)."""
    clipped = (w < lo) | (w > hi)
    for _ in range(max(1, iters)):
        w = w.clamp(lo, hi)
        w = w / ops.mean(w)
    return w, clipped


def _mean_ratio(x: Tensor, ops: GroupOps, p: ReweightParams) -> tuple[Tensor, Tensor]:
    """E1: w = clip(x / mean_omega(x), clip_min, clip_max), renormalised to mean 1."""
    return _clip_renorm(x / ops.mean(x), ops, p.clip_min, p.clip_max, p.renorm_iters)


def _affine_z(x: Tensor, ops: GroupOps, p: ReweightParams) -> tuple[Tensor, Tensor]:
    """E2: w = clip(1 + beta z, 1 - c, 1 + c), z the omega-weighted z-score; renormalised to mean 1."""
    z = (x - ops.mean(x)) / ops.std(x).clamp_min(1e-30)
    return _clip_renorm(1.0 + p.beta * z, ops, 1.0 - p.clip_c, 1.0 + p.clip_c, p.renorm_iters)


def _softmax(x: Tensor, ops: GroupOps, p: ReweightParams) -> tuple[Tensor, Tensor]:
    """E3: w proportional to exp(x / tau), tau = std_omega(x), rescaled to omega-weighted mean 1."""
    tau = ops.std(x).clamp_min(1e-30)
    w = torch.exp(((x - ops.max(x)) / tau).clamp_min(-80.0))
    return w / ops.mean(w), torch.zeros_like(x, dtype=torch.bool)


#: Novelty -> weight maps by name, all (x (B,T), group statistics, ReweightParams) -> (w, clipped).
FORMULAS: dict[str, Callable[[Tensor, GroupOps, ReweightParams], tuple[Tensor, Tensor]]] = {
    "mean_ratio": _mean_ratio,
    "affine_z": _affine_z,
    "softmax": _softmax,
}


def cap_weights(w: Tensor, ops: GroupOps, cap: float, rounds: int = 50) -> tuple[Tensor, Tensor]:
    """Water-filling: weights above ``cap`` are set to it and the group's other weights scaled up so that the
    omega-weighted mean stays 1, until none exceeds it (each round caps at least one more token). Returns w and
    the capped flags (B, T)."""
    capped = torch.zeros_like(w, dtype=torch.bool)
    at_cap, zero = torch.full_like(w, cap), torch.zeros_like(w)
    for _ in range(rounds):
        over = ops.valid & ~capped & (w > cap)
        if not bool(over.any()):  # one host sync per round; the first round usually ends it
            break
        capped = capped | over
        fixed, free = ops.mean(torch.where(capped, at_cap, zero)), ops.mean(torch.where(capped, zero, w))
        w = torch.where(capped, at_cap, w * ((1.0 - fixed) / free.clamp_min(1e-30)).clamp_min(0.0))
    return w.clamp_max(cap), capped


def _sign_subsets(index: Tensor, num_groups: int, negative: Tensor | None) -> tuple[Tensor, int]:
    """Each group's rollouts with A < 0 (negative (B,) bool) as a group of their own: index (B,) -> (B,) in
    [0, 2G) (-1 stays -1), and the new number of groups."""
    if negative is None:
        return index, num_groups
    return torch.where(index >= 0, 2 * index + negative.long(), -1), 2 * num_groups


def group_weights(
    x: Tensor,
    omega: Tensor,
    index: Tensor,
    num_groups: int,
    params: ReweightParams,
    invert: Tensor | None = None,
    negative: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Weights w (B, T) from values x (B, T) >= 0, normalised within groups: sum omega w = sum omega per group.

    omega (B, T) normalisation weights (0 on padding), index (B,) group in [0, G) or -1 (w = 1), invert (B,) bool:
    use 1/x for these rollouts (sign mode "explore", x floored at explore_floor x the group mean first),
    negative (B,) bool: rollouts whose advantage is negative, normalised apart from the group's others (module
    docstring). Groups with zero spread of x get exactly w = 1; tokens that do not count (omega = 0) get w = 1 too
    (the caller masks them). Returns w and the flags (B, T) of tokens clipped or capped.
    """
    index, num_groups = _sign_subsets(index, num_groups, negative)
    ops = GroupOps(index, omega, num_groups)
    x = x.float()
    if invert is not None:
        floor = params.explore_floor * ops.mean(x)
        x = torch.where(invert[:, None], 1.0 / torch.maximum(x, floor).clamp_min(1e-30), x)
    flat = (ops.max(x) - ops.min(x)) <= params.zero_spread_rtol * ops.mean(x).abs()
    w, clipped = FORMULAS[params.formula](x, ops, params)
    w, capped = cap_weights(w, ops, params.max_weight)
    keep = ops.valid & ~flat
    return torch.where(keep, w, torch.ones_like(w)), (clipped | capped) & keep


# ---------------------------------------------------------------------------------------------------------------
# HarA
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HaraParams:
    """HarA's knobs, typed and nested once: the novelty computation (its barycenter loop inside) and the novelty ->
    weight map. The config holds them as one flat section, ``hara.hara``, which :func:`hara.knobs.read_knobs` reads
    into this; the barycenter backend is not a knob (each method fixes its own)."""

    novelty: NoveltyParams = knob_group(NoveltyParams)
    reweight: ReweightParams = knob_group(ReweightParams)


def _indistinguishable(sequence: Tensor, index: Tensor, num_groups: int, rtol: float) -> Tensor:
    """Groups (G,) whose rollouts all have the same sequence novelty (identical rollouts): w = 1 at every level,
    since token novelty then only measures how well k supports quantise one shared trajectory."""
    ops = GroupOps(index, torch.ones_like(sequence)[:, None], num_groups)
    x = sequence[:, None].float()
    flat = ((ops.max(x) - ops.min(x)) <= rtol * ops.mean(x).abs())[:, 0]
    return group_all(flat, ops.slot, num_groups + 1)[:num_groups]  # slot G collects rows in no group


def novelty_weights(
    novelty: NoveltyResult,
    omega: Tensor,
    level: str,
    params: ReweightParams,
    negative: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """HarA weights w (B, T) from a novelty result: level "token" (nu), "sequence" (N broadcast) or
    "hierarchical" (w_seq(N) * w_tok(nu within each rollout), capped again as a product). omega (B, T):
    normalisation weights; negative (B,) bool: rollouts with A < 0 (normalised apart, see group_weights).
    Groups of indistinguishable rollouts (zero spread of N) or without feature spread keep w = 1 at every level.
    Returns w, clipped (B, T) and the per-group fallback flags (G,) (NaN/Inf anywhere -> w = 1 for the group)."""
    g = novelty.groups
    if g.num_groups == 0:  # nothing reweighted
        ones = torch.ones_like(novelty.token)
        return ones, torch.zeros_like(ones, dtype=torch.bool), torch.zeros(0, dtype=torch.bool, device=ones.device)
    index = g.index
    ok = (
        novelty.ok & ~novelty.flat & ~_indistinguishable(novelty.sequence, index, g.num_groups, params.zero_spread_rtol)
    )
    index = torch.where((index >= 0) & ok[index.clamp_min(0)], index, -1)  # broken or flat groups: w = 1
    invert = (index >= 0) & ~g.correct[index.clamp_min(0)] if params.sign_mode == "explore" else None
    seq = novelty.sequence[:, None].expand_as(novelty.token)
    if level in ("token", "sequence"):
        x = novelty.token if level == "token" else seq
        w, clipped = group_weights(x, omega, index, g.num_groups, params, invert, negative)
    elif level == "hierarchical":
        w_seq, c_seq = group_weights(seq, omega, index, g.num_groups, params, invert, negative)
        rollout = torch.where(index >= 0, torch.arange(index.numel(), device=index.device), -1)
        w_tok, c_tok = group_weights(novelty.token, omega, rollout, index.numel(), params, invert)
        subsets, size = _sign_subsets(index, g.num_groups, negative)
        w, capped = cap_weights(w_seq * w_tok, GroupOps(subsets, omega, size), params.max_weight)
        w, clipped = torch.where(index[:, None] >= 0, w, torch.ones_like(w)), c_seq | c_tok | capped
    else:
        raise ValueError(f"level must be token, sequence or hierarchical, got {level!r}")
    bad_tok = ~torch.isfinite(w) & (index[:, None] >= 0)
    bad = group_any(bad_tok.any(1), index.clamp_min(0), g.num_groups)  # bad_tok is False where index = -1
    fallback = bad | ~novelty.ok
    row_fallback = (index >= 0) & bad[index.clamp_min(0)]
    return torch.where(row_fallback[:, None], torch.ones_like(w), w), clipped & ~row_fallback[:, None], fallback


def _weight_stats(w: Tensor, clipped: Tensor, rows: Tensor, mask: Tensor, cap: float) -> dict[str, float]:
    """mean/std/max/fraction clipped of w and the number of tokens at the weight cap, over the valid tokens of
    reweighted rollouts (one host sync)."""
    sel = mask & rows[:, None]
    vals = w[sel]
    if vals.numel() == 0:
        return {
            "hara/w_mean": 1.0,
            "hara/w_std": 0.0,
            "hara/w_max": 1.0,
            "hara/w_clip_frac": 0.0,
            "hara/w_capped_tokens": 0.0,
        }
    std = vals.std(unbiased=False)
    s = torch.stack([vals.mean(), std, vals.max(), clipped[sel].float().mean(), (vals >= cap).sum().float()])
    s = s.tolist()
    return {
        "hara/w_mean": s[0],
        "hara/w_std": s[1],
        "hara/w_max": s[2],
        "hara/w_clip_frac": s[3],
        "hara/w_capped_tokens": s[4],
    }


def _make_hara(level: str, backend: str, method: str) -> WeightingFn:
    """HarA transform at one level with one barycenter backend."""

    def hara(
        advantages: Tensor, completion_mask: Tensor, group_ids: Tensor, rewards: Tensor, context: WeightingContext
    ) -> tuple[Tensor, dict[str, float]]:
        start = time.perf_counter()
        params: HaraParams = context.params
        rw = params.reweight
        if context.hidden_states is None:
            raise ValueError(f"weighting {method!r} needs context.hidden_states (B, T, d)")
        mask = completion_mask.bool()
        nov = compute_novelty(
            context.hidden_states,
            mask,
            group_ids,
            rewards,
            advantages,
            replace(params.novelty, backend=backend),
        )
        omega = host_token_weights(mask, context.loss_type) * advantages.abs().float()[:, None]
        w, clipped, fallback = novelty_weights(nov, omega, level, rw, negative=advantages < 0)
        token_adv = advantages.float()[:, None] * w * mask
        info = {
            **nov.info,
            **_weight_stats(w, clipped, nov.groups.index >= 0, mask, rw.max_weight),
            "hara/nan_fallbacks": float(fallback.sum()),
            "hara/time_s": time.perf_counter() - start,
        }
        return token_adv, info

    hara.__name__ = hara.__qualname__ = method
    hara.__doc__ = f"HarA, {level}-level novelty, {backend} barycenter (see module docstring)."
    return hara


hara_tok = _make_hara("token", "linearized", "hara_tok")
hara_seq = _make_hara("sequence", "linearized", "hara_seq")
hara_hier = _make_hara("hierarchical", "linearized", "hara_hier")
hara_exact_tok = _make_hara("token", "exact", "hara_exact_tok")
hara_exact_seq = _make_hara("sequence", "exact", "hara_exact_seq")
