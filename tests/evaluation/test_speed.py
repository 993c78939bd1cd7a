"""The speed endpoint's scores (config report.speed, hara/evaluation/speed.py): every candidate checkpoint scored per
problem on the speed benchmark, on the engine its validation loads and through the same cache; the same seeded
sample of problems for every run; the data stage draws the benchmark and keeps it out of training."""

from __future__ import annotations

import json

import pytest

from hara.config import ConfigError
from hara.data.embedded import TRAIN
from hara.data.pipeline import data_benchmarks, selection_datasets
from hara.evaluation.speed import SpeedCurve, sample_problems
from tests.evaluation.eval_helpers import smoke_config
from tests.evaluation.test_selection import SELECTION, run_selection, write_run_and_data

SPEED = ("report.speed.benchmark=mini_math500", "report.speed.problems=5")


def test_the_sample_is_seeded_in_the_benchmarks_order_and_all_without_a_cap():
    records = [{"id": f"p{i}"} for i in range(20)]
    sample = sample_problems(records, 6, "speed:0:x")
    assert len(sample) == 6 and sample == sample_problems(records, 6, "speed:0:x")
    assert [r["id"] for r in sample] == sorted((r["id"] for r in sample), key=lambda i: int(i[1:]))
    assert sample != sample_problems(records, 6, "speed:1:x")  # another config seed, another sample
    assert sample_problems(records, None, "s") == sample_problems(records, 99, "s") == records


def test_every_candidate_is_scored_per_problem_on_one_engine_and_cached(tmp_path):
    config = smoke_config(*SELECTION, *SPEED, f"results_dir={tmp_path / 'results'}")
    run, data, datasets = write_run_and_data(tmp_path, config)
    speed = SpeedCurve.from_config(config, data)
    assert (len(speed.records), speed.available) == (5, 8)
    problems = [row["problem"] for row in speed.records]
    knows = {"step-1": set(problems[:1]), "step-3": set(problems[:3]), "final": set(problems)}
    final_scores = tmp_path / "final_scores.json"
    final_scores.write_text(json.dumps({"benchmarks": {}, "checkpoint": "final"}))
    calls: list = []
    selection, _, curve = run_selection(config, run, data, datasets, knows, calls, final_scores)
    assert calls == ["step-1", "step-3", "final"]  # one engine per candidate for its validation and its speed
    assert (curve["benchmark"], curve["problems"], curve["available"]) == ("mini_math500", 5, 8)
    assert [c["step"] for c in curve["candidates"]] == [c["step"] for c in selection["candidates"]] == [1, 3, 4]
    assert [c["pass_at_1"] for c in curve["candidates"]] == [0.2, 0.6, 1.0]
    ids = [row["id"] for row in speed.records]
    assert list(curve["candidates"][1]["problems"]) == ids
    assert list(curve["candidates"][1]["problems"].values()) == [1.0, 1.0, 1.0, 0.0, 0.0]
    assert not any(c["cached"] for c in curve["candidates"])

    calls.clear()  # again: every score from the cache, no engine loaded
    _, _, again = run_selection(config, run, data, datasets, knows, calls, final_scores)
    assert calls == [] and all(c["cached"] for c in again["candidates"])
    assert [c["problems"] for c in again["candidates"]] == [c["problems"] for c in curve["candidates"]]

    fewer = smoke_config(*SELECTION, "report.speed.benchmark=mini_math500", "report.speed.problems=3")
    fewer["results_dir"] = config["results_dir"]
    _, _, other = run_selection(fewer, run, data, datasets, knows, calls, final_scores)
    assert calls == ["step-1", "step-3", "final"]  # other problems: scored anew, validation from the cache
    chosen = set(other["candidates"][0]["problems"])
    assert other["problems"] == len(chosen) == 3 and chosen <= {row["id"] for row in datasets["mini_math500"]}


def test_without_report_speed_nothing_is_scored_and_the_data_is_as_before():
    config = smoke_config(*SELECTION)
    assert config["report"]["speed"] == {"benchmark": None, "problems": None}
    assert data_benchmarks(config) == config["data"]["benchmarks"]
    assert SpeedCurve.from_config(config, "/nonexistent") is None


def test_the_data_stage_draws_the_speed_benchmark_and_keeps_it_out_of_training():
    listed = ("data.benchmarks=[mini_minerva]",)
    config = smoke_config(*SELECTION, *listed, "report.speed.benchmark=mini_math500")
    datasets, without = selection_datasets(config), selection_datasets(smoke_config(*SELECTION, *listed))
    assert data_benchmarks(config) == ["mini_minerva", "mini_math500"]
    assert datasets["mini_minerva"] == without["mini_minerva"]  # the final benchmark does not move
    speed = {row["problem"] for row in datasets["mini_math500"]}
    assert speed and not speed & {row["problem"] for row in datasets[TRAIN]}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (("selection.enabled=false",), "report.speed.benchmark: needs selection.enabled"),
        (("report.speed.benchmark=math500",), "report.speed.benchmark: 'math500' is not a benchmark of source"),
    ],
)
def test_a_speed_benchmark_without_candidates_or_of_another_source_is_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        smoke_config("report.speed.benchmark=mini_math500", *overrides)


@pytest.mark.parametrize(
    ("speed", "flags", "message"),
    [
        ("report.speed.benchmark=mini_math500", [], "report.speed.benchmark is set: --speed-out is needed"),
        ("report.speed.benchmark=null", ["--speed-out", "s.json"], "--speed-out: report.speed.benchmark is null"),
    ],
)
def test_hara_evaluate_needs_speed_out_exactly_with_a_speed_benchmark(
    tmp_path, capsys, monkeypatch, speed, flags, message
):
    from hara.cli import main
    from hara.evaluation import models

    config = smoke_config(*SELECTION, f"results_dir={tmp_path / 'results'}")
    run, data, _ = write_run_and_data(tmp_path, config)
    monkeypatch.setitem(models.ENGINES, "transformers", lambda cfg: pytest.fail("an engine was built"))
    sets = [arg for value in (*SELECTION, speed) for arg in ("--set", value)]
    args = ["evaluate", "--config", "config/smoke.yaml", *sets, "--benchmark", "mini_math500", "--backend"]
    args += ["transformers", "--checkpoint", str(run / "final"), "--data", str(data), "--no-mlflow"]
    args += ["--out", str(tmp_path / "scores.json"), "--selection-out", str(tmp_path / "selection.json")]
    args += ["--selected-scores-out", str(tmp_path / "selected.json"), *flags]
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "scores.json").exists()


def test_the_plan_counts_each_candidate_s_speed_scores():
    from hara.planning.cost import selection_tokens

    base = smoke_config(*SELECTION)
    settings = base["evaluation"]
    per_problem = settings["n"] * settings["max_new_tokens"]
    for cap, scored in ((5, 5), (None, 8), (99, 8)):  # the smoke benchmarks have 8 problems
        speed = smoke_config(
            *SELECTION, "report.speed.benchmark=mini_math500", f"report.speed.problems={cap or 'null'}"
        )
        assert selection_tokens(speed) - selection_tokens(base) == 3 * scored * per_problem  # candidates 1, 3, 4


def test_hara_evaluate_writes_speed_json_beside_the_selection_in_one_process(tmp_path, monkeypatch):
    """The workflow's evaluate job with report.speed: final/'s engine serves its test benchmark, its validation and
    its speed scores; each other candidate loads one engine for both of its scores."""
    from hara.cli import main
    from hara.data.format import prompt_format
    from hara.evaluation import models
    from tests.evaluation.test_selection import KnowsEngine

    overrides = (*SELECTION, *SPEED, f"results_dir={tmp_path / 'results'}")
    config = smoke_config(*overrides)
    run, data, datasets = write_run_and_data(tmp_path, config)
    problems = [row["problem"] for row in SpeedCurve.from_config(config, data).records]
    knows = {"step-1": set(problems[:2]), "step-3": set(problems[:4]), "final": set(problems)}
    answers = {row["problem"]: row["answer"] for rows in datasets.values() for row in rows}
    calls: list = []
    monkeypatch.setattr(KnowsEngine, "live", set())
    engine = lambda cfg: KnowsEngine(cfg.checkpoint, knows, answers, prompt_format(config).template, calls)
    monkeypatch.setitem(models.ENGINES, "transformers", engine)
    out = tmp_path / "eval"
    args = ["evaluate", "--config", "config/smoke.yaml", *[a for o in overrides for a in ("--set", o)]]
    args += ["--backend", "transformers", "--checkpoint", str(run / "final"), "--benchmark", "mini_minerva"]
    args += ["--data", str(data), "--out", str(out / "scores.json"), "--no-mlflow"]
    args += ["--selection-out", str(out / "selection.json"), "--selected-scores-out", str(out / "selected.json")]
    assert main([*args, "--speed-out", str(out / "speed.json")]) == 0
    assert calls == ["final", "step-1", "step-3"] and not KnowsEngine.live  # final/ selected: no more
    speed = json.loads((out / "speed.json").read_text(encoding="utf-8"))
    assert [(c["step"], c["pass_at_1"]) for c in speed["candidates"]] == [(1, 0.4), (3, 0.8), (4, 1.0)]
    assert (out / "selection.json").is_file()
