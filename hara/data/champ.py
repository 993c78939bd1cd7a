"""Real competition problems from champ-dataset (CHAMP, MIT licence), mapped to the canonical problem record.

champ-dataset 1.0.0 ships its data inside the wheel (``champ_dataset/dataset_files/v0.json``, 73 MB), so it works
offline: ``champ_dataset.load("v0")`` returns a ``Dataset`` whose ``problems`` dict holds 270 problems (Number-Theory
80, Inequality 50, Polynomial 50, Sequence 50, Combinatorics 40). Each ``Problem`` has ``identifier``, ``text``,
``answer`` (free text), ``category`` and ``solution.steps[i].text``.

Answers are free text (``"239"``, ``"2^(n-1)"``, ``"C(10, 5), or equivalently 252"``, ``"5/14, or approximately
35.7%"``, ``"No"``), so only those whose answer is a number or a simple expression are kept: the answer, or one of its
``", or equivalently ..."`` alternatives, must consist of digits, one-letter variables and arithmetic
(``+ - * / ^ ( ) !``), must parse to a sympy expression with math-verify, and its LaTeX form (``2^{n-1}`` for
``2^(n-1)``) must score 1.0 against it with :func:`hara.boxed_answer.math_reward`. Approximate alternatives are never
used as gold answers.
"""

from __future__ import annotations

import re

from hara.data.io import DataError

__all__ = ["CHAMP_VERSION", "latex_exponents", "load_champ", "simple_answer"]

CHAMP_VERSION = "v0"
_SIMPLE = re.compile(r"^[0-9a-z+\-*/^().! ]+$")  # digits, variables, arithmetic; no commas, words or upper case
_EXACT_PREFIXES = ("equivalently", "an equivalent form such as", "equivalently,")


def _candidates(answer: str) -> list[str]:
    """The answer and its exact alternatives (``"X, or equivalently Y"`` -> X, Y), approximations dropped."""
    parts = [part.strip() for part in answer.split(", or ")]
    out = [parts[0]]
    for part in parts[1:]:
        for prefix in sorted(_EXACT_PREFIXES, key=len, reverse=True):
            if part.startswith(prefix):
                out.append(part[len(prefix) :].strip())
                break
    return out


def _is_simple(text: str) -> bool:
    """Digits, one-letter variables and arithmetic only (``floor``, ``sum_``, ``C(n, k)``, "No" are not)."""
    return bool(text) and _SIMPLE.match(text) is not None and re.search(r"[a-z]{2,}", text) is None


def latex_exponents(text: str) -> str:
    """``2^(n-1)`` -> ``2^{n-1}``: how a model writes the answer in LaTeX (``^`` binds one token in LaTeX)."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("^(", i):
            depth, j = 0, i + 1
            for j in range(i + 1, len(text)):
                depth += {"(": 1, ")": -1}.get(text[j], 0)
                if depth == 0:
                    break
            out.append("^{" + latex_exponents(text[i + 2 : j]) + "}")
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _parses(answer: str) -> bool:
    """math-verify parses the answer to a sympy expression, and the reward gives 1.0 to the answer written in LaTeX
    (``\\boxed{2^{n-1}}`` for gold ``2^(n-1)``)."""
    import sympy
    from math_verify import parse

    from hara.boxed_answer import PARSING_TIMEOUT_S, math_reward  # the scoring rule that will grade the answer

    # The scoring rule's alarm, not math-verify's 3 s default: the alarm counts wall time, and the first parse of a
    # process builds the LaTeX parser, so on a loaded machine a simple answer timed out and its problem was dropped
    # (the data then depended on the load).
    parsed = parse(f"${answer}$", extraction_mode="first_match", parsing_timeout=PARSING_TIMEOUT_S)
    if not parsed or not isinstance(parsed[0], sympy.Basic):
        return False
    return math_reward(f"\\boxed{{{latex_exponents(answer)}}}", answer) == 1.0


def simple_answer(answer: str) -> str | None:
    """The first exact form of a CHAMP answer that is a number or simple expression math-verify handles, or None."""
    return next((c for c in _candidates(answer) if _is_simple(c) and _parses(c)), None)


def _load_problems(version: str) -> dict:
    """The ``problems`` dict of champ-dataset, or a DataError saying how to get the package."""
    try:
        import champ_dataset
    except ImportError:
        raise DataError("champ-dataset is not installed: pip install champ-dataset==1.0.0") from None
    try:
        return champ_dataset.load(version).problems
    except (OSError, ValueError, KeyError, AssertionError) as err:
        raise DataError(f"champ-dataset could not load its {version!r} data files: {err}") from None


def load_champ(numeric_only: bool = False, version: str = CHAMP_VERSION) -> list[dict]:
    """CHAMP problems with a number or simple-expression answer, as canonical records sorted by id.

    Args:
        numeric_only: keep only answers without variables (e.g. for the tiny models' benchmarks).
        version: champ-dataset data file name.

    Raises:
        DataError: champ-dataset missing or its data unreadable.
    """
    records = []
    for identifier, problem in sorted(_load_problems(version).items()):
        answer = simple_answer(problem.answer or "")
        if answer is None or (numeric_only and re.search(r"[a-z]", answer)):
            continue
        records.append(
            {
                "id": f"champ:{identifier}",
                "problem": problem.text.strip(),
                "solution": " ".join(step.text.strip() for step in problem.solution.steps),
                "answer": answer,
                "skill": problem.category,
                "level": None,
                "source": f"champ:{version}",
            }
        )
    return records
