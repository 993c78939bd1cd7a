"""Issue 7's must-show points on the smoke study: parallel workers share one exact study (Optuna + MLflow), a
raising trial is FAIL with its message, and the summary draws the figures from the real trials. A SIGKILLed
worker's trial failed and the restarted study going on: tests/sweeps/test_sensitivity.py (the same worker code for
either kind of study)."""

from __future__ import annotations

import json

import matplotlib.image
import pytest
import yaml

from hara.cli import main
from hara.sweeps.study import load_study
from hara.sweeps.worker import open_study, run_worker
from tests.sweeps.conftest import load_trials, mlflow_runs, run_sweep, sweeps_html, sweeps_markdown, write_study

FINISHED = {"COMPLETE", "PRUNED"}
PARAMS = ("hara.hara.alpha", "training.temperature")


@pytest.fixture(scope="module")
def parallel_study(tmp_path_factory, tiny_base):
    """`hara sweep run --workers 2` on the smoke study (budget 6): two worker processes, one study."""
    folder = tmp_path_factory.mktemp("parallel")
    study, results = write_study(folder), folder / "results"
    run_sweep(study, results, tiny_base, "run", "--workers", "2")
    return study, results


def test_two_parallel_workers_finish_exactly_the_budget_once_each(parallel_study):
    _, results = parallel_study
    trials = load_trials(results)
    assert [t.number for t in trials] == list(range(6))
    assert {t.state.name for t in trials} <= FINISHED
    assert len({tuple(t.params[p] for p in PARAMS) for t in trials}) == 6, "two trials drew the same parameters"
    by_worker = {}
    for t in trials:
        by_worker.setdefault(t.user_attrs["worker"]["pid"], []).append(t)
    assert len(by_worker) == 2, "one worker did all the trials"
    first, second = by_worker.values()  # the two workers' trials overlapped in time: they ran in parallel
    assert min(t.datetime_complete for t in first) > min(t.datetime_start for t in second) or min(
        t.datetime_complete for t in second
    ) > min(t.datetime_start for t in first)

    parents, children = mlflow_runs(results)
    assert len(parents) == 1 and parents[0].info.run_name == "sweep-smoke"
    assert len(children) == 6
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parents[0].info.run_id}
    numbers = sorted(int(c.data.tags["sweep.trial_number"]) for c in children)
    assert numbers == list(range(6)), "a trial was logged twice or not at all"
    for child in children:
        trial = trials[int(child.data.tags["sweep.trial_number"])]
        assert child.data.tags["sweep.state"] == trial.state.name
        assert float(child.data.params["hara.hara.alpha"]) == pytest.approx(trial.params["hara.hara.alpha"])
        assert child.data.metrics["sweep/intermediate"] == trial.intermediate_values[max(trial.intermediate_values)]
        assert "train/reward" in child.data.metrics  # the training curves went into the trial's child run
        if trial.state.name == "COMPLETE":
            assert child.data.metrics["sweep/objective"] == pytest.approx(trial.value)


def test_raising_trial_is_fail_with_its_message_and_the_study_goes_on(tmp_path, tiny_base):
    """grad_accum_steps 3 cannot split the smoke step's 8 rollouts: the training stage raises, for real."""
    path = write_study(
        tmp_path,
        name="raising",
        trials=1,
        max_failed_trials=3,
        pruner={"name": "none"},
        space={"training.grad_accum_steps": {"type": "categorical", "choices": [3, 1]}},
        objective={"metric": "validation/pass@1", "direction": "maximize"},
    )
    overrides = [f"results_dir={tmp_path / 'results'}", f"tracking.mlflow_uri=sqlite:///{tmp_path}/results/mlflow.db"]
    spec = load_study(path, overrides=overrides)
    study = open_study(spec)
    for accum in (3, 1):
        study.enqueue_trial({"training.grad_accum_steps": accum})

    summary = run_worker(spec, base_model=tiny_base)
    assert summary["trials"] == {0: "FAIL", 1: "COMPLETE"} and summary["stopped"] == "trial budget reached"
    failed, done = load_trials(tmp_path / "results", "raising")
    assert "ConfigError" in failed.user_attrs["fail_reason"] and "does not divide" in failed.user_attrs["fail_reason"]
    assert "\n" not in failed.user_attrs["fail_reason"]
    assert "Traceback" in (spec.study_dir / "trials" / "trial0000" / "error.txt").read_text()
    assert 0.0 <= done.value <= 1.0 and done.params == {"training.grad_accum_steps": 1}
    _, children = mlflow_runs(tmp_path / "results")
    by_number = {int(c.data.tags["sweep.trial_number"]): c for c in children}
    assert by_number[0].info.status == "FAILED"
    assert by_number[0].data.tags["sweep.fail_reason"] == failed.user_attrs["fail_reason"]
    assert by_number[1].data.metrics["validation/pass_at_1"] == done.value


def test_summary_draws_sensitivity_figures_from_the_trials(parallel_study, tiny_base, capsys):
    study, results = parallel_study
    args = [
        "sweep",
        "report",
        "--study",
        str(study),
        "--set",
        f"results_dir={results}",
        "--set",
        f"tracking.mlflow_uri=sqlite:///{results}/mlflow.db",
    ]
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    trials = load_trials(results)
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    best = max(complete, key=lambda t: t.value)
    assert {k: summary["best"][k] for k in ("trial", "value", "params", "reevaluated")} == {
        "trial": best.number,
        "value": best.value,
        "params": best.params,
        "reevaluated": None,
    }
    assert sum(summary["states"].values()) == 6
    # Which trials the median pruner stops depends on the two workers' pace, so the complete trials may all score
    # alike (seen under a loaded CI machine); fANOVA needs two distinct values.
    varied = len({t.value for t in complete}) >= 2
    if varied:
        assert set(summary["importances"]) == set(PARAMS)
        assert sum(summary["importances"].values()) == pytest.approx(1.0)
    else:
        assert summary["importances"] == "n/a (fewer than two distinct objective values)"
    out = results / "sweeps" / "smoke"
    expected = {"history", *(["importance"] if varied else []), *(f"param:{p}" for p in PARAMS)}
    assert set(summary["figures"]) == expected
    for name in summary["figures"].values():
        image = matplotlib.image.imread(out / name)
        assert image.shape[0] > 200 and image.std() > 0.05, f"{name} is blank"
    assert yaml.safe_load((out / "best_params.yaml").read_text()) == best.params
    rows = (out / "trials.csv").read_text().splitlines()
    assert len(rows) == 7 and rows[0].startswith("number,state,value,se,role,seeds,hara.hara.alpha")

    markdown, page = sweeps_markdown(results, results / "report"), sweeps_html(results)
    assert "## Sweeps" in markdown and markdown.count("](../sweeps/smoke/") == len(expected)
    assert page.count("<img") == len(expected) and f"{best.value:.4g}" in page
    assert "not re-evaluated: inflated by the selection over the trials" in markdown
    parents, _ = mlflow_runs(results)
    assert parents[0].info.status == "FINISHED"
    assert parents[0].data.metrics["sweep/best_objective"] == best.value


def test_trials_train_on_prompts_selected_once_from_the_split(tmp_path, tiny_base, monkeypatch):
    """With training.prompt_selection on (as in the embedded default), the study selects its RL prompts once from
    the split's training problems and every trial trains on exactly those, never on a validation problem."""
    import hara.rlvr.session as session_module
    from hara.data.format import format_prompt
    from hara.data.io import read_jsonl

    selection = {"enabled": True, "pool": 12, "samples": 1, "min_pass": 0.0, "max_pass": 1.0}
    path = write_study(
        tmp_path,
        name="selected",
        trials=2,
        pruner={"name": "none"},
        overrides={
            "rlvr.dapo.dynamic_sampling": False,
            **{f"training.prompt_selection.{key}": value for key, value in selection.items()},
        },
    )
    overrides = [f"results_dir={tmp_path / 'results'}", f"tracking.mlflow_uri=sqlite:///{tmp_path}/results/mlflow.db"]
    spec = load_study(path, overrides=overrides)
    seen = []
    original = session_module.train_dataset

    def recording(config, data_dir, prompts_dir=None):
        dataset = original(config, data_dir, prompts_dir)
        seen.append(sorted(dataset["prompt"]))
        return dataset

    monkeypatch.setattr(session_module, "train_dataset", recording)
    summary = run_worker(spec, base_model=tiny_base)
    assert summary["trials"] == {0: "COMPLETE", 1: "COMPLETE"}

    prompts_dir = spec.study_dir / "prompts"
    chosen = read_jsonl(prompts_dir / "prompts.jsonl")
    assert json.loads((prompts_dir / "selection.json").read_text())["pool_size"] == len(chosen) == 12
    held_out = {r["id"] for r in read_jsonl(spec.study_dir / "data" / "validation.jsonl")}
    assert not held_out & {r["id"] for r in chosen}
    assert seen == [sorted(format_prompt(r["problem"]) for r in chosen)] * 2
    for number in (0, 1):
        run_info = json.loads((spec.study_dir / "trials" / f"trial{number:04d}" / "run_info.json").read_text())
        assert run_info["prompts"] == str(prompts_dir)
