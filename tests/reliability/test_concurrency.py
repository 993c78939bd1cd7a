"""Eight processes open runs and log per-step metrics into one tracking store at the same moment (a sqlite file and a
real `mlflow server`): every run and every metric point arrives. The test prints the counts it expected and found."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.reliability.servers import mlflow_server, run_together

WORKERS, STEPS, METRICS = 8, 25, 4
EXPERIMENT = "concurrency"
pytestmark = pytest.mark.slow

# One training run's worth of tracking, through the harness's own hara.tracking: create (or find) the experiment,
# open a run, then -- once every worker is ready -- log STEPS steps of METRICS metrics each and finish.
WORKER = """
import sys, time
from pathlib import Path
from mlflow.tracking import MlflowClient  # imported before "ready": the race below is the logging, not imports
from hara.tracking import start_run
uri, index, root, steps, metrics = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
(root / f"ready{index}").touch()
while not (root / "go").exists():
    time.sleep(0.01)
run, _ = start_run(uri, "concurrency", f"worker-{index}", root / f"run{index}", {"worker": index}, {"index": index})
for step in range(1, steps + 1):
    run.log_metrics({f"train/m{j}": index * 1000 + step * 10 + j for j in range(metrics)}, step=step)
run.finish()
"""


def log_from_eight_processes(uri: str, root: Path) -> None:
    run_together(
        [[sys.executable, "-c", WORKER, uri, str(i), str(root), str(STEPS), str(METRICS)] for i in range(WORKERS)], root
    )


def count_arrivals(uri: str) -> tuple[int, int, list[str]]:
    """(runs found, metric points found, problems) in the experiment, checking every value."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(EXPERIMENT)
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    points, problems = 0, []
    for run in runs:
        index = int(run.data.params["index"])
        if run.info.status != "FINISHED":
            problems.append(f"{run.info.run_name}: {run.info.status}")
        for j in range(METRICS):
            history = client.get_metric_history(run.info.run_id, f"train/m{j}")
            points += len(history)
            found = sorted((m.step, m.value) for m in history)
            if found != [(s, index * 1000 + s * 10 + j) for s in range(1, STEPS + 1)]:
                problems.append(f"{run.info.run_name} train/m{j}: {found}")
    return len(runs), points, problems


def assert_nothing_lost(uri: str, root: Path, store: str) -> None:
    log_from_eight_processes(uri, root)
    runs, points, problems = count_arrivals(uri)
    print(
        f"{store}: runs expected {WORKERS} found {runs}; metric points expected {WORKERS * STEPS * METRICS} "
        f"found {points}; lost {WORKERS * STEPS * METRICS - points}"
    )
    assert (runs, points, problems) == (WORKERS, WORKERS * STEPS * METRICS, [])


def test_eight_processes_into_one_sqlite_file(tmp_path):
    assert_nothing_lost(f"sqlite:///{tmp_path}/mlflow.db", tmp_path, "sqlite")


def test_eight_processes_into_one_tracking_server(tmp_path):
    (tmp_path / "server").mkdir()
    with mlflow_server(tmp_path / "server") as uri:
        assert_nothing_lost(uri, tmp_path, "server")
