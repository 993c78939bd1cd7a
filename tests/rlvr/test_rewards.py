"""The math-verify reward: hand-written cases, garbage input, worker threads, and the synthetic data's own format."""

import random
import time
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction

import pytest
from math_verify import parse

from hara import boxed_answer as reward
from hara.boxed_answer import last_boxed, math_reward, too_costly
from hara.data.format import format_completion
from hara.data.synthetic import format_number, generate_problems
from hara.rlvr.rewards import accuracy_reward

HAND_CASES = [
    (r"so \boxed{1/2}", "0.5", 1.0),
    (r"so \boxed{0.6}", "0.5", 0.0),
    ("the answer is 1/2", "1/2", 0.0),  # no box, no reward
    (r"\boxed{\frac{1}{2}}", "1/2", 1.0),
    (r"\boxed{\dfrac{7}{4}}", "7/4", 1.0),
    (r"\boxed{1.75}", "7/4", 1.0),
    (r"\boxed{-3}", "-3", 1.0),
    (r"\boxed{3}", "-3", 0.0),
    (r"\boxed{-3}", "3", 0.0),
    (r"\boxed{-\frac{7}{4}}", "-7/4", 1.0),
    (r"\boxed{x = 5}", "5", 1.0),
    (r"first \boxed{2}, finally \boxed{3}.", "3", 1.0),  # the last box counts
    (r"first \boxed{2}, finally \boxed{3}.", "2", 0.0),
    (r"\boxed{7/4} and then \boxed{2", "7/4", 1.0),  # a cut-off last box does not count
    (r"\boxed{2^{n-1}}", "2^(n-1)", 1.0),
    (r"\boxed{42}", 42, 1.0),  # numeric gold columns (AMC stores floats)
    (r"\boxed{27}", 27.0, 1.0),
    (r"\boxed{\frac{\sqrt{3}}{3}}", "\\frac{1}{\\sqrt{3}}", 1.0),
]

GARBAGE = [
    None,
    42,
    "",
    "\\boxed",
    "\\boxed{",
    "\\boxed{}",
    "\\boxed{}}}}",
    "}{\\boxed{{{",
    "\\boxed{\\frac{}{}}",
    "\\boxed{\\frac{1}{0}}",
    "\\boxed{@#%&*}",
    "\\boxed{" + "x" * 5000 + "}",
    "\\boxed{9^{9^{9^{9}}}}",
    "\\boxed{9!!!!}",
    "\\boxed{10^{10}!}",
    "\\boxed{((((((((}",
    "\x00\uffff\\boxed{\ud7ff}",
    "\\boxed{\\begin{pmatrix}",
]


@pytest.fixture(scope="module", autouse=True)
def _stop_helper_process():
    yield
    reward._SANDBOX.close()  # leave no helper process behind


@pytest.mark.parametrize(("completion", "gold", "expected"), HAND_CASES)
def test_hand_written_cases(completion, gold, expected):
    assert math_reward(completion, gold) == expected


def test_last_boxed():
    assert last_boxed(r"a \boxed{1} b \boxed{\frac{1}{2}} c") == r"\frac{1}{2}"
    assert last_boxed(r"\boxed {x^{2}}") == "x^{2}"
    assert last_boxed(r"\boxed{5} \boxed{6") == "5"
    assert last_boxed("no box") is None


def test_garbage_scores_zero_quickly():
    start = time.perf_counter()
    for completion in GARBAGE:
        assert math_reward(completion, "1") == 0.0
    assert math_reward(r"\boxed{1}", None) == 0.0
    assert math_reward(r"\boxed{1}", "") == 0.0
    assert time.perf_counter() - start < 20


def test_too_costly():
    for answer in ("9^{9^{9}}", "9^9^9", "2^(3^(4^5))", "2^{123456}", "123456!", "9!!", "(9!)!", "\\binom{9999}{5}"):
        assert too_costly(answer), answer
    for answer in ("x^2 + y^2", "x^2y^3", "(2^3)^2", "2^{n-1}", "10!", "\\frac{2^{10}}{3}", "\\binom{10}{3}"):
        assert not too_costly(answer), answer


def test_worker_threads_agree_with_the_main_thread():
    cases = HAND_CASES + [(g, "1", 0.0) for g in GARBAGE]
    main = [math_reward(c, g) for c, g, _ in cases]
    with ThreadPoolExecutor(max_workers=2) as pool:
        threaded = list(pool.map(lambda case: math_reward(case[0], case[1]), cases))
    assert threaded == main
    assert threaded[: len(HAND_CASES)] == [expected for _, _, expected in HAND_CASES]


def test_a_repeated_answer_is_parsed_once(monkeypatch):
    """The rollouts of a group often box the same answer: the second time, no math-verify parse (before: two
    parses per call, every call)."""
    calls = []
    monkeypatch.setattr(reward, "parse", lambda *args, **kwargs: calls.append(args) or parse(*args, **kwargs))
    reward._clear_memos()  # fresh memos
    scores = [math_reward(completion, "7/4") for completion in (r"\boxed{1.75}", r"so \boxed{1.75}.", r"\boxed{2}")]
    assert scores == [1.0, 1.0, 0.0] and len(calls) == 3  # gold and answer for 1.75, then the answer 2


def test_a_gold_is_parsed_once_for_all_its_answers(monkeypatch):
    """A problem's gold is checked against every distinct answer of its rollouts: parsed the first time only
    (before: once per distinct answer), with the same scores as parsing it each time."""
    calls = []
    monkeypatch.setattr(reward, "parse", lambda *args, **kwargs: calls.append(args[0]) or parse(*args, **kwargs))
    reward._clear_memos()
    answers = [r"\boxed{1.75}", r"\boxed{\frac{7}{4}}", r"\boxed{2}", r"\boxed{7/4}", r"\boxed{x}"]
    assert [math_reward(answer, "7/4") for answer in answers] == [1.0, 1.0, 0.0, 1.0, 0.0]
    assert calls.count("$7/4$") == 1 and len(calls) == 1 + len(answers)


def test_hung_helper_is_killed_and_replaced():
    # the helper started (it imports sympy and math-verify: seconds, more in a loaded suite) outside the timed call,
    # so the time bound below is on the hang being cut off, not on an import
    assert reward._SANDBOX.score("2", "2") == 1.0
    start = time.perf_counter()
    assert reward._SANDBOX.score("9!!!!", "1", timeout_s=0.5) == 0.0  # sympy would grind on this for seconds
    assert time.perf_counter() - start < 10
    with ThreadPoolExecutor(max_workers=1) as pool:
        assert pool.submit(math_reward, r"\boxed{0.5}", "1/2").result() == 1.0


def test_accuracy_reward_trl_signature():
    completions = [r"\boxed{1}", [{"role": "assistant", "content": r"so \boxed{\frac{1}{2}}"}], r"\boxed{3}", None]
    answers = ["1", "0.5", "4", "1"]
    assert accuracy_reward(completions, answers, prompts=["p"] * 4, trainer_state=None) == [1.0, 1.0, 0.0, 0.0]
    with pytest.raises(ValueError):
        accuracy_reward([r"\boxed{1}"], ["1", "2"])


def _perturbed(answer: str) -> str:
    """A different exact answer of the same form."""
    return format_number(Fraction(answer) + 1)


def test_synthetic_records_score_one_in_their_own_format_and_zero_when_perturbed():
    records = generate_problems(300, seed=2024)
    rng = random.Random(0)
    for record in records:
        assert math_reward(format_completion(record["solution"], record["answer"]), record["answer"]) == 1.0, record
        wrong = _perturbed(record["answer"])
        assert math_reward(format_completion(record["solution"], wrong), record["answer"]) == 0.0, record
        if rng.random() < 0.1:  # a decimal of a fraction is also right (math-verify compares values)
            value = Fraction(record["answer"])
            if value.denominator in (1, 2, 4, 5, 8):
                assert math_reward(rf"\boxed{{{float(value)}}}", record["answer"]) == 1.0, record
