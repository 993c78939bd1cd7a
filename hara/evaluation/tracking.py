"""Logging evaluation scores into the MLflow run of the training run that produced the checkpoint.

The training stage writes ``mlflow_run.json`` = ``{"tracking_uri", "run_id", "experiment_id"}`` into the run folder
(the checkpoint's folder or its parent). Scores go into that same run, so a run's curves and its benchmark scores
sit side by side in the MLflow UI.

MLflow 3.17 accepts only alphanumerics, ``_ - . : /`` and spaces in metric names: ``eval/math500/pass@1`` is
rejected, so the MLflow key spells ``@`` as ``_at_`` (``eval/math500/pass_at_1``, ``.../pass_at_1_stderr``); the
result JSON keeps lighteval's ``pass@1``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

__all__ = ["RUN_FILE", "find_run_file", "log_scores", "mlflow_key"]

RUN_FILE = "mlflow_run.json"
RUN_KEYS = ("tracking_uri", "run_id")


def find_run_file(checkpoint: str | Path) -> Path | None:
    """``mlflow_run.json`` in the checkpoint folder or its parent, or None."""
    folder = Path(checkpoint).resolve()
    for candidate in (folder / RUN_FILE, folder.parent / RUN_FILE):
        if candidate.is_file():
            return candidate
    return None


def mlflow_key(benchmark: str, metric: str) -> str:
    """MLflow metric key of a benchmark score (``@`` is not a valid MLflow name character)."""
    return f"eval/{benchmark}/{metric.replace('@', '_at_')}"


def read_run(path: Path) -> dict:
    """The run reference; a file without tracking_uri / run_id is a user error naming the file."""
    try:
        run = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: invalid JSON ({err.msg})") from None
    missing = [key for key in RUN_KEYS if not (isinstance(run, dict) and run.get(key))]
    if missing:
        raise ValueError(f"{path}: missing {', '.join(missing)}")
    return run


def log_scores(checkpoint: str | Path, scores: Mapping[str, Mapping[str, float]], step: int = 0) -> dict | None:
    """Log ``{benchmark: {metric: value}}`` into the checkpoint's training run; returns the run reference or None.

    Uses an explicit ``MlflowClient(tracking_uri)``: no global MLflow state and no default sqlite file in the
    working directory.
    """
    path = find_run_file(checkpoint)
    if path is None:
        return None
    run = read_run(path)
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=run["tracking_uri"])
    for benchmark, metrics in scores.items():
        for metric, value in metrics.items():
            client.log_metric(run["run_id"], mlflow_key(benchmark, metric), float(value), step=step)
    return {**run, "run_file": str(path)}
