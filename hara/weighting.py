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
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, fields
from typing import Any, Callable

import torch
from torch import Tensor

from hara.novelty import NoveltyParams, NoveltyResult, compute_novelty
from hara.ot.barycenter import BarycenterConfig
from hara.ot.linearized import token_positions
from hara.ot.sinkhorn import sinkhorn_log

__all__ = [
    "FORMULAS",
    "HOST_TOKEN_WEIGHTS",
    "EntropyShapingParams",
    "ForkingParams",
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


@dataclass
class WeightingContext:
    """What a transform may need beyond the advantages.

    hidden_states (B, T, d): one layer's hidden states aligned with the completion tokens (HarA, shear).
    token_entropies (B, T): sampling-policy entropy per token at temperature 1 (forking_tokens, gtpo, grpo_s).
    loss_type: the host loss, one of :data:`HOST_TOKEN_WEIGHTS` ("grpo", "dr_grpo", "dapo").
    params: the method's knobs (flat dict; see each method's parameter dataclass for names and defaults).
    """

    hidden_states: Tensor | None = None
    token_entropies: Tensor | None = None
    loss_type: str = "grpo"
    params: dict[str, Any] = field(default_factory=dict)


WeightingFn = Callable[[Tensor, Tensor, Tensor, Tensor, WeightingContext], tuple[Tensor, dict[str, float]]]
_REGISTRY: dict[str, WeightingFn] = {}


def register(name: str) -> Callable[[WeightingFn], WeightingFn]:
    """Decorator adding a transform under ``name``; registering a different function under a taken name raises."""

    def add(fn: WeightingFn) -> WeightingFn:
        if name in _REGISTRY and _REGISTRY[name] is not fn:
            raise ValueError(f"weighting {name!r} is already registered")
        _REGISTRY[name] = fn
        return fn

    return add


def get_weighting(name: str) -> WeightingFn:
    """The transform registered under ``name``, or a plug-in method's (hara/methods.py: imported and registered on
    first use); a KeyError listing the known names otherwise."""
    if name not in _REGISTRY:
        from hara.methods import methods

        spec = methods().get(name)
        if spec is None or spec.weighting is None:
            raise KeyError(f"unknown weighting {name!r}; known: {', '.join(sorted(_REGISTRY))}")
        register(name)(spec.load_weighting())
    return _REGISTRY[name]


def available_weightings() -> list[str]:
    """Sorted names of all registered transforms."""
    return sorted(_REGISTRY)


def apply_weighting(
    name: str, advantages: Tensor, completion_mask: Tensor, group_ids: Tensor, rewards: Tensor,
    context: WeightingContext | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Look up ``name`` and apply it (the one call a trainer adapter needs)."""
    return get_weighting(name)(advantages, completion_mask, group_ids, rewards, context or WeightingContext())


# ---------------------------------------------------------------------------------------------------------------
# Host-loss token weighting
# ---------------------------------------------------------------------------------------------------------------


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


def _parse(cls: type, params: dict[str, Any], method: str, exclude: tuple[str, ...] = ()) -> Any:
    """Build a parameter dataclass from a flat dict, naming unknown keys in the error."""
    known = {f.name for f in fields(cls)} - set(exclude)
    unknown = set(params) - known
    if unknown:
        raise ValueError(f"unknown parameter(s) {sorted(unknown)} for weighting {method!r}; known: {sorted(known)}")
    return cls(**params)


# ---------------------------------------------------------------------------------------------------------------
# Group-wise reweighting formulas (E1, E2, E3)
# ---------------------------------------------------------------------------------------------------------------


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

    formula: str = "mean_ratio"
    clip_min: float = 0.2
    clip_max: float = 5.0
    renorm_iters: int = 3
    beta: float = 0.5
    clip_c: float = 0.8
    sign_mode: str = "magnitude"
    explore_floor: float = 0.2
    zero_spread_rtol: float = 1e-4
    max_weight: float = 5.0

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


class _GroupOps:
    """omega-weighted statistics of token values (B, T) within groups, broadcast back to tokens.

    index (B,) group in [0, G) or -1; omega (B, T) >= 0; tokens with omega = 0 or index = -1 do not count.
    """

    def __init__(self, index: Tensor, omega: Tensor, num_groups: int) -> None:
        self.valid = (omega > 0) & (index[:, None] >= 0)
        self.slot = torch.where(self.valid, index[:, None].expand_as(omega), num_groups).flatten()
        self.omega, self.size = omega.flatten(), num_groups + 1  # the extra slot collects invalid tokens

    def _reduce(self, v: Tensor, how: str) -> Tensor:
        init = {"amax": float("-inf"), "amin": float("inf")}[how]
        out = torch.full((self.size,), init, device=v.device, dtype=v.dtype)
        return out.scatter_reduce(0, self.slot, v.flatten(), reduce=how)[self.slot].view_as(v)

    def mean(self, v: Tensor) -> Tensor:
        num = torch.zeros(self.size, device=v.device).index_add_(0, self.slot, (v.flatten() * self.omega))
        den = torch.zeros(self.size, device=v.device).index_add_(0, self.slot, self.omega)
        return (num / den.clamp_min(1e-30))[self.slot].view_as(v)

    def std(self, v: Tensor) -> Tensor:
        return (self.mean((v - self.mean(v)).square())).sqrt()

    def max(self, v: Tensor) -> Tensor:
        return self._reduce(torch.where(self.valid, v, float("-inf")), "amax")

    def min(self, v: Tensor) -> Tensor:
        return self._reduce(torch.where(self.valid, v, float("inf")), "amin")


def _clip_renorm(w: Tensor, ops: _GroupOps, lo: float, hi: float, iters: int) -> tuple[Tensor, Tensor]:
    """Clip to [lo, hi] and renormalise to omega-weighted mean 1, ``iters`` times (ends renormalised: exact mass)."""
    clipped = (w < lo) | (w > hi)
    for _ in range(max(1, iters)):
        w = w.clamp(lo, hi)
        w = w / ops.mean(w)
    return w, clipped


def _mean_ratio(x: Tensor, ops: _GroupOps, p: ReweightParams) -> tuple[Tensor, Tensor]:
    """E1: w = clip(x / mean_omega(x), clip_min, clip_max), renormalised to mean 1."""
    return _clip_renorm(x / ops.mean(x), ops, p.clip_min, p.clip_max, p.renorm_iters)


def _affine_z(x: Tensor, ops: _GroupOps, p: ReweightParams) -> tuple[Tensor, Tensor]:
    """E2: w = clip(1 + beta z, 1 - c, 1 + c), z the omega-weighted z-score; renormalised to mean 1."""
    z = (x - ops.mean(x)) / ops.std(x).clamp_min(1e-30)
    return _clip_renorm(1.0 + p.beta * z, ops, 1.0 - p.clip_c, 1.0 + p.clip_c, p.renorm_iters)


def _softmax(x: Tensor, ops: _GroupOps, p: ReweightParams) -> tuple[Tensor, Tensor]:
    """E3: w proportional to exp(x / tau), tau = std_omega(x), rescaled to omega-weighted mean 1."""
    tau = ops.std(x).clamp_min(1e-30)
    w = torch.exp(((x - ops.max(x)) / tau).clamp_min(-80.0))
    return w / ops.mean(w), torch.zeros_like(x, dtype=torch.bool)


#: Novelty -> weight maps by name, all (x (B,T), group statistics, ReweightParams) -> (w, clipped).
FORMULAS: dict[str, Callable[[Tensor, _GroupOps, ReweightParams], tuple[Tensor, Tensor]]] = {
    "mean_ratio": _mean_ratio, "affine_z": _affine_z, "softmax": _softmax,
}


def _cap(w: Tensor, ops: _GroupOps, cap: float, rounds: int = 50) -> tuple[Tensor, Tensor]:
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
    x: Tensor, omega: Tensor, index: Tensor, num_groups: int, params: ReweightParams, invert: Tensor | None = None,
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
    ops = _GroupOps(index, omega, num_groups)
    x = x.float()
    if invert is not None:
        floor = params.explore_floor * ops.mean(x)
        x = torch.where(invert[:, None], 1.0 / torch.maximum(x, floor).clamp_min(1e-30), x)
    flat = (ops.max(x) - ops.min(x)) <= params.zero_spread_rtol * ops.mean(x).abs()
    w, clipped = FORMULAS[params.formula](x, ops, params)
    w, capped = _cap(w, ops, params.max_weight)
    keep = ops.valid & ~flat
    return torch.where(keep, w, torch.ones_like(w)), (clipped | capped) & keep


# ---------------------------------------------------------------------------------------------------------------
# HarA
# ---------------------------------------------------------------------------------------------------------------


def _hara_params(params: dict[str, Any], method: str) -> tuple[dict[str, Any], ReweightParams]:
    """Split a flat HarA params dict into novelty/barycenter knobs and reweighting knobs (unknown keys raise)."""
    rw = {f.name for f in fields(ReweightParams)}
    nov = ({f.name for f in fields(NoveltyParams)} | {f.name for f in fields(BarycenterConfig)}) - {
        "barycenter", "backend"}
    unknown = set(params) - rw - nov
    if unknown:
        raise ValueError(f"unknown parameter(s) {sorted(unknown)} for weighting {method!r}; "
                         f"known: {sorted(rw | nov)}")
    return {k: v for k, v in params.items() if k in nov}, ReweightParams(**{k: v for k, v in params.items() if k in rw})


def _indistinguishable(sequence: Tensor, index: Tensor, num_groups: int, rtol: float) -> Tensor:
    """Groups (G,) whose rollouts all have the same sequence novelty (identical rollouts): w = 1 at every level,
    since token novelty then only measures how well k supports quantise one shared trajectory."""
    ops = _GroupOps(index, torch.ones_like(sequence)[:, None], num_groups)
    x = sequence[:, None].float()
    flat = ((ops.max(x) - ops.min(x)) <= rtol * ops.mean(x).abs())[:, 0]
    out = torch.zeros(num_groups + 1, device=sequence.device).index_add_(0, ops.slot, (~flat).float())
    return out[:num_groups] == 0


def novelty_weights(
    novelty: NoveltyResult, omega: Tensor, level: str, params: ReweightParams, negative: Tensor | None = None,
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
    ok = novelty.ok & ~novelty.flat & ~_indistinguishable(novelty.sequence, index, g.num_groups,
                                                          params.zero_spread_rtol)
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
        w, capped = _cap(w_seq * w_tok, _GroupOps(subsets, omega, size), params.max_weight)
        w, clipped = torch.where(index[:, None] >= 0, w, torch.ones_like(w)), c_seq | c_tok | capped
    else:
        raise ValueError(f"level must be token, sequence or hierarchical, got {level!r}")
    bad_tok = ~torch.isfinite(w) & (index[:, None] >= 0)
    bad = torch.zeros(g.num_groups, device=w.device).index_add_(
        0, index.clamp_min(0), bad_tok.any(1).float() * (index >= 0)) > 0
    fallback = bad | ~novelty.ok
    row_fallback = (index >= 0) & bad[index.clamp_min(0)]
    return torch.where(row_fallback[:, None], torch.ones_like(w), w), clipped & ~row_fallback[:, None], fallback


def _weight_stats(w: Tensor, clipped: Tensor, rows: Tensor, mask: Tensor, cap: float) -> dict[str, float]:
    """mean/std/max/fraction clipped of w and the number of tokens at the weight cap, over the valid tokens of
    reweighted rollouts (one host sync)."""
    sel = mask & rows[:, None]
    vals = w[sel]
    if vals.numel() == 0:
        return {"hara/w_mean": 1.0, "hara/w_std": 0.0, "hara/w_max": 1.0, "hara/w_clip_frac": 0.0,
                "hara/w_capped_tokens": 0.0}
    std = vals.std(unbiased=False)
    s = torch.stack([vals.mean(), std, vals.max(), clipped[sel].float().mean(), (vals >= cap).sum().float()])
    s = s.tolist()
    return {"hara/w_mean": s[0], "hara/w_std": s[1], "hara/w_max": s[2], "hara/w_clip_frac": s[3],
            "hara/w_capped_tokens": s[4]}


def _make_hara(level: str, backend: str, method: str) -> WeightingFn:
    """HarA transform at one level with one barycenter backend."""

    def hara(advantages: Tensor, completion_mask: Tensor, group_ids: Tensor, rewards: Tensor,
             context: WeightingContext) -> tuple[Tensor, dict[str, float]]:
        start = time.perf_counter()
        nov_flat, rw = _hara_params(context.params, method)
        if context.hidden_states is None:
            raise ValueError(f"weighting {method!r} needs context.hidden_states (B, T, d)")
        mask = completion_mask.bool()
        nov = compute_novelty(context.hidden_states, mask, group_ids, rewards, advantages,
                              NoveltyParams.from_flat({**nov_flat, "backend": backend}))
        omega = host_token_weights(mask, context.loss_type) * advantages.abs().float()[:, None]
        w, clipped, fallback = novelty_weights(nov, omega, level, rw, negative=advantages < 0)
        token_adv = advantages.float()[:, None] * w * mask
        info = {**nov.info, **_weight_stats(w, clipped, nov.groups.index >= 0, mask, rw.max_weight),
                "hara/nan_fallbacks": float(fallback.sum()), "hara/time_s": time.perf_counter() - start}
        return token_adv, info

    hara.__name__ = hara.__qualname__ = method
    hara.__doc__ = f"HarA, {level}-level novelty, {backend} barycenter (see module docstring)."
    return hara


for _name, _level, _backend in [
    ("hara_tok", "token", "linearized"), ("hara_seq", "sequence", "linearized"),
    ("hara_hier", "hierarchical", "linearized"), ("hara_exact_tok", "token", "exact"),
    ("hara_exact_seq", "sequence", "exact"),
]:
    register(_name)(_make_hara(_level, _backend, _name))


@dataclass(frozen=True)
class _NoParams:
    """`none` takes no parameters."""


@register("none")
def none(advantages: Tensor, completion_mask: Tensor, group_ids: Tensor, rewards: Tensor,
         context: WeightingContext) -> tuple[Tensor, dict[str, float]]:
    """The host algorithm as is: every valid token carries its rollout's advantage."""
    _parse(_NoParams, context.params, "none")
    return advantages.float()[:, None] * completion_mask.float(), {}


# ---------------------------------------------------------------------------------------------------------------
# Credit-assignment baselines
# ---------------------------------------------------------------------------------------------------------------


def _require(tensor: Tensor | None, what: str, method: str) -> Tensor:
    """Clear error when a transform's context input is missing."""
    if tensor is None:
        raise ValueError(f"weighting {method!r} needs context.{what}")
    return tensor


def _prompt_index(group_ids: Tensor) -> tuple[Tensor, int]:
    """Prompt index (B,) in [0, P) and P."""
    _, prompt = torch.unique(group_ids, return_inverse=True)
    return prompt, int(prompt.max()) + 1 if prompt.numel() else 0


def _live_prompts(advantages: Tensor, prompt: Tensor, num_prompts: int, atol: float = 1e-8) -> Tensor:
    """Rows whose prompt has a non-zero advantage somewhere (B,) bool."""
    top = torch.zeros(num_prompts, device=advantages.device).scatter_reduce(
        0, prompt, advantages.abs().float(), reduce="amax")
    return top[prompt] > atol


@dataclass(frozen=True)
class ForkingParams:
    """top_fraction: share of the batch's valid tokens (highest entropy) that keep their gradient."""

    top_fraction: float = 0.2


@register("forking_tokens")
def forking_tokens(advantages: Tensor, completion_mask: Tensor, group_ids: Tensor, rewards: Tensor,
                   context: WeightingContext) -> tuple[Tensor, dict[str, float]]:
    """Beyond the 80/20 rule (arXiv 2506.01939): only tokens in the batch's top-20% entropy get gradient.

    w = 1[H >= threshold] with the threshold the ceil(top_fraction * N)-th largest entropy among the N valid
    tokens (ties may keep slightly more); non-finite entropies are never kept. No renormalisation (as published).
    """
    p = _parse(ForkingParams, context.params, "forking_tokens")
    mask = completion_mask.bool()
    ent = _require(context.token_entropies, "token_entropies (B, T)", "forking_tokens").float()
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

    alpha1: float = 1.0
    alpha2: float = 0.1
    outcome_threshold: float = 0.5
    normalization: str = "joint"
    eps: float = 1e-8


def _shaped_rewards(h: Tensor, valid: Tensor, correct: Tensor, rewards: Tensor, prompt: Tensor, P: int,
                    p: EntropyShapingParams) -> Tensor:
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


def _entropy_shaping(level: str, advantages: Tensor, completion_mask: Tensor, group_ids: Tensor, rewards: Tensor,
                     context: WeightingContext, method: str) -> tuple[Tensor, dict[str, float]]:
    """Shared body of gtpo (level "token") and grpo_s (level "sequence")."""
    p = _parse(EntropyShapingParams, context.params, method)
    if p.normalization not in ("joint", "separate"):
        raise ValueError(f"normalization must be 'joint' or 'separate', got {p.normalization!r}")
    mask = completion_mask.bool()
    ent = _require(context.token_entropies, "token_entropies (B, T)", method).float()
    ent = torch.where(mask & torch.isfinite(ent), ent.clamp_min(0.0), 0.0)
    prompt, P = _prompt_index(group_ids)
    correct = rewards > p.outcome_threshold
    if level == "token":
        values, valid = ent, mask
    else:  # mean token entropy of each rollout, one "position"
        values = (ent.sum(1) / mask.sum(1).clamp_min(1))[:, None]
        valid = mask.any(1, keepdim=True)
    shaped = _shaped_rewards(values, valid, correct, rewards, prompt, P, p)
    key, size = (prompt, P) if p.normalization == "joint" else (prompt * 2 + correct.long(), 2 * P)
    adv = _normalise(shaped, valid, key, size, p.eps, unbiased=level == "sequence")
    adv = adv * _live_prompts(advantages, prompt, P)[:, None]  # all-equal rewards carry no signal (w = 1 of 0)
    return adv.expand(mask.shape) * mask, {f"{method}/shaped_reward_mean": float(shaped[valid].mean())
                                           if bool(valid.any()) else 0.0}


@register("gtpo")
def gtpo(advantages: Tensor, completion_mask: Tensor, group_ids: Tensor, rewards: Tensor,
         context: WeightingContext) -> tuple[Tensor, dict[str, float]]:
    """GTPO (arXiv 2508.04349): entropy-shaped token rewards normalised per prompt into token advantages.

    The input advantages only decide which prompts carry signal; the host's advantage formula is replaced.
    """
    return _entropy_shaping("token", advantages, completion_mask, group_ids, rewards, context, "gtpo")


@register("grpo_s")
def grpo_s(advantages: Tensor, completion_mask: Tensor, group_ids: Tensor, rewards: Tensor,
           context: WeightingContext) -> tuple[Tensor, dict[str, float]]:
    """GRPO-S (arXiv 2508.04349): the same shaping on each rollout's mean token entropy, GRPO-normalised."""
    return _entropy_shaping("sequence", advantages, completion_mask, group_ids, rewards, context, "grpo_s")


@dataclass(frozen=True)
class PositionParams:
    """beta: slope of the linear position weight."""

    beta: float = 1.0


@register("position")
def position(advantages: Tensor, completion_mask: Tensor, group_ids: Tensor, rewards: Tensor,
             context: WeightingContext) -> tuple[Tensor, dict[str, float]]:
    """Position stand-in [R]: w = (1 + beta u_t) / (1 + beta / 2), u_t = (t-1)/(n-1) (u = 1/2 when n = 1).

    The mean of w over a rollout's tokens is exactly 1, so every host loss keeps its advantage mass.
    """
    p = _parse(PositionParams, context.params, "position")
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

    span_width: int = 100
    span_stride: int = 25
    eps_rel: float = 0.05
    sinkhorn_iters: int = 100
    outcome_threshold: float = 0.5
    chunk_elements: int = 1 << 22


def _spans(h: Tensor, mask: Tensor, rows: list[int], width: int, stride: int) -> tuple[Tensor, Tensor, Tensor]:
    """All sliding spans of the given rows: features (S, W, d), span mask (S, W), batch column of each span
    token (S, W) and owner row (S,) stacked into the third output's companion. Spans cover every valid token;
    a completion shorter than ``width`` is one span."""
    feats, masks, cols, owners = [], [], [], []
    w_max = min(width, int(mask[rows].sum(1).max()))
    for b in rows:
        idx = torch.nonzero(mask[b]).flatten()
        n, w = idx.numel(), min(width, idx.numel())
        starts = list(range(0, n - w + 1, stride))
        starts += [n - w] if starts[-1] + w < n else []
        for s in starts:
            col = torch.cat([idx[s:s + w], idx[:1].expand(w_max - w)])
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
        ac, mac = a[i:i + chunk], ma[i:i + chunk]
        sq = (ac.square().sum(-1)[:, None, :, None] + b.square().sum(-1)[None, :, None, :]
              - 2.0 * (ac.reshape(-1, ac.shape[-1]) @ b.reshape(-1, b.shape[-1]).T).reshape(
                  ac.shape[0], W, Sb, W).transpose(1, 2))
        cost = sq.clamp_min(0.0).sqrt()
        pair = (mac[:, None, :, None] & mb[None, :, None, :]).float()
        eps = p.eps_rel * (cost * pair).sum((-1, -2)) / pair.sum((-1, -2)).clamp_min(1.0)
        cost = cost * pair  # padded entries carry no mass; keep them finite
        res = sinkhorn_log(log_a[i:i + chunk, None].expand(-1, Sb, -1), log_b[None].expand(ac.shape[0], -1, -1),
                           cost, eps.clamp_min(1e-12), max_iter=p.sinkhorn_iters, tol=1e-4)
        out.append((res.plan * cost).sum((-1, -2)))
    return torch.cat(out)


def _shear_prompt(h: Tensor, mask: Tensor, good: list[int], bad: list[int], p: ShearParams, w: Tensor) -> None:
    """Fill w (B, T) for one prompt with both outcomes present: each span's distance to the closest span of the
    opposite outcome, max over the spans covering a token, divided by the prompt's mean hidden-state norm."""
    fa, ma, ca, oa = _spans(h, mask, good, p.span_width, p.span_stride)
    fb, mb, cb, ob = _spans(h, mask, bad, p.span_width, p.span_stride)
    dist = _entropic_w1(fa, ma, fb, mb, p)
    rows = good + bad
    norm = torch.linalg.vector_norm(h[rows].float(), dim=-1)[mask[rows]].mean().clamp_min(1e-12)
    flat = torch.zeros(w.numel(), device=w.device)
    for score, m, col, owner in ((dist.min(1).values, ma, ca, oa), (dist.min(0).values, mb, cb, ob)):
        index = (owner[:, None] * w.shape[1] + col)[m]
        flat.scatter_reduce_(0, index, score[:, None].expand_as(m)[m], reduce="amax")
    rows_t = torch.tensor(rows, device=w.device)
    w[rows_t] = (flat.view_as(w)[rows_t] / norm)


@register("shear")
def shear(advantages: Tensor, completion_mask: Tensor, group_ids: Tensor, rewards: Tensor,
          context: WeightingContext) -> tuple[Tensor, dict[str, float]]:
    """SHEAR (arXiv 2604.23318; docs/method.md, "Baselines"): span-level entropic W1 between a rollout's sliding
    spans (last-layer hidden states) and the closest span of any rollout of the opposite outcome; a token's weight
    is the max over the spans covering it, divided by the mean hidden-state norm; w = 1 when the opposite outcome
    group is empty. Not renormalised."""
    p = _parse(ShearParams, context.params, "shear")
    h = _require(context.hidden_states, "hidden_states (B, T, d)", "shear")
    mask = completion_mask.bool() & torch.isfinite(h).all(-1)
    prompt, P = _prompt_index(group_ids)
    correct = (rewards > p.outcome_threshold).tolist()
    w = torch.ones(mask.shape, device=mask.device)
    has_tokens = mask.any(1).tolist()
    for q in range(P):
        rows = [b for b in torch.nonzero(prompt == q).flatten().tolist() if has_tokens[b]]
        good, bad = [b for b in rows if correct[b]], [b for b in rows if not correct[b]]
        if good and bad:
            _shear_prompt(h, mask, good, bad, p, w)
    return advantages.float()[:, None] * w * mask, {"shear/w_mean": float(w[mask].mean()) if bool(mask.any())
                                                    else 1.0}
