"""`hara sweep report`: sensitivity figures and best parameters of a study, from the trials in its storage.

Writes into results/sweeps/<name>/: ``history.png`` (objective per trial and best so far), ``importance.png``
(fANOVA parameter importance, seeded), ``param_<key>.png`` (objective against each swept parameter, pruned trials at
their last reported value), ``best_params.yaml`` (ready for ``--set``), ``trials.csv`` and ``summary.json``. The
figures are plain matplotlib (Agg). The study's MLflow parent run gets the best value and the folder's files.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Mapping
from pathlib import Path

import yaml

from hara.sweeps.study import METRIC_DESCRIPTIONS

__all__ = ["write_summary"]

STATE_STYLE = {"COMPLETE": {"color": "tab:blue", "marker": "o", "label": "complete"},
               "PRUNED": {"color": "tab:gray", "marker": "x", "label": "pruned (last reported value)"}}


def plotted_value(trial) -> float | None:
    """The value a trial is drawn at: its objective, or a pruned trial's last intermediate value."""
    if trial.state.name == "COMPLETE":
        return trial.value
    if trial.state.name == "PRUNED" and trial.intermediate_values:
        return trial.intermediate_values[max(trial.intermediate_values)]
    return None


def _figure():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt, *plt.subplots(figsize=(5.5, 3.8))


def _save(plt, fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_history(trials, metric: str, maximize: bool, path: Path) -> Path:
    plt, fig, ax = _figure()
    best, best_line = None, []
    for trial in trials:
        if trial.state.name == "COMPLETE":
            best = trial.value if best is None else (max if maximize else min)(best, trial.value)
        best_line.append((trial.number, best))
    _scatter(ax, trials, lambda t: t.number)
    ax.step([n for n, b in best_line if b is not None], [b for _, b in best_line if b is not None], where="post",
            color="tab:red", label="best so far")
    ax.set(xlabel="trial", ylabel=metric, title="Optimization history")
    ax.legend(fontsize=8)
    return _save(plt, fig, path)


def _scatter(ax, trials, x_of) -> None:
    for state, style in STATE_STYLE.items():
        points = [(x_of(t), plotted_value(t)) for t in trials
                  if t.state.name == state and plotted_value(t) is not None]
        if points:
            ax.scatter(*zip(*points), **style)


def plot_param(trials, name: str, metric: str, path: Path) -> Path:
    plt, fig, ax = _figure()
    with_param = [t for t in trials if name in t.params]
    categorical = any(isinstance(t.params[name], (str, bool)) for t in with_param)
    if categorical:  # categorical axes as labelled positions in first-seen order
        order = list(dict.fromkeys(str(t.params[name]) for t in with_param))
        _scatter(ax, with_param, lambda t: order.index(str(t.params[name])))
        ax.set_xticks(range(len(order)), order)
    else:
        _scatter(ax, with_param, lambda t: t.params[name])
        if all(t.distributions[name].log for t in with_param if hasattr(t.distributions[name], "log")):
            ax.set_xscale("log")
    ax.set(xlabel=name, ylabel=metric, title=f"{metric} vs {name}")
    ax.legend(fontsize=8)
    return _save(plt, fig, path)


def plot_importance(importances: Mapping[str, float], path: Path) -> Path:
    plt, fig, ax = _figure()
    names = list(importances)[::-1]
    ax.barh(names, [importances[n] for n in names], color="tab:blue")
    ax.set(xlabel="importance (fANOVA)", title="Parameter importance")
    return _save(plt, fig, path)


def param_importances(study, seed: int) -> dict[str, float]:
    """fANOVA importance of each parameter over the complete trials (a single parameter gets 1.0)."""
    from optuna.importance import FanovaImportanceEvaluator, get_param_importances

    return {name: float(value) for name, value in
            get_param_importances(study, evaluator=FanovaImportanceEvaluator(seed=seed)).items()}


def write_trials_csv(trials, names: list[str], path: Path) -> None:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["number", "state", "value", *names, "worker_pid", "fail_reason"])
        for t in trials:
            writer.writerow([t.number, t.state.name, "" if t.value is None else t.value,
                             *[t.params.get(n, "") for n in names], t.user_attrs.get("worker", {}).get("pid", ""),
                             t.user_attrs.get("fail_reason", "")])


def safe_name(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", key)


def load_existing_study(spec):
    """The study from its storage; a study that was never run is a user error (and nothing is created)."""
    import optuna

    from hara.errors import UserError
    from hara.sweeps.worker import open_storage

    missing = UserError(f"study {spec.fields['name']}: not found (run `hara sweep run --study {spec.path}` first)")
    if not spec.fields["storage"] and not (spec.study_dir / "journal.log").is_file():
        raise missing
    try:
        return optuna.load_study(study_name=spec.fields["name"], storage=open_storage(spec))
    except KeyError:
        raise missing from None


def write_summary(spec, mlflow: bool = True) -> dict:
    """Figures, best params, trials table and summary.json of a study; returns summary.json's content."""
    from hara.errors import UserError

    study, out = load_existing_study(spec), spec.study_dir
    trials = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    if not complete:
        raise UserError(f"study {spec.fields['name']}: no complete trial yet in {out} (run `hara sweep run` first)")
    metric, names = spec.fields["objective"]["metric"], list(spec.fields["space"])
    maximize = spec.fields["objective"]["direction"] == "maximize"
    figures = {"history": plot_history(trials, metric, maximize, out / "history.png")}
    figures.update({f"param:{n}": plot_param(trials, n, metric, out / f"param_{safe_name(n)}.png") for n in names})
    varied = len({t.value for t in complete}) >= 2  # fANOVA needs a varying objective
    importances = param_importances(study, spec.fields["sampler"]["seed"]) if varied else {}
    if importances:
        figures["importance"] = plot_importance(importances, out / "importance.png")
    best = study.best_trial
    (out / "best_params.yaml").write_text(yaml.safe_dump(dict(best.params), sort_keys=False), encoding="utf-8")
    write_trials_csv(trials, names, out / "trials.csv")
    summary = {
        "study": spec.fields["name"], "description": spec.fields["description"], "metric": metric,
        "metric_description": METRIC_DESCRIPTIONS[metric],
        "direction": spec.fields["objective"]["direction"], "method": spec.fields["method"],
        "best": {"trial": best.number, "value": best.value, "params": best.params},
        "states": {s: sum(t.state.name == s for t in trials) for s in ("COMPLETE", "PRUNED", "FAIL", "RUNNING")},
        "importances": importances or "n/a (fewer than two distinct objective values)",
        "figures": {k: p.name for k, p in figures.items()},
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    if mlflow:
        log_summary(spec, summary)
    return summary


def log_summary(spec, summary: Mapping) -> None:
    """Best value on the parent run, the summary files as its artifacts; the parent run is then finished."""
    from hara.tracking import metric_name, open_run

    run = open_run(spec.study_dir)
    if run is None:
        return
    run.log_metrics({"sweep/best_objective": summary["best"]["value"],
                     metric_name(f"best/{summary['metric']}"): summary["best"]["value"]}, step=0)
    run.set_tags({"sweep.best_trial": summary["best"]["trial"]})
    for name in ["summary.json", "best_params.yaml", "trials.csv", *summary["figures"].values()]:
        run.client.log_artifact(run.run_id, str(spec.study_dir / name), artifact_path="summary")
    run.finish()
