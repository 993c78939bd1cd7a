"""The analyses' report sections and the paper-vs-ours table, on hand-made run folders (no training)."""

from __future__ import annotations

import json

import pytest

from hara.analysis.run import run_analysis
from hara.analysis.workflow import study_eval_dir, study_run_dir, study_runs
from hara.config import load_config
from hara.report import build_report
from tests.helpers import REPO


def write_run(root, folder, accuracies, step_s, hara_s=None, score=None, benchmarks=()):
    """metrics.jsonl (and scores.json when ``score`` is given) of one run below ``root``."""
    train = root / folder
    train.mkdir(parents=True, exist_ok=True)
    rows = [
        {
            "step": i + 1,
            "train/accuracy": a,
            "time/step_s": step_s,
            "train/entropy": 1.0,
            "train/response_length": 10.0,
            **({"time/hara_s": hara_s} if hara_s is not None else {}),
        }
        for i, a in enumerate(accuracies)
    ]
    train.joinpath("metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return rows


def write_scores(root, folder, score, benchmarks):
    path = root / folder / "scores.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"benchmarks": {b: {"score": score} for b in benchmarks}}), encoding="utf-8")


@pytest.fixture
def config(tmp_path):
    config = load_config(REPO / "config" / "smoke.yaml")
    config["results_dir"] = str(tmp_path)
    config["analyses"].update(enabled=True, variants=[], exact_methods=["hara_tok"], exact_steps=0, group_sizes=[])
    config["analyses"]["interpretability"]["enabled"] = False
    return config


def relative(config, path):
    return path.removeprefix(config["results_dir"] + "/")


def test_exact_section_reports_both_step_times_and_the_papers(config, tmp_path):
    benchmarks = config["data"]["benchmarks"]
    times = {"hara_tok": (0.5, 0.05, 0.30), "hara_exact_tok": (2.0, 1.55, 0.28)}
    for run in study_runs(config, "exact"):
        step_s, hara_s, score = times[run.method]
        write_run(tmp_path, relative(config, study_run_dir(config, run)), [0.1, 0.2], step_s, hara_s)
        write_scores(tmp_path, relative(config, study_eval_dir(config, run)), score, benchmarks)
    result = json.loads(run_analysis("exact", config, tmp_path, tmp_path / "analysis" / "exact").read_text())
    rows = {row[1]: row for row in result["rows"]}
    assert rows["exact"][4:6] == ["2.000", "1.550"] and rows["linearized"][4:6] == ["0.500", "0.050"]
    assert rows["exact"][-1] == "175" and rows["linearized"][-1] == "43.6"  # the paper's, labelled as such
    assert "4.00x faster" in result["finding"] and "+2.0" not in result["finding"]
    assert "2.0 points" in result["finding"]  # pass@1 30% linearized vs 28% exact
    assert (tmp_path / "analysis" / "exact" / "exact.csv").read_text().count("\n") == 3


def test_efficiency_speedup_and_equal_time_gain(config, tmp_path):
    write_run(tmp_path, "train/tiny-s/grpo/none/seed0", [0.0, 0.1, 0.2, 0.3], 1.0)
    write_run(tmp_path, "train/tiny-s/grpo/hara_tok/seed0", [0.0, 0.3, 0.5, 0.6], 1.0)
    result = json.loads(run_analysis("efficiency", config, tmp_path, tmp_path / "analysis" / "efficiency").read_text())
    assert result["rows"] == [["tiny-s", "grpo", "hara_tok", "0", "0.0", "2.00", "30.0"]]
    assert result["figures"] == ["efficiency.png"]


def test_report_has_a_section_per_enabled_analysis_with_the_papers_claim(config, tmp_path):
    test_exact_section_reports_both_step_times_and_the_papers(config, tmp_path)
    test_efficiency_speedup_and_equal_time_gain(config, tmp_path)
    build_report(config, tmp_path, tmp_path / "report", mlflow=False)
    page = (tmp_path / "report" / "index.html").read_text(encoding="utf-8")
    markdown = (tmp_path / "report" / "report.md").read_text(encoding="utf-8")
    for anchor in ("analysis-exact", "analysis-efficiency"):
        assert f'id="{anchor}"' in page
    assert "Paper:" in page and "154 (exact FGW) -&gt; 41.0" in page and "Our run:" in page
    assert "![exact](figures/analysis_exact.png)" in markdown
    tables = {t["key"]: t for t in json.loads((tmp_path / "report" / "tables.json").read_text())}
    paper = {row[0]: row for row in tables["paper"]["rows"]}
    assert paper["speedup"][1].startswith("up to 2.64x")
    # one run pair: no interval over the (cell, seed) pairs, whose primary needs report.min_seeds of them
    for key in ("speedup", "equal_time"):
        assert paper[key][2].startswith("n/a (primary hara_tok - none needs >= 3 run pairs with a target"), key
        assert "has 1; secondary: 0 of 1 cells above" in paper[key][2]
    assert paper["speedup"][3] == paper["equal_time"][3] == "not measured"  # one seed: no interval
    # exact 2.0 s / step; the linearized run is the grid cell, which the efficiency test rewrote at 1.0 s / step
    assert paper["exact_tok"][2] == "exact / linearized per-step cost 2.00x [2.00x, 2.00x]"
    assert paper["exact_tok"][3] == "reproduced"


def test_a_missing_analysis_reads_na(config, tmp_path):
    build_report(config, tmp_path, tmp_path / "report", mlflow=False)
    markdown = (tmp_path / "report" / "report.md").read_text(encoding="utf-8")
    assert "## Analysis: exact\n\nn/a" in markdown
