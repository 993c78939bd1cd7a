"""The prompt / completion format shared by the warm-up, RL training and evaluation.

The real Qwen3-Base models are prompted to reason step by step and put the final answer in ``\\boxed{}``; the tiny
embedded models learn the same shape during the warm-up, so the reward (math-verify on the boxed answer) and the
evaluation are identical for both worlds. The instruction is kept short because the tiny models read characters.
"""

import re

PROMPT_TEMPLATE = "Question: {problem}\nAnswer:"
COMPLETION_TEMPLATE = " {solution} The answer is \\boxed{{{answer}}}."
DIRECT_TEMPLATE = " The answer is \\boxed{{{answer}}}."
_DIRECT_ANSWER = re.compile(r"\s*The answer is \\boxed\{[^{}]*\}\.?\s*")


def format_prompt(problem: str, template: str = PROMPT_TEMPLATE) -> str:
    """The text a policy is conditioned on for one problem."""
    return template.format(problem=problem.strip())


def format_completion(solution: str, answer: str) -> str:
    """A worked solution ending in a boxed answer: the supervised target of the warm-up."""
    return COMPLETION_TEMPLATE.format(solution=solution.strip(), answer=answer.strip())


def format_direct_answer(answer: str) -> str:
    """The boxed answer with no working: how much web maths is written, and the warm-up's "direct" style."""
    return DIRECT_TEMPLATE.format(answer=answer.strip())


def is_direct_answer(completion: str) -> bool:
    """True when a completion is a bare boxed answer (the direct style), with no working before it."""
    return _DIRECT_ANSWER.fullmatch(completion) is not None
