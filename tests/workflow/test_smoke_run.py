"""The smoke DAG run for real, once for this whole module, locally on its own sqlite store (config/smoke.yaml's, the
kind of store the default config uses): data, base model, two training cells, evaluation, checkpoint selection,
report. One training job is SIGKILLed mid-run and `snakemake --rerun-incomplete` resumes it from its last checkpoint
and completes the DAG; over both runs every job finished once. Then, in this order (pytest runs a module's tests in
file order; the last ones change the DAG's folder):
- the finished DAG's outputs: the report's numbers, checkpoint selection, the paired differences recomputed from the
  predictions, `hara repro-check`, the store's runs;
- a real `mlflow server` on 127.0.0.1 over the DAG's store (as `hara ui` serves a local store) holds every run of
  the grid with its metrics; headless Chromium shows them by name in the MLflow UI's experiment page and
  run-comparison view (a screenshot of the comparison lands in results/ui/mlflow_compare.png). The experiment opens
  on its runs table, where each training run shows its average pass@1 and its difference from the baseline as the
  report computed them (screenshots: results/ui/mlflow_runs_by_method.png, results/ui/mlflow_chart_view.png);
- Snakemake's incremental behaviour (nothing to redo; one deleted evaluation reruns only its job, which selects the
  run's checkpoint too, and the report), and the paper's analyses and a plug-in analysis added to copies of the
  finished DAG (only their jobs and the report run).
The jobs log into the sqlite store themselves; a DAG whose jobs log through a server (an authenticated one) is the
rehearsal's (tests/workflow/test_rehearsal.py). This module was two files that each ran the smoke DAG from scratch
(~225 CPU s each): this one locally, and tests/reliability/test_mlflow_server.py killed and resumed on a server."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import time
import urllib.parse
from collections import Counter
from pathlib import Path

import pytest
import yaml

from hara.config import load_config
from hara.evaluation.tracking import DIGEST_CHARS
from hara.report.mlflow_runs import AVERAGE
from hara.tracking import EXPERIMENT_KIND, ui_path
from hara.tracking.ui import VIEW_BY_METHOD, VIEW_PER_RUN
from tests.helpers import REPO, SMOKE
from tests.reliability.servers import (
    CHROMIUM,
    RunsTable,
    chromium,
    compared_metrics,
    drawn_as,
    mlflow_server,
    visible_text,
)
from tests.workflow.conftest import BIN, SNAKEFILE, job_counts, snakemake
from tests.workflow.test_dag import expected_counts

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


def run_and_kill_one_training_job(workdir: Path, scratch: Path, config_args: list[str]) -> tuple[int, str]:
    """Start the DAG in ``workdir``, SIGKILL the victim's training job once it paused after step 2; Snakemake's exit
    code + log. The hook, the pid file and the log go to ``scratch``, outside the DAG's folder."""
    hooks, pidfile, log_path = scratch / "hooks", scratch / "victim.pid", scratch / "first_run.log"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(PAUSE_AT_STEP, encoding="utf-8")
    cmd = [str(BIN / "snakemake"), "-s", str(SNAKEFILE), "--cores", "2", *config_args]
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(
            cmd, cwd=workdir, env=snakemake_env(hooks, pidfile), stdout=log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 420
        while not pidfile.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert pidfile.exists(), f"the training job never reached step 2:\n{log_path.read_text()}"
        os.kill(int(pidfile.read_text()), signal.SIGKILL)
        code = proc.wait(timeout=420)
    return code, log_path.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """The smoke DAG in a scratch folder (results, logs and the MLflow store land there, never in the checkout):
    killed once, then resumed with --rerun-incomplete. {"workdir", "config", "first_code", "first_log",
    "second_log", "trained_in_first_run"}."""
    root = tmp_path_factory.mktemp("smoke_dag")
    workdir = root / "work"
    workdir.mkdir()
    config_args = ["--configfile", str(SMOKE)]
    first_code, first_log = run_and_kill_one_training_job(workdir, root, config_args)
    config = load_config(SMOKE)
    trained = [m for m in config["grid"]["methods"] if (workdir / cell_dir(config, "train", m) / "final").is_dir()]
    second = snakemake(workdir, "--rerun-incomplete", *config_args)
    return {
        "workdir": workdir,
        "config": config,
        "first_code": first_code,
        "first_log": first_log,
        "second_log": second.stdout + second.stderr,
        "trained_in_first_run": trained,
    }


def store_uri(smoke_run: dict) -> str:
    """The DAG's MLflow store: the config's sqlite database, relative to the DAG's folder."""
    from hara.tracking import absolute_uri

    workdir, config = smoke_run["workdir"], smoke_run["config"]
    return absolute_uri(config["tracking"]["mlflow_uri"].replace("sqlite:///", f"sqlite:///{workdir}/", 1))


@pytest.fixture(scope="module")
def server(smoke_run, tmp_path_factory):
    """A real `mlflow server` on 127.0.0.1 over the DAG's store (one worker, as `hara ui` serves a local store); its
    URI. Started by the first test that reads the store through it."""
    with mlflow_server(tmp_path_factory.mktemp("server"), store=store_uri(smoke_run)) as uri:
        yield uri


def cell_dirs(config: dict, stage: str) -> list[Path]:
    grid = config["grid"]
    return [
        Path(config["results_dir"]) / stage / size / rlvr / method / f"seed{seed}"
        for size in config["models"]["sizes"]
        for rlvr in grid["rlvr"]
        for method in grid["methods"]
        for seed in grid["seeds"]
    ]


def cell_dir(config: dict, stage: str, method: str) -> Path:
    return (
        Path(config["results_dir"])
        / stage
        / config["models"]["sizes"][0]
        / config["grid"]["rlvr"][0]
        / method
        / f"seed{config['grid']['seeds'][0]}"
    )


def started_jobs(log: str) -> dict[str, tuple[str, str]]:
    """The jobs a Snakemake run started, read from its log: job id -> (rule, the job's output files)."""
    jobs = {}
    for rule, body in re.findall(r"^(?:local)?rule (\S+):\n((?:    .*\n)*)", log, re.MULTILINE):
        fields = dict(re.findall(r"^    (\w+): (.*)$", body, re.MULTILINE))
        jobs[fields["jobid"]] = (rule, fields.get("output", ""))
    return jobs


def finished_jobs(log: str) -> list[tuple[str, str]]:
    """(rule, output files) of every job a Snakemake run finished, in order ('Finished jobid: N (Rule: R)')."""
    started = started_jobs(log)
    found = re.findall(r"^Finished jobid: (\d+) \(Rule: (\S+)\)", log, re.MULTILINE)
    assert all(started[jobid][0] == rule for jobid, rule in found), (found, started)
    return [started[jobid] for jobid, _ in found]


def test_smoke_dag_runs_every_job_once(smoke_run):
    """The first run planned the whole DAG; over it and the resumed run every job finished exactly once, and a job
    started twice only if the first run did not finish it: the killed training job (resumed from its checkpoint:
    the next test) and, at most, a training job Snakemake stopped when the kill failed the run."""
    workdir, config = smoke_run["workdir"], smoke_run["config"]
    first, second = smoke_run["first_log"], smoke_run["second_log"]
    assert job_counts(first) == expected_counts(config)
    finished = finished_jobs(first) + finished_jobs(second)
    assert len(set(finished)) == len(finished), finished  # no job finished twice
    assert dict(Counter(rule for rule, _ in finished)) == expected_counts(config), finished
    assert job_counts(second) == dict(Counter(rule for rule, _ in finished_jobs(second)))  # all it planned
    started_first, started_second = set(started_jobs(first).values()), set(started_jobs(second).values())
    restarted = started_first & started_second
    assert restarted == started_first - set(finished_jobs(first)), (restarted, started_first)
    assert {rule for rule, _ in restarted} == {"train"}, restarted
    assert ("train", str(cell_dir(config, "train", VICTIM) / "final")) in restarted, restarted
    for run_dir in cell_dirs(config, "train"):
        assert (workdir / run_dir / "final" / "config.json").is_file()
        cell = run_dir.relative_to(Path(config["results_dir"]) / "train")
        assert (workdir / "logs" / "train" / cell).with_suffix(".log").is_file()


def test_killed_training_job_resumes_from_its_checkpoint_and_the_dag_completes(smoke_run):
    config, workdir = smoke_run["config"], smoke_run["workdir"]
    first_log = smoke_run["first_log"]
    assert smoke_run["first_code"] != 0 and "Error in rule train" in first_log, first_log[-3000:]
    victim = workdir / cell_dir(config, "train", VICTIM)
    info = json.loads((victim / "run_info.json").read_text())
    assert info["resumed_from"].endswith("checkpoint-1"), info["resumed_from"]  # step 2 was lost, step 1 kept
    assert [json.loads(x)["step"] for x in (victim / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    counts = job_counts(smoke_run["second_log"])
    # Only what did not finish trains again: the killed job, and a job Snakemake stopped when the kill failed the
    # run (with --cores 2 another training job may still be running then; under load it often is).
    trained = smoke_run["trained_in_first_run"]
    assert VICTIM not in trained
    assert counts.get("train") == len(config["grid"]["methods"]) - len(trained) and counts.get("report") == 1, counts
    assert (workdir / config["results_dir"] / "report" / "index.html").is_file()
    for method in config["grid"]["methods"]:
        assert (workdir / cell_dir(config, "eval", method) / "scores.json").is_file()


def test_report_has_numbers_from_the_runs(smoke_run):
    workdir, config = smoke_run["workdir"], smoke_run["config"]
    report = workdir / config["results_dir"] / "report"
    tables = {t["key"]: t for t in json.loads((report / "tables.json").read_text(encoding="utf-8"))}
    scores = json.loads((workdir / cell_dirs(config, "eval")[0] / "scores.json").read_text(encoding="utf-8"))
    first = scores["benchmarks"][config["data"]["benchmarks"][0]]["score"] * 100
    base_row, first_row = tables["main"]["rows"][:2]
    assert first_row[2] == f"{first:.1f}"  # the table shows the evaluated score (its one seed: in the note)
    size = config["models"]["sizes"][0]
    base = json.loads((workdir / config["results_dir"] / "eval" / size / "base" / "scores.json").read_text())
    base_first = 100 * base["benchmarks"][config["data"]["benchmarks"][0]]["score"]
    assert base_row[:3] == [size, "base (no RL)", f"{base_first:.1f}"]
    assert all("n/a" not in cell for row in tables["main"]["rows"] for cell in row)
    assert all("n/a" not in row[3] for row in tables["efficiency"]["rows"])  # seconds per step measured
    page = (report / "index.html").read_text(encoding="utf-8")
    assert "data:image/png;base64," in page and "Efficiency" in page
    assert (report / "figures" / f"dynamics_{config['models']['sizes'][0]}.png").stat().st_size > 1000


def test_each_run_selects_its_checkpoint_on_the_held_out_validation_split(smoke_run):
    """Checkpoint selection in the DAG: validation.jsonl is disjoint from train.jsonl, every run kept its candidate
    (step 1, hard links) and scored it and final/ on validation, and the report's selection table shows both test
    averages; the selected checkpoint's test scores are the final's own when final/ was selected."""
    workdir, config = smoke_run["workdir"], smoke_run["config"]
    data = workdir / config["results_dir"] / "data"
    ids = lambda name: {json.loads(line)["id"] for line in (data / name).read_text().splitlines()}
    assert len(ids("validation.jsonl")) == config["selection"]["validation_problems"]
    assert not ids("validation.jsonl") & ids("train.jsonl")
    for train_dir, eval_dir in zip(cell_dirs(config, "train"), cell_dirs(config, "eval")):
        assert (workdir / train_dir / "candidates" / "step-1" / "model.safetensors").is_file()
        selection = json.loads((workdir / eval_dir / "selection.json").read_text(encoding="utf-8"))
        assert [c["step"] for c in selection["candidates"]] == [1, config["training"]["steps"]]
        assert all(0 <= c["validation_pass_at_1"] <= 1 for c in selection["candidates"])
        selected = json.loads((workdir / eval_dir / "selected_scores.json").read_text(encoding="utf-8"))
        assert selected["selected_step"] == selection["selected_step"]
        final = json.loads((workdir / eval_dir / "scores.json").read_text(encoding="utf-8"))
        assert set(selected["benchmarks"]) == set(final["benchmarks"])
        if selection["selected_step"] == selection["final_step"]:
            assert {k: v for k, v in selected.items() if k != "selected_step"} == final
    report = workdir / config["results_dir"] / "report"
    table = {t["key"]: t for t in json.loads((report / "tables.json").read_text(encoding="utf-8"))}["selection"]
    assert len(table["rows"]) == len(cell_dirs(config, "eval"))
    assert all("n/a" not in cell for row in table["rows"] for cell in row)


def test_report_differences_from_the_baseline_recompute_from_the_saved_predictions(smoke_run):
    """The main table's paired difference of hara_tok from none, recomputed independently (scipy's paired
    bootstrap over the problems of the two scores.json files, the config's resamples and seed): same interval."""
    import numpy as np
    from scipy import stats

    workdir, config = smoke_run["workdir"], smoke_run["config"]
    report = workdir / config["results_dir"] / "report"
    found = {(c["a"], c["b"]): c for c in json.loads((report / "comparisons.json").read_text(encoding="utf-8"))}
    (none_dir, tok_dir), benchmark = cell_dirs(config, "eval"), config["data"]["benchmarks"][0]
    outcome = {}
    for name, folder in (("none", none_dir), ("hara_tok", tok_dir)):
        entry = json.loads((workdir / folder / "scores.json").read_text(encoding="utf-8"))["benchmarks"][benchmark]
        assert entry["eval_fingerprint"]["n"] == entry["sampling"]["n"]
        outcome[name] = np.array([row["pass@1"] for row in sorted(entry["predictions"], key=lambda r: r["id"])])
    bootstrap = config["report"]["bootstrap"]
    ci = stats.bootstrap(
        (outcome["hara_tok"], outcome["none"]),
        lambda a, b, axis: np.mean(a - b, axis=axis),
        paired=True,
        vectorized=True,
        method="percentile",
        n_resamples=bootstrap["resamples"],
        confidence_level=bootstrap["confidence"],
        rng=np.random.default_rng(bootstrap["seed"]),
    ).confidence_interval
    ours = found[("hara_tok", "none")]["benchmarks"][benchmark]
    assert (ours["ci_low"], ours["ci_high"]) == pytest.approx((ci.low, ci.high), abs=1e-12)
    assert ours["difference"] == pytest.approx(outcome["hara_tok"].mean() - outcome["none"].mean())
    main = next(t for t in json.loads((report / "tables.json").read_text(encoding="utf-8")) if t["key"] == "main")
    tok_row = next(row for row in main["rows"] if row[1] == "hara_tok")
    lo, hi = 100 * ci.low, 100 * ci.high
    corrected = ours["corrected"]  # the verdict after correction over the family against none, and its MDE
    assert f"Δ {100 * ours['difference']:+.1f} [{lo:+.1f}, {hi:+.1f}] {corrected['verdict']}" in tok_row[2]
    assert tok_row[2].rstrip("‡").endswith(f"MDE {100 * corrected['mde']:.1f}")


def test_repro_check_gives_every_claim_a_status_on_the_dags_results(smoke_run, capsys):
    """`hara repro-check` on a finished DAG: every claim of hara/analysis/paper_claims.yaml with its status and numbers;
    the report's first table is the same check."""
    from hara.cli import main
    from hara.report.repro import load_claims

    workdir, config = smoke_run["workdir"], smoke_run["config"]
    results = workdir / config["results_dir"]
    assert main(["repro-check", "--config", str(SMOKE), "--results", str(results)]) == 0
    printed, claims = capsys.readouterr().out, load_claims()
    status = {key: found for found, key in re.findall(r"^\[(.+?)\] (\S+)$", printed, re.MULTILINE)}
    assert list(status) == [claim.key for claim in claims]
    assert set(status.values()) <= {"reproduced", "within noise", "contradicted", "not measured"}
    # one seed and no declared run variance (smoke.yaml): the primary covers the problems only and decides nothing
    assert status["gain_vs_grpo"] == "not measured" and "problems only" in printed
    assert "largest: hara_tok vs none (tiny-s, grpo) " in printed  # the secondary family is still described
    declared = ["--set", f"report.run_variance={REPO / 'config' / 'variance' / 'embedded.yaml'}"]
    assert main(["repro-check", "--config", str(SMOKE), "--results", str(results), *declared]) == 0
    printed = capsys.readouterr().out
    assert re.search(r"^\[(reproduced|within noise|contradicted)\] gain_vs_grpo$", printed, re.MULTILINE)
    assert "one seed; run variance declared from" in printed
    tables = {t["key"]: t for t in json.loads((results / "report" / "tables.json").read_text(encoding="utf-8"))}
    assert [row[0] for row in tables["paper"]["rows"]] == [claim.key for claim in claims]


def test_mlflow_holds_runs_scores_and_the_report(smoke_run):
    from mlflow.tracking import MlflowClient

    config = smoke_run["config"]
    client = MlflowClient(tracking_uri=store_uri(smoke_run))
    experiment = client.get_experiment_by_name(config["name"])
    runs = {run.info.run_name: run for run in client.search_runs([experiment.experiment_id])}
    benchmark = config["data"]["benchmarks"][0]
    for method in config["grid"]["methods"]:
        name = f"{config['models']['sizes'][0]}-{config['grid']['rlvr'][0]}-{method}-seed{config['grid']['seeds'][0]}"
        assert f"eval/{benchmark}/pass_at_1" in runs[name].data.metrics
        assert runs[name].data.tags["method"] == method
    artifacts = [a.path for a in client.list_artifacts(runs["report"].info.run_id, "report")]
    assert "report/index.html" in artifacts


def train_runs(uri: str, config: dict) -> dict:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(config["name"])
    runs = client.search_runs([experiment.experiment_id], filter_string="tags.stage = 'train'")
    return {run.info.run_name: run for run in runs}, experiment, client


def test_server_holds_every_run_with_its_metrics(smoke_run, server):
    config = smoke_run["config"]
    runs, _, client = train_runs(server, config)
    benchmark = config["data"]["benchmarks"][0]
    for method in config["grid"]["methods"]:
        name = f"tiny-s-grpo-{method}-seed0"
        run = runs[name]
        assert run.info.status == "FINISHED", (name, run.info.status)
        assert f"eval/{benchmark}/pass_at_1" in run.data.metrics
        steps = sorted({m.step for m in client.get_metric_history(run.info.run_id, "train/loss")})
        assert steps == [1, 2], (name, steps)
    assert len(runs) == len(config["grid"]["methods"])  # the resumed job reused its run, it did not add one


def test_mlflow_ui_lists_and_compares_the_grid_runs(smoke_run, server):
    assert Path(CHROMIUM).exists(), "Debian's chromium is missing (.ci/run installs it: apt-get install chromium)"
    uri, config = server, smoke_run["config"]
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


def test_mlflow_ui_opens_on_the_runs_table_with_each_runs_scores(smoke_run, server):
    """The experiment (marked as model training) lands on its runs; each training run carries, exactly, the
    report's average pass@1 and difference from none, and the saved view draws them in the runs table."""
    uri, config, workdir = server, smoke_run["config"], smoke_run["workdir"]
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


# Last: these change the DAG's folder (the tests above read it as the DAG left it), or copy it as it is then.


def test_second_run_has_nothing_to_do(smoke_run):
    workdir = smoke_run["workdir"]
    output = snakemake(workdir, "--configfile", str(SMOKE)).stderr
    assert "Nothing to be done" in output, output[-2000:]


def test_deleting_one_evaluation_reruns_only_its_job_and_the_report(smoke_run):
    workdir, config = smoke_run["workdir"], smoke_run["config"]
    scores = [workdir / d / "scores.json" for d in cell_dirs(config, "eval")]
    selections = [workdir / d / "selection.json" for d in cell_dirs(config, "eval")]
    finals = [workdir / d / "final" for d in cell_dirs(config, "train")]
    before = {p: p.stat().st_mtime_ns for p in scores[1:] + selections[1:] + finals}
    selected_before = selections[0].stat().st_mtime_ns
    scores[0].unlink()
    proc = snakemake(workdir, "--configfile", str(SMOKE))
    # the evaluate job also selects the run's checkpoint (it reads the final's test scores when final/ is selected)
    assert job_counts(proc.stdout + proc.stderr) == {"evaluate": 1, "report": 1, "all": 1}
    assert scores[0].is_file() and selections[0].stat().st_mtime_ns > selected_before
    assert {p: p.stat().st_mtime_ns for p in before} == before


#: Small enough for CI: two extra training runs (hara_exact_tok, of the exact study and of FGW with hidden-state
#: structures; the other studies reuse the smoke grid's cells).
SMOKE_ANALYSES = {
    "analyses": {
        "enabled": True,
        "variants": ["fgw"],
        "exact_methods": ["hara_tok"],
        "exact_steps": 0,
        "group_sizes": [4],
        "group_size_methods": ["hara_tok"],
        "interpretability": {"problems": 2, "rollouts": [2, 4]},
    }
}


def test_analyses_added_to_the_finished_smoke_dag_write_every_section_with_numbers(smoke_run, tmp_path):
    """On a copy of the finished smoke DAG (file times kept), the analyses override runs only the analysis jobs and
    the report: the grid's cells are reused, not trained again."""
    workdir = tmp_path / "with_analyses"
    shutil.copytree(smoke_run["workdir"], workdir, symlinks=True)
    override = tmp_path / "analyses.yaml"
    override.write_text(yaml.safe_dump(SMOKE_ANALYSES), encoding="utf-8")
    proc = snakemake(workdir, "--configfile", str(SMOKE), str(override), timeout=1800)
    counts = job_counts(proc.stdout + proc.stderr)
    assert counts == {"analysis_train": 2, "analysis_evaluate": 2, "analysis": 5, "report": 1, "all": 1}
    config = load_config(SMOKE)
    results = workdir / config["results_dir"]
    markdown = (results / "report" / "report.md").read_text(encoding="utf-8")
    page = (results / "report" / "index.html").read_text(encoding="utf-8")
    for name in ("variants", "exact", "group_size", "efficiency", "interpretability"):
        result = json.loads((results / "analysis" / name / f"{name}.json").read_text(encoding="utf-8"))
        assert (results / "analysis" / name / f"{name}.csv").is_file()
        assert result["rows"] and result["figures"], name
        assert all((results / "analysis" / name / f).stat().st_size > 1000 for f in result["figures"])
        assert f'id="analysis-{name}"' in page and f"## {result['title']}" in markdown
    exact = json.loads((results / "analysis" / "exact" / "exact.json").read_text(encoding="utf-8"))
    step_times = [row[4] for row in exact["rows"]]  # exact and linearized, both measured in this run
    assert len(step_times) == 2 and all(float(t) > 0 for t in step_times)
    interp = json.loads((results / "analysis" / "interpretability" / "interpretability.json").read_text())
    assert {(row[0], row[1]) for row in interp["rows"]} == {
        (v, s) for v in ("w", "gw", "fgw") for s in ("position", "hidden")
    }
    assert all(row[4] != "n/a" for row in interp["rows"])
    per_problem = json.loads((results / "analysis" / "interpretability" / "problem_scores.json").read_text())
    assert {len(row["per_problem"]) for row in per_problem["rows"]} == {2}  # the units of the claims' intervals
    paper = {row[0]: row for row in json.loads((results / "report" / "tables.json").read_text())[0]["rows"]}
    assert paper["fgw_interpretability"][3] != "not measured" and paper["fgw_rollouts"][3] != "not measured"
    variants = json.loads((results / "analysis" / "variants" / "variants.json").read_text())
    assert [(row[0], row[1], row[3]) for row in variants["rows"]] == [
        ("fgw", "position", "hara_tok"),
        ("fgw_hidden", "hidden", "hara_exact_tok"),
    ]
    assert all(row[5] != "n/a" for row in variants["rows"])
    assert "GW (α=1) sees only rollout lengths" in variants["note"] and "GW (α=1) sees only" in interp["note"]


def install_analysis_plugin(root: Path) -> Path:
    """tests/analysis_plugin.py as an installed package declares it: a .dist-info with a hara.analyses entry point."""
    info = root / "toy_analysis-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-analysis\nVersion: 0.1\n", encoding="utf-8")
    (info / "entry_points.txt").write_text("[hara.analyses]\ntoy = tests.analysis_plugin:SPEC\n", encoding="utf-8")
    return root


def test_a_plugin_analysis_declared_in_one_module_gets_its_jobs_its_command_and_its_report_section(smoke_run, tmp_path):
    """Declared in one place (tests/analysis_plugin.py), no other file edited: the DAG builds its training runs and its
    analysis job, which runs `hara analysis toy_count`, and the report shows its section."""
    workdir = tmp_path / "with_toy"
    shutil.copytree(smoke_run["workdir"], workdir, symlinks=True)
    env = {"PYTHONPATH": f"{install_analysis_plugin(tmp_path / 'site')}:{REPO}"}
    only_toy = {
        "enabled": True,
        "variants": [],
        "exact_methods": [],
        "group_sizes": [],
        "interpretability": {"enabled": False},
    }
    for name, knobs in (("with_run", {"steps": 1}), ("toy", {})):
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump({"analyses": {**only_toy, "plugins": {"toy_count": knobs}}}), encoding="utf-8")
    dry = snakemake(workdir, "-n", "--configfile", str(SMOKE), str(tmp_path / "with_run.yaml"), env=env)
    assert job_counts(dry.stdout + dry.stderr) == {
        "analysis_train": 1,
        "analysis_evaluate": 1,
        "analysis": 2,
        "report": 1,
        "all": 1,
    }
    proc = snakemake(workdir, "--configfile", str(SMOKE), str(tmp_path / "toy.yaml"), env=env)
    assert job_counts(proc.stdout + proc.stderr) == {"analysis": 2, "report": 1, "all": 1}  # toy_count, efficiency
    results = workdir / load_config(SMOKE)["results_dir"]
    assert (workdir / "logs" / "analysis" / "toy_count.log").read_text().strip().endswith("toy_count.json")
    result = json.loads((results / "analysis" / "toy_count" / "toy_count.json").read_text(encoding="utf-8"))
    assert result["rows"] == [["none", "0", "5"], ["hara_tok", "0", "5"]]
    page = (results / "report" / "index.html").read_text(encoding="utf-8")
    markdown = (results / "report" / "report.md").read_text(encoding="utf-8")
    assert 'id="analysis-toy_count"' in page and "## Toy: benchmarks scored per run" in markdown
