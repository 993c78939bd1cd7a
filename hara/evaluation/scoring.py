"""pass@1 inside lighteval's pass@k machinery, scored with the project's reward function.

Why not lighteval's own ``Metrics.pass_at_k_math``: its sample scorer (``MultilingualExtractiveMatchMetric`` with
expression and LaTeX extraction) falls back to the last number or expression anywhere in the text, while training
rewards only the last complete ``\\boxed{}`` (:func:`hara.boxed_answer.math_reward`). Measured with lighteval 0.13.0
and math-verify 0.5.2 (tests/evaluation/test_eval_scoring.py keeps both cases):

- ``"The answer is 7."`` against gold ``7``: lighteval 1, math_reward 0 (no boxed answer: the format was not followed);
- ``"\\boxed{1,2}"`` against OlympiadBench's ``"1, 2"``: lighteval 0, math_reward 1.

A model trained on one rule and evaluated on another is exactly the offline/online extraction mismatch this stage
avoids, so the metric below is lighteval's :class:`PassAtK` (same estimator, same corpus mean, same standard error)
with ``math_reward`` as its per-sample scorer. Texts are scored as generated: no stripping, no normalization and
no reasoning-tag removal (the pipeline is run with ``remove_reasoning_tags=False``), exactly like the RL reward.
With k = 1 the unbiased estimator ``1 - C(n-c, 1) / C(n, 1)`` equals ``c / n``, the mean reward over the n samples.
"""

from __future__ import annotations

import numpy as np
from lighteval.metrics.metrics_sample import PassAtK
from lighteval.metrics.utils.metric_utils import SampleLevelMetric
from lighteval.models.model_output import ModelResponse
from lighteval.tasks.requests import Doc, SamplingMethod

from hara.boxed_answer import math_reward

__all__ = ["METRIC_NAME", "RewardPassAtK", "pass_at_1_metric", "reward_score"]

METRIC_NAME = "pass@1"


def reward_score(doc: Doc, model_response: ModelResponse) -> float:
    """lighteval sample scorer: ``math_reward`` of the (single) completion against the document's gold answer."""
    return math_reward(model_response.text[0], doc.get_golds()[0])


class RewardPassAtK(PassAtK):
    """lighteval's pass@k estimator over n samples with ``math_reward`` as the per-sample score.

    ``__str__`` is stable across processes (lighteval's default prints the scorer's attributes, and the task config
    string feeds its prediction-cache key), and it names the scorer, so changing it invalidates cached scores.
    """

    def __init__(self, n: int, k: int = 1) -> None:
        super().__init__(k=k, n=n, sample_scoring_function=reward_score)

    def compute(self, doc: Doc, model_response: ModelResponse, **kwargs) -> float:
        """pass@k of one problem; raises if fewer than n completions came back (a silent smaller n would bias it)."""
        if len(model_response.text) < self.n:
            raise ValueError(f"{doc.task_name}: {len(model_response.text)} completions for n={self.n}")
        scores = [self.compute_score(doc, ModelResponse(text=[text])) for text in model_response.text[: self.n]]
        return self.pass_at_k(scores)

    def __str__(self) -> str:
        return f"RewardPassAtK(k={self.k}, n={self.n}, scorer=hara.boxed_answer.math_reward)"


def pass_at_1_metric(n: int) -> SampleLevelMetric:
    """A fresh pass@1 metric over ``n`` samples (fresh: lighteval's shared metric objects are mutated by tasks)."""
    return SampleLevelMetric(
        metric_name=METRIC_NAME,
        sample_level_fn=RewardPassAtK(n=n),
        category=SamplingMethod.GENERATIVE,
        corpus_level_fn=np.mean,
        higher_is_better=True,
    )
