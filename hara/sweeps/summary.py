"""`hara sweep report`: what a study found, from the trials in its storage.

Writes into results/sweeps/<name>/ ``trials.csv``, ``summary.json`` and, by the study's kind:

- search: ``history.png`` (objective per trial and best so far), ``param_<key>.png`` (objective against each swept
  parameter, pruned trials at their last value), ``importance.png`` (fANOVA, seeded; studies of two parameters or
  more: one parameter would always get 1.0) and ``best_params.yaml`` (ready for ``--set``): the choice of
  :func:`hara.sweeps.design.choose`, made on the re-evaluated values when the study re-evaluates, with how much
  the best value shrank on fresh seeds;
- sensitivity: ``effects.png`` and the table of each value's corrected effect against the reference, with one
  conclusion line (:mod:`hara.sweeps.effects`).

The figures are plain matplotlib (Agg). The study's MLflow parent run gets the result (best value, or each value's
effect and interval, also set on the value's child runs) and the folder's files.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Mapping
from pathlib import Path

import yaml

from hara.layout import BEST_PARAMS, SUMMARY_FILE, TRIALS_FILE
from hara.results.study_summary import EffectRow, SearchChoice, SearchFindings, SensitivityFindings, StudySummary
from hara.sweeps.study import OBJECTIVES

__all__ = ["write_summary"]

STATE_STYLE = {
    "COMPLETE": {"color": "tab:blue", "marker": "o", "label": "complete"},
    "PRUNED": {"color": "tab:gray", "marker": "x", "label": "pruned (last reported value)"},
}


def plotted_value(trial) -> float | None:
    """The value a trial is drawn at: its objective, or a pruned trial's last intermediate value (the mean of its
    finished seeds for a trial of several)."""
    if trial.state.name == "COMPLETE":
        return trial.value
    if trial.state.name == "PRUNED" and trial.user_attrs.get("seed_values"):
        values = list(trial.user_attrs["seed_values"].values())
        return sum(values) / len(values)
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
    ax.step(
        [n for n, b in best_line if b is not None],
        [b for _, b in best_line if b is not None],
        where="post",
        color="tab:red",
        label="best so far",
    )
    ax.set(xlabel="trial", ylabel=metric, title="Optimization history")
    ax.legend(fontsize=8)
    return _save(plt, fig, path)


def _scatter(ax, trials, x_of) -> None:
    for state, style in STATE_STYLE.items():
        points = [(x_of(t), plotted_value(t)) for t in trials if t.state.name == state and plotted_value(t) is not None]
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

    return {
        name: float(value)
        for name, value in get_param_importances(study, evaluator=FanovaImportanceEvaluator(seed=seed)).items()
    }


def write_trials_csv(trials, names: list[str], path: Path) -> None:
    from hara.sweeps.design import role_of

    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["number", "state", "value", "se", "role", "seeds", *names, "worker_pid", "fail_reason"])
        for t in trials:
            se = t.user_attrs.get("se")
            writer.writerow(
                [
                    t.number,
                    t.state.name,
                    "" if t.value is None else t.value,
                    "" if se is None else se,
                    role_of(t),
                    " ".join(map(str, t.user_attrs.get("seeds", []))),
                    *[t.params.get(n, "") for n in names],
                    t.user_attrs.get("worker", {}).get("pid", ""),
                    t.user_attrs.get("fail_reason", ""),
                ]
            )


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
    """The study's figures, tables and summary.json (by its kind); returns summary.json's content."""
    from hara.errors import UserError

    study, out = load_existing_study(spec), spec.study_dir
    trials = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
    if not any(t.state.name == "COMPLETE" for t in trials):
        raise UserError(f"study {spec.fields['name']}: no complete trial yet in {out} (run `hara sweep run` first)")
    metric = spec.fields["objective"]["metric"]
    summary = StudySummary(
        study=spec.fields["name"],
        kind=spec.kind,
        description=spec.fields["description"],
        metric=metric,
        metric_description=OBJECTIVES[metric].description,
        direction=spec.fields["objective"]["direction"],
        method=spec.fields["method"],
        seeds=spec.seeds,
        states={s: sum(t.state.name == s for t in trials) for s in ("COMPLETE", "PRUNED", "FAIL", "RUNNING")},
        findings=KIND_SUMMARIES[spec.kind](spec, study, trials),
    )
    write_trials_csv(trials, list(spec.fields["space"]), out / TRIALS_FILE)
    summary.write(out / SUMMARY_FILE)
    if mlflow:
        log_summary(spec, summary, trials)
    return summary.as_json()


def search_summary(spec, study, trials) -> SearchFindings:
    """Figures over the search trials, importance (two parameters or more), the choice and best_params.yaml."""
    from hara.sweeps.design import SEARCH, choose, role_of

    out, metric, names = spec.study_dir, spec.fields["objective"]["metric"], list(spec.fields["space"])
    maximize = spec.fields["objective"]["direction"] == "maximize"
    search = [t for t in trials if role_of(t) == SEARCH]
    figures = {"history": plot_history(search, metric, maximize, out / "history.png")}
    figures.update({f"param:{n}": plot_param(search, n, metric, out / f"param_{safe_name(n)}.png") for n in names})
    complete = [t for t in search if t.state.name == "COMPLETE"]
    importances: dict | str = "n/a (one parameter: its importance is 1 by definition)"
    if len(names) >= 2:
        varied = len({t.value for t in complete}) >= 2  # fANOVA needs a varying objective
        importances = (
            param_importances(study, spec.fields["sampler"]["seed"])
            if varied
            else "n/a (fewer than two distinct objective values)"
        )
        if isinstance(importances, dict):
            figures["importance"] = plot_importance(importances, out / "importance.png")
    choice = choose(trials, maximize)
    if choice is None:
        from hara.errors import UserError

        raise UserError(f"study {spec.fields['name']}: no complete feasible search trial (see trials.csv)")
    (out / BEST_PARAMS).write_text(yaml.safe_dump(dict(choice.trial.params), sort_keys=False), encoding="utf-8")
    best = SearchChoice(
        trial=choice.trial.number,
        value=choice.reported,
        params=choice.trial.params,
        search_value=choice.value,
        search_se=choice.se,
        reevaluated=choice.reevaluated,
        reevaluated_se=choice.reevaluated_se,
        shrinkage=choice.shrinkage,
        candidates=choice.candidates,
        reevaluation_seeds=spec.reevaluation_seeds if choice.reevaluated is not None else [],
    )
    return SearchFindings(best, importances, {k: p.name for k, p in figures.items()})


def plot_effects(result, metric: str, path: Path) -> Path:
    """Effect against value: the raw interval as error bars, the corrected one as a band; 0 = the reference."""
    from hara.sweeps.effects import point_label

    plt, fig, ax = _figure()
    rows, names = result.rows(), list(result.reference)
    numeric = len(names) == 1 and all(
        isinstance(r["point"][names[0]], (int, float)) and not isinstance(r["point"][names[0]], bool) for r in rows
    )
    points = sorted(
        rows
        + [
            {
                "point": result.reference,
                "effect": 0.0,
                "ci_low": 0.0,
                "ci_high": 0.0,
                "corrected_low": 0.0,
                "corrected_high": 0.0,
                "label": point_label(result.reference),
            }
        ],
        key=lambda r: r["point"][names[0]] if numeric else 0,
    )
    x = [r["point"][names[0]] for r in points] if numeric else list(range(len(points)))
    effect = [r["effect"] for r in points]
    ax.fill_between(
        x,
        [r["corrected_low"] for r in points],
        [r["corrected_high"] for r in points],
        alpha=0.25,
        color="tab:blue",
        label=f"corrected interval ({len(rows)} values)",
    )
    ax.errorbar(
        x,
        effect,
        yerr=[[e - r["ci_low"] for e, r in zip(effect, points)], [r["ci_high"] - e for e, r in zip(effect, points)]],
        fmt="o-",
        color="tab:blue",
        capsize=3,
        label="effect, raw 95% interval",
    )
    ax.axhline(0.0, color="gray", lw=0.8)
    if numeric and min(x) > 0 and max(x) / min(x) >= 10:
        ax.set_xscale("log")
    if not numeric:
        ax.set_xticks(x, [r["label"] for r in points], rotation=20, fontsize=7)
    unit = f" ({result.unit})" if result.unit else ""
    ax.set(
        xlabel=names[0] if numeric else "value",
        ylabel=f"{metric} - reference{unit}",
        title=f"Effect against the reference {point_label(result.reference)}",
    )
    ax.legend(fontsize=8)
    return _save(plt, fig, path)


def sensitivity_summary(spec, study, trials) -> SensitivityFindings:
    """Each value's corrected effect against the reference, the figure and the conclusion line."""
    from hara.results.paired import Bootstrap
    from hara.sweeps.effects import point_label, sensitivity

    result = sensitivity(spec, trials, Bootstrap.from_config(spec.base_config))
    figures = {}
    if result.effects:
        figures["effects"] = plot_effects(result, spec.fields["objective"]["metric"], spec.study_dir / "effects.png")
    return SensitivityFindings(
        reference=result.reference,
        reference_label=point_label(result.reference),
        reference_mean=result.reference_mean * result.scale,
        unit=result.unit,
        family_size=len(result.effects),
        effects=[EffectRow(**row) for row in result.rows()],
        missing=[point_label(p) for p in result.missing],
        conclusion=result.conclusion(),
        figures={k: p.name for k, p in figures.items()},
    )


KIND_SUMMARIES = {"search": search_summary, "sensitivity": sensitivity_summary}


def log_summary(spec, summary: StudySummary, trials) -> None:
    """The result on the parent run (and each value's effect on its child runs), the summary files as the parent's
    artifacts; the parent run is then finished."""
    from hara.tracking import metric_name, open_run

    run = open_run(spec.study_dir)
    if run is None:
        return
    findings = summary.findings
    if isinstance(findings, SearchFindings):
        run.log_metrics(
            {"sweep/best_objective": findings.best.value, metric_name(f"best/{summary.metric}"): findings.best.value},
            step=0,
        )
        run.set_tags({"sweep.best_trial": findings.best.trial})
    else:
        log_effects(spec, findings, trials, run)
        run.set_tags({"sweep.conclusion": findings.conclusion[:5000]})
    files = [SUMMARY_FILE, TRIALS_FILE, *summary.figures.values()]
    files += [BEST_PARAMS] if isinstance(findings, SearchFindings) else []
    for name in files:
        run.client.log_artifact(run.run_id, str(spec.study_dir / name), artifact_path="summary")
    run.finish()


EFFECT_FIELDS = ("effect", "ci_low", "ci_high", "corrected_low", "corrected_high", "mde")


def log_effects(spec, findings: SensitivityFindings, trials, parent) -> None:
    """Parent: ``sensitivity/<value>/<field>``; each (value, seed) child run: its value's ``sweep/<field>``."""
    from hara.sweeps.design import point_key
    from hara.sweeps.worker import trial_dir
    from hara.tracking import metric_name, open_run

    by_point = {point_key(row.point): row for row in findings.effects}
    for row in findings.effects:
        parent.log_metrics(
            {metric_name(f"sensitivity/{row.label}/{f}"): getattr(row, f) for f in EFFECT_FIELDS}, step=0
        )
    for trial in trials:
        row = by_point.get(point_key(trial.params))
        child = open_run(trial_dir(spec, trial.number)) if row and trial.state.name == "COMPLETE" else None
        if child is not None:
            child.log_metrics({f"sweep/{f}": getattr(row, f) for f in EFFECT_FIELDS}, step=0)
            child.set_tags({"sweep.verdict": row.verdict})
            child.finish()
