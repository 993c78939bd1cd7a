"""The synthetic world's step oracle: where a worked solution first goes wrong.

Every synthetic problem (hara/data/synthetic.py) is solved by a chain of exact arithmetic steps written as sentences,
``"7 * 4 = 28. 28 + 9 = 37."``, and ends in ``"The answer is \\boxed{37}."`` (hara/data/format.py). A completion
that imitates that format can be checked step by step against exact arithmetic (:class:`fractions.Fraction`) and
against the problem's reference solution, which is what :func:`first_wrong_step` does:

- the completion is cut into steps at sentence ends (``.``, ``,``, ``;`` or a newline followed by a space or the end);
- a step with ``=`` is a chain of parts; every part that is pure arithmetic (integers, ``+ - * / ^``, parentheses,
  implicit products such as ``(a - b)(a + b)``) is evaluated exactly, parts with words or variables (``x``,
  ``25% of 200``) are not checked;
- a step is **wrong** when two of its evaluated parts differ (false arithmetic, division by zero), or when its result
  (the last evaluated part) is a value the reference solution never reaches (off the reference's track: a copied
  operand gone wrong is caught there, where its arithmetic is still right);
- the answer step (from ``The answer is`` or the first ``\\boxed``) is wrong unless its boxed value equals the gold
  answer exactly.

The first wrong step is the oracle's answer; a completion with no checkable step and no box (malformed, cut off)
has none (:attr:`StepCheck.first_wrong` is None). Pure Python, no torch: the trainer maps the step's character
span to token indices (:func:`first_wrong_span`, called by hara/rlvr/trainer.py) and the oracle transforms
(hara/weighting/oracle.py) move the rollout's advantage there. Problems from the hub have no reference steps in this
form and are refused.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from fractions import Fraction
from itertools import accumulate

__all__ = [
    "Step",
    "StepCheck",
    "WrongSpan",
    "evaluate",
    "first_wrong_span",
    "first_wrong_step",
    "reference_values",
    "split_steps",
]

# a sentence ends at . , ; or a newline followed by whitespace or the end of the text ("3.5" and "1,000" are one
# number); the answer step starts at "The answer is" or at a "\boxed" with no such phrase before it
_STEP_END = re.compile(r"[.,;](?=\s|$)|\n")
_ANSWER = re.compile(r"The answer is|\\boxed")
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_ARITHMETIC = re.compile(r"^[\d\s+\-*/^()]+$")
_IMPLICIT_PRODUCT = re.compile(r"(?<=[\d)])\s*(?=\()|(?<=\))\s*(?=\d)")
MAX_EXPONENT = 64  # larger powers are not arithmetic a solution writes out; refusing them bounds the work
MAX_PART_CHARS = 80


@dataclass(frozen=True)
class Step:
    """One step of a completion: its text, where it starts in the completion (characters), whether it is the answer
    step, and its verdict (True right, False wrong, None not checkable)."""

    text: str
    start: int
    answer: bool
    ok: bool | None


@dataclass(frozen=True)
class StepCheck:
    """The steps of one completion and the index of the first wrong one (None: none found)."""

    steps: tuple[Step, ...]
    first_wrong: int | None

    @property
    def start(self) -> int | None:
        """Character offset of the first wrong step in the completion, or None."""
        return None if self.first_wrong is None else self.steps[self.first_wrong].start


class _Undefined(ValueError):
    """An arithmetic part with no value (division by zero): the step claiming one is wrong."""


def _value(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return Fraction(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = _value(node.operand)
        return -inner if isinstance(node.op, ast.USub) else inner
    if isinstance(node, ast.BinOp):
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Add):
            return left + right
        if isinstance(node.op, ast.Sub):
            return left - right
        if isinstance(node.op, ast.Mult):
            return left * right
        if isinstance(node.op, ast.Div):
            if right == 0:
                raise _Undefined("division by zero")
            return left / right
        if isinstance(node.op, ast.Pow) and right.denominator == 1 and abs(right) <= MAX_EXPONENT:
            if left == 0 and right < 0:
                raise _Undefined("zero to a negative power")
            return left ** int(right)
    raise TypeError("not arithmetic")


def evaluate(part: str) -> Fraction | None:
    """The exact value of an arithmetic part (``"(3 + 4) * 2"``, ``"7/4"``, ``"(12 - 5)(12 + 5)"``), or None when
    it is not pure arithmetic. Raises :class:`ValueError` for arithmetic without a value (division by zero)."""
    text = part.strip()
    if not text or len(text) > MAX_PART_CHARS or not _ARITHMETIC.match(text) or not any(c.isdigit() for c in text):
        return None
    text = _IMPLICIT_PRODUCT.sub("*", text).replace("^", "**")
    try:
        return _value(ast.parse(text, mode="eval").body)
    except (SyntaxError, TypeError, RecursionError):
        return None


def _chain_values(text: str) -> tuple[list[Fraction], bool]:
    """The values of a step's evaluable ``=`` parts, and whether one part had no value."""
    values, undefined = [], False
    for part in text.split("=") if "=" in text else []:
        try:
            value = evaluate(part)
        except _Undefined:
            undefined = True
            continue
        if value is not None:
            values.append(value)
    return values, undefined


def split_steps(completion: str) -> list[tuple[str, int, bool]]:
    """(text, start offset, is the answer step) of each non-empty step; the answer step runs to the end."""
    answer = _ANSWER.search(completion)
    body_end = answer.start() if answer else len(completion)
    pieces, start = [], 0
    for end in [m.end() for m in _STEP_END.finditer(completion, 0, body_end)] + [body_end]:
        pieces.append((start, end))
        start = end
    steps = []
    for a, b in pieces:
        piece = completion[a:b]
        text = piece.strip().rstrip(".,;").rstrip()  # the sentence's terminator is not part of its last number
        if text:
            steps.append((text, a + len(piece) - len(piece.lstrip()), False))
    if answer:
        steps.append((completion[answer.start() :].strip(), answer.start(), True))
    return steps


def reference_values(solution: str) -> set[Fraction]:
    """Every value the reference solution's steps reach (the evaluable parts of its ``=`` chains)."""
    return {value for text, _, _ in split_steps(solution) for value in _chain_values(text)[0]}


def _gold(answer: str) -> Fraction | None:
    try:
        return evaluate(answer)
    except ValueError:
        return None


def _answer_ok(text: str, gold: Fraction | None) -> bool:
    boxed = _BOXED.findall(text)
    if not boxed or gold is None:
        return False
    try:
        return evaluate(boxed[-1]) == gold
    except ValueError:
        return False


def _step_ok(text: str, reference: set[Fraction] | None) -> bool | None:
    values, undefined = _chain_values(text)
    if undefined or len(set(values)) > 1:
        return False
    if not values or len(values) < 2 and reference is None:
        return None  # nothing to check: a restatement, or one value with no reference to place it
    return reference is None or values[-1] in reference


def first_wrong_step(completion: str, answer: str, reference: str | None = None) -> StepCheck:
    """Check ``completion`` step by step against exact arithmetic, the reference solution's values (when given) and
    the gold ``answer``; see the module docstring for the rules."""
    gold, known = _gold(answer), reference_values(reference) if reference is not None else None
    if known is not None and gold is not None:
        known.add(gold)
    steps = tuple(
        Step(text, start, is_answer, _answer_ok(text, gold) if is_answer else _step_ok(text, known))
        for text, start, is_answer in split_steps(completion)
    )
    wrong = next((index for index, step in enumerate(steps) if step.ok is False), None)
    return StepCheck(steps, wrong)


@dataclass(frozen=True)
class WrongSpan:
    """Where a completion's first wrong step lies, in token indices: ``start`` (its first token), ``end`` (one past
    its last token: the next step's start, so the answer template after a wrong worked step is not part of it; for a
    wrong answer step, the boxed value only) and ``step`` (its index among the completion's steps). All -1 where no
    wrong step was found."""

    start: int = -1
    end: int = -1
    step: int = -1


def _span_chars(completion: str, check: StepCheck) -> tuple[int, int]:
    """Character span [start, end) of the first wrong step (see :class:`WrongSpan`)."""
    index = check.first_wrong
    step = check.steps[index]
    if step.answer:
        boxed = list(_BOXED.finditer(completion, step.start))
        return (boxed[-1].start(1), boxed[-1].end(1)) if boxed else (step.start, len(completion))
    end = check.steps[index + 1].start if index + 1 < len(check.steps) else len(completion)
    return step.start, end


def _token_at(ends: list[int], char: int) -> int:
    """Index of the token holding character ``char``, given each token's end offset (cumulative lengths)."""
    return next((index for index, end in enumerate(ends) if end > char), len(ends) - 1)


def first_wrong_span(pieces: list[str], answer: str, reference: str | None = None) -> WrongSpan:
    """The tokens of the first wrong step of a completion (:class:`WrongSpan`; all -1 where none is found).

    ``pieces``: the completion's tokens decoded one by one (their concatenation is the text that is checked, so
    offsets and tokens always agree)."""
    completion = "".join(pieces)
    check = first_wrong_step(completion, answer, reference)
    if check.first_wrong is None or not pieces:
        return WrongSpan()
    ends = list(accumulate(len(piece) for piece in pieces))
    start, end = _span_chars(completion, check)
    if start >= ends[-1]:
        return WrongSpan()
    first = _token_at(ends, start)
    # the token holding the next step's first character starts the next step (a token straddling the boundary
    # goes with it); a span is at least its first token
    last = _token_at(ends, end) if end < ends[-1] else len(pieces)
    return WrongSpan(first, max(last, first + 1), check.first_wrong)
