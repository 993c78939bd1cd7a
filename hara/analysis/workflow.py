"""Which training runs and outputs the enabled analyses need, from the validated config and the analysis registry
(:mod:`hara.analysis.registry`): used by workflows/analyses.smk, the analysis commands and the report, so all three
agree on every path.

Extra training runs are grid cells with config overrides (``hara train --set KEY=VALUE``), declared by each analysis
(:mod:`hara.analysis.runs`). A run whose overrides change nothing and whose method is in the grid *is* that grid cell
and reuses its folders. Every extra run is logged to its own MLflow experiment ``<name>-<study>-<label>``.
"""

from __future__ import annotations

from collections.abc import Mapping

from hara import layout
from hara.analysis.registry import analyses, get_analysis
from hara.analysis.runs import AnalysisRun, exact_counterpart, host_rlvr, probe_checkpoint
from hara.layout import Cell, method_seeds

__all__ = [
    "AnalysisRun",
    "analysis_gpu",
    "analysis_inputs",
    "analysis_methods",
    "analysis_names",
    "analysis_outputs",
    "analysis_runs",
    "enabled_analyses",
    "exact_counterpart",
    "host_rlvr",
    "is_grid_cell",
    "override_args",
    "probe_checkpoint",
    "study_eval_dir",
    "study_run_dir",
    "study_runs",
]


def analysis_names() -> list[str]:
    """Every registered analysis, in report order; each writes <results>/analysis/<name>/<name>.csv, <name>.json and
    figures."""
    return list(analyses())


def study_runs(config: Mapping, study: str) -> list[AnalysisRun]:
    """The training runs of one analysis ([] for analyses without training runs or switched off)."""
    return get_analysis(study).runs(config) if study in enabled_analyses(config) else []


def is_grid_cell(config: Mapping, run: AnalysisRun) -> bool:
    """True when the run is a cell of the main grid (no effective overrides, method trained there)."""
    return (
        not run.overrides and run.method in config["grid"]["methods"] and run.seed in method_seeds(config, run.method)
    )


def _cell(run: AnalysisRun) -> Cell:
    return Cell(run.size, run.rlvr, run.method, run.seed)


def study_run_dir(config: Mapping, run: AnalysisRun) -> str:
    """The run's training folder: the grid cell's when it is one, else below <results>/analysis/train/."""
    results = config["results_dir"]
    if is_grid_cell(config, run):
        return str(layout.run_dir(results, _cell(run)))
    return layout.analysis_train_dir(results, run.study, run.label, _cell(run))


def study_eval_dir(config: Mapping, run: AnalysisRun) -> str:
    """The run's evaluation folder (holding scores.json), following :func:`run_dir`."""
    results = config["results_dir"]
    if is_grid_cell(config, run):
        return str(layout.eval_dir(results, _cell(run)))
    return layout.analysis_eval_dir(results, run.study, run.label, _cell(run))


def override_args(config: Mapping, run: AnalysisRun) -> list[str]:
    """``--set KEY=VALUE`` arguments of the run's `hara train` (its own MLflow experiment included)."""
    name = f"{config['name']}-{run.study}-{run.label}"[:64]
    return [f"{key}={value}" for key, value in (*run.overrides, ("name", name))]


def analysis_runs(config: Mapping) -> list[AnalysisRun]:
    """Every extra training run of the enabled studies (grid cells excluded: the main DAG trains those)."""
    runs = [r for study in enabled_analyses(config) for r in study_runs(config, study)]
    unique = {(study_run_dir(config, r)): r for r in runs if not is_grid_cell(config, r)}
    return list(unique.values())


def enabled_analyses(config: Mapping) -> list[str]:
    """The analyses the config switches on, in report order."""
    return [name for name, spec in analyses().items() if spec.is_on(config)]


def analysis_outputs(config: Mapping, name: str) -> dict[str, str]:
    """The files analysis ``name`` writes: csv, json (title, paper claim, our finding, figure names)."""
    folder = layout.analysis_dir(config["results_dir"], name)
    return {"csv": f"{folder}/{name}.csv", "json": f"{folder}/{name}.json"}


def analysis_methods(config: Mapping) -> list[str]:
    """Methods the analyses train beyond the grid's (e.g. hara_exact_tok; the probed checkpoint's method, which the
    grid's train rule then trains): the workflow's method wildcard allows them."""
    probed = {m for name in enabled_analyses(config) for m in get_analysis(name).probes(config)}
    return sorted(({run.method for run in analysis_runs(config)} | probed) - set(config["grid"]["methods"]))


def analysis_inputs(config: Mapping, name: str) -> list[str]:
    """The files analysis ``name`` reads: its runs' checkpoints and scores, then what its declaration adds ([] when
    the config leaves it off, so a plug-in's input function never sees a config without its knobs)."""
    if name not in enabled_analyses(config):
        return []
    runs = [
        p
        for r in study_runs(config, name)
        for p in (f"{study_run_dir(config, r)}/{layout.FINAL_DIR}", f"{study_eval_dir(config, r)}/{layout.SCORES_FILE}")
    ]
    return [*runs, *get_analysis(name).inputs(config)]


def analysis_gpu(name: str) -> bool:
    """Whether analysis ``name``'s job runs a model (GPUs where evaluation jobs get them)."""
    return get_analysis(name).gpu
