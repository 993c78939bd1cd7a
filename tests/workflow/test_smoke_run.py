"""The smoke DAG run for real, locally: data, base model, two training cells, evaluation, checkpoint selection,
report; then Snakemake's incremental behaviour (nothing to redo; one deleted evaluation reruns only its job, which
selects the run's checkpoint too, and the report), and the paper's analyses added to the finished DAG (only their jobs and the report run)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from hara.config import load_config
from tests.helpers import REPO, SMOKE
from tests.workflow.conftest import job_counts, snakemake
from tests.workflow.test_dag import expected_counts

pytestmark = pytest.mark.slow


# smoke_run: the local smoke DAG run, a session fixture of tests/workflow/conftest.py.


def cell_dirs(config: dict, stage: str) -> list[Path]:
    grid = config["grid"]
    return [
        Path(config["results_dir"]) / stage / size / rlvr / method / f"seed{seed}"
        for size in config["models"]["sizes"]
        for rlvr in grid["rlvr"]
        for method in grid["methods"]
        for seed in grid["seeds"]
    ]


def test_smoke_dag_runs_every_job_once(smoke_run):
    workdir, config, output = smoke_run
    assert job_counts(output) == expected_counts(config)
    for run_dir in cell_dirs(config, "train"):
        assert (workdir / run_dir / "final" / "config.json").is_file()
        cell = run_dir.relative_to(Path(config["results_dir"]) / "train")
        assert (workdir / "logs" / "train" / cell).with_suffix(".log").is_file()


def test_report_has_numbers_from_the_runs(smoke_run):
    workdir, config, _ = smoke_run
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
    workdir, config, _ = smoke_run
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

    workdir, config, _ = smoke_run
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

    workdir, config, _ = smoke_run
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

    from hara.tracking import absolute_uri

    workdir, config, _ = smoke_run
    uri = absolute_uri(config["tracking"]["mlflow_uri"].replace("sqlite:///", f"sqlite:///{workdir}/", 1))
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(config["name"])
    runs = {run.info.run_name: run for run in client.search_runs([experiment.experiment_id])}
    benchmark = config["data"]["benchmarks"][0]
    for method in config["grid"]["methods"]:
        name = f"{config['models']['sizes'][0]}-{config['grid']['rlvr'][0]}-{method}-seed{config['grid']['seeds'][0]}"
        assert f"eval/{benchmark}/pass_at_1" in runs[name].data.metrics
        assert runs[name].data.tags["method"] == method
    artifacts = [a.path for a in client.list_artifacts(runs["report"].info.run_id, "report")]
    assert "report/index.html" in artifacts


def test_second_run_has_nothing_to_do(smoke_run):
    workdir, _, _ = smoke_run
    output = snakemake(workdir, "--configfile", str(SMOKE)).stderr
    assert "Nothing to be done" in output, output[-2000:]


def test_deleting_one_evaluation_reruns_only_its_job_and_the_report(smoke_run):
    workdir, config, _ = smoke_run
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
    shutil.copytree(smoke_run[0], workdir, symlinks=True)
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
    shutil.copytree(smoke_run[0], workdir, symlinks=True)
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
