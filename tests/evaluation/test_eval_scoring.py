"""pass@1 over n samples scored with math_reward inside lighteval's PassAtK; why lighteval's own scorer is not used."""

from __future__ import annotations

import pytest
from lighteval.metrics.metrics import Metrics
from lighteval.models.model_output import ModelResponse
from lighteval.tasks.requests import Doc

from hara.boxed_answer import math_reward
from hara.evaluation.scoring import RewardPassAtK, pass_at_1_metric


def doc(gold: str) -> Doc:
    return Doc(query="Question: q\nAnswer:", choices=[gold], gold_index=0, task_name="t|0")


# (completion, gold, lighteval pass_at_k_math's score, math_reward) measured with lighteval 0.13.0 / math-verify 0.5.2
DISAGREEMENTS = [
    ("The answer is 7.", "7", 1.0, 0.0),  # unboxed: lighteval extracts the bare number, training gives no reward
    ("\\boxed{1,2}", "1, 2", 0.0, 1.0),  # an OlympiadBench-style answer list
]


@pytest.mark.parametrize("text,gold,lighteval_score,reward", DISAGREEMENTS)
def test_lighteval_math_scorer_disagrees_with_the_training_reward(text, gold, lighteval_score, reward):
    """The reason for RewardPassAtK: if these ever agree, the docstring of hara.evaluation.scoring is out of date."""
    builtin = Metrics.pass_at_k_math.value.sample_level_fn
    saved = builtin.k, builtin.n
    builtin.k, builtin.n = 1, 1
    try:
        assert builtin.compute(doc=doc(gold), model_response=ModelResponse(text=[text])) == lighteval_score
    finally:
        builtin.k, builtin.n = saved
    assert math_reward(text, gold) == reward
    assert RewardPassAtK(n=1).compute(doc(gold), ModelResponse(text=[text])) == reward


@pytest.mark.parametrize("n,correct", [(1, 0), (1, 1), (4, 0), (4, 1), (4, 3), (4, 4), (7, 5), (16, 9)])
def test_pass_at_1_is_the_mean_reward_over_n_samples(n, correct):
    texts = ["\\boxed{\\frac{1}{2}}"] * correct + ["\\boxed{3}"] * (n - correct)
    score = RewardPassAtK(n=n).compute(doc("0.5"), ModelResponse(text=texts))
    assert abs(score - correct / n) < 1e-12


def test_only_the_first_n_samples_count_and_fewer_is_an_error():
    assert RewardPassAtK(n=2).compute(doc("2"), ModelResponse(text=["\\boxed{2}", "x", "\\boxed{2}"])) == 0.5
    with pytest.raises(ValueError, match="1 completions for n=2"):
        RewardPassAtK(n=2).compute(doc("2"), ModelResponse(text=["\\boxed{2}"]))


def test_metric_description_is_stable_for_the_cache_key():
    """lighteval hashes the task config's text into its cache key: it must not contain memory addresses."""
    first, second = str(pass_at_1_metric(4).sample_level_fn), str(pass_at_1_metric(4).sample_level_fn)
    assert first == second and "0x" not in first and "n=4" in first
    assert str(pass_at_1_metric(8).sample_level_fn) != first
