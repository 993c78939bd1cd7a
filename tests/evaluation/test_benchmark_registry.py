"""The benchmark registry (hara/data/catalog.py): a benchmark declared in one place, here in this test module, is
fetched, validated in configs, loaded in its own schema, evaluated and shown in the report, with no other file edited.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from hara.config import ConfigError, validate_config
from hara.data.catalog import BENCHMARKS, Benchmark, get_benchmark, register_benchmark
from hara.data.format import format_prompt
from hara.data.hub import HubSchema
from hara.evaluation.fetch import fetch_plan
from hara.evaluation.runner import evaluate_checkpoint
from hara.layout import grid_cells
from hara.report.tables import main_table
from hara.results.collect import Run
from tests.evaluation.eval_helpers import StandInEngine, hub_config
from tests.helpers import fresh_registry

#: The toy benchmark: its own column names (q, a, uid) and split, as a hub dataset would have them.
TOY = Benchmark("toy_arith", "hub", "toy-org/arith", HubSchema("benchmark", "test", problem="q", answer="a", id="uid"))
ROWS = [{"q": "Compute 2+3.", "a": "5", "uid": "t1"}, {"q": "Compute 7*6.", "a": "42", "uid": "t2"}]


@pytest.fixture
def toy_registered(monkeypatch):
    """What a plug-in module's register_benchmark(TOY) does, undone afterwards."""
    fresh_registry(monkeypatch, BENCHMARKS)
    return register_benchmark(TOY)


def test_a_registered_benchmark_is_fetched_validated_evaluated_and_reported(toy_registered, tmp_path, fake_checkpoint):
    folder = tmp_path / "hub" / TOY.hub_id
    folder.mkdir(parents=True)
    (folder / "test.jsonl").write_text("".join(json.dumps(row) + "\n" for row in ROWS), encoding="utf-8")
    assert any(
        item.hub_id == TOY.hub_id and item.split == "test"
        for item in fetch_plan({"data": {"train_dataset": "hiyouga/math12k"}}, tmp_path / "out")
    )

    config = validate_config(
        {
            **hub_config(tmp_path / "hub", n=2),
            "data": {**hub_config(tmp_path / "hub")["data"], "benchmarks": [TOY.name]},
        },
        source="test",
    )  # a hub benchmark
    answers = {format_prompt(row["q"]): [f" So \\boxed{{{row['a']}}}."] for row in ROWS}
    result = evaluate_checkpoint(
        config,
        fake_checkpoint,
        [TOY.name],
        cache_dir=tmp_path / "cache",
        engine_factory=lambda cfg: StandInEngine(answers),
    )["benchmarks"][TOY.name]
    assert result["n_problems"] == 2 and result["score"] == 1.0
    assert sorted(p["id"] for p in result["predictions"]) == ["toy-org/arith:t1", "toy-org/arith:t2"]  # its ids

    runs = {cell: Run(cell, [], {TOY.name: 0.5}) for cell in grid_cells(config)}
    table = main_table(config, runs)
    assert TOY.name in table.header and all(row[2].startswith("50.0") for row in table.rows if row[1] != "base (no RL)")


def test_unknown_and_misdeclared_benchmarks_are_refused(toy_registered, tmp_path):
    config = {**hub_config(tmp_path), "data": {**hub_config(tmp_path)["data"], "benchmarks": ["toy_geometry"]}}
    with pytest.raises(ConfigError, match=r"data.benchmarks\[0\]: 'toy_geometry' is not a benchmark of source 'hub'"):
        validate_config(config, source="test")
    with pytest.raises(KeyError, match="toy_arith"):  # the valid names listed
        get_benchmark("toy_geometry")
    assert register_benchmark(TOY) is TOY  # the same declaration again (a module imported twice): a no-op
    with pytest.raises(ValueError, match="'toy_arith' is already registered"):
        register_benchmark(dataclasses.replace(TOY, problems=2))
    with pytest.raises(ValueError, match="hub_id 'toy-org/arith' is already registered"):  # one dataset, one benchmark
        register_benchmark(dataclasses.replace(TOY, name="toy_arith_again"))
    with pytest.raises(ValueError, match="needs a hub_id and a benchmark schema"):
        Benchmark("toy_train", "hub", "toy-org/train", HubSchema("train", "train", problem="q", answer="a"))
    with pytest.raises(ValueError, match="hub_id 'hiyouga/math12k' is a training set"):  # before: accepted
        Benchmark("math12k_test", "hub", "hiyouga/math12k", HubSchema("benchmark", "test", problem="q", answer="a"))


def test_the_planner_reads_each_benchmarks_size_from_its_declaration():
    """hara plan counted a hub benchmark's problems from a table of its own, which gave a benchmark missing there
    data.benchmark_size without a word; now the declaration holds the size and a missing one is an error."""
    config = {"data": {"benchmark_size": 8, "benchmark_sizes": {"mini_aime24": 5}}}
    hub_sizes = {"math500": 500, "aime24": 30, "amc23": 40, "minerva": 272, "olympiadbench": 674}
    assert {name: get_benchmark(name).size(config) for name in hub_sizes} == hub_sizes
    assert get_benchmark("mini_math500").size(config) == 8
    assert get_benchmark("mini_aime24").size(config) == 5  # data.benchmark_sizes
    assert get_benchmark("in_distribution").size(config) == 1000  # its own declared size
    with pytest.raises(ValueError, match="'toy_arith': its number of problems is not declared"):
        TOY.size(config)
