"""Must-show 1: a stand-in that boxes every gold answer scores 1.0 on each registered task, a wrong one 0.0.

Hub fixtures are written in each dataset's own schema (conftest.HUB_ROWS) and read through the tasks; the oracle's
answers are written by hand per row (never taken from the mapped records), and the mini benchmarks' answers come
from the data stage (hara.data.pipeline), so a task that loaded, mapped or prompted differently would score < 1.
"""

from __future__ import annotations

import pytest

from hara.data.embedded import BENCHMARKS as MINI
from hara.data.format import format_prompt
from hara.data.pipeline import build_config_datasets
from hara.evaluation.runner import evaluate_checkpoint
from tests.evaluation.eval_helpers import (
    HUB_IDS,
    HUB_ROWS,
    WRONG,
    StandInEngine,
    hub_config,
    smoke_config,
    write_hub_fixtures,
)

N = 3


def hub_answers(name: str) -> dict[str, str]:
    """prompt -> the hand-written correct answer of each fixture row."""
    problem_key = "problem" if "problem" in HUB_ROWS[name][0][0] else "question"
    return {format_prompt(row[problem_key]): answer for row, answer in HUB_ROWS[name]}


def mini_config(*overrides: str) -> dict:
    """The smoke config with every mini benchmark listed (only the listed ones are drawn), in_distribution at the
    smoke size."""
    return smoke_config(f"data.benchmarks=[{', '.join(MINI)}]", "data.benchmark_sizes={in_distribution: 8}", *overrides)


def mini_answers(config: dict, name: str) -> dict[str, str]:
    """prompt -> gold answer of a mini benchmark, as the data stage generates it."""
    return {format_prompt(r["problem"]): r["answer"] for r in build_config_datasets(config)[name]}


def run(config, checkpoint, name, answers, cache_dir):
    """Evaluate a stand-in answering ``answers[prompt]``. Each stand-in gets its own prediction cache: they share
    the same fake checkpoint files, and the cache rightly treats the same files + settings as the same model."""
    result = evaluate_checkpoint(
        config, checkpoint, [name], cache_dir=cache_dir, engine_factory=lambda cfg: StandInEngine(answers)
    )
    return result["benchmarks"][name]


def oracle(table: dict[str, str]) -> dict[str, list[str]]:
    return {prompt: [f" Some work. The answer is \\boxed{{{answer}}}."] for prompt, answer in table.items()}


def wrong(table: dict[str, str]) -> dict[str, list[str]]:
    # The gold answer appears unboxed: only the boxed (wrong) one may count.
    return {prompt: [f" It might be {answer}, but the answer is {WRONG}."] for prompt, answer in table.items()}


@pytest.fixture(scope="module")
def hub_root(tmp_path_factory):
    return write_hub_fixtures(tmp_path_factory.mktemp("hub"))


@pytest.mark.parametrize("name", list(HUB_IDS))
def test_hub_task_oracle_scores_one_and_wrong_scores_zero(name, hub_root, fake_checkpoint, tmp_path):
    config = hub_config(hub_root, n=N)
    table = hub_answers(name)
    right = run(config, fake_checkpoint, name, oracle(table), tmp_path / "right")
    assert right["n_problems"] == len(HUB_ROWS[name])
    assert right["score"] == 1.0, [(p["gold"], p["pass@1"]) for p in right["predictions"]]
    assert all(len(p["completions"]) == N for p in right["predictions"])
    assert run(config, fake_checkpoint, name, wrong(table), tmp_path / "wrong")["score"] == 0.0


@pytest.mark.parametrize("name", list(MINI))
def test_mini_task_oracle_scores_one_and_wrong_scores_zero(name, fake_checkpoint, tmp_path):
    config = mini_config(f"evaluation.n={N}")
    table = mini_answers(config, name)
    right = run(config, fake_checkpoint, name, oracle(table), tmp_path / "right")
    assert right["n_problems"] == config["data"]["benchmark_size"] == len(table)
    assert right["score"] == 1.0
    assert run(config, fake_checkpoint, name, wrong(table), tmp_path / "wrong")["score"] == 0.0


def test_mini_records_from_a_data_folder_equal_the_generated_ones(tmp_path):
    """`--data` (a `hara data` folder) and in-memory generation give the same problems in the same order."""
    from hara.data.pipeline import write_config_datasets
    from hara.evaluation.tasks import benchmark_records

    config = mini_config()
    write_config_datasets(config, tmp_path)
    for name in MINI:
        from_folder, generated = benchmark_records(config, name, tmp_path), benchmark_records(config, name)
        assert [(r["id"], r["answer"]) for r in from_folder] == [(r["id"], r["answer"]) for r in generated]


def test_hub_records_from_a_data_folder_equal_the_fetched_ones(tmp_path):
    """The workflow evaluates with `--data results/data` (the canonical records prepare_data wrote): for the hub
    source too, that folder gives the same problems as the fetched hub folders (it was read as the hub root before,
    and stopped with 'results/data/HuggingFaceH4/MATH-500: not a directory')."""
    import json

    from hara.data.pipeline import write_config_datasets
    from hara.evaluation.tasks import benchmark_records

    root = write_hub_fixtures(tmp_path / "hub")
    train = root / "hiyouga" / "math12k" / "train.jsonl"
    train.parent.mkdir(parents=True)
    train.write_text(json.dumps({"problem": "What is $1+1$?", "answer": "2"}) + "\n", encoding="utf-8")
    config = hub_config(root, n=N)
    write_config_datasets(config, tmp_path / "data")
    for name in config["data"]["benchmarks"]:
        assert benchmark_records(config, name, tmp_path / "data") == benchmark_records(config, name), name
