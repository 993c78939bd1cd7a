"""Logging evaluation scores into the MLflow run of the training run that produced the checkpoint.

The training stage writes ``mlflow_run.json`` (:mod:`hara.tracking`: the run and its store) into the run folder (the
checkpoint's folder or its parent). Scores go into that same run, so a run's curves and its benchmark scores
sit side by side in the MLflow UI.

MLflow 3.17 accepts only alphanumerics, ``_ - . : /`` and spaces in metric names: ``eval/math500/pass@1`` is
rejected, so the MLflow key spells ``@`` as ``_at_`` (``eval/math500/pass_at_1``, ``.../pass_at_1_stderr``); the
result JSON keeps lighteval's ``pass@1``.

The benchmarks are also logged as the run's dataset inputs (:func:`benchmark_inputs`): the runs table's Dataset
column then names each benchmark with a digest of its content, so two runs scored on different problems are told
apart at a glance.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path

from hara.layout import RUN_FILE  # the file the training stage writes, read in hara.tracking
from hara.tracking import read_run_file

__all__ = ["RUN_FILE", "benchmark_inputs", "find_run_file", "log_benchmark_inputs", "log_scores", "mlflow_key"]

#: Characters of the benchmark's sha256 kept as the MLflow dataset digest: MLflow's stores cap a digest at 36, and the
#: UI prints it beside the name in every Dataset cell (MLflow's own digests are 8). The source keeps the full hash.
DIGEST_CHARS = 16


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


def benchmark_sha256(name: str, entry: Mapping) -> str:
    """The benchmark content hash of a scores.json benchmark entry (its evaluation fingerprint's, else the older
    ``dataset_fingerprint``); an entry with neither is an error naming the benchmark."""
    sha = entry.get("eval_fingerprint", {}).get("benchmark_sha256") or entry.get("dataset_fingerprint")
    if not sha:
        raise ValueError(
            f"benchmark {name}: no eval_fingerprint.benchmark_sha256 or dataset_fingerprint in its "
            "scores (evaluated by an older hara; evaluate again)"
        )
    return sha


def benchmark_inputs(benchmarks: Mapping[str, Mapping]) -> list:
    """MLflow dataset inputs (context ``eval``) for scores.json's ``benchmarks`` entries: name = benchmark, digest =
    the start of its content hash, source = the full hash, profile = its number of problems when known."""
    from mlflow.entities import Dataset, DatasetInput, InputTag

    inputs = []
    for name, entry in benchmarks.items():
        sha = benchmark_sha256(name, entry)
        profile = json.dumps({"num_rows": entry["n_problems"]}) if "n_problems" in entry else None
        dataset = Dataset(
            name=name,
            digest=sha[:DIGEST_CHARS],
            source_type="code",
            source=json.dumps({"tags": {"benchmark": name, "benchmark_sha256": sha}}),
            profile=profile,
        )
        inputs.append(DatasetInput(dataset, tags=[InputTag("mlflow.data.context", "eval")]))
    return inputs


def log_benchmark_inputs(client, run_id: str, benchmarks: Mapping[str, Mapping]) -> None:
    """Log the benchmarks as dataset inputs of the run (MLflow keeps one input per dataset and run: logging them
    again, e.g. from `hara report`, adds nothing)."""
    inputs = benchmark_inputs(benchmarks)
    if not inputs:
        return
    from mlflow.exceptions import MlflowException

    try:
        client.log_inputs(run_id, datasets=inputs)
    except MlflowException as error:
        # MLflow's SQL store checks for a dataset, then inserts it: two evaluate jobs logging the same benchmark at
        # once make the second insert fail its unique constraint (seen: sqlite3.IntegrityError from a tracking
        # server under a loaded CI box). The dataset exists by then, so once more links it.
        if "IntegrityError" not in str(error):
            raise
        client.log_inputs(run_id, datasets=inputs)


def log_scores(
    checkpoint: str | Path,
    scores: Mapping[str, Mapping[str, float]],
    step: int = 0,
    benchmarks: Mapping[str, Mapping] | None = None,
) -> dict | None:
    """Log ``{benchmark: {metric: value}}`` into the checkpoint's training run, and ``benchmarks`` (the result's
    entries, as in scores.json) as its dataset inputs; returns the run reference or None.

    Uses an explicit client (:func:`hara.tracking.tracking_client`, bounded HTTP retries): no global MLflow state
    and no default sqlite file in the working directory. A store that refuses the scores (a tracking server stopped
    since training) is a :class:`~hara.tracking.TrackingError` naming it and the run file.
    """
    path = find_run_file(checkpoint)
    if path is None:
        return None
    run = read_run_file(path)
    from mlflow.entities import Metric
    from mlflow.exceptions import MlflowException

    from hara.tracking import TrackingError, tracking_client

    now = int(time.time() * 1000)
    metrics = [
        Metric(mlflow_key(benchmark, metric), float(value), now, step)
        for benchmark, values in scores.items()
        for metric, value in values.items()
    ]
    try:
        client = tracking_client(run["tracking_uri"])
        client.log_batch(run["run_id"], metrics=metrics)
        log_benchmark_inputs(client, run["run_id"], benchmarks or {})
    except MlflowException as error:
        reason = " ".join(str(error).split())[:300]
        raise TrackingError(
            f"{path}: the MLflow run {run['run_id']} at {run['tracking_uri']} did not take the scores ({reason})"
        ) from None
    return {**run, "run_file": str(path)}
