"""The analysis rules in the real workflow: a dry run of the embedded default with config/analyses.yaml (job counts
from hara.analysis.workflow). The smoke DAG with a small analyses override runs for real in tests/workflow/test_smoke_run.py
(on a copy of the finished smoke DAG: only the analysis jobs and the report run)."""

from __future__ import annotations

import pytest
import yaml

from hara.analysis.workflow import analysis_runs, enabled_analyses
from hara.config import load_config
from tests.helpers import REPO
from tests.workflow.conftest import job_counts, snakemake

SMOKE, DEFAULT, ANALYSES = (REPO / "config" / name for name in ("smoke.yaml", "default.yaml", "analyses.yaml"))


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
