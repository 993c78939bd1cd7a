"""The analysis registry (hara/analysis/registry.py): every registered analysis, built in or installed, keeps the
contract the workflow, `hara analysis` and the report rely on."""

from __future__ import annotations

import re
from importlib.metadata import EntryPoint

import pytest

from hara.analysis import registry
from hara.analysis.workflow import analysis_inputs, analysis_names, enabled_analyses, study_runs
from hara.config import load_config
from tests.helpers import REPO, fresh_registry

DEFAULT, ANALYSES = REPO / "config" / "default.yaml", REPO / "config" / "analyses.yaml"
LABEL = re.compile(r"[A-Za-z0-9_.]+")  # workflows/analyses.smk's label wildcard


@pytest.fixture
def toy_installed(monkeypatch):
    """The registry as it is when a package declares ``toy = tests.analysis_plugin:SPEC`` in hara.analyses."""
    point = EntryPoint(name="toy", value="tests.analysis_plugin:SPEC", group=registry.ENTRY_POINT_GROUP)
    fresh_registry(monkeypatch, registry.ANALYSES, lambda group: [point] if group == point.group else [])


def contract(name: str, config: dict) -> None:
    spec = registry.get_analysis(name)
    assert spec.name == name and LABEL.fullmatch(name), name
    assert callable(spec.load_run()), name
    assert name in enabled_analyses(config), name
    for run in study_runs(config, name):
        assert run.study == name and LABEL.fullmatch(run.label), (name, run)
    assert all(isinstance(path, str) and path for path in analysis_inputs(config, name)), name


def test_every_registered_analysis_keeps_the_contract(toy_installed):
    config = load_config(DEFAULT, ["analyses.enabled=true", "analyses.plugins.toy_count={steps: 2}"])
    assert analysis_names() == ["variants", "exact", "group_size", "efficiency", "interpretability", "toy_count"]
    for name in analysis_names():
        contract(name, config)
    assert [r.label for r in study_runs(config, "toy_count")] == ["steps2"]


def test_a_plugin_analysis_is_off_until_its_knobs_are_given(toy_installed):
    config = load_config(DEFAULT, ["analyses.enabled=true"])
    assert "toy_count" in analysis_names() and "toy_count" not in enabled_analyses(config)


def test_a_plugin_cannot_replace_a_built_in_analysis():
    with pytest.raises(ValueError, match="'efficiency' is already registered"):
        registry.register_analysis(registry.AnalysisSpec("efficiency", "tests.analysis_plugin:toy_count"))


def test_a_bad_entry_point_is_refused_with_its_name(monkeypatch):
    point = EntryPoint(name="broken", value="tests.method_plugin:NOT_A_SPEC", group=registry.ENTRY_POINT_GROUP)
    fresh_registry(monkeypatch, registry.ANALYSES, lambda group: [point])
    with pytest.raises(TypeError, match="entry point 'broken'"):
        registry.analyses()


def test_an_analysis_that_is_off_reads_nothing_so_its_inputs_never_see_missing_knobs(monkeypatch):
    """The workflow asks every registered analysis for its inputs when it builds the DAG; a plug-in that reads its
    own knobs there failed (TypeError on None) whenever the config did not switch it on."""
    fresh_registry(monkeypatch, registry.ANALYSES)
    spec = registry.AnalysisSpec(
        "needs_knobs",
        "tests.analysis_plugin:toy_count",
        inputs=lambda c: registry.plugin_knobs(c, "needs_knobs")["files"],
    )
    registry.register_analysis(spec)
    config = load_config(DEFAULT, ["analyses.enabled=true"])
    assert analysis_inputs(config, "needs_knobs") == []
    on = load_config(DEFAULT, ["analyses.enabled=true", "analyses.plugins.needs_knobs={files: [a.json]}"])
    assert analysis_inputs(on, "needs_knobs") == ["a.json"]
