"""The smoke DAG against a real `mlflow server` on 127.0.0.1, with one training job SIGKILLed mid-run:
`snakemake --rerun-incomplete` resumes it from its last checkpoint and the DAG completes; the server holds every run
of the grid with its metrics; headless Chromium shows them by name in the MLflow UI's experiment page and
run-comparison view (a screenshot of the comparison lands in results/ui/mlflow_compare.png)."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import time
import urllib.parse
from pathlib import Path

import pytest

from hara.config import load_config
from tests.reliability.servers import CHROMIUM, chromium, compared_metrics, mlflow_server, visible_text
from tests.workflow.conftest import BIN, REPO, SNAKEFILE, job_counts, snakemake

SMOKE = REPO / "config" / "smoke.yaml"
SCREENSHOT = REPO / "results" / "ui" / "mlflow_compare.png"
VICTIM = "hara_tok"  # the grid cell whose training job is killed
pytestmark = pytest.mark.slow

# Loaded into the training job through PYTHONPATH: once step 2 is logged (after checkpoint-1, before
# checkpoint-2), the job writes its pid and waits; the test then SIGKILLs it from outside, as a preemption would.
PAUSE_AT_STEP = """
import os, sys, time
victim = os.environ["HARA_TEST_VICTIM"] in sys.argv and not os.path.exists(os.environ["HARA_TEST_PIDFILE"])
if os.path.basename(sys.argv[0]) == "hara" and sys.argv[1:2] == ["train"] and victim:
    from hara.rlvr import train as _train
    _log = _train.MetricsCallback.on_log
    def on_log(self, args, state, control, logs=None, **kwargs):
        _log(self, args, state, control, logs=logs, **kwargs)
        if state.global_step == int(os.environ["HARA_TEST_PAUSE_AT_STEP"]):
            with open(os.environ["HARA_TEST_PIDFILE"] + ".tmp", "w") as handle:
                handle.write(str(os.getpid()))
            os.replace(os.environ["HARA_TEST_PIDFILE"] + ".tmp", os.environ["HARA_TEST_PIDFILE"])
            time.sleep(600)
    _train.MetricsCallback.on_log = on_log
"""


def snakemake_env(hooks: Path, pidfile: Path) -> dict[str, str]:
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "OMP_NUM_THREADS": "1",
            "PYTHONPATH": str(hooks), "HARA_TEST_VICTIM": VICTIM, "HARA_TEST_PIDFILE": str(pidfile),
            "HARA_TEST_PAUSE_AT_STEP": "2"}


def run_and_kill_one_training_job(workdir: Path, config_args: list[str]) -> tuple[int, str]:
    """Start the DAG, SIGKILL the victim's training job once it paused after step 2; Snakemake's exit code + log."""
    hooks, pidfile = workdir / "hooks", workdir / "victim.pid"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(PAUSE_AT_STEP, encoding="utf-8")
    cmd = [str(BIN / "snakemake"), "-s", str(SNAKEFILE), "--cores", "2", *config_args]
    with open(workdir / "first_run.log", "w", encoding="utf-8") as log:
        proc = subprocess.Popen(cmd, cwd=workdir, env=snakemake_env(hooks, pidfile), stdout=log,
                                stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 420
        while not pidfile.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert pidfile.exists(), f"the training job never reached step 2:\n{(workdir / 'first_run.log').read_text()}"
        os.kill(int(pidfile.read_text()), signal.SIGKILL)
        code = proc.wait(timeout=420)
    return code, (workdir / "first_run.log").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def server_dag(tmp_path_factory):
    """The smoke DAG on a fresh tracking server: killed once, then resumed with --rerun-incomplete."""
    root = tmp_path_factory.mktemp("server_dag")
    (root / "server").mkdir()
    workdir = root / "work"
    workdir.mkdir()
    with mlflow_server(root / "server") as uri:
        config_args = ["--configfile", str(SMOKE), "--config", f"tracking={json.dumps({'mlflow_uri': uri})}"]
        first_code, first_log = run_and_kill_one_training_job(workdir, config_args)
        config = load_config(SMOKE)
        trained = [m for m in config["grid"]["methods"] if (workdir / cell_dir(config, "train", m) / "final").is_dir()]
        second = snakemake(workdir, "--rerun-incomplete", *config_args)
        yield {"uri": uri, "workdir": workdir, "config": config, "first_code": first_code, "first_log": first_log,
               "second_log": second.stdout + second.stderr, "trained_in_first_run": trained}


def cell_dir(config: dict, stage: str, method: str) -> Path:
    return (Path(config["results_dir"]) / stage / config["models"]["sizes"][0] / config["grid"]["rlvr"][0] / method
            / f"seed{config['grid']['seeds'][0]}")


def train_runs(uri: str, config: dict) -> dict:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(config["name"])
    runs = client.search_runs([experiment.experiment_id], filter_string="tags.stage = 'train'")
    return {run.info.run_name: run for run in runs}, experiment, client


def test_killed_training_job_resumes_from_its_checkpoint_and_the_dag_completes(server_dag):
    config, workdir = server_dag["config"], server_dag["workdir"]
    first_log = server_dag["first_log"]
    assert server_dag["first_code"] != 0 and "Error in rule train" in first_log, first_log[-3000:]
    victim = workdir / cell_dir(config, "train", VICTIM)
    info = json.loads((victim / "run_info.json").read_text())
    assert info["resumed_from"].endswith("checkpoint-1"), info["resumed_from"]  # step 2 was lost, step 1 kept
    assert [json.loads(x)["step"] for x in (victim / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    counts = job_counts(server_dag["second_log"])
    # Only what did not finish trains again: the killed job, and a job Snakemake stopped when the kill failed the
    # run (with --cores 2 another training job may still be running then; under load it often is).
    trained = server_dag["trained_in_first_run"]
    assert VICTIM not in trained
    assert counts.get("train") == len(config["grid"]["methods"]) - len(trained) and counts.get("report") == 1, counts
    assert (workdir / config["results_dir"] / "report" / "index.html").is_file()
    for method in config["grid"]["methods"]:
        assert (workdir / cell_dir(config, "eval", method) / "scores.json").is_file()


def test_server_holds_every_run_with_its_metrics(server_dag):
    config = server_dag["config"]
    runs, _, client = train_runs(server_dag["uri"], config)
    benchmark = config["data"]["benchmarks"][0]
    for method in config["grid"]["methods"]:
        name = f"tiny-s-grpo-{method}-seed0"
        run = runs[name]
        assert run.info.status == "FINISHED", (name, run.info.status)
        assert f"eval/{benchmark}/pass_at_1" in run.data.metrics
        steps = sorted({m.step for m in client.get_metric_history(run.info.run_id, "train/loss")})
        assert steps == [1, 2], (name, steps)
    assert len(runs) == len(config["grid"]["methods"])  # the resumed job reused its run, it did not add one


def drawn_as(cell: str, value: float) -> bool:
    """The UI's cell is ``value`` at the precision it draws (MLflow rounds to a few decimals: 0.0071928 -> 0.007)."""
    decimals = len(cell.partition(".")[2]) if "e" not in cell.lower() else None
    half_step = 0.5 * 10.0 ** -decimals if decimals is not None else 0.0
    return math.isclose(float(cell), value, rel_tol=1e-3, abs_tol=1e-12) or abs(float(cell) - value) <= half_step


def test_mlflow_ui_lists_and_compares_the_grid_runs(server_dag):
    assert Path(CHROMIUM).exists(), "Debian's chromium is missing (.ci/run installs it: apt-get install chromium)"
    uri, config = server_dag["uri"], server_dag["config"]
    runs, experiment, _ = train_runs(uri, config)
    names = sorted(runs)
    listing = visible_text(chromium(f"{uri}/#/experiments/{experiment.experiment_id}/runs", "--dump-dom").stdout)
    assert all(name in listing for name in names), listing[:2000]

    ids = json.dumps([runs[name].info.run_id for name in names])
    compare = (f"{uri}/#/compare-runs?runs={urllib.parse.quote(ids)}"
               f"&experiments={urllib.parse.quote(json.dumps([experiment.experiment_id]))}")
    dom = chromium(compare, "--dump-dom").stdout
    text = visible_text(dom)
    assert f"Comparing {len(names)} Runs" in text, text[:2000]
    assert all(name in text for name in names)
    shown = compared_metrics(dom)
    assert len(shown) >= 10 and f"eval/{config['data']['benchmarks'][0]}/pass_at_1" in shown, shown
    for metric, cells in shown.items():  # every value drawn is the server's latest value of that run's metric
        assert len(cells) == len(names), (metric, cells)
        for name, cell in zip(names, cells):
            value = runs[name].data.metrics.get(metric)
            assert (cell in ("NaN", "-", "") if value is None else drawn_as(cell, value)), (name, metric, cell, value)
    print(f"MLflow compare view: {len(names)} runs x {len(shown)} metrics drawn, all equal to the server's values")
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    SCREENSHOT.unlink(missing_ok=True)
    chromium(compare, f"--screenshot={SCREENSHOT}")
    assert SCREENSHOT.stat().st_size > 20_000  # a drawn page, not a blank one
