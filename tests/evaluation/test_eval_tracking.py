"""Scores are logged into the checkpoint's MLflow training run (found through mlflow_run.json)."""

from __future__ import annotations

import json

import pytest

from hara.cli import main
from hara.data.format import format_prompt
from hara.data.pipeline import build_config_datasets
from hara.evaluation import models
from hara.evaluation.tracking import find_run_file, log_scores, mlflow_key
from tests.evaluation.eval_helpers import StandInEngine, smoke_config


def make_run(tmp_path) -> dict:
    """A training run in an sqlite MLflow store, like the training stage writes by default."""
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    experiment_id = client.create_experiment("hara-test")
    run = client.create_run(experiment_id)
    return {"tracking_uri": uri, "run_id": run.info.run_id, "experiment_id": experiment_id}


def history(run: dict, key: str) -> list[float]:
    from mlflow import MlflowClient

    return [m.value for m in MlflowClient(tracking_uri=run["tracking_uri"]).get_metric_history(run["run_id"], key)]


def test_mlflow_keys_are_valid_mlflow_names():
    from mlflow.exceptions import MlflowException
    from mlflow.utils.validation import _validate_metric_name

    with pytest.raises(MlflowException):
        _validate_metric_name("eval/math500/pass@1")  # why the key spells @ as _at_
    _validate_metric_name(mlflow_key("math500", "pass@1"))
    assert mlflow_key("math500", "pass@1") == "eval/math500/pass_at_1"


def test_run_file_is_found_in_the_checkpoint_or_its_parent(tmp_path):
    checkpoint = tmp_path / "run" / "checkpoint-10"
    checkpoint.mkdir(parents=True)
    assert find_run_file(checkpoint) is None
    (tmp_path / "run" / "mlflow_run.json").write_text("{}")
    assert find_run_file(checkpoint) == tmp_path / "run" / "mlflow_run.json"
    with pytest.raises(ValueError, match="missing tracking_uri, run_id"):
        log_scores(checkpoint, {"math500": {"pass@1": 0.5}})


def test_evaluate_logs_pass_at_1_and_stderr_into_the_training_run(tmp_path, fake_checkpoint, monkeypatch):
    run = make_run(tmp_path)
    (fake_checkpoint.parent / "mlflow_run.json").write_text(json.dumps(run))
    config = smoke_config()
    records = build_config_datasets(config)["mini_minerva"]
    table = {
        format_prompt(r["problem"]): [f"\\boxed{{{r['answer']}}}" if i % 2 else "no"] for i, r in enumerate(records)
    }
    monkeypatch.setitem(models.ENGINES, "transformers", lambda cfg: StandInEngine(table))
    out = tmp_path / "r.json"
    assert (
        main(
            [
                "evaluate",
                "--config",
                "config/smoke.yaml",
                "--checkpoint",
                str(fake_checkpoint),
                "--benchmark",
                "mini_minerva",
                "--out",
                str(out),
                "--cache-dir",
                str(tmp_path / "cache"),
            ]
        )
        == 0
    )
    result = json.loads(out.read_text())
    entry = result["benchmarks"]["mini_minerva"]
    assert result["mlflow_run"]["run_id"] == run["run_id"]
    assert history(run, "eval/mini_minerva/pass_at_1") == [pytest.approx(entry["score"])] and entry["score"] == 0.5
    assert history(run, "eval/mini_minerva/pass_at_1_stderr") == [pytest.approx(entry["stderr"])]


class SlowEngine(StandInEngine):
    """Generation that takes a while, as a real engine's does: long enough for the system metrics monitor."""

    def generate(self, prompts, n, sampling, stop=()):
        import time

        time.sleep(0.6)
        return super().generate(prompts, n, sampling, stop)


def test_evaluate_samples_system_metrics_into_the_training_run(tmp_path, fake_checkpoint, monkeypatch):
    """tracking.system_metrics covers the evaluate job too (GPU utilisation and memory on a GPU node): MLflow's
    monitor samples into the checkpoint's training run while it evaluates."""
    run = make_run(tmp_path)
    (fake_checkpoint.parent / "mlflow_run.json").write_text(json.dumps(run))
    records = build_config_datasets(smoke_config())["mini_minerva"]
    table = {format_prompt(r["problem"]): ["no"] for r in records}
    monkeypatch.setitem(models.ENGINES, "transformers", lambda cfg: SlowEngine(table))
    assert (
        main(
            [
                "evaluate",
                "--config",
                "config/smoke.yaml",
                "--checkpoint",
                str(fake_checkpoint),
                "--benchmark",
                "mini_minerva",
                "--out",
                str(tmp_path / "r.json"),
                "--cache-dir",
                str(tmp_path / "c"),
                "--set",
                "tracking.system_metrics.enabled=true",
                "--set",
                "tracking.system_metrics.interval_s=0.1",
            ]
        )
        == 0
    )
    assert history(run, "system/cpu_utilization_percentage"), "no system metrics sampled during the evaluation"


def test_an_unreachable_tracking_server_keeps_the_scores_and_names_the_store(
    tmp_path, fake_checkpoint, monkeypatch, capsys
):
    """The run's tracking server is gone (stopped after training): the evaluation's scores are written before MLflow
    is asked, the command fails in one line naming the store and the scores file, and MLflow's client retries a
    bounded number of times (its default back-off waited ~4 minutes before this) unless the user set their own."""
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    uri = f"http://127.0.0.1:{port}"
    (fake_checkpoint.parent / "mlflow_run.json").write_text(json.dumps({"tracking_uri": uri, "run_id": "0" * 32}))
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", raising=False)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "0")  # the test's own setting wins: no waiting here
    config = smoke_config()
    table = {format_prompt(r["problem"]): ["no"] for r in build_config_datasets(config)["mini_minerva"]}
    monkeypatch.setitem(models.ENGINES, "transformers", lambda cfg: StandInEngine(table))
    out = tmp_path / "r.json"
    code = main(
        [
            "evaluate",
            "--config",
            "config/smoke.yaml",
            "--checkpoint",
            str(fake_checkpoint),
            "--benchmark",
            "mini_minerva",
            "--out",
            str(out),
            "--cache-dir",
            str(tmp_path / "cache"),
        ]
    )
    error = capsys.readouterr().err
    assert code == 2 and uri in error and str(out) in error
    result = json.loads(out.read_text())
    assert result["benchmarks"]["mini_minerva"]["score"] == 0.0 and result["mlflow_run"] is None
    import os

    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "2"
    assert os.environ["MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR"] == "0"


def test_a_dataset_insert_lost_to_a_concurrent_job_is_logged_again():
    """Two evaluate jobs logging the same benchmark at once: MLflow's SQL store checks, then inserts, and the
    second insert fails its unique constraint (sqlite3.IntegrityError through the server, seen in a loaded suite).
    The dataset then exists: the inputs are logged once more; any other refusal still stops."""
    from mlflow.exceptions import MlflowException

    from hara.evaluation.tracking import log_benchmark_inputs

    class RacingClient:
        def __init__(self, message: str):
            self.calls, self.message = 0, message

        def log_inputs(self, run_id, datasets):
            self.calls += 1
            if self.calls == 1:
                raise MlflowException(self.message)

    entry = {"eval_fingerprint": {"benchmark_sha256": "ab" * 32}, "n_problems": 3}
    racing = RacingClient("BAD_REQUEST: (sqlite3.IntegrityError) UNIQUE constraint failed: datasets.dataset_uuid")
    log_benchmark_inputs(racing, "run", {"mini_math500": entry})
    assert racing.calls == 2
    with pytest.raises(MlflowException, match="RESOURCE_DOES_NOT_EXIST"):
        log_benchmark_inputs(RacingClient("RESOURCE_DOES_NOT_EXIST: no run"), "run", {"mini_math500": entry})
