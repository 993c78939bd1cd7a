"""`hara report` writes each training run's summary into its MLflow run (sqlite store, no server): the average
pass@1, the paired difference from the baseline exactly as comparisons.json has it, the verdict, the benchmarks as
dataset inputs, a description, and the experiment's saved views of the runs table."""

from __future__ import annotations

import json
import statistics

import pytest
from mlflow.tracking import MlflowClient

from hara.config import load_config
from hara.report import comparisons
from hara.report.mlflow_runs import (
    AVERAGE,
    NOTE_HEADER,
    log_run_summaries,
    saved_views,
)
from hara.results.collect import Cell, Run
from hara.tracking import run_name, start_run
from hara.tracking.ui import VIEW_BY_METHOD, VIEW_PER_RUN
from tests.helpers import REPO

NOTE = "mlflow.note.content"


def grid_runs(config: dict) -> dict[Cell, Run]:
    """The smoke grid's two cells, scored on every benchmark with per-problem pass@1 and equal fingerprints."""
    benchmarks, runs = config["data"]["benchmarks"], {}
    for offset, method in enumerate(config["grid"]["methods"]):
        cell = Cell("tiny-s", "grpo", method, 0)
        problems = {b: {str(i): float((i + offset) % 3 == 0) for i in range(12)} for b in benchmarks}
        fingerprints = {
            b: {"benchmark_sha256": f"{i:02d}" * 32, "backend": "transformers"} for i, b in enumerate(benchmarks)
        }
        runs[cell] = Run(
            cell, [], {b: statistics.fmean(p.values()) for b, p in problems.items()}, problems, fingerprints
        )
    return runs


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    """Training runs in an sqlite store (as `hara train` opens them), then the report's summaries. Shared by the
    module's tests: the two that change a description change the baseline's, and each sets it up first."""
    config, tmp_path = load_config(REPO / "config" / "smoke.yaml"), tmp_path_factory.mktemp("summaries")
    uri, runs = f"sqlite:///{tmp_path}/mlflow.db", grid_runs(config)
    ids = {}
    for cell in runs:
        run, _ = start_run(
            uri,
            config["name"],
            run_name(cell.size, cell.rlvr, cell.method, cell.seed),
            tmp_path / "train" / cell.path(),
            {"stage": "train", "method": cell.method},
            {},
        )
        run.finish()
        ids[cell.method] = run.run_id
    found = comparisons(config, runs)
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "comparisons.json").write_text(json.dumps(found))
    done = log_run_summaries(config, tmp_path, runs, tmp_path / "report", "report-run-id")
    client = MlflowClient(tracking_uri=uri)
    return {
        "config": config,
        "runs": runs,
        "ids": ids,
        "comparisons": found,
        "done": done,
        "client": client,
        "tmp": tmp_path,
    }


def test_each_training_run_gets_its_average_and_its_difference_from_none(logged):
    client, ids, found = logged["client"], logged["ids"], logged["comparisons"]
    assert sorted(logged["done"]) == sorted(ids.values())
    versus = next(c for c in found if (c["a"], c["b"]) == ("hara_tok", "none"))["average"]
    for cell, run in logged["runs"].items():
        data = client.get_run(ids[cell.method]).data
        assert data.metrics[AVERAGE] == round(100 * statistics.fmean(run.scores.values()), 1)  # as the report shows
        if cell.method == "none":
            assert not any(key.startswith("vs_none/") for key in data.metrics)
            assert data.tags["vs_none.verdict"] == "baseline"
        else:  # exactly the report's numbers, in percentage points rounded as the report prints them
            assert (
                data.metrics["vs_none/avg_diff_pts"],
                data.metrics["vs_none/avg_ci_low_pts"],
                data.metrics["vs_none/avg_ci_high_pts"],
                data.metrics["vs_none/avg_mde_pts"],
            ) == tuple(
                round(100 * value, 1)
                for value in (versus["difference"], versus["ci_low"], versus["ci_high"], versus["corrected"]["mde"])
            )
            assert data.tags["vs_none.verdict"] == versus["corrected"]["verdict"]  # the verdict after correction
            assert data.tags["vs_none.low_power"] == str(versus["corrected"]["low_power"]).lower()
        assert client.get_run(ids[cell.method]).info.status == "FINISHED"  # the summary does not reopen the run


def test_benchmarks_are_the_runs_dataset_inputs(logged):
    config = logged["config"]
    inputs = logged["client"].get_run(logged["ids"]["hara_tok"]).inputs.dataset_inputs
    by_name = {i.dataset.name: i.dataset for i in inputs}
    assert sorted(by_name) == sorted(config["data"]["benchmarks"])
    first = config["data"]["benchmarks"][0]
    assert by_name[first].digest == "00" * 8 and json.loads(by_name[first].profile) == {"num_rows": 12}


def test_description_names_the_cell_and_links_the_report(logged):
    note = logged["client"].get_run(logged["ids"]["hara_tok"]).data.tags[NOTE]
    report = logged["tmp"].resolve() / "report" / "index.html"
    assert note.startswith(f"{NOTE_HEADER}: size `tiny-s`, RLVR `grpo`, method `hara_tok`, seed 0")
    assert f"`{report}`" in note
    assert "/runs/report-run-id/artifacts/report/index.html?workflowType=machine_learning" in note
    assert f"viewStateShareKey={VIEW_BY_METHOD[0]}&workflowType=machine_learning" in note
    assert "**vs none**:" in note and "**Average pass@1**" in note


def test_a_description_written_by_a_person_is_kept(logged):
    client, run_id = logged["client"], logged["ids"]["none"]
    client.set_tag(run_id, NOTE, "my notes on this run")
    log_run_summaries(logged["config"], logged["tmp"], logged["runs"], logged["tmp"] / "report", "report-run-id")
    assert client.get_run(run_id).data.tags[NOTE] == "my notes on this run"


def test_experiment_holds_the_saved_views_of_the_scores(logged):
    client = logged["client"]
    tags = client.get_experiment_by_name(logged["config"]["name"]).tags
    for key, name in (VIEW_PER_RUN, VIEW_BY_METHOD):
        envelope = json.loads(tags[f"mlflow.sharedViewState.{key}"])
        state = json.loads(envelope["state"])
        assert envelope["name"] == name and isinstance(envelope["createdAt"], int)
        assert state["selectedColumns"][:6] == [
            f"metrics.`{AVERAGE}`",
            "metrics.`vs_none/avg_diff_pts`",
            "metrics.`vs_none/avg_ci_low_pts`",
            "metrics.`vs_none/avg_ci_high_pts`",
            "metrics.`vs_none/avg_mde_pts`",
            "tags.`vs_none.verdict`",
        ]
        assert state["searchFilter"] == "tags.stage = 'train'" and state["orderByKey"] == f"metrics.`{AVERAGE}`"
        assert ("groupBy" in state) == (key == VIEW_BY_METHOD[0])


def test_without_mlflow_nothing_is_logged_and_a_run_missing_a_benchmark_has_no_average(logged):
    config, runs = logged["config"], logged["runs"]
    assert log_run_summaries(config, logged["tmp"], runs, logged["tmp"] / "report", None) == []
    cell = next(iter(runs))
    partial = {cell: Run(cell, [], {config["data"]["benchmarks"][0]: 0.5})}
    client, run_id = logged["client"], logged["ids"][cell.method]
    client.delete_tag(run_id, NOTE)
    log_run_summaries(config, logged["tmp"], partial, logged["tmp"] / "report", "report-run-id")
    assert "n/a (not scored on every benchmark" in client.get_run(run_id).data.tags[NOTE]


def test_the_baseline_columns_come_first():
    found = [{"b": "hara_seq"}, {"b": "none"}]
    state = json.loads(json.loads(saved_views(found, 0)[f"mlflow.sharedViewState.{VIEW_PER_RUN[0]}"])["state"])
    assert [c for c in state["selectedColumns"] if c.startswith("tags")] == [
        "tags.`vs_none.verdict`",
        "tags.`vs_hara_seq.verdict`",
    ]


def test_hara_ui_prints_the_link_that_opens_the_runs_table_in_the_scores_view(logged, capsys):
    """`hara ui --print-link` on the config's store: the experiment's runs table, in the saved view, in training
    mode (MLflow 3.17's UI lands on its GenAI overview otherwise); a store without the experiment: one line."""
    from hara.cli import main
    from hara.tracking.ui import ui_command

    config = logged["config"]
    uri = f"sqlite:///{logged['tmp']}/mlflow.db"
    experiment = logged["client"].get_experiment_by_name(config["name"]).experiment_id
    argv = [
        "ui",
        "--config",
        str(REPO / "config" / "smoke.yaml"),
        "--set",
        f"tracking.mlflow_uri={uri}",
        "--port",
        "5123",
        "--print-link",
    ]
    assert main(argv) == 0
    link = capsys.readouterr().out.strip().split(": ", 1)[1]
    assert link == (
        f"http://127.0.0.1:5123/#/experiments/{experiment}/runs?viewStateShareKey={VIEW_PER_RUN[0]}"
        "&workflowType=machine_learning"
    )
    assert ui_command(uri, "127.0.0.1", 5123)[:4] == ["mlflow", "server", "--backend-store-uri", uri]
    assert main([*argv[:4], f"tracking.mlflow_uri=sqlite:///{logged['tmp']}/absent.db", "--print-link"]) == 2
    assert "no such database" in capsys.readouterr().err


def test_checkpoint_candidates_are_logged_models_and_the_training_data_dataset_inputs(tmp_path):
    """The selection's candidates as external logged models (validation score linked to the validation dataset,
    the selected one's test scores to each benchmark), the training data as dataset inputs; a second report adds
    no model."""
    from hara.report.mlflow_runs import log_run_summaries

    config, uri = load_config(REPO / "config" / "smoke.yaml"), f"sqlite:///{tmp_path}/mlflow.db"
    runs = grid_runs(config)
    cell = next(c for c in runs if c.method == "hara_tok")
    runs[cell].selection = {
        "selected_step": 2,
        "final_step": 4,
        "candidates": [
            {"step": 2, "checkpoint": "c/step-2", "fingerprint": "aa", "validation_pass_at_1": 0.5},
            {"step": 4, "checkpoint": "c/final", "fingerprint": "bb", "validation_pass_at_1": 0.25},
        ],
    }
    runs[cell].selected_problems = runs[cell].problems
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "manifest.json").write_text(
        json.dumps(
            {
                "train": "train.jsonl",
                "validation": "v.jsonl",
                "files": {
                    "train.jsonl": {"count": 90, "sha256": "11" * 32},
                    "v.jsonl": {"count": 12, "sha256": "22" * 32},
                },
            }
        )
    )
    (tmp_path / "rl_prompts" / "tiny-s").mkdir(parents=True)
    (tmp_path / "rl_prompts" / "tiny-s" / "prompts.jsonl").write_text('{"p": 1}\n{"p": 2}\n')
    for each in runs:
        run, _ = start_run(
            uri,
            config["name"],
            run_name(each.size, each.rlvr, each.method, each.seed),
            tmp_path / "train" / each.path(),
            {"stage": "train", "method": each.method},
            {},
        )
        run.finish()
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "comparisons.json").write_text(json.dumps(comparisons(config, runs)))
    for _ in range(2):
        log_run_summaries(config, tmp_path, runs, tmp_path / "report", "report-run-id")
    client = MlflowClient(tracking_uri=uri)
    run_id = json.loads((tmp_path / "train" / cell.path() / "mlflow_run.json").read_text())["run_id"]
    experiment = client.get_run(run_id).info.experiment_id
    models = {m.name: m for m in client.search_logged_models([experiment])}
    assert sorted(models) == ["tiny-s-grpo-hara_tok-seed0-step2", "tiny-s-grpo-hara_tok-seed0-step4"]  # once each
    selected = models["tiny-s-grpo-hara_tok-seed0-step2"]
    assert selected.tags["hara.selected"] == "true" and selected.params["checkpoint"] == "c/step-2"
    linked = {(m.key, m.dataset_name) for m in selected.metrics}
    assert ("eval/validation/pass_at_1", "validation") in linked
    assert {(f"eval/{b}/pass_at_1", b) for b in config["data"]["benchmarks"]} <= linked
    from hara.report.mlflow_models import model_name  # a hub size has a dot, which MLflow refuses in a model name

    dotted = model_name("qwen3-1.7b-grpo-none-seed0", 2)
    assert (
        dotted == "qwen3-1_7b-grpo-none-seed0-step2" and client.create_logged_model(experiment, dotted).name == dotted
    )
    inputs = {i.dataset.name: i for i in client.get_run(run_id).inputs.dataset_inputs}
    assert {"train", "validation", "rl_prompts/tiny-s"} <= set(inputs)
    assert json.loads(inputs["rl_prompts/tiny-s"].dataset.profile) == {"num_rows": 2}
