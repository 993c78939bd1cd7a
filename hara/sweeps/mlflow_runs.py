"""MLflow for sweeps: one parent run per study, one child run per trial (tag ``mlflow.parentRunId``).

A trial's child run is created when the trial starts and recorded in the trial's run folder (``mlflow_run.json``),
so ``hara.rlvr.train.train`` reopens it and logs the training curves and config there. :class:`TrialRunCallback`
(an Optuna study callback, ``callback(study, frozen_trial)``) closes it when the trial ends: the trial's params,
every intermediate value (``sweep/intermediate`` at its step), the objective (``sweep/objective`` and the named
metric), the state and, for a failed trial, the reason.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from hara.rlvr.presets import config_preset
from hara.tracking import MlflowRun, metric_name, open_run, start_run

__all__ = ["TrialRunCallback", "child_run", "parent_run", "run_params"]

#: Optuna trial state -> MLflow run status
RUN_STATUS = {"COMPLETE": "FINISHED", "PRUNED": "KILLED", "FAIL": "FAILED"}


def parent_run(spec, config: Mapping) -> MlflowRun:
    """The study's parent run (created by the first worker, under the study lock; its id lives in the study dir)."""
    fields = spec.fields
    tags = {
        "stage": "sweep",
        "sweep.study": fields["name"],
        "method": fields["method"],
        "rlvr": fields["rlvr"],
        "size": fields["size"],
        "sweep.metric": fields["objective"]["metric"],
    }
    params = {
        "sweep.trials": fields["trials"],
        "sweep.direction": fields["objective"]["direction"],
        "sweep.sampler": fields["sampler"]["name"],
        "sweep.pruner": fields["pruner"]["name"],
        "sweep.space": {k: dict(v) for k, v in fields["space"].items()},
        "sweep.base_config": spec.base_source,
    }
    run, _ = start_run(
        config["tracking"]["mlflow_uri"], config["name"], f"sweep-{fields['name']}", spec.study_dir, tags, params
    )
    return run


def child_run(spec, config: Mapping, parent: MlflowRun, trial: Any, run_dir: Path) -> MlflowRun:
    """The trial's child run, recorded in ``run_dir`` (reopened if it exists), tagged with its role and seeds."""
    from hara.sweeps.design import role_of, seeds_of

    number = trial.number
    tags = {
        "mlflow.parentRunId": parent.run_id,
        "stage": "sweep",
        "sweep.study": spec.fields["name"],
        "sweep.trial_number": number,
        "method": spec.fields["method"],
        "sweep.role": role_of(trial),
        "sweep.seeds": ",".join(map(str, seeds_of(trial, spec))),
    }
    if "reevaluates" in trial.user_attrs:
        tags["sweep.reevaluates"] = trial.user_attrs["reevaluates"]
    run, _ = start_run(
        parent.tracking_uri,
        config["name"],
        f"sweep-{spec.fields['name']}-trial{number}",
        run_dir,
        tags,
        dict(trial.params),
    )
    return run


def run_params(spec, config: Mapping) -> dict:
    """What a trial trained with, named as the training stage names it (hara.<knob>, training.<key>)."""
    from hara.rlvr.session import method_params

    params = {f"hara.{k}": v for k, v in method_params(config, spec.fields["method"]).items()}
    params.update({f"training.{k}": v for k, v in config["training"].items()})
    params.update({f"rlvr.{k}": v for k, v in dataclasses.asdict(config_preset(config, spec.fields["rlvr"])).items()})
    return params


class TrialRunCallback:
    """Closes a finished trial's child run with its params, intermediate values, objective and state."""

    def __init__(self, spec, trial_dir: Callable[[int], Path]) -> None:
        self.spec, self.trial_dir = spec, trial_dir

    def __call__(self, study: Any, trial: Any) -> None:
        run = open_run(self.trial_dir(trial.number))
        if run is None:
            return  # the worker died before the trial's run existed: nothing was logged, nothing to close
        run.log_params(trial.params)
        if len(trial.user_attrs.get("seeds", [0])) == 1:  # several seeds report per-problem instances, not steps
            for step, value in sorted(trial.intermediate_values.items()):
                run.log_metrics({"sweep/intermediate": value}, step=step)
        final_step = max(trial.intermediate_values, default=0)
        if trial.value is not None:
            metric = self.spec.fields["objective"]["metric"]
            run.log_metrics({"sweep/objective": trial.value, metric_name(metric): trial.value}, step=final_step)
        for seed, value in sorted(trial.user_attrs.get("seed_values", {}).items(), key=lambda kv: int(kv[0])):
            run.log_metrics({"sweep/seed_objective": value}, step=int(seed))
        if trial.user_attrs.get("se") is not None:
            run.log_metrics({"sweep/objective_se": trial.user_attrs["se"]}, step=final_step)
        tags = {"sweep.state": trial.state.name}
        if "fail_reason" in trial.user_attrs:
            tags["sweep.fail_reason"] = trial.user_attrs["fail_reason"][:5000]
        run.set_tags(tags)
        run.finish(RUN_STATUS.get(trial.state.name, "FAILED"))
