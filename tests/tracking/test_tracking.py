"""MLflow tracking: one run per training run, reopened by id from mlflow_run.json, with every step's metrics."""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from hara.cli import main
from hara.evaluation.tracking import DIGEST_CHARS, log_scores
from hara.tracking import EXPERIMENT_KIND, RUN_FILE, metric_name, open_run, run_name, start_run, ui_path
from tests.helpers import smoke_train_args


def test_metric_names_are_valid_for_mlflow():
    assert metric_name("eval/math500/pass@1") == "eval/math500/pass_at_1"
    assert metric_name("hara/w_std") == "hara/w_std"
    assert metric_name("a b:c-d.e/f") == "a b:c-d.e/f"
    assert metric_name("x[0]") == "x_0_"


def test_run_is_created_once_and_reopened_by_id(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # relative, and the folder does not exist yet; saved absolute so other stages find it from any folder
    name = run_name("tiny-s", "grpo", "hara_tok", 1)
    run, resumed = start_run(
        "sqlite:///db/mlflow.db",
        "exp",
        name,
        tmp_path / "out",
        tags={"size": "tiny-s", "method": "hara_tok"},
        params={"hara.alpha": 0.5},
    )
    assert not resumed
    uri = f"sqlite:///{tmp_path.resolve()}/db/mlflow.db"
    saved = json.loads((tmp_path / "out" / RUN_FILE).read_text())
    assert saved == {"tracking_uri": uri, "run_id": run.run_id, "experiment_id": run.experiment_id}
    run.log_metrics({"train/reward": 0.25, "hara/bad": math.nan, "eval/x/pass@1": 0.5}, step=1)
    run.finish()

    again, resumed = start_run(uri, "exp", "ignored", tmp_path / "out", tags={}, params={"hara.alpha": 0.5})
    assert resumed and again.run_id == run.run_id
    client = MlflowClient(tracking_uri=uri)
    data = client.get_run(run.run_id)
    assert data.info.status == "RUNNING" and data.info.run_name == "tiny-s-grpo-hara_tok-seed1"
    assert data.data.tags["method"] == "hara_tok" and data.data.params == {"hara.alpha": "0.5"}
    assert data.data.metrics == {"train/reward": 0.25, "eval/x/pass_at_1": 0.5}  # NaN not sent
    assert open_run(tmp_path / "elsewhere") is None


def test_a_run_folder_copied_without_its_store_goes_on_in_the_configs_store(tmp_path, capsys):
    """A run folder copied alone (a crashed run moved to resume elsewhere) names a store that did not come with it:
    the resumed run is a new run in the config's store, with a warning, and the store it names is never written."""
    source = tmp_path / "source"
    run, _ = start_run(f"sqlite:///{source}/mlflow.db", "exp", "r", source / "run", tags={}, params={})
    run.finish()
    before = (source / "mlflow.db").read_bytes()
    shutil.copytree(source / "run", tmp_path / "copy" / "run")
    uri = f"sqlite:///{tmp_path}/copy/mlflow.db"
    again, resumed = start_run(uri, "exp", "r", tmp_path / "copy" / "run", tags={}, params={})
    assert not resumed and again.tracking_uri == uri and again.run_id != run.run_id
    assert "MLflow store" in capsys.readouterr().err
    assert (source / "mlflow.db").read_bytes() == before
    assert open_run(tmp_path / "copy" / "run").run_id == again.run_id  # its mlflow_run.json now names the new run


def test_experiment_artifacts_live_next_to_the_database(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    run, _ = start_run(uri, "exp", "r", tmp_path / "out", tags={}, params={})
    location = MlflowClient(tracking_uri=uri).get_experiment(run.experiment_id).artifact_location
    assert location.startswith((tmp_path / "mlartifacts").as_uri())


def test_experiments_are_marked_as_model_training_and_old_ones_get_the_mark(tmp_path):
    """MLflow's UI reads the kind tag (custom_model_development: the runs table, not the GenAI overview)."""
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    run, _ = start_run(uri, "new", "r", tmp_path / "a", tags={}, params={})
    client = MlflowClient(tracking_uri=uri)
    assert client.get_experiment(run.experiment_id).tags[EXPERIMENT_KIND[0]] == "custom_model_development"
    old = client.create_experiment("old")  # made before hara marked its experiments
    chosen = client.create_experiment("chosen", tags={EXPERIMENT_KIND[0]: "finetuning"})  # a kind a person set
    for name, folder in (("old", "b"), ("chosen", "c")):
        start_run(uri, name, "r", tmp_path / folder, tags={}, params={})
    assert client.get_experiment(old).tags[EXPERIMENT_KIND[0]] == "custom_model_development"
    assert client.get_experiment(chosen).tags[EXPERIMENT_KIND[0]] == "finetuning"


def test_ui_links_open_the_training_mode_of_the_ui():
    assert ui_path("3") == "#/experiments/3/runs?workflowType=machine_learning"
    assert ui_path("3", "", "") == "#/experiments/3?workflowType=machine_learning"
    assert (
        ui_path("3", "runs", "viewStateShareKey=v")
        == "#/experiments/3/runs?viewStateShareKey=v&workflowType=machine_learning"
    )


def test_evaluation_logs_the_benchmarks_as_dataset_inputs_of_the_training_run(tmp_path):
    """The runs table's Dataset column: benchmark name and content digest; logging them twice adds nothing."""
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    run, _ = start_run(uri, "exp", "r", tmp_path / "run", tags={}, params={})
    sha = "ab" * 32
    entries = {
        "math500": {"eval_fingerprint": {"benchmark_sha256": sha}, "n_problems": 7},
        "aime24": {"dataset_fingerprint": "cd" * 32},
    }  # evaluated before fingerprints were recorded
    for _ in range(2):
        log_scores(tmp_path / "run" / "final", {"math500": {"pass@1": 0.5}}, benchmarks=entries)
    inputs = MlflowClient(tracking_uri=uri).get_run(run.run_id).inputs.dataset_inputs
    found = {i.dataset.name: i for i in inputs}
    assert sorted(found) == ["aime24", "math500"] and len(inputs) == 2
    math = found["math500"]
    assert math.dataset.digest == sha[:DIGEST_CHARS]
    assert json.loads(math.dataset.source)["tags"]["benchmark_sha256"] == sha  # the full hash, for a lookup
    assert json.loads(math.dataset.profile) == {"num_rows": 7}
    assert [(t.key, t.value) for t in math.tags] == [("mlflow.data.context", "eval")]
    with pytest.raises(ValueError, match="benchmark gsm8k: no eval_fingerprint"):
        log_scores(tmp_path / "run", {}, benchmarks={"gsm8k": {"score": 0.1}})


def test_hara_train_logs_every_step_with_filterable_tags(tmp_path):
    base = tmp_path / "base"
    from hara.models.tiny import build_tiny_model
    from hara.models.tokenizer import build_tokenizer

    tokenizer = build_tokenizer("char")
    build_tiny_model("tiny-s", tokenizer, seed=0).save_pretrained(base)
    tokenizer.save_pretrained(base)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    out = tmp_path / "run"
    assert (
        main(
            [
                *smoke_train_args("hara_seq", 2, "dr_grpo"),
                "--out",
                str(out),
                "--base-model",
                str(base),
                "--set",
                f"tracking.mlflow_uri={uri}",
                "--set",
                "data.train_size=20",
                "--set",
                "training.save_steps=100",
            ]
        )
        == 0
    )
    saved = json.loads((out / RUN_FILE).read_text())
    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(saved["run_id"])
    assert run.info.status == "FINISHED" and run.info.run_name == "tiny-s-dr_grpo-hara_seq-seed2"
    tags = run.data.tags
    assert (tags["size"], tags["rlvr"], tags["method"], tags["seed"]) == ("tiny-s", "dr_grpo", "hara_seq", "2")
    assert tags["hara.barycenter_size"] == "4"  # the smoke config's HarA knob
    assert run.data.params["rlvr.loss_type"] == "dr_grpo" and run.data.params["rlvr.scale_rewards"] == "none"
    for key in (
        "train/reward",
        "train/entropy",
        "train/response_length",
        "train/clip_fraction",
        "hara/w_std",
        "time/step_s",
        "time/hara_s",
    ):
        assert [m.step for m in client.get_metric_history(run.info.run_id, key)] == [1, 2], key


def _open_and_log(uri: str, index: int) -> str:
    """One process: open the (possibly brand-new) store, create a run, log a metric; return the run id."""
    from hara.tracking import tracking_client

    client = tracking_client(uri)
    run = client.create_run(client.create_experiment(f"concurrent-{index}"))
    client.log_metric(run.info.run_id, "train/reward", float(index), step=0)
    return run.info.run_id


def test_processes_opening_a_new_sqlite_store_at_once_all_succeed(tmp_path):
    """First use of a fresh sqlite store by several processes at once must not crash the migration."""
    import multiprocessing

    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        run_ids = pool.starmap(_open_and_log, [(uri, i) for i in range(4)])
    client = MlflowClient(tracking_uri=uri)
    assert len(set(run_ids)) == 4
    assert sorted(client.get_run(r).data.metrics["train/reward"] for r in run_ids) == [0.0, 1.0, 2.0, 3.0]


def tree(folder: Path) -> dict[str, tuple[str, int]]:
    """Every file below ``folder``: its content's sha256 and its modification time."""
    return {
        str(p.relative_to(folder)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_a_copied_results_folder_reads_and_writes_its_own_store(tmp_path):
    """Issue 52, item 7: `hara report --results <copy>` (the config still naming the source) logs the report run,
    its artifacts and every training run's summary into the copy's store; a later stage reopens the copy's runs.
    Nothing of the source folder (its store, its lock, its artifacts) changes."""
    from hara.layout import grid_cells, run_dir
    from hara.report.mlflow_runs import AVERAGE
    from tests.report.finished import smoke_argv, write_finished

    source, copy = tmp_path / "source" / "results", tmp_path / "copy" / "results"
    config = write_finished(source, mlflow=True)
    shutil.copytree(source, copy)
    before = tree(source)
    assert main(smoke_argv(source, "--results", str(copy))) == 0
    reopened = open_run(run_dir(copy, grid_cells(config)[0]))  # as a resumed training or an evaluation opens it
    reopened.finish()
    assert tree(source) == before
    uri = f"sqlite:///{copy.resolve()}/mlflow.db"
    assert reopened.tracking_uri == uri
    client = MlflowClient(tracking_uri=uri)
    runs = {
        r.info.run_name: r for r in client.search_runs([client.get_experiment_by_name(config["name"]).experiment_id])
    }
    assert (
        AVERAGE in runs["tiny-s-grpo-none-seed0"].data.metrics
        and AVERAGE in runs["tiny-s-grpo-hara_tok-seed0"].data.metrics
    )
    assert runs["report"].info.artifact_uri.startswith(copy.resolve().as_uri() + "/mlartifacts/")
    assert (copy / "mlartifacts").is_dir()
