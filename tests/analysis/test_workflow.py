"""Which runs the analyses add (hara/analysis/workflow.py): overrides, reuse of grid cells, paths, switches."""

from __future__ import annotations

import pytest

from hara.analysis.workflow import (
    analysis_methods,
    analysis_runs,
    enabled_analyses,
    override_args,
    study_eval_dir,
    study_run_dir,
    study_runs,
)
from hara.config import load_config
from tests.helpers import REPO


@pytest.fixture
def config():
    config = load_config(REPO / "config" / "default.yaml")
    config["analyses"].update(
        enabled=True,
        variants=["w", "gw", "fgw"],
        exact_methods=["hara_tok"],
        exact_steps=0,
        group_sizes=[4, 8],
        group_size_methods=["none", "hara_tok"],
    )
    return config


def test_studies_have_no_runs_while_the_analyses_are_off(config):
    config["analyses"]["enabled"] = False
    assert {study: study_runs(config, study) for study in ("variants", "exact", "group_size")} == {
        "variants": [],
        "exact": [],
        "group_size": [],
    }


def test_variants_override_alpha_and_fgw_reuses_the_grid_cell(config):
    runs = {r.label: r for r in study_runs(config, "variants")}
    assert runs["w"].overrides == (("hara.hara.alpha", 0.0),) and runs["gw"].overrides == (("hara.hara.alpha", 1.0),)
    assert runs["fgw"].overrides == ()  # alpha 0.5 is the config's: the grid's hara_tok run
    assert study_run_dir(config, runs["fgw"]) == "results/train/tiny-s/grpo/hara_tok/seed0"
    assert study_run_dir(config, runs["w"]) == "results/analysis/train/variants/w/tiny-s/grpo/hara_tok/seed0"
    assert study_eval_dir(config, runs["w"]) == "results/analysis/eval/variants/w/tiny-s/grpo/hara_tok/seed0"


def test_hidden_structure_variants_train_the_exact_counterpart(config):
    runs = {r.label: r for r in study_runs(config, "variants")}
    assert {r.label for r in runs.values()} == {"w", "gw", "fgw", "w_hidden", "gw_hidden", "fgw_hidden"}
    assert runs["gw_hidden"].method == "hara_exact_tok"
    assert runs["gw_hidden"].overrides == (("hara.hara.alpha", 1.0), ("hara.hara.structure", "hidden"))
    assert (
        study_run_dir(config, runs["fgw_hidden"])
        == "results/analysis/train/variants/fgw_hidden/tiny-s/grpo/hara_exact_tok/seed0"
    )
    config["analyses"]["structures"] = ["position"]
    assert {r.label for r in study_runs(config, "variants")} == {"w", "gw", "fgw"}


def test_exact_pairs_each_linearized_method_with_its_pot_counterpart(config):
    methods = [r.method for r in study_runs(config, "exact")]
    assert methods == ["hara_tok", "hara_exact_tok"]
    assert analysis_methods(config) == ["hara_exact_tok"]
    config["analyses"]["exact_steps"] = 20
    capped = study_runs(config, "exact")
    assert all(r.overrides == (("training.steps", 20),) for r in capped)
    assert all(r.label == "steps20" for r in capped)


def test_group_sizes_reuse_the_training_group_size(config):
    runs = study_runs(config, "group_size")
    assert {(r.label, r.method, r.overrides) for r in runs} == {
        ("G4", "none", (("training.group_size", 4),)),
        ("G4", "hara_tok", (("training.group_size", 4),)),
        ("G8", "none", ()),
        ("G8", "hara_tok", ()),
    }
    extra = [r for r in analysis_runs(config) if r.study == "group_size"]
    assert len(extra) == 2  # G = 8 = training.group_size: the grid trains those


def test_every_extra_run_logs_to_its_own_experiment(config):
    run = study_runs(config, "variants")[0]
    assert override_args(config, run) == ["hara.hara.alpha=0.0", "name=hara-embedded-variants-w"]


def test_switches(config):
    assert enabled_analyses(config) == ["variants", "exact", "group_size", "efficiency", "interpretability"]
    config["analyses"].update(variants=[], group_sizes=[])
    config["analyses"]["interpretability"]["enabled"] = False
    assert enabled_analyses(config) == ["exact", "efficiency"]
    config["analyses"]["enabled"] = False
    assert enabled_analyses(config) == [] and analysis_runs(config) == []


def test_inputs_of_each_analysis(config):
    from hara.analysis.workflow import analysis_inputs

    assert analysis_inputs(config, "interpretability") == [
        "results/train/tiny-s/grpo/hara_tok/seed0/final",
        "results/data/manifest.json",
    ]
    assert len(analysis_inputs(config, "efficiency")) == 9  # every grid cell of the default
    group = analysis_inputs(config, "group_size")
    assert group[-1] == "results/analysis/interpretability/interpretability.csv"  # FGW's score at G rollouts
    assert "results/analysis/eval/group_size/G4/tiny-s/grpo/none/seed0/scores.json" in group
