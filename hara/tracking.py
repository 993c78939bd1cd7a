"""MLflow tracking: one MLflow run per training run, shared with the evaluation stage through ``mlflow_run.json``.

The training stage opens (or, on resume, reopens) the run and writes ``<run dir>/mlflow_run.json`` =
``{"tracking_uri", "run_id", "experiment_id"}``; later stages call :func:`open_run` on the same folder and log into
the same run (e.g. ``eval/<benchmark>/pass_at_1``). Everything goes through an explicit ``MlflowClient`` with the
config's tracking URI (never MLflow's global default, which writes ``sqlite:///mlflow.db`` wherever it runs).

MLflow metric names may only contain alphanumerics, ``_ - . : /`` and spaces: ``pass@1`` is rejected, so
:func:`metric_name` spells ``@`` as ``_at_`` (``eval/math500/pass@1`` -> ``eval/math500/pass_at_1``).
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["RUN_FILE", "MlflowRun", "absolute_uri", "metric_name", "open_run", "run_name", "start_run"]

RUN_FILE = "mlflow_run.json"


def metric_name(name: str) -> str:
    """A valid MLflow metric or param name for ``name`` ('@' -> '_at_', other invalid characters -> '_')."""
    return re.sub(r"[^A-Za-z0-9_\-.:/ ]", "_", name.replace("@", "_at_"))


def run_name(size: str, rlvr: str, method: str, seed: int) -> str:
    """The run name, built from the same fields as the run's folder (results/train/<size>/<rlvr>/<method>/seed<k>)."""
    return f"{size}-{rlvr}-{method}-seed{seed}"


def absolute_uri(uri: str) -> str:
    """``sqlite:///relative.db`` made absolute (relative to the cwd now), so that a later stage started from another
    folder finds the same database; other URIs are returned unchanged."""
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return "sqlite:///" + str(Path(uri[len("sqlite:///"):]).resolve())
    return uri


def _ensure_sqlite_folder(uri: str) -> None:
    """sqlite:///relative/path.db needs its folder to exist before MLflow opens it."""
    if uri.startswith("sqlite:///"):
        Path(uri[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)


def _migrate_sqlite_store_once(uri: str) -> None:
    """Create and migrate a sqlite store under an exclusive file lock.

    MLflow creates and migrates a new sqlite store on first use; two processes doing that at the same moment fail
    with "table _alembic_tmp_experiments already exists". The lock (``<db>.lock`` beside the database) makes the
    first opener migrate while the others wait; afterwards it costs one uncontended lock and one query.
    """
    import fcntl

    from mlflow.tracking import MlflowClient

    database = Path(uri[len("sqlite:///"):])
    with open(database.with_name(database.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            MlflowClient(tracking_uri=uri).search_experiments(max_results=1)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _client(uri: str):
    from mlflow.tracking import MlflowClient

    _ensure_sqlite_folder(uri)
    if uri.startswith("sqlite:///"):
        _migrate_sqlite_store_once(uri)
    return MlflowClient(tracking_uri=uri)


@dataclass
class MlflowRun:
    """A handle on one MLflow run: log metrics per step, params, tags, and close it."""

    tracking_uri: str
    run_id: str
    experiment_id: str

    def __post_init__(self) -> None:
        self.client = _client(self.tracking_uri)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """Log finite numeric metrics at ``step`` in one batch (non-finite values are skipped, not sent)."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(metric_name(k), float(v), now, step) for k, v in metrics.items()
                 if isinstance(v, (int, float)) and math.isfinite(float(v))]
        if batch:
            self.client.log_batch(self.run_id, metrics=batch)

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Log params once (a param already logged with the same value is skipped; MLflow forbids changing one)."""
        from mlflow.entities import Param

        logged = self.client.get_run(self.run_id).data.params
        new = [Param(metric_name(k), str(v)[:6000]) for k, v in params.items() if metric_name(k) not in logged]
        if new:
            self.client.log_batch(self.run_id, params=new)

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        for key, value in tags.items():
            self.client.set_tag(self.run_id, metric_name(key), str(value))

    def finish(self, status: str = "FINISHED") -> None:
        self.client.set_terminated(self.run_id, status=status)

    def save(self, out_dir: str | Path) -> Path:
        """Write ``mlflow_run.json`` into ``out_dir``."""
        path = Path(out_dir) / RUN_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"tracking_uri": self.tracking_uri, "run_id": self.run_id,
                                    "experiment_id": self.experiment_id}, indent=2) + "\n", encoding="utf-8")
        return path


def open_run(out_dir: str | Path) -> MlflowRun | None:
    """The run recorded in ``out_dir/mlflow_run.json`` (None if there is none), marked RUNNING again."""
    path = Path(out_dir) / RUN_FILE
    if not path.is_file():
        return None
    info = json.loads(path.read_text(encoding="utf-8"))
    run = MlflowRun(info["tracking_uri"], info["run_id"], info["experiment_id"])
    run.client.update_run(run.run_id, status="RUNNING")
    return run


def _experiment_id(client: Any, name: str, uri: str) -> str:
    """Id of experiment ``name``, created with its artifacts next to a sqlite database (not in the cwd)."""
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    location = None
    if uri.startswith("sqlite:///"):
        location = (Path(uri[len("sqlite:///"):]).resolve().parent / "mlartifacts" / name).as_uri()
    from mlflow.exceptions import MlflowException

    try:  # the kind tag opens the MLflow UI on its training-runs view (MLflow 3 guesses "GenAI" when it is empty)
        return client.create_experiment(name, artifact_location=location,
                                        tags={"mlflow.experimentKind": "custom_model_development"})
    except MlflowException as error:  # another job created it between our lookup and our create
        if error.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
        return client.get_experiment_by_name(name).experiment_id


def start_run(tracking_uri: str, experiment: str, name: str, out_dir: str | Path, tags: Mapping[str, Any],
              params: Mapping[str, Any]) -> tuple[MlflowRun, bool]:
    """Reopen the run recorded in ``out_dir`` or create a new one; returns (run, resumed).

    The run id is written to ``out_dir/mlflow_run.json`` before anything else is logged, so a crash at any later
    point resumes into the same run.
    """
    existing = open_run(out_dir)
    if existing is not None:
        return existing, True
    tracking_uri = absolute_uri(tracking_uri)
    client = _client(tracking_uri)
    experiment_id = _experiment_id(client, experiment, tracking_uri)
    created = client.create_run(experiment_id, run_name=name, tags={metric_name(k): str(v) for k, v in tags.items()})
    run = MlflowRun(tracking_uri, created.info.run_id, experiment_id)
    run.save(out_dir)
    run.log_params(params)
    return run, False
