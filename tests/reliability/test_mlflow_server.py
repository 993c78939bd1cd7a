"""The smoke DAG against a real `mlflow server` on 127.0.0.1, with one training job SIGKILLed mid-run:
`snakemake --rerun-incomplete` resumes it from its last checkpoint and the DAG completes; the server holds every run
of the grid with its metrics; headless Chromium shows them by name in the MLflow UI's experiment page and
run-comparison view (a screenshot of the comparison lands in results/ui/mlflow_compare.png). The experiment opens on
its runs table, where each training run shows its average pass@1 and its difference from the baseline as the
report computed them (screenshots: results/ui/mlflow_runs_by_method.png, results/ui/mlflow_chart_view.png)."""

from __future__ import annotations

import json
import math
import os
import signal
import statistics
import subprocess
import time
import urllib.parse
from html.parser import HTMLParser
from pathlib import Path

import pytest

from hara.config import load_config
from hara.evaluation.tracking import DIGEST_CHARS
from hara.report.mlflow_runs import AVERAGE
from hara.tracking import EXPERIMENT_KIND, ui_path
from hara.tracking.ui import VIEW_BY_METHOD, VIEW_PER_RUN
from tests.helpers import REPO, SMOKE
from tests.reliability.servers import CHROMIUM, chromium, compared_metrics, mlflow_server, visible_text
from tests.workflow.conftest import BIN, SNAKEFILE, job_counts, snakemake

SCREENSHOT = REPO / "results" / "ui" / "mlflow_compare.png"
RUNS_SCREENSHOT = REPO / "results" / "ui" / "mlflow_runs_by_method.png"
CHARTS_SCREENSHOT = REPO / "results" / "ui" / "mlflow_chart_view.png"
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
    return {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "OMP_NUM_THREADS": "1",
        # the hook first, then the suite's own PYTHONPATH (a checkout run with PYTHONPATH=<checkout> against a venv
        # installed from another one: without it, this DAG's first run imported that other checkout's hara)
        "PYTHONPATH": os.pathsep.join(filter(None, (str(hooks), os.environ.get("PYTHONPATH")))),
        "HARA_TEST_VICTIM": VICTIM,
        "HARA_TEST_PIDFILE": str(pidfile),
        "HARA_TEST_PAUSE_AT_STEP": "2",
    }


def run_and_kill_one_training_job(workdir: Path, config_args: list[str]) -> tuple[int, str]:
    """Start the DAG, SIGKILL the victim's training job once it paused after step 2; Snakemake's exit code + log."""
    hooks, pidfile = workdir / "hooks", workdir / "victim.pid"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(PAUSE_AT_STEP, encoding="utf-8")
    cmd = [str(BIN / "snakemake"), "-s", str(SNAKEFILE), "--cores", "2", *config_args]
    with open(workdir / "first_run.log", "w", encoding="utf-8") as log:
        proc = subprocess.Popen(
            cmd, cwd=workdir, env=snakemake_env(hooks, pidfile), stdout=log, stderr=subprocess.STDOUT
        )
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
        yield {
            "uri": uri,
            "workdir": workdir,
            "config": config,
            "first_code": first_code,
            "first_log": first_log,
            "second_log": second.stdout + second.stderr,
            "trained_in_first_run": trained,
        }


def cell_dir(config: dict, stage: str, method: str) -> Path:
    return (
        Path(config["results_dir"])
        / stage
        / config["models"]["sizes"][0]
        / config["grid"]["rlvr"][0]
        / method
        / f"seed{config['grid']['seeds'][0]}"
    )


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
    half_step = 0.5 * 10.0**-decimals if decimals is not None else 0.0
    return math.isclose(float(cell), value, rel_tol=1e-3, abs_tol=1e-12) or abs(float(cell) - value) <= half_step


def test_mlflow_ui_lists_and_compares_the_grid_runs(server_dag):
    assert Path(CHROMIUM).exists(), "Debian's chromium is missing (.ci/run installs it: apt-get install chromium)"
    uri, config = server_dag["uri"], server_dag["config"]
    runs, experiment, _ = train_runs(uri, config)
    names = sorted(runs)
    listing = visible_text(chromium(f"{uri}/#/experiments/{experiment.experiment_id}/runs", "--dump-dom").stdout)
    assert all(name in listing for name in names), listing[:2000]

    ids = json.dumps([runs[name].info.run_id for name in names])
    compare = (
        f"{uri}/#/compare-runs?runs={urllib.parse.quote(ids)}"
        f"&experiments={urllib.parse.quote(json.dumps([experiment.experiment_id]))}"
    )
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
            assert cell in ("NaN", "-", "") if value is None else drawn_as(cell, value), (name, metric, cell, value)
    print(f"MLflow compare view: {len(names)} runs x {len(shown)} metrics drawn, all equal to the server's values")
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    SCREENSHOT.unlink(missing_ok=True)
    chromium(compare, f"--screenshot={SCREENSHOT}")
    assert SCREENSHOT.stat().st_size > 20_000  # a drawn page, not a blank one


class RunsTable(HTMLParser):
    """The cells of the MLflow runs table (an ag-grid) in a dumped DOM: ``rows[row id][column id]`` = the cell's
    text. Row ids end with the run id (``<run id>``, or ``tag.method.<value>.<run id>`` when grouped); column ids
    are MLflow's (``metrics.`eval/avg_pass_at_1```). Only the rows and columns drawn in the viewport are there."""

    def __init__(self, dom: str):
        super().__init__()
        self.rows: dict[str, dict[str, str]] = {}
        self.row = self.column = None
        self.depth = 0  # open divs inside the current cell
        self.feed(dom)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "row-id" in attrs:
            self.row = attrs["row-id"]
        elif attrs.get("role") == "gridcell" and self.row and "col-id" in attrs:
            self.column, self.depth = attrs["col-id"], 0
            self.rows.setdefault(self.row, {})[self.column] = ""
        if self.column and tag == "div":
            self.depth += 1

    def handle_endtag(self, tag):
        if self.column and tag == "div":
            self.depth -= 1
            if self.depth == 0:
                self.column = None

    def handle_data(self, data):
        if self.column:
            cells = self.rows[self.row]
            cells[self.column] = " ".join(f"{cells[self.column]} {data}".split())

    def of_run(self, run_id: str) -> dict[str, str]:
        """The run's cells, merged over the grid's containers (pinned and scrolled columns are separate rows)."""
        merged: dict[str, str] = {}
        for row, cells in self.rows.items():
            if row.rsplit(".", 1)[-1] == run_id:
                merged.update({column: text for column, text in cells.items() if text})
        return merged


def expected_summaries(config: dict, workdir: Path) -> dict[str, dict]:
    """Per training run name, what the report must have logged, from the files themselves: the mean of the
    scores.json pass@1 over the config's benchmarks, comparisons.json's average difference from none, and each
    benchmark's `name (digest)` as the Dataset column prints it."""
    found = json.loads((workdir / config["results_dir"] / "report" / "comparisons.json").read_text())
    expected = {}
    for method in config["grid"]["methods"]:
        scores = json.loads((workdir / cell_dir(config, "eval", method) / "scores.json").read_text())["benchmarks"]
        versus = [c["average"] for c in found if (c["a"], c["b"]) == (method, "none")]
        points = {
            "vs_none/avg_diff_pts": "difference",
            "vs_none/avg_ci_low_pts": "ci_low",
            "vs_none/avg_ci_high_pts": "ci_high",
        }  # percentage points, rounded as the report prints them
        expected[f"tiny-s-grpo-{method}-seed0"] = {
            AVERAGE: round(100 * statistics.fmean(scores[b]["score"] for b in config["data"]["benchmarks"]), 1),
            **(
                {
                    **{key: round(100 * versus[0][field], 1) for key, field in points.items()},
                    "vs_none/avg_mde_pts": round(100 * versus[0]["corrected"]["mde"], 1),
                }
                if versus
                else {}
            ),
            "datasets": [
                f"{name} ({entry['eval_fingerprint']['benchmark_sha256'][:DIGEST_CHARS]})"
                for name, entry in scores.items()
            ],
        }
    return expected


def test_mlflow_ui_opens_on_the_runs_table_with_each_runs_scores(server_dag):
    """The experiment (marked as model training) lands on its runs; each training run carries, exactly, the
    report's average pass@1 and difference from none, and the saved view draws them in the runs table."""
    uri, config, workdir = server_dag["uri"], server_dag["config"], server_dag["workdir"]
    runs, experiment, client = train_runs(uri, config)
    assert experiment.tags[EXPERIMENT_KIND[0]] == EXPERIMENT_KIND[1]
    expected = expected_summaries(config, workdir)
    assert sorted(expected) == sorted(runs) and any("vs_none/avg_diff_pts" in e for e in expected.values())
    for name, values in expected.items():
        logged = client.get_run(runs[name].info.run_id)
        assert {k: logged.data.metrics.get(k) for k in values if k != "datasets"} == {
            k: v for k, v in values.items() if k != "datasets"
        }, name
        assert logged.data.tags["vs_none.verdict"], name
        note = logged.data.tags["mlflow.note.content"]
        assert str((workdir / config["results_dir"] / "report" / "index.html").resolve()) in note, note

    landing = visible_text(chromium(f"{uri}/{ui_path(experiment.experiment_id, '')}", "--dump-dom").stdout)
    assert "Run Name" in landing and "Tool calls" not in landing, landing[:1500]  # not the GenAI overview

    # the link `hara ui` prints (the user's way in): the runs table in the scores' view, verdicts and MDEs drawn
    shown = subprocess.run(
        [str(BIN / "hara"), "ui", "--config", str(SMOKE), "--set", f"tracking.mlflow_uri={uri}", "--print-link"],
        capture_output=True,
        text=True,
        check=True,
        cwd=workdir,
    )
    link = shown.stdout.strip().rsplit(" ", 1)[1]
    assert link == f"{uri}/{ui_path(experiment.experiment_id, 'runs', f'viewStateShareKey={VIEW_PER_RUN[0]}')}"
    table = RunsTable(chromium(link, "--dump-dom", window="2400,1400").stdout)
    for name, values in expected.items():
        cells = table.of_run(runs[name].info.run_id)
        if "vs_none/avg_mde_pts" in values:  # the verdict after correction beside the MDE
            assert cells.get("tags.`vs_none.verdict`") in ("better", "worse", "within noise"), cells
        for metric in (AVERAGE, "vs_none/avg_diff_pts", "vs_none/avg_mde_pts"):
            cell = cells.get(f"metrics.`{metric}`")
            assert cell is not None, (name, metric, cells)
            assert cell == "-" if metric not in values else drawn_as(cell, values[metric]), (name, metric, cell)
        assert any(dataset in cells.get("attributes.`Dataset`", "") for dataset in values["datasets"]), cells
    print(
        f"MLflow runs table: {len(expected)} runs drawn with {AVERAGE}, vs_none/avg_diff_pts, the MDE and the "
        "verdict equal to the report's"
    )

    by_method = ui_path(experiment.experiment_id, "runs", f"viewStateShareKey={VIEW_BY_METHOD[0]}")
    charts = ui_path(experiment.experiment_id, "runs", f"viewStateShareKey={VIEW_PER_RUN[0]}&compareRunsMode=CHART")
    # wide enough for every picked column beside MLflow's assistant panel; charts draw lazily, hence more time
    for url, path, budget in ((by_method, RUNS_SCREENSHOT, 30000), (charts, CHARTS_SCREENSHOT, 60000)):
        path.unlink(missing_ok=True)
        path.parent.mkdir(parents=True, exist_ok=True)  # Chromium writes no screenshot into a missing folder
        chromium(f"{uri}/{url}", f"--screenshot={path}", window="2400,1000", budget_ms=budget)
        assert path.stat().st_size > 20_000, path  # a drawn page, not a blank one
