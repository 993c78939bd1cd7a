"""Issue 38 on the smoke config with real workers: a sensitivity study whose list holds the reference (its runs are
the reference's, its effect exactly 0 with a zero-width interval), a sensitivity study interrupted by a killed worker
and restarted (every (value, seed) trial done once), and a search that re-evaluates its best trial on fresh seeds
before writing best_params.yaml."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections import Counter

import pytest
import yaml
from conftest import (
    KNOB,
    REFERENCE,
    load_trials,
    mlflow_runs,
    run_sweep,
    sweep_command,
    write_sensitivity_study,
    write_study,
)
from test_sweeps import wait_for

from hara.sweeps.report_section import sweeps_markdown

ALPHA = "hara.hara.alpha"
LOW = 0.1  # the other value of the sensitivity studies (near greedy: more completions run to the cap)


def done_pairs(trials) -> Counter:
    return Counter((t.params[KNOB], t.user_attrs["seeds"][0]) for t in trials if t.state.name == "COMPLETE")


@pytest.fixture(scope="module")
def reference_listed(tmp_path_factory, tiny_base):
    """temperature in [0.5, the reference] x seeds 0, 1, then `hara sweep report`."""
    folder = tmp_path_factory.mktemp("reference-listed")
    study, results = write_sensitivity_study(folder), folder / "results"
    run_sweep(study, results, tiny_base, "run")
    run_sweep(study, results, tiny_base, "report")
    return results


def test_a_listed_reference_is_the_reference_with_effect_exactly_zero(reference_listed):
    trials = load_trials(reference_listed, "sensitivity")
    assert done_pairs(trials) == Counter({(REFERENCE, 0): 1, (REFERENCE, 1): 1, (LOW, 0): 1, (LOW, 1): 1})
    assert len(trials) == 4, "the listed reference was trained again"
    summary = json.loads((reference_listed / "sweeps" / "sensitivity" / "summary.json").read_text())
    rows = {row["point"][KNOB]: row for row in summary["effects"]}
    same = rows[REFERENCE]
    assert (same["effect"], same["ci_low"], same["ci_high"]) == (0.0, 0.0, 0.0)
    assert (same["corrected_low"], same["corrected_high"], same["mde"]) == (0.0, 0.0, 0.0)
    assert same["verdict"] == "within noise" and same["seeds"] == 2
    reference_values = sorted(t.value for t in trials if t.params[KNOB] == REFERENCE)
    assert same["mean"] == pytest.approx(sum(reference_values) / 2)
    other = rows[LOW]
    by_seed = {(t.params[KNOB], t.user_attrs["seeds"][0]): t.value for t in trials}
    assert other["effect"] == pytest.approx(sum(by_seed[LOW, s] - by_seed[REFERENCE, s] for s in (0, 1)) / 2)
    assert other["ci_low"] <= other["effect"] <= other["ci_high"]
    assert other["effect"] != 0.0, "the knob does not move the smoke objective: the test shows nothing"
    assert other["corrected_low"] <= other["ci_low"] and other["mde"] > 0
    assert summary["family_size"] == 2 and summary["conclusion"] in sweeps_markdown(reference_listed, reference_listed)
    assert (reference_listed / "sweeps" / "sensitivity" / "effects.png").is_file()

    parents, children = mlflow_runs(reference_listed)
    assert parents[0].data.metrics["sensitivity/temperature 1/effect"] == 0.0
    child_effects = {c.data.params[KNOB]: c.data.metrics["sweep/effect"] for c in children}
    assert child_effects == {"1.0": 0.0, "0.1": pytest.approx(other["effect"])}


def test_an_interrupted_sensitivity_study_ends_with_every_value_and_seed_done_once(tmp_path, tiny_base):
    study, results = write_sensitivity_study(tmp_path, values=(LOW,)), tmp_path / "results"
    second = results / "sweeps" / "sensitivity" / "trials" / "trial0001"
    worker = subprocess.Popen(sweep_command(study, results, tiny_base, "run"), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        wait_for(lambda: (second / "run_info.json").is_file(), 300, "the second trial to start training")
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait()
    before = load_trials(results, "sensitivity")
    assert [t.state.name for t in before] == ["COMPLETE", "RUNNING"]

    run_sweep(study, results, tiny_base, "run")
    after = load_trials(results, "sensitivity")
    assert [t.state.name for t in after] == ["COMPLETE", "FAIL", "COMPLETE", "COMPLETE", "COMPLETE"]
    assert done_pairs(after) == Counter({(REFERENCE, 0): 1, (REFERENCE, 1): 1, (LOW, 0): 1, (LOW, 1): 1})
    killed = after[1]
    assert (killed.params, killed.user_attrs["seeds"]) == (after[2].params, after[2].user_attrs["seeds"]), \
        "the killed (value, seed) was not the one run again"


def test_a_search_reevaluates_its_best_trial_on_fresh_seeds(tmp_path, tiny_base):
    study = write_study(tmp_path, name="reevaluated", trials=2, repeats=2, pruner={"name": "wilcoxon"},
                        objective={"metric": "train/reward", "direction": "maximize"},
                        space={ALPHA: {"type": "float", "low": 0.0, "high": 1.0}}, reevaluate={"top": 1, "repeats": 2})
    results = tmp_path / "results"
    run_sweep(study, results, tiny_base, "run")
    trials = load_trials(results, "reevaluated")
    assert [t.user_attrs["role"] for t in trials] == ["search", "search", "reevaluation"]
    search, fresh = trials[:2], trials[2]
    best = max(search, key=lambda t: t.value)
    assert fresh.user_attrs["reevaluates"] == best.number and fresh.params == best.params
    assert [t.user_attrs["seeds"] for t in trials] == [[0, 1], [0, 1], [2, 3]]
    for trial in trials:  # the objective is the mean of the seeds, with its standard error
        values = list(trial.user_attrs["seed_values"].values())
        assert trial.value == pytest.approx(sum(values) / 2) and trial.user_attrs["se"] >= 0
    run_sweep(study, results, tiny_base, "report")
    out = results / "sweeps" / "reevaluated"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["best"]["reevaluated"] == pytest.approx(fresh.value)
    assert summary["best"]["shrinkage"] == pytest.approx(best.value - fresh.value)
    assert summary["best"]["value"] == pytest.approx(fresh.value) and summary["best"]["trial"] == best.number
    assert yaml.safe_load((out / "best_params.yaml").read_text()) == best.params
    assert "importance" not in summary["figures"] and summary["importances"].startswith("n/a (one parameter")
