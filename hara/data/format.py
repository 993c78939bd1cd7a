"""The prompt / completion format shared by the warm-up, RL training and evaluation.

The prompt is the config's ``prompt.template`` with ``{problem}`` replaced, and generation stops at the first of
``prompt.stop`` (:class:`PromptFormat`, built once from the config by :func:`prompt_format`): TRL's rollouts, the
pass-rate selection, the accuracy checks and both evaluation backends (transformers and vLLM, through lighteval's
task config) take the same two settings, so the policy is always conditioned on, and cut at, the same text.

- The embedded default keeps ``Question: {problem}\\nAnswer:`` and no stop: the tiny models read characters, learn
  the boxed-answer shape in the warm-up and end with their eos token.
- config/paper.yaml asks the Qwen3-Base models to reason step by step and box the final answer (the instruction of
  Qwen2.5-Math and DeepSeek-R1's evaluations) and stops at a new ``Question:``: a Base model has no chat turn to
  end and otherwise runs on into invented follow-up questions, whose boxed answers the last-boxed reward would score.
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass

PROMPT_TEMPLATE = "Question: {problem}\nAnswer:"
COMPLETION_TEMPLATE = " {solution} The answer is \\boxed{{{answer}}}."
DIRECT_TEMPLATE = " The answer is \\boxed{{{answer}}}."
_DIRECT_ANSWER = re.compile(r"\s*The answer is \\boxed\{[^{}]*\}\.?\s*")


def format_prompt(problem: str, template: str = PROMPT_TEMPLATE) -> str:
    """The text a policy is conditioned on for one problem (``{problem}`` replaced, so the template may hold other
    braces, e.g. ``\\boxed{}``)."""
    return template.replace("{problem}", problem.strip())


def cut_at_stop(completion: str, stop: tuple[str, ...] | list[str]) -> str:
    """``completion`` up to the first stop sequence (excluded), as vLLM returns it; unchanged when none occurs."""
    cut = min((index for index in (completion.find(s) for s in stop) if index >= 0), default=-1)
    return completion if cut < 0 else completion[:cut]


@dataclass(frozen=True)
class PromptFormat:
    """How problems are put to a policy and where its completion ends (the config's ``prompt`` section)."""

    template: str = PROMPT_TEMPLATE
    stop: tuple[str, ...] = ()

    def prompt(self, problem: str) -> str:
        return format_prompt(problem, self.template)

    def cut(self, completion: str) -> str:
        return cut_at_stop(completion, self.stop)


def prompt_format(config: Mapping) -> PromptFormat:
    """The :class:`PromptFormat` of a resolved config."""
    return PromptFormat(template=config["prompt"]["template"], stop=tuple(config["prompt"]["stop"]))


def format_completion(solution: str, answer: str) -> str:
    """A worked solution ending in a boxed answer: the supervised target of the warm-up."""
    return COMPLETION_TEMPLATE.format(solution=solution.strip(), answer=answer.strip())


def format_direct_answer(answer: str) -> str:
    """The boxed answer with no working: how much web maths is written, and the warm-up's "direct" style."""
    return DIRECT_TEMPLATE.format(answer=answer.strip())


def is_direct_answer(completion: str) -> bool:
    """True when a completion is a bare boxed answer (the direct style), with no working before it."""
    return _DIRECT_ANSWER.fullmatch(completion) is not None
