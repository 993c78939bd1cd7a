"""The project's one scoring rule (below data, models, evaluation and RL): the last ``\\boxed{...}`` of a completion
checked against the gold answer with math-verify.

``math_reward`` is the single scoring rule of the project (RL reward, warm-up check and evaluation agree on it):
1.0 when the boxed answer is mathematically equal to the gold answer (``\\boxed{1/2}``, ``\\boxed{0.5}`` and
``\\boxed{\\frac{1}{2}}`` all match gold ``"1/2"``), 0.0 otherwise, including when there is no complete boxed answer.
It never raises: completions are untrusted model output.

Thread safety. math-verify bounds parsing and comparison time with ``signal.alarm``, which only works in the main
thread. Newer math-verify (>= 0.8) accepts ``parsing_timeout=None`` / ``timeout_seconds=None`` to switch the alarm
off in worker threads, but the version pinned here (0.5.2, fixed by lighteval 0.13's latex2sympy2_extended==1.0.6 pin)
hands the None to ``signal.alarm``, gets a TypeError and silently fails every LaTeX parse and every comparison. And
with no alarm at all, a model that writes ``\\boxed{9!!!!}`` or ``\\boxed{9^{9^{9^9}}}`` would hang the trainer:
sympy evaluates such numbers eagerly and never returns. So:

- in the main thread the answer is scored in process, under math-verify's own alarms (PARSING_TIMEOUT_S per parse/compare);
- in any other thread it is scored by a helper process (``python -m hara.boxed_answer``, started on first use, one
  per process, calls serialized by a lock) whose main thread has working alarms; if the helper does not answer
  within :data:`SANDBOX_TIMEOUT_S` it is killed and restarted and the answer scores 0.

Both paths run the same :func:`math_reward`, so a score never depends on the calling thread. Answers that are
obviously too costly to evaluate (see :func:`too_costly`) score 0 without being parsed in either path.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import re
import select
import subprocess
import sys
import threading
import warnings
from pathlib import Path

from latex2sympy2_extended import NormalizationConfig
from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

__all__ = ["MAX_ANSWER_CHARS", "SANDBOX_TIMEOUT_S", "last_boxed", "math_reward", "too_costly"]

MAX_ANSWER_CHARS = 300  # longer boxed contents are not parsed (a final answer is short; parsing cost grows fast)
# math-verify's alarm per parse and per comparison. It is wall-clock time (signal.alarm), so on a loaded machine
# (the CI's 4 test workers on 2 cores beside Slurm jobs) a parse that takes 0.1-0.3 s idle was cut off at
# math-verify's default of 3 s and a right answer scored 0; 10 s keeps scores independent of load, and answers that
# could run unbounded are refused before parsing (too_costly).
PARSING_TIMEOUT_S = 10
SANDBOX_TIMEOUT_S = 35.0  # hard limit for one worker-thread answer: two parses and a comparison, with margin
SANDBOX_START_TIMEOUT_S = 120.0  # the helper imports sympy and math-verify before it is ready

# The completion side: only the boxed answer counts (no fallback to bare numbers elsewhere in the text), with the
# normalization TRL's accuracy_reward uses for model output.
_PRED_CONFIG = (
    LatexExtractionConfig(
        normalization_config=NormalizationConfig(
            nits=False, malformed_operators=False, basic_latex=True, equations=True, boxed="all", units=True
        ),
        boxed_match_priority=0,
        try_extract_without_anchor=False,
    ),
)
# The gold side: answers are short LaTeX or plain expressions ("7/4", "-3", "\\frac{1}{2}", "2^(n-1)").
_GOLD_CONFIG = (LatexExtractionConfig(), ExprExtractionConfig())

# Constructs sympy evaluates eagerly into astronomically large numbers: nested powers (a^b^c, a^{b^c}, a^(b^c)),
# exponents of 5+ digits, chained factorials and factorials of 5+ digit numbers or of powers and groups (9!!!,
# 10^{10}!, (9!)!), binomials of 4+ digit numbers. Sums and products of powers (x^2 + y^2, x^2y^3, (2^3)^2) pass.
_COSTLY = re.compile(
    r"\^\s*\w\s*\^|\^\s*\{[^{}]*\^|\^\s*\([^()]*\^"  # nested powers
    r"|\^\s*[{(]?\s*\d{5,}"  # huge exponents
    r"|\d{5,}\s*!|[})]\s*!|\^\s*\w\s*!|!\s*!"  # huge or chained factorials
    r"|\\[dt]?binom\s*\{?\s*\d{4,}|\d{4,}\s*\\choose"  # huge binomials
)


def last_boxed(text: str) -> str | None:
    """Content of the last complete ``\\boxed{...}`` in ``text`` (braces matched), or None.

    A final box cut off by the length limit does not count; the last *complete* box before it does.
    """
    end = len(text)
    while (start := text.rfind("\\boxed", 0, end)) >= 0:
        i = start + len("\\boxed")
        while i < len(text) and text[i] == " ":
            i += 1
        if i < len(text) and text[i] == "{":
            depth = 0
            for j in range(i, len(text)):
                depth += {"{": 1, "}": -1}.get(text[j], 0)
                if depth == 0:
                    return text[i + 1 : j]
        end = start
    return None


def too_costly(answer: str) -> bool:
    """True for boxed answers that are not parsed at all because evaluating them could run unbounded."""
    return len(answer) > MAX_ANSWER_CHARS or _COSTLY.search(answer) is not None


@functools.lru_cache(maxsize=2**16)
def _verify_in_process(answer: str, gold: str) -> float:
    """Score one boxed answer against one gold answer with math-verify; main thread only (uses SIGALRM).

    Memoised on (answer, gold): the score is a pure function of the two strings, and the same pair comes back often
    (the rollouts of a group agree, prompts return across steps; 32-43% of an evaluation's 4,000 pairs on the
    embedded default are repeats), while each math-verify parse costs milliseconds of sympy."""
    gold_parsed = _parsed_gold(gold)
    pred_parsed = parse(f"\\boxed{{{answer}}}", extraction_config=_PRED_CONFIG, parsing_timeout=PARSING_TIMEOUT_S)
    if not gold_parsed or not pred_parsed:
        return 0.0
    return 1.0 if verify(list(gold_parsed), pred_parsed, timeout_seconds=PARSING_TIMEOUT_S) else 0.0


_GOLD_PARSES: dict[str, tuple] = {}


def _parsed_gold(gold: str) -> tuple:
    """math-verify's parse of a gold answer, kept per gold string: a problem's gold is checked against every
    distinct answer its rollouts box (a training run scores thousands of distinct answers against a few hundred
    golds), and math-verify neither mutates a parse nor depends on anything but the string. An empty parse (a
    timeout under load) is not kept, so it cannot spread to the gold's later answers."""
    if (parsed := _GOLD_PARSES.get(gold)) is None:
        # Bare golds are wrapped in $...$ so that LaTeX ("\\frac{1}{2}") and plain ("7/4", "2^(n-1)") both parse.
        gold_text = gold if ("$" in gold or "\\boxed" in gold) else f"${gold}$"
        parsed = tuple(
            parse(
                gold_text,
                extraction_config=_GOLD_CONFIG,
                extraction_mode="first_match",
                parsing_timeout=PARSING_TIMEOUT_S,
            )
        )
        if parsed and len(_GOLD_PARSES) < 2**16:
            _GOLD_PARSES[gold] = parsed
    return parsed


def _clear_memos() -> None:
    """Forget both memos (scored pairs, parsed golds): a fresh process's scoring, for tests and benchmarks."""
    _verify_in_process.cache_clear()
    _GOLD_PARSES.clear()


class _Sandbox:
    """A helper process that scores answers in its own main thread, where math-verify's alarms work.

    One line of JSON ``[answer, gold]`` in, one line with the score out. A helper that does not answer in time is
    killed and replaced on the next call, so a pathological answer costs one timeout, never a hang.
    """

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()

    def _readline(self, timeout_s: float) -> str | None:
        """The helper's next output line, or None if it says nothing within ``timeout_s`` or has exited."""
        ready, _, _ = select.select([self._proc.stdout], [], [], timeout_s)
        return (self._proc.stdout.readline() or None) if ready else None

    def _start(self) -> None:
        """Start the helper and wait for its ``ready`` line."""
        env = dict(os.environ)
        # The helper must import this very package even when it was put on sys.path by hand (tests, notebooks).
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "hara.boxed_answer"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        if self._readline(SANDBOX_START_TIMEOUT_S) != "ready\n":
            self.close()
            # A silent 0.0 for every worker-thread answer would look like a model that never learns.
            warnings.warn(
                "math_reward: the math-verify helper process did not start; worker-thread answers score 0",
                RuntimeWarning,
                stacklevel=3,
            )
            raise RuntimeError("the math-verify helper process did not start")

    def score(self, answer: str, gold: str, timeout_s: float | None = None) -> float:
        """Score in the helper; 0.0 (and a restart next time) if it fails or exceeds ``timeout_s``."""
        with self._lock:
            try:
                if self._proc is None or self._proc.poll() is not None:
                    self._start()
                self._proc.stdin.write(json.dumps([answer, gold]) + "\n")
                self._proc.stdin.flush()
                line = self._readline(SANDBOX_TIMEOUT_S if timeout_s is None else timeout_s)
                if line is not None:
                    return float(line)
            except (OSError, ValueError, RuntimeError):
                pass
            self.close()
            return 0.0

    def close(self) -> None:
        """Stop the helper (it also exits by itself when this process closes its stdin)."""
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None


_SANDBOX = _Sandbox()
atexit.register(_SANDBOX.close)


def math_reward(completion: str, gold: str) -> float:
    """1.0 if the last boxed answer in ``completion`` equals ``gold`` per math-verify, else 0.0. Never raises.

    Safe to call from any thread (see the module docstring).
    """
    try:
        if not isinstance(completion, str) or gold is None:
            return 0.0
        gold = str(gold).strip()
        answer = last_boxed(completion)
        if not gold or answer is None or not answer.strip() or too_costly(answer):
            return 0.0
        if threading.current_thread() is threading.main_thread():
            return _verify_in_process(answer, gold)
        return _SANDBOX.score(answer, gold)
    except Exception:  # noqa: BLE001 - untrusted model output must never crash training
        return 0.0


def _serve() -> None:
    """Helper-process loop: read ``[answer, gold]`` lines from stdin, write scores to stdout, until EOF."""
    out = sys.stdout
    sys.stdout = sys.stderr  # math-verify prints parse errors; keep them off the protocol stream
    out.write("ready\n")
    out.flush()
    for line in sys.stdin:
        try:
            answer, gold = json.loads(line)
            score = _verify_in_process(str(answer), str(gold))
        except Exception:  # noqa: BLE001 - one bad request must not end the helper
            score = 0.0
        out.write(f"{score}\n")
        out.flush()


if __name__ == "__main__":
    _serve()
