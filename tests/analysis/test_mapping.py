"""Must-show 2 of issue 8: on hidden states with planted stages the support x stage matrix is block-diagonal and
FGW's held-out likelihood score beats W's and GW's; on unstructured noise every score falls to chance; a wrong
mapping (shuffled plans) breaks both measures."""

from __future__ import annotations

import pytest
import torch

from hara.analysis.mapping import (
    block_diagonality,
    fit_stage_model,
    heldout_tokens,
    mapping_scores,
    stage_mass,
    staircase_mass,
    token_loglik,
)
from hara.analysis.transport import first_rollouts, problem_plans, variant_alphas
from tests.analysis.planted import NUM_STAGES, planted_rollouts

ALPHAS = variant_alphas(["w", "gw", "fgw"], 0.5)


@pytest.fixture(scope="module")
def planted():
    h, mask, stages, problem = planted_rollouts(seed=0)
    plans = {v: problem_plans(h, mask, problem, a) for v, a in ALPHAS.items()}
    return plans, stages, problem


def scores_of(plans, stages, problem):
    return mapping_scores(plans, stages, problem, NUM_STAGES)


def test_plans_are_transport_plans(planted):
    plans, stages, _ = planted
    plan, valid = plans["fgw"], stages >= 0
    k = plan.shape[-1]
    # column marginals q = 1/k exactly (the capped scaling Sinkhorn ends on them); rows a_t = 1/n only up to the
    # capped solver's error, which is why the likelihood normalises each token's row before using it
    assert torch.allclose(plan.sum(1), torch.full((plan.shape[0], k), 1.0 / k), atol=1e-4)
    assert torch.all(plan.sum(-1)[valid] > 0) and torch.all(plan.sum(-1)[~valid] == 0)


def test_support_stage_matrix_is_block_diagonal_for_fgw(planted):
    plans, stages, problem = planted
    scores, matrix = scores_of(plans["fgw"], stages, problem)
    assert scores.staircase > 0.85 and scores.staircase_chance < 0.3
    assert scores.sparsity > 0.6
    top_stage = matrix.argmax(1)  # supports in position order walk through the stages in order, one block each
    assert torch.all(top_stage[1:] >= top_stage[:-1]) and set(top_stage.tolist()) == set(range(NUM_STAGES))


def test_fgw_likelihood_beats_w_and_gw(planted):
    plans, stages, problem = planted
    score = {v: scores_of(p, stages, problem)[0] for v, p in plans.items()}
    assert score["fgw"].score > score["w"].score + 0.1
    assert score["fgw"].score > score["gw"].score + 0.1
    assert all(s.score > s.chance + 0.5 for s in score.values())  # each variant sees part of the structure


def test_unstructured_noise_scores_at_chance():
    h, mask, stages, problem = planted_rollouts(seed=1, structured=False)
    for variant, alpha in ALPHAS.items():
        scores, _ = scores_of(problem_plans(h, mask, problem, alpha), stages, problem)
        assert abs(scores.gain) < 0.03, variant
        assert scores.staircase < scores.staircase_chance + 0.05 and scores.sparsity < 0.05, variant


def test_features_only_variant_is_at_chance_when_features_are_noise():
    h, mask, stages, problem = planted_rollouts(seed=2)
    noise = torch.randn(h.shape, generator=torch.Generator().manual_seed(3))
    scores, _ = scores_of(problem_plans(noise, mask, problem, ALPHAS["w"]), stages, problem)
    assert abs(scores.gain) < 0.05


def shuffle_supports(plans: torch.Tensor, seed: int) -> torch.Tensor:
    """A wrong mapping: every rollout's support axis permuted independently."""
    gen = torch.Generator().manual_seed(seed)
    perm = torch.stack([torch.randperm(plans.shape[-1], generator=gen) for _ in range(plans.shape[0])])
    return torch.gather(plans, 2, perm[:, None, :].expand_as(plans))


def test_shuffled_plans_break_both_measures(planted):
    plans, stages, problem = planted
    good, _ = scores_of(plans["fgw"], stages, problem)
    bad, _ = scores_of(shuffle_supports(plans["fgw"], seed=4), stages, problem)
    assert bad.gain < 0.05 < good.gain - 0.5
    assert bad.staircase < bad.staircase_chance + 0.05


def test_shuffled_stage_labels_break_the_likelihood(planted):
    plans, stages, problem = planted
    gen = torch.Generator().manual_seed(5)
    shuffled = stages.clone()
    valid = stages >= 0
    shuffled[valid] = stages[valid][torch.randperm(int(valid.sum()), generator=gen)]
    assert abs(scores_of(plans["fgw"], shuffled, problem)[0].gain) < 0.05


def test_reversed_supports_keep_the_likelihood_but_lose_the_block_order(planted):
    plans, stages, problem = planted
    good, _ = scores_of(plans["fgw"], stages, problem)
    flipped, _ = scores_of(plans["fgw"].flip(-1), stages, problem)
    assert flipped.score == pytest.approx(good.score, abs=1e-9)  # a consistent relabelling carries the same info
    assert flipped.staircase < good.staircase - 0.4  # but the supports no longer walk through the stages in order


def test_likelihood_is_the_mean_log_of_the_soft_assignment_loop():
    """Vectorised score against a per-token loop on a small random case."""
    gen = torch.Generator().manual_seed(6)
    plans = torch.rand(3, 5, 4, generator=gen)
    plans = plans / plans.sum(-1, keepdim=True) / 5
    stages = torch.randint(0, 3, (3, 5), generator=gen)
    stages[0, 4] = -1
    given = torch.rand(4, 3, generator=gen).double()
    given = given / given.sum(1, keepdim=True)
    expected = [
        torch.log(sum(plans[r, t, j] * 5 * given[j, stages[r, t]] for j in range(4)))
        for r in range(3)
        for t in range(5)
        if stages[r, t] >= 0
    ]
    score = float(token_loglik(plans, stages, given)[stages >= 0].mean())
    assert score == pytest.approx(float(sum(expected) / len(expected)), rel=1e-6)


def test_stage_model_and_mass_on_a_hand_made_plan():
    plans = torch.tensor([[[0.5, 0.0], [0.0, 0.5]]])  # token 0 -> support 0, token 1 -> support 1
    stages = torch.tensor([[0, 1]])
    matrix = stage_mass(plans, stages, 2)
    assert torch.allclose(matrix, torch.tensor([[0.5, 0.0], [0.0, 0.5]]))
    assert staircase_mass(matrix) == pytest.approx(1.0)
    assert block_diagonality(matrix)[1] == pytest.approx(0.5)
    given, marginal = fit_stage_model(plans, stages, 2, smoothing=0.5)
    assert torch.allclose(given, torch.tensor([[0.75, 0.25], [0.25, 0.75]], dtype=torch.float64))
    assert torch.allclose(marginal, torch.tensor([0.5, 0.5], dtype=torch.float64))


def test_heldout_needs_two_problems():
    plans = torch.full((2, 2, 2), 0.25)
    with pytest.raises(ValueError, match="two problems"):
        heldout_tokens(plans, torch.zeros(2, 2, dtype=torch.long), torch.zeros(2, dtype=torch.long), 2)


def test_first_rollouts_takes_the_first_of_every_problem():
    problem = torch.tensor([0, 0, 0, 1, 1, 1])
    assert first_rollouts(problem, 2).tolist() == [0, 1, 3, 4]


def test_score_variants_ranks_fgw_first_at_every_rollout_count():
    from hara.analysis.interpret import Rollouts, _finding, score_variants
    from hara.ot.barycenter import BarycenterConfig

    data = Rollouts(*planted_rollouts(seed=7))
    rows, matrices = score_variants(data, ALPHAS, [2, 8], BarycenterConfig(), smoothing=0.5)
    assert [(r["variant"], r["rollouts"]) for r in rows] == [(v, c) for v in ALPHAS for c in (2, 8)]
    for count in (2, 8):
        at = {r["variant"]: r["scores"].score for r in rows if r["rollouts"] == count}
        assert at["fgw"] > max(at["w"], at["gw"]), count
    assert set(matrices) == set(ALPHAS) and matrices["fgw"].shape == (16, NUM_STAGES)
    assert "highest score: FGW" in _finding(rows)


def test_score_variants_runs_every_structure():
    from hara.analysis.interpret import Rollouts, _finding, score_variants
    from hara.ot.barycenter import BarycenterConfig

    h, mask, stages, problem = planted_rollouts(seed=8)
    keep = problem < 2  # POT's exact solver: two problems are enough
    data = Rollouts(h[keep], mask[keep], stages[keep], problem[keep])
    rows, matrices = score_variants(
        data, ALPHAS, [4], BarycenterConfig(exact_max_iter=5), smoothing=0.5, structures=("position", "hidden")
    )
    assert [(r["structure"], r["variant"]) for r in rows] == [(s, v) for s in ("position", "hidden") for v in ALPHAS]
    assert set(matrices) == set(ALPHAS) | {f"{v}_hidden" for v in ALPHAS}
    assert not torch.allclose(matrices["gw"], matrices["gw_hidden"])
    finding = _finding(rows)
    assert finding.startswith("Positional structure, at 4 rollouts") and "Hidden-state structure, exact" in finding


def test_the_interpretability_barycenter_is_the_config_s_training_one():
    from hara.analysis.interpret import barycenter_config
    from hara.config import validate_config
    from hara.ot.barycenter import BarycenterConfig

    config = validate_config({"hara": {"hara": {"alpha": 0.3, "barycenter_size": 4, "formula": "softmax"}}})
    assert barycenter_config(config) == BarycenterConfig(alpha=0.3, barycenter_size=4)
