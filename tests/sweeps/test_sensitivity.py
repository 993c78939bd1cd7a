"""Issue 38 on the smoke config with real workers: a sensitivity study interrupted by a killed worker and restarted
ends with every (value, seed) trial done once, and the reference it lists is the reference (its runs are the
reference's, its effect exactly 0 with a zero-width interval); a search re-evaluates its best trial on fresh seeds
before writing best_params.yaml."""

from __future__ import annotations

import html
import json
import os
import signal
import subprocess
from collections import Counter

import pytest
import yaml

from tests.sweeps.conftest import (
    KNOB,
    REFERENCE,
    load_trials,
    mlflow_runs,
    run_sweep,
    sweep_command,
    sweeps_html,
    sweeps_markdown,
    wait_for,
    write_sensitivity_study,
    write_study,
)

ALPHA = "hara.hara.alpha"
LOW = 0.1  # the other value of the sensitivity studies (near greedy: more completions run to the cap)


def done_pairs(trials) -> Counter:
    return Counter((t.params[KNOB], t.user_attrs["seeds"][0]) for t in trials if t.state.name == "COMPLETE")


def test_an_interrupted_study_ends_with_every_value_and_seed_once_and_the_listed_reference_at_exactly_zero(
    tmp_path, tiny_base
):
    """temperature in [0.1, the reference] x seeds 0, 1; the worker is SIGKILLed in the second trial, restarted, and
    the study reported. The listed reference is the reference: 4 planned trials, not 6."""
    study, results = write_sensitivity_study(tmp_path), tmp_path / "results"
    second = results / "sweeps" / "sensitivity" / "trials" / "trial0001"
    worker = subprocess.Popen(
        sweep_command(study, results, tiny_base, "run"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    try:
        wait_for(lambda: (second / "run_info.json").is_file(), 300, "the second trial to start training")
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait()
    before = load_trials(results, "sensitivity")
    assert [t.state.name for t in before] == ["COMPLETE", "RUNNING"]

    run_sweep(study, results, tiny_base, "run")
    trials = load_trials(results, "sensitivity")
    assert [t.state.name for t in trials] == ["COMPLETE", "FAIL", "COMPLETE", "COMPLETE", "COMPLETE"]
    assert done_pairs(trials) == Counter({(REFERENCE, 0): 1, (REFERENCE, 1): 1, (LOW, 0): 1, (LOW, 1): 1})
    killed = trials[1]
    assert (killed.params, killed.user_attrs["seeds"]) == (trials[2].params, trials[2].user_attrs["seeds"]), (
        "the killed (value, seed) was not the one run again"
    )

    run_sweep(study, results, tiny_base, "report")
    summary = json.loads((results / "sweeps" / "sensitivity" / "summary.json").read_text())
    rows = {row["point"][KNOB]: row for row in summary["effects"]}
    same = rows[REFERENCE]
    assert (same["effect"], same["ci_low"], same["ci_high"]) == (0.0, 0.0, 0.0)
    assert (same["corrected_low"], same["corrected_high"], same["mde"]) == (0.0, 0.0, 0.0)
    assert same["verdict"] == "within noise" and same["seeds"] == 2
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    assert same["mean"] == pytest.approx(sum(t.value for t in complete if t.params[KNOB] == REFERENCE) / 2)
    other = rows[LOW]
    by_seed = {(t.params[KNOB], t.user_attrs["seeds"][0]): t.value for t in complete}
    assert other["effect"] == pytest.approx(sum(by_seed[LOW, s] - by_seed[REFERENCE, s] for s in (0, 1)) / 2)
    assert other["effect"] != 0.0, "the knob does not move the smoke objective: the test shows nothing"
    assert other["ci_low"] <= other["effect"] <= other["ci_high"]
    assert other["corrected_low"] <= other["ci_low"] and other["mde"] > 0
    assert summary["family_size"] == 2 and summary["conclusion"] in sweeps_markdown(results, results)
    page = sweeps_html(results)
    assert page.count("<table>") == 1 and "after correction" in page and html.escape(summary["conclusion"]) in page
    assert (results / "sweeps" / "sensitivity" / "effects.png").is_file()

    parents, children = mlflow_runs(results)
    assert parents[0].data.metrics["sensitivity/temperature 1/effect"] == 0.0
    finished = [c for c in children if c.data.tags["sweep.state"] == "COMPLETE"]
    assert {c.data.params[KNOB]: c.data.metrics["sweep/effect"] for c in finished} == {
        "1.0": 0.0,
        "0.1": pytest.approx(other["effect"]),
    }
    assert sum(c.info.status == "FAILED" for c in children) == 1


def test_a_search_reevaluates_its_best_trial_on_fresh_seeds(tmp_path, tiny_base):
    study = write_study(
        tmp_path,
        name="reevaluated",
        trials=2,
        pruner={"name": "none"},
        objective={"metric": "train/reward", "direction": "maximize"},
        space={ALPHA: {"type": "float", "low": 0.0, "high": 1.0}},
        reevaluate={"top": 1, "repeats": 2},
    )
    results = tmp_path / "results"
    run_sweep(study, results, tiny_base, "run")
    trials = load_trials(results, "reevaluated")
    assert [t.user_attrs["role"] for t in trials] == ["search", "search", "reevaluation"]
    search, fresh = trials[:2], trials[2]
    best = max(search, key=lambda t: t.value)
    assert fresh.user_attrs["reevaluates"] == best.number and fresh.params == best.params
    assert [t.user_attrs["seeds"] for t in trials] == [[0], [0], [1, 2]]
    values = list(fresh.user_attrs["seed_values"].values())  # the objective is the mean of the seeds, with its se
    assert fresh.value == pytest.approx(sum(values) / 2) and fresh.user_attrs["se"] >= 0
    assert (results / "sweeps" / "reevaluated" / "trials" / "trial0002" / "seed2" / "metrics.jsonl").is_file()
    _, children = mlflow_runs(results)
    child = next(c for c in children if c.data.tags["sweep.trial_number"] == "2")
    assert child.data.tags["sweep.role"] == "reevaluation" and child.data.tags["sweep.seeds"] == "1,2"
    assert "time/step_s" in child.data.metrics  # its first seed's training curves
    assert child.data.metrics["sweep/objective_se"] == pytest.approx(fresh.user_attrs["se"])
    run_sweep(study, results, tiny_base, "report")
    out = results / "sweeps" / "reevaluated"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["best"]["reevaluated"] == pytest.approx(fresh.value)
    assert summary["best"]["shrinkage"] == pytest.approx(best.value - fresh.value)
    assert summary["best"]["value"] == pytest.approx(fresh.value) and summary["best"]["trial"] == best.number
    assert yaml.safe_load((out / "best_params.yaml").read_text()) == best.params
    assert "importance" not in summary["figures"] and summary["importances"].startswith("n/a (one parameter")
