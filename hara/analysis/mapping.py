"""Barycenter supports -> reasoning stages: the interpretability measures of the paper's MATH500 study [R].

The paper states that barycenter supports map sparsely and block-diagonally onto reasoning stages, and that FGW gives
a higher "average likelihood score" than W and GW; its formulas are not public. Ours, all pure tensor code:

- support x stage mass matrix  M[j, s] = (1/N) sum_r sum_t T_r[t, j] 1[stage_r(t) = s]  over labelled tokens
  (each rollout's plan carries mass 1, so M sums to the labelled share of the mass, ~1);
- block-diagonality: the share of M's mass on the best *staircase*, i.e. max over non-decreasing maps
  j -> stage(j) of sum_j M[j, stage(j)] (dynamic programming over the supports in position order). A matrix whose
  supports cover the stages in order, one block each, scores 1; the chance level is the same measure on the
  independence matrix r c^T (row sums times column sums), which is what M looks like when supports say nothing;
- sparsity: 1 - the mass-weighted mean normalised entropy of the stage distribution of each support;
- likelihood score: fit P(stage | support) = (M_fit[j, s] + lambda) / (r_j + S lambda) on one half of the problems,
  then on the held-out half the mean log-likelihood of every labelled token's stage under its soft support
  assignment, log sum_j (T[t, j] / a_t) P(s_t | j). Chance = the mean log-likelihood under the fitted stage
  marginal P(s) (what any assignment that carries no information achieves). Two-fold: each half is held out once.

Shapes: plans (N, n, k) with rows summing to a_t = 1/n_r on valid tokens; stages (N, n) long in [0, S) for
labelled tokens and -1 elsewhere (padding, tokens with no text); problem (N,) the problem of each rollout.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

__all__ = [
    "MappingScores",
    "block_diagonality",
    "fit_stage_model",
    "heldout_tokens",
    "mapping_scores",
    "sparsity",
    "stage_mass",
    "staircase_mass",
    "token_loglik",
]


def stage_mass(plans: Tensor, stages: Tensor, num_stages: int) -> Tensor:
    """M (k, S): transported mass from labelled tokens of stage s to support j, averaged over the N rollouts."""
    labelled = stages >= 0
    onehot = torch.nn.functional.one_hot(stages.clamp_min(0), num_stages).to(plans.dtype) * labelled[..., None]
    return torch.einsum("rtj,rts->js", plans, onehot) / max(plans.shape[0], 1)


def staircase_mass(matrix: Tensor) -> float:
    """max over non-decreasing stage(j) of sum_j M[j, stage(j)] / sum M (the best in-order block assignment)."""
    m = matrix.double()
    total = float(m.sum())
    if total <= 0:
        return 0.0
    best = m[0].clone()  # best[s]: best sum over supports 0..j with stage(j) = s
    for j in range(1, m.shape[0]):
        best = torch.cummax(best, dim=0).values + m[j]
    return float(best.max()) / total


def block_diagonality(matrix: Tensor) -> tuple[float, float]:
    """(staircase mass of M, staircase mass of the independence matrix with M's marginals = chance level)."""
    m = matrix.double()
    total = m.sum().clamp_min(1e-300)
    independent = m.sum(1, keepdim=True) * m.sum(0, keepdim=True) / total
    return staircase_mass(m), staircase_mass(independent)


def sparsity(matrix: Tensor) -> float:
    """1 - mass-weighted mean of H(stage | support j) / log S: 1 = every support sees one stage, 0 = uniform."""
    m = matrix.double()
    rows = m.sum(1)
    if float(rows.sum()) <= 0 or m.shape[1] < 2:
        return 0.0
    p = m / rows.clamp_min(1e-300)[:, None]
    entropy = -(p * torch.log(p.clamp_min(1e-300))).sum(1) / torch.log(torch.tensor(float(m.shape[1])))
    return float(1.0 - (rows * entropy).sum() / rows.sum())


def fit_stage_model(plans: Tensor, stages: Tensor, num_stages: int, smoothing: float = 0.5) -> tuple[Tensor, Tensor]:
    """P(stage | support) (k, S) with additive smoothing ``smoothing`` (in token counts), and the marginal P(s)."""
    counts = stage_mass(plans, stages, num_stages).double() * plans.shape[0]
    tokens = (stages >= 0).sum().clamp_min(1)
    # M is in units of rollout mass (1 per rollout): rescale to token counts so the smoothing means "pseudo-tokens".
    counts = counts * tokens / counts.sum().clamp_min(1e-300)
    given = (counts + smoothing) / (counts.sum(1, keepdim=True) + num_stages * smoothing)
    labels = stages[stages >= 0]
    marginal = (torch.bincount(labels, minlength=num_stages).double() + smoothing) / (
        labels.numel() + num_stages * smoothing
    )
    return given, marginal


def token_loglik(plans: Tensor, stages: Tensor, given: Tensor) -> Tensor:
    """log sum_j (T[t, j] / a_t) P(s_t | j) of every token, (N, n) (unlabelled tokens: any value); plans (N, n, k),
    given (k, S)."""
    assignment = plans.double() / plans.double().sum(-1, keepdim=True).clamp_min(1e-300)  # T[t, :] / a_t
    predictive = assignment @ given  # (N, n, S)
    chosen = torch.gather(predictive, -1, stages.clamp_min(0)[..., None])[..., 0]
    return torch.log(chosen.clamp_min(1e-300))


def heldout_tokens(
    plans: Tensor, stages: Tensor, problem: Tensor, num_stages: int, smoothing: float = 0.5
) -> tuple[Tensor, Tensor, Tensor]:
    """Two-fold held-out log-likelihoods of every labelled token: problems split by parity of their index, each half
    scored with the stage model fitted on the other half. Returns (score, chance, problem) per token."""
    fold = (problem % 2).bool()
    scores, chances, problems = [], [], []
    for held in (fold, ~fold):
        if not bool(held.any()) or not bool((~held).any()):
            continue
        given, marginal = fit_stage_model(plans[~held], stages[~held], num_stages, smoothing)
        test_stages = stages[held]
        labelled = test_stages >= 0
        if not bool(labelled.any()):
            continue
        scores.append(token_loglik(plans[held], test_stages, given)[labelled])
        chances.append(torch.log(marginal[test_stages[labelled]]))
        problems.append(problem[held][:, None].expand_as(test_stages)[labelled])
    if not scores:
        raise ValueError("held-out likelihood needs labelled tokens in at least two problems of both parities")
    return torch.cat(scores), torch.cat(chances), torch.cat(problems)


@dataclass(frozen=True)
class MappingScores:
    """All measures of one set of plans (see the module docstring); ``gain`` = score - chance (nats per token)."""

    score: float
    chance: float
    staircase: float
    staircase_chance: float
    sparsity: float
    per_problem: dict[int, float] = field(default_factory=dict, compare=False)  # held-out score of each problem

    @property
    def gain(self) -> float:
        return self.score - self.chance


def mapping_scores(
    plans: Tensor, stages: Tensor, problem: Tensor, num_stages: int, smoothing: float = 0.5
) -> tuple[MappingScores, Tensor]:
    """Every measure of the plans, and the support x stage matrix M (k, S) over all rollouts."""
    matrix = stage_mass(plans, stages, num_stages)
    scores, chances, problems = heldout_tokens(plans, stages, problem, num_stages, smoothing)
    per_problem = {int(p): float(scores[problems == p].mean()) for p in torch.unique(problems)}
    stair, stair_chance = block_diagonality(matrix)
    return (
        MappingScores(float(scores.mean()), float(chances.mean()), stair, stair_chance, sparsity(matrix), per_problem),
        matrix,
    )
