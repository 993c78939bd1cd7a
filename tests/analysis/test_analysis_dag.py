"""The analysis rules in the real workflow: a dry run of the embedded default with config/analyses.yaml (job counts
from hara.analysis.plan), and the smoke DAG with a small analyses override run for real, ending in a report with a
section per analysis filled with numbers."""

from __future__ import annotations

import json

import pytest
import yaml

from hara.analysis.plan import analysis_runs, enabled_analyses
from hara.config import load_config
from tests.workflow.conftest import REPO, job_counts, snakemake

SMOKE, DEFAULT, ANALYSES = (REPO / "config" / name for name in ("smoke.yaml", "default.yaml", "analyses.yaml"))

#: Small enough for CI: two extra training runs (hara_exact_tok, of the exact study and of FGW with hidden-state
#: structures; the other studies reuse the smoke grid's cells).
SMOKE_ANALYSES = {"analyses": {"enabled": True, "variants": ["fgw"], "exact_methods": ["hara_tok"], "exact_steps": 0,
                               "group_sizes": [4], "group_size_methods": ["hara_tok"],
                               "interpretability": {"problems": 2, "rollouts": [2, 4]}}}


def merged(*layers: dict) -> dict:
    out: dict = {}
    for layer in layers:
        for key, value in layer.items():
            out[key] = merged(out.get(key, {}), value) if isinstance(value, dict) else value
    return out


def resolved(*paths, extra: dict | None = None) -> dict:
    """The config Snakemake resolves from several --configfile files (later ones update earlier ones)."""
    from hara.config import validate_config

    layers = [yaml.safe_load(p.read_text(encoding="utf-8")) for p in paths]
    return validate_config(merged(*layers, extra or {}))


def test_default_with_analyses_dry_run_lists_the_extra_jobs(tmp_path):
    config = resolved(DEFAULT, ANALYSES)
    proc = snakemake(tmp_path, "-n", "--configfile", str(DEFAULT), str(ANALYSES))
    counts = job_counts(proc.stdout + proc.stderr)
    extra = len(analysis_runs(config))
    assert extra == 2 + 3 + 2 + 4  # W and GW; W, GW, FGW with hidden-state structures; hara_exact_seq/tok; G 4, 16
    assert counts["analysis_train"] == counts["analysis_evaluate"] == extra
    assert counts["analysis"] == len(enabled_analyses(config)) == 5
    assert counts["train"] == 9 and counts["report"] == 1
    assert "download_labeller" not in counts  # the rule-based labeller needs no model


def test_paper_with_analyses_downloads_the_labelling_model_once(tmp_path):
    """config/paper.yaml labels stages with an LLM: its snapshot comes from a download job of its own, which the
    interpretability job waits for."""
    paper = REPO / "config" / "paper.yaml"
    proc = snakemake(tmp_path, "-n", "--configfile", str(paper), str(ANALYSES))
    output = proc.stdout + proc.stderr
    assert job_counts(output)["download_labeller"] == 1
    labelling = load_config(paper, skip_checks=("check_local_folders",))["analyses"]["interpretability"]
    assert labelling["labeller"] == "llm" and f"output: {labelling['llm_model']}" in output


@pytest.mark.parametrize("name", ["default.yaml", "smoke.yaml", "paper.yaml"])
def test_analyses_are_off_in_every_shipped_config(name):
    config = load_config(REPO / "config" / name, skip_checks=("check_local_folders",))
    assert enabled_analyses(config) == [] and analysis_runs(config) == []


@pytest.mark.slow
def test_smoke_dag_with_analyses_writes_every_section_with_numbers(tmp_path):
    override = tmp_path / "analyses.yaml"
    override.write_text(yaml.safe_dump(SMOKE_ANALYSES), encoding="utf-8")
    # 76 s alone, over 600 s beside the rest of the suite in 4 workers on 2 cores (two training runs with POT's exact FGW)
    proc = snakemake(tmp_path, "--configfile", str(SMOKE), str(override), timeout=1800)
    counts = job_counts(proc.stdout + proc.stderr)
    assert counts["analysis_train"] == counts["analysis_evaluate"] == 2 and counts["analysis"] == 5
    config = load_config(SMOKE)
    results = tmp_path / config["results_dir"]
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
    assert {(row[0], row[1]) for row in interp["rows"]} == {(v, s) for v in ("w", "gw", "fgw")
                                                             for s in ("position", "hidden")}
    assert all(row[4] != "n/a" for row in interp["rows"])
    variants = json.loads((results / "analysis" / "variants" / "variants.json").read_text())
    assert [(row[0], row[1], row[3]) for row in variants["rows"]] == [("fgw", "position", "hara_tok"),
                                                                      ("fgw_hidden", "hidden", "hara_exact_tok")]
    assert all(row[5] != "n/a" for row in variants["rows"])
    assert "GW (α=1) sees only rollout lengths" in variants["note"] and "GW (α=1) sees only" in interp["note"]
