"""The rule-based stage labeller on the synthetic solutions' structure (hara/analysis/stages.py)."""

from __future__ import annotations

import random

from hara.analysis.stages import STAGES, char_stages, token_stages
from hara.data.format import format_completion
from hara.data.synthetic import make_record
from hara.models.tokenizer import build_tokenizer


def spans(text: str) -> list[tuple[str, str]]:
    """(stage, text) runs of a labelled text."""
    labels, out = char_stages(text), []
    for ch, label in zip(text, labels):
        if out and out[-1][0] == STAGES[label]:
            out[-1] = (out[-1][0], out[-1][1] + ch)
        else:
            out.append((STAGES[label], ch))
    return out


def test_multi_step_solution_walks_through_every_stage_in_order():
    text = " 9 + 17 = 26. 26 * 9 = 234. The answer is \\boxed{234}."
    assert spans(text) == [
        ("restate", " 9 + 17 "),
        ("compute", "= 26. 26 * 9 "),
        ("result", "= 234. "),
        ("answer", "The answer is \\boxed{234}."),
    ]


def test_single_step_and_malformed_texts():
    assert [s for s, _ in spans(" 28 - 13 = 15. The answer is \\boxed{15}.")] == ["restate", "result", "answer"]
    assert [s for s, _ in spans(" 12 apples the answer is 3")] == ["compute", "answer"]
    assert [s for s, _ in spans("= 4 =")] == ["compute", "result"]
    assert char_stages("") == []


def test_stages_never_go_backwards_on_generated_solutions():
    rng = random.Random(0)
    for skill in ("arithmetic", "linear_equation", "fractions", "word_problem", "percent", "gcd_lcm"):
        for level in (1, 3, 5):
            record = make_record(rng, skill, level, "x")
            labels = char_stages(format_completion(record["solution"], record["answer"]))
            assert labels == sorted(labels), (skill, level)
            assert labels[0] == STAGES.index("restate") and labels[-1] == STAGES.index("answer")


def test_token_stages_follow_the_characters_of_each_token():
    tokenizer = build_tokenizer("char")
    text = " 2 + 3 = 5. The answer is \\boxed{5}."
    ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    labels = token_stages(ids, lambda row: tokenizer.decode(row, skip_special_tokens=True))
    assert labels[:-1] == char_stages(tokenizer.decode(ids, skip_special_tokens=True))
    assert labels[-1] == -1  # eos adds no text: unlabelled
