"""Rule-based reasoning-stage labeller for the synthetic problems' solution text (the embedded default) [R].

The paper labels MATH500 completions with an external LLM; on the cluster that is a vLLM-served model with a prompt
kept in the config. On the embedded default the solutions have a fixed structure (hara/data/synthetic.py and
hara/data/format.py): sentences of arithmetic steps "expr = value." followed by "The answer is \\boxed{v}.", e.g.

    " 9 + 17 = 26. 26 * 9 = 234. The answer is \\boxed{234}."

and these rules label every character with one of four stages, in reading order:

    restate  everything before the first "=" of the completion (the question's expression or equation, restated);
    compute  from the first "=" up to (not including) the last "=" before the answer phrase (intermediate steps);
    result   from that last "=" to the answer phrase (the final computed value and its full stop);
    answer   from the answer phrase "The answer is" (case-insensitive) to the end.

Malformed text degrades gracefully: without an answer phrase there is no answer stage; without any "=" before the
answer phrase, that text is labelled compute (a model that skips the restatement is still computing). A token gets
the stage of its first character; tokens that decode to no text (eos, padding) get -1 (unlabelled).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

__all__ = ["STAGES", "STAGE_DEFINITIONS", "char_stages", "token_stages"]

#: Stage names in their reading order (index = label).
STAGES = ("restate", "compute", "result", "answer")
#: What each stage means, in words: the rules above, and the definitions an LLM labeller is given
#: (hara/analysis/labellers.py fills them into its prompt).
STAGE_DEFINITIONS = {
    "restate": "restates the problem: the expression or equation to be solved, before any calculation",
    "compute": "an intermediate calculation or reasoning step that does not yet give the final value",
    "result": "the last calculation, which gives the final value",
    "answer": "states the final answer, e.g. 'The answer is \\boxed{...}'",
}
_ANSWER = re.compile(r"the answer is", re.IGNORECASE)


def char_stages(text: str) -> list[int]:
    """The stage index of every character of ``text`` (rules in the module docstring)."""
    match = _ANSWER.search(text)
    body_end = match.start() if match else len(text)
    equals = [i for i, ch in enumerate(text[:body_end]) if ch == "="]
    labels = [STAGES.index("answer")] * len(text)
    if not equals:
        labels[:body_end] = [STAGES.index("compute")] * body_end
        return labels
    first, last = equals[0], equals[-1]
    for i in range(body_end):
        labels[i] = (
            STAGES.index("restate") if i < first else STAGES.index("compute") if i < last else STAGES.index("result")
        )
    return labels


def token_stages(
    token_ids: Sequence[int],
    decode: Callable[[list[int]], str],
    labels_of: Callable[[str], Sequence[int]] = char_stages,
) -> list[int]:
    """Stage of every token: the stage of its first character in the decoded completion, -1 for tokens adding no
    text. ``decode`` maps a prefix of ids to text (special tokens skipped); spans come from decoding prefixes, so
    any tokenizer works (the char tokenizer and BPE alike). ``labels_of`` gives the characters' stages (by default
    these rules; the LLM labeller passes its own)."""
    text = decode(list(token_ids))
    labels = labels_of(text)
    out, start = [], 0
    for t in range(len(token_ids)):
        end = len(decode(list(token_ids[: t + 1])))
        out.append(labels[start] if end > start and start < len(labels) else -1)
        start = max(start, end)
    return out
