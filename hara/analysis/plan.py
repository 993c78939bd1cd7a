"""Which training runs and outputs the analyses need, from the validated config (used by workflows/analyses.smk,
the analysis commands and the report, so all three agree on every path).

Extra training runs are grid cells with config overrides (``hara train --set KEY=VALUE``): the FGW variants
override ``hara.hara.alpha`` (and, for the hidden-state structure, ``hara.hara.structure`` of the method's exact
counterpart), the exact-vs-linearized study ``training.steps``, the rollout-count study
``training.group_size``. They use the first size, the host preset (grpo when trained) and every grid seed. A run
whose overrides change nothing and whose method is in the grid *is* that grid cell and reuses its folders.
Every extra run is logged to its own MLflow experiment ``<name>-<study>-<label>``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hara import layout
from hara.layout import Cell, method_seeds

__all__ = [
    "ANALYSIS_NAMES",
    "AnalysisRun",
    "analysis_inputs",
    "analysis_methods",
    "analysis_outputs",
    "analysis_runs",
    "enabled_analyses",
    "eval_dir",
    "exact_counterpart",
    "host_rlvr",
    "override_args",
    "probe_checkpoint",
    "run_dir",
    "study_runs",
]

#: Every analysis, in report order; each writes <results>/analysis/<name>/<name>.csv, <name>.json and figures.
ANALYSIS_NAMES = ("variants", "exact", "group_size", "efficiency", "interpretability")


@dataclass(frozen=True)
class AnalysisRun:
    """One training run of a study: a grid cell (size, rlvr, method, seed) plus config overrides."""

    study: str
    label: str
    size: str
    rlvr: str
    method: str
    seed: int
    overrides: tuple[tuple[str, Any], ...]

    @property
    def cell(self) -> str:
        return Cell(self.size, self.rlvr, self.method, self.seed).path()


def host_rlvr(config: Mapping) -> str:
    """The preset of the analyses and of the report's main table: grpo when trained, else the grid's first."""
    presets = config["grid"]["rlvr"]
    return "grpo" if "grpo" in presets else presets[0]


def exact_counterpart(method: str) -> str:
    """hara_tok -> hara_exact_tok (the POT-backed registry entry of the same level)."""
    return method.replace("hara_", "hara_exact_", 1)


def _lookup(config: Mapping, key: str) -> Any:
    node: Any = config
    for part in key.split("."):
        node = node[part]
    return node


def _runs(config: Mapping, study: str, label: str, method: str, overrides: dict[str, Any]) -> list[AnalysisRun]:
    """The study's run of ``method`` for every grid seed; overrides equal to the config are dropped."""
    changed = tuple((k, v) for k, v in overrides.items() if _lookup(config, k) != v)
    size, rlvr = config["models"]["sizes"][0], host_rlvr(config)
    return [AnalysisRun(study, label, size, rlvr, method, int(seed), changed) for seed in config["grid"]["seeds"]]


def _variant_run(method: str, variant: str, alpha: float, structure: str) -> tuple[str, str, dict[str, Any]]:
    """(label, method, overrides) of a variant: the method at that alpha with training's positional structure, or
    its exact counterpart with the hidden-state structure (the linearization needs 1-D structures)."""
    if structure == "position":
        return variant, method, {"hara.hara.alpha": float(alpha)}
    return (
        f"{variant}_{structure}",
        exact_counterpart(method),
        {"hara.hara.alpha": float(alpha), "hara.hara.structure": structure},
    )


def study_runs(config: Mapping, study: str) -> list[AnalysisRun]:
    """The training runs of one study ([] for studies without training runs or switched off)."""
    if study not in enabled_analyses(config):
        return []
    a = config["analyses"]
    if study == "variants":
        from hara.ot.exact import FGW_VARIANTS  # POT and torch: imported only when the study is on

        alphas = {v: (config["hara"]["hara"]["alpha"] if v == "fgw" else FGW_VARIANTS[v]) for v in a["variants"]}
        return [
            r
            for structure in a["structures"]
            for v, alpha in alphas.items()
            for r in _runs(config, study, *_variant_run(a["variant_method"], v, alpha, structure))
        ]
    if study == "exact":
        steps = {"training.steps": a["exact_steps"]} if a["exact_steps"] else {}
        label = f"steps{a['exact_steps'] or config['training']['steps']}"
        return [
            r
            for m in a["exact_methods"]
            for method in (m, exact_counterpart(m))
            for r in _runs(config, study, label, method, steps)
        ]
    if study == "group_size":
        return [
            r
            for g in a["group_sizes"]
            for m in a["group_size_methods"]
            for r in _runs(config, study, f"G{g}", m, {"training.group_size": int(g)})
        ]
    return []


def is_grid_cell(config: Mapping, run: AnalysisRun) -> bool:
    """True when the run is a cell of the main grid (no effective overrides, method trained there)."""
    return (
        not run.overrides and run.method in config["grid"]["methods"] and run.seed in method_seeds(config, run.method)
    )


def run_dir(config: Mapping, run: AnalysisRun) -> str:
    """The run's training folder: the grid cell's when it is one, else below <results>/analysis/train/."""
    results = config["results_dir"]
    if is_grid_cell(config, run):
        return str(layout.run_dir(results, Cell(run.size, run.rlvr, run.method, run.seed)))
    return f"{results}/analysis/train/{run.study}/{run.label}/{run.cell}"


def eval_dir(config: Mapping, run: AnalysisRun) -> str:
    """The run's evaluation folder (holding scores.json), following :func:`run_dir`."""
    results = config["results_dir"]
    if is_grid_cell(config, run):
        return str(layout.eval_dir(results, Cell(run.size, run.rlvr, run.method, run.seed)))
    return f"{results}/analysis/eval/{run.study}/{run.label}/{run.cell}"


def override_args(config: Mapping, run: AnalysisRun) -> list[str]:
    """``--set KEY=VALUE`` arguments of the run's `hara train` (its own MLflow experiment included)."""
    name = f"{config['name']}-{run.study}-{run.label}"[:64]
    return [f"{key}={value}" for key, value in (*run.overrides, ("name", name))]


def analysis_runs(config: Mapping) -> list[AnalysisRun]:
    """Every extra training run of the enabled studies (grid cells excluded: the main DAG trains those)."""
    runs = [r for study in enabled_analyses(config) for r in study_runs(config, study)]
    unique = {(run_dir(config, r)): r for r in runs if not is_grid_cell(config, r)}
    return list(unique.values())


def enabled_analyses(config: Mapping) -> list[str]:
    """The analyses the config switches on, in report order."""
    a = config["analyses"]
    if not a["enabled"]:
        return []
    on = {
        "variants": bool(a["variants"]),
        "exact": bool(a["exact_methods"]),
        "group_size": bool(a["group_sizes"]),
        "efficiency": True,
        "interpretability": a["interpretability"]["enabled"],
    }
    return [name for name in ANALYSIS_NAMES if on[name]]


def analysis_outputs(config: Mapping, name: str) -> dict[str, str]:
    """The files analysis ``name`` writes: csv, json (title, paper claim, our finding, figure names)."""
    folder = f"{config['results_dir']}/analysis/{name}"
    return {"csv": f"{folder}/{name}.csv", "json": f"{folder}/{name}.json"}


def analysis_methods(config: Mapping) -> list[str]:
    """Methods the analyses train beyond the grid's (e.g. hara_exact_tok; the probed checkpoint's method, which the
    grid's train rule then trains): the workflow's method wildcard allows them."""
    probed = (
        {config["analyses"]["interpretability"]["method"]} if "interpretability" in enabled_analyses(config) else set()
    )
    return sorted(({run.method for run in analysis_runs(config)} | probed) - set(config["grid"]["methods"]))


def probe_checkpoint(config: Mapping) -> str:
    """The checkpoint the interpretability study probes: the grid cell (first size, host preset, first seed) of
    ``analyses.interpretability.method``."""
    method = config["analyses"]["interpretability"]["method"]
    cell = Cell(config["models"]["sizes"][0], host_rlvr(config), method, method_seeds(config, method)[0])
    return f"{layout.run_dir(config['results_dir'], cell)}/final"


def _grid_finals(config: Mapping) -> list[str]:
    return [f"{layout.run_dir(config['results_dir'], cell)}/final" for cell in layout.grid_cells(config)]


def analysis_inputs(config: Mapping, name: str) -> list[str]:
    """The files analysis ``name`` reads: its runs' checkpoints and scores, the grid's runs (efficiency), the probed
    checkpoint and the benchmark data (interpretability); group_size also reads the interpretability CSV."""
    if name == "efficiency":
        return _grid_finals(config)
    if name == "interpretability":
        labelling = config["analyses"]["interpretability"]
        model = [labelling["llm_model"]] if labelling["labeller"] == "llm" else []  # download_labeller's output
        return [probe_checkpoint(config), f"{config['results_dir']}/data/manifest.json", *model]
    paths = [
        p
        for r in study_runs(config, name)
        for p in (f"{run_dir(config, r)}/final", f"{eval_dir(config, r)}/scores.json")
    ]
    if name == "group_size" and "interpretability" in enabled_analyses(config):
        paths.append(analysis_outputs(config, "interpretability")["csv"])
    return paths
