"""TRL's side of the reward: :func:`accuracy_reward` scores a batch of completions with the project's one scoring
rule, :func:`hara.boxed_answer.math_reward` (also used by the warm-up check, the prompt selection and the evaluation)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hara.boxed_answer import math_reward

__all__ = ["accuracy_reward"]


def _completion_text(completion: Any) -> str:
    """The text of one completion: a string, or the concatenated contents of a list of chat messages."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Sequence):
        return "".join(str(m.get("content") or "") for m in completion if isinstance(m, dict))
    return ""


def accuracy_reward(completions: Sequence[Any], answer: Sequence[Any], **kwargs: Any) -> list[float]:
    """TRL reward function: ``math_reward`` per completion against the dataset's ``answer`` column.

    Args:
        completions: strings, or conversational completions (lists of ``{"role", "content"}`` messages).
        answer: gold answers, one per completion (TRL repeats each prompt's row for its group).
        **kwargs: the other dataset columns and trainer state TRL passes; ignored.

    Returns:
        A list of floats in {0.0, 1.0}, one per completion.
    """
    return [math_reward(_completion_text(c), g) for c, g in zip(completions, answer, strict=True)]
