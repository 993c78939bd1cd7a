"""Reasoning novelty of rollouts: distance to the FGW barycenter of their outcome group [R].

For one prompt with G rollouts, the rollouts are split by outcome (correct: reward > ``outcome_threshold``).
Every outcome group D with |D| >= 2 rollouts of at least two valid tokens gets a barycenter (see
:mod:`hara.ot.barycenter`), all groups of a step batched together; then

    token novelty     nu_{r,t} = sum_j T_r[t,j] K_r[t,j] / a_t    (expected transport cost of token t),
    sequence novelty  N_r      = <T_r, K_r> = sum_t a_t nu_{r,t}   (entropy term excluded).

Hidden states are whitened once per prompt, h <- (h - mean) / rms over all valid tokens of the prompt with
rms = sqrt(mean_t ||h_t - mean||^2), so the squared feature distance is O(1) like the position cost (p in [0,1]).
The whitening is applied inside the cost expansion, never as a copy of the hidden states.
Rollouts not in such a group (zero-advantage prompts, singleton groups, completions with n <= 1) get no OT work.
A group whose hidden states, costs, plans or novelties are not finite is reported in ``NoveltyResult.ok``; a group
whose hidden states do not vary (all tokens of all its rollouts at one point, up to rounding) in
``NoveltyResult.flat``: its novelty would only measure lengths, so it is not reweighted.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch import Tensor

from hara.groups import group_all, group_max, prompt_index
from hara.knobs import fixed, knob, knob_group
from hara.ot.barycenter import BarycenterConfig, BarycenterResult, GroupedStates, linearized_barycenter
from hara.ot.exact import exact_barycenter
from hara.ot.linearized import centered_sqnorm

__all__ = [
    "BACKENDS",
    "NoveltyParams",
    "NoveltyResult",
    "OutcomeGroups",
    "compute_novelty",
    "flat_groups",
    "outcome_groups",
    "random_projection",
    "whitening_stats",
]

#: Barycenter solvers by name; both take (GroupedStates, BarycenterConfig) and return a BarycenterResult.
BACKENDS = {"linearized": linearized_barycenter, "exact": exact_barycenter}


@dataclass(frozen=True)
class NoveltyParams:
    """Knobs of the novelty computation beyond the barycenter loop's own (``barycenter``).

    whiten: per-prompt whitening [R]. projection_dim: seeded Gaussian random projection of the hidden states to
    this many dimensions before anything else (0 = off; for very wide models). outcome_threshold: reward above
    which a rollout counts as correct. zero_advantage_atol: a prompt whose |advantages| are all below it does no
    OT work. backend: "linearized" (default) or "exact" (POT). flat_rtol: a group whose feature variance is below
    this fraction of its mean squared norm has no spread (fp32 rounding leaves ~1e-14; hidden states of a real
    model that differ at all are far above 1e-10).
    """

    barycenter: BarycenterConfig = knob_group(BarycenterConfig)
    whiten: bool = knob(True, "Per-prompt whitening of the hidden states.")
    projection_dim: int = knob(
        0,
        "Seeded Gaussian random projection to this many dimensions (0 = off; for very wide models).",
        minimum=0,
        maximum=65536,
    )
    projection_seed: int = knob(0, "Seed of the random projection.", minimum=0, maximum=4294967295)
    outcome_threshold: float = knob(0.5, "Reward above which a rollout counts as correct.", minimum=-1000, maximum=1000)
    zero_advantage_atol: float = knob(
        1e-8, "A prompt whose |advantages| are all below this does no OT work.", minimum=0, maximum=1
    )
    backend: str = fixed("linearized")  # each HarA method fixes its own (hara_exact_*: exact)
    flat_rtol: float = knob(
        1e-10,
        "An outcome group whose hidden-state variance is below this fraction of its mean squared norm has no feature "
        "spread and gets w = 1 (its novelty would only measure lengths).",
        minimum=0,
        maximum=1,
    )

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {sorted(BACKENDS)}, got {self.backend!r}")


@dataclass
class OutcomeGroups:
    """Assignment of the B rollouts to the G outcome groups that get reweighted.

    index (B,): group in [0, G) or -1 when the rollout is not reweighted; correct (G,) bool: the group holds
    correct rollouts; group_prompt (G,): prompt of each group; prompt (B,): prompt index in [0, P).
    """

    index: Tensor
    correct: Tensor
    group_prompt: Tensor
    prompt: Tensor
    num_prompts: int

    @property
    def num_groups(self) -> int:
        return self.correct.shape[0]


@dataclass
class NoveltyResult:
    """token (B, T) nu (0 where not computed); sequence (B,) N; groups; ok (G,) bool: group's numbers finite;
    barycenter: the raw result over the reweighted rows (in batch order); info: namespaced floats for logging;
    flat (G,) bool: the group's hidden states have no spread."""

    token: Tensor
    sequence: Tensor
    groups: OutcomeGroups
    ok: Tensor
    barycenter: BarycenterResult | None
    info: dict[str, float]
    flat: Tensor | None = None

    def __post_init__(self) -> None:
        if self.flat is None:
            self.flat = torch.zeros_like(self.ok)


def outcome_groups(
    group_ids: Tensor,
    rewards: Tensor,
    advantages: Tensor,
    completion_mask: Tensor,
    outcome_threshold: float = 0.5,
    zero_advantage_atol: float = 1e-8,
) -> OutcomeGroups:
    """Split rollouts into outcome groups (prompt, correct) and keep those that get reweighted.

    group_ids (B,) prompt id per rollout (any integers), rewards (B,), advantages (B,), completion_mask (B, T).
    A rollout is kept if its completion has >= 2 valid tokens, its prompt has a non-zero advantage and its
    outcome group has >= 2 such rollouts.
    """
    prompt, P = prompt_index(group_ids)
    live = group_max(advantages.abs().float(), prompt, P) > zero_advantage_atol
    correct = rewards > outcome_threshold
    eligible = (completion_mask.bool().sum(-1) >= 2) & live[prompt]
    none = torch.full_like(prompt, 2 * P)
    key = torch.where(eligible, prompt * 2 + correct.long(), none)
    active = eligible & (torch.bincount(key, minlength=2 * P + 1)[key] >= 2)
    used, index = torch.unique(torch.where(active, key, none), return_inverse=True)
    used = used[used < 2 * P]
    index = torch.where(active, index, torch.full_like(index, -1))
    return OutcomeGroups(index, (used % 2) == 1, used // 2, prompt, P)


def random_projection(h: Tensor, dim: int, seed: int) -> Tensor:
    """Seeded Gaussian projection h (..., d) -> (..., dim), entries N(0, 1/dim) (norms preserved on average)."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    w = torch.randn(h.shape[-1], dim, generator=gen) / dim**0.5
    return h @ w.to(device=h.device, dtype=h.dtype)


def whitening_stats(
    h: Tensor, mask: Tensor, prompt: Tensor, num_prompts: int, usable: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """Per-prompt mean (P, d), inverse rms (P,) and per-token ||h - mean||^2 (N, n).

    h (N, n, d) finite everywhere, mask (N, n), prompt (N,), usable (N,) bool: rows that count (rows whose valid
    tokens were not finite are left out, so they cannot poison the other outcome group of their prompt).
    rms = sqrt(mean_t ||h_t - mean||^2) over the valid tokens of the usable rows of the prompt; the centred norms
    are computed exactly, row by row (LLM hidden states have large common components).
    """
    m = (mask & usable[:, None]).to(h.dtype)
    row_sum = torch.bmm(m[:, None, :], h)[:, 0]  # (N, d): masked sums as one pass over h
    d = h.shape[-1]
    sums = torch.zeros(num_prompts, d, device=h.device).index_add_(0, prompt, row_sum)
    count = torch.zeros(num_prompts, device=h.device).index_add_(0, prompt, m.sum(1)).clamp_min(1.0)
    mean = sums / count[:, None]
    h_sq = centered_sqnorm(h, mean[prompt])
    valid_sq = torch.where(m > 0, h_sq, torch.zeros((), device=h.device))  # padding may overflow: never multiply
    var = torch.zeros(num_prompts, device=h.device).index_add_(0, prompt, valid_sq.sum(1)) / count
    return mean, var.sqrt().clamp_min(1e-12).reciprocal(), h_sq


@dataclass
class _Rows:
    """The rows the OT works on (N of them), already fp32, projected and finite everywhere."""

    h: Tensor  # (N, n, d)
    mask: Tensor  # (N, n)
    batch_row: Tensor  # (N,) row in the batch
    usable: Tensor  # (N,) bool: valid tokens were finite


def _work_rows(hidden_states: Tensor, mask: Tensor, rows: Tensor, params: NoveltyParams) -> _Rows:
    """Select rows (N,), convert to fp32 and project, copying only when something actually changes.

    A non-finite row sum (over all tokens, padding included) triggers the rare safe path: a copy with masked
    tokens set to 0 (masked_fill, so NaN in padding is dropped) and rows with non-finite valid tokens zeroed.
    """
    identity = torch.arange(rows.numel(), device=rows.device)
    same = rows.numel() == hidden_states.shape[0] and bool((rows == identity).all())
    h = hidden_states if same else hidden_states[rows]
    h = h.float()
    if params.projection_dim:
        h = random_projection(h, params.projection_dim, params.projection_seed)
    m = mask[rows]
    usable = torch.ones(rows.numel(), dtype=torch.bool, device=h.device)
    if not bool(torch.isfinite(h.sum((1, 2))).all()):
        h = h.masked_fill(~m[..., None], 0.0)
        usable = torch.isfinite(h.sum((1, 2)))
        h[~usable] = 0.0
    return _Rows(h, m, rows, usable)


def _novelty_from_plans(bary: BarycenterResult, mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """nu (N, n) = n * sum_j T K, N (N,) = <T, K> and finite (N,): K, T and nu finite on valid tokens."""
    per_token = (bary.plan * bary.cost).sum(-1)
    n = mask.sum(-1, keepdim=True).to(per_token.dtype)
    nu = torch.where(mask, per_token * n, torch.zeros((), device=per_token.device))
    valid = mask[..., None]
    bad = ((~torch.isfinite(bary.cost) | ~torch.isfinite(bary.plan)) & valid).flatten(1).any(1)
    return nu, per_token.sum(-1), ~(bad | (~torch.isfinite(nu)).any(1))


def flat_groups(h: Tensor, mask: Tensor, group: Tensor, num_groups: int, rtol: float) -> Tensor:
    """Groups (G,) whose hidden states have no spread: var_g <= rtol * mean_g ||h||^2 over their valid tokens.

    h (N, n, d) finite, mask (N, n) (tokens that count), group (N,). The variance is computed exactly (two passes:
    group means, then centred norms), and mean ||h||^2 = ||mean||^2 + var, so no uncentred sum is needed.
    """
    m = mask.to(h.dtype)
    sums = h.new_zeros(num_groups, h.shape[-1]).index_add_(0, group, torch.bmm(m[:, None, :], h)[:, 0])
    count = h.new_zeros(num_groups).index_add_(0, group, m.sum(1)).clamp_min(1.0)
    mean = sums / count[:, None]
    sq = torch.where(mask, centered_sqnorm(h, mean[group]), torch.zeros((), device=h.device, dtype=h.dtype))
    var = h.new_zeros(num_groups).index_add_(0, group, sq.sum(1)) / count
    return var <= rtol * (mean.square().sum(-1) + var)


def _prepare(hidden_states: Tensor, mask: Tensor, groups: OutcomeGroups, params: NoveltyParams):
    """Rows for the OT (reweighted rows only), their group (N,), whitening per group and ||h - mean||^2."""
    active = groups.index >= 0
    live = torch.zeros(groups.num_prompts, dtype=torch.bool, device=mask.device)
    live[groups.prompt[active]] = True
    # Whitening statistics need every valid token of the prompt, also of rollouts that are not reweighted.
    need = (live[groups.prompt] & mask.any(-1)) if params.whiten else active
    rows = _work_rows(hidden_states, mask, torch.nonzero(need).flatten(), params)
    shift = scale = h_sq = None
    if params.whiten:
        mean, inv_rms, h_sq = whitening_stats(
            rows.h, rows.mask, groups.prompt[rows.batch_row], groups.num_prompts, rows.usable
        )
        shift, scale = mean[groups.group_prompt], inv_rms[groups.group_prompt]
    keep = active[rows.batch_row]
    if not bool(keep.all()):  # drop the statistics-only rows (one copy of the reweighted rows)
        rows = _Rows(rows.h[keep], rows.mask[keep], rows.batch_row[keep], rows.usable[keep])
        h_sq = None if h_sq is None else h_sq[keep]
    return rows, groups.index[rows.batch_row], shift, scale, h_sq


@torch.no_grad()
def compute_novelty(
    hidden_states: Tensor,
    completion_mask: Tensor,
    group_ids: Tensor,
    rewards: Tensor,
    advantages: Tensor,
    params: NoveltyParams = NoveltyParams(),
) -> NoveltyResult:
    """Token and sequence novelty of every rollout against its outcome-group barycenter (module docstring).

    hidden_states (B, T, d) (any float dtype; computed in fp32), completion_mask (B, T) (1 = valid completion
    token; padding and prompt tokens 0), group_ids (B,), rewards (B,), advantages (B,).
    """
    start = time.perf_counter()
    mask = completion_mask.bool()
    groups = outcome_groups(group_ids, rewards, advantages, mask, params.outcome_threshold, params.zero_advantage_atol)
    token = torch.zeros(mask.shape, device=mask.device)
    sequence = torch.zeros(mask.shape[0], device=mask.device)
    if groups.num_groups == 0:  # nothing to reweight: no OT work at all
        ok = torch.ones(0, dtype=torch.bool, device=mask.device)
        info = {**_info(groups, None, ok, start), "hara/flat_groups": 0.0}
        return NoveltyResult(token, sequence, groups, ok, None, info)
    rows, group, shift, scale, h_sq = _prepare(hidden_states, mask, groups, params)
    states = GroupedStates(rows.h, rows.mask, group, groups.num_groups, shift, scale, h_sq)
    bary = BACKENDS[params.backend](states, params.barycenter)
    nu, seq, finite = _novelty_from_plans(bary, rows.mask)
    ok = group_all(finite & rows.usable, group, groups.num_groups)
    flat = flat_groups(rows.h, rows.mask & rows.usable[:, None], group, groups.num_groups, params.flat_rtol)
    row_ok = ok[group]
    token[rows.batch_row] = torch.where(row_ok[:, None], nu, torch.zeros((), device=nu.device))
    sequence[rows.batch_row] = torch.where(row_ok, seq, torch.zeros((), device=seq.device))
    info = {**_info(groups, bary, ok, start, sequence, group), "hara/flat_groups": float(flat.sum())}
    return NoveltyResult(token, sequence, groups, ok, bary, info, flat)


def _info(
    groups: OutcomeGroups,
    bary: BarycenterResult | None,
    ok: Tensor,
    start: float,
    sequence: Tensor | None = None,
    group: Tensor | None = None,
) -> dict[str, float]:
    """Namespaced floats for logging (one host sync for all tensor statistics)."""
    active = groups.index >= 0
    info = {
        "hara/groups": float(groups.num_groups),
        "hara/rollouts_reweighted": float(active.sum()),
        "hara/nonfinite_groups": float((~ok).sum()),
    }
    if bary is None:
        info.update(
            {
                "hara/novelty_mean": 0.0,
                "hara/order_reversing_mass": 0.0,
                "hara/order_reversing_mass_max": 0.0,
                "hara/sinkhorn_iters": 0.0,
                "hara/barycenter_iters": 0.0,
                "hara/sinkhorn_marginal_error": 0.0,
                "hara/sinkhorn_unconverged": 0.0,
                "hara/solver_fallbacks": 0.0,
            }
        )
    else:
        row_ok = ok[group]
        r_mass = torch.where(row_ok, bary.order_reversing_mass, torch.zeros((), device=ok.device))
        n_ok = row_ok.sum().clamp_min(1)
        stats = torch.stack([sequence[groups.index >= 0].sum() / n_ok, r_mass.sum() / n_ok, r_mass.max()]).tolist()
        info.update(
            {
                "hara/novelty_mean": stats[0],
                "hara/order_reversing_mass": stats[1],
                "hara/order_reversing_mass_max": stats[2],
                **{f"hara/{k}": v for k, v in bary.info.items() if k != "time_s"},
            }
        )
    info["hara/ot_time_s"] = time.perf_counter() - start
    return info
