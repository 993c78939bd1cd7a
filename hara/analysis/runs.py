"""What each built-in analysis trains and reads, from the validated config: its extra training runs (grid cells with
config overrides, ``hara train --set KEY=VALUE``) and the files its job reads besides them. The registry
(:mod:`hara.analysis.registry`) names these functions in the analyses' declarations.

The FGW variants override ``hara.hara.alpha`` (and, for the hidden-state structure, ``hara.hara.structure`` of the
method's exact counterpart), the exact-vs-linearized study ``training.steps``, the rollout-count study
``training.group_size``. They use the first size, the host preset (grpo when trained) and every grid seed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hara import layout
from hara.config import get_path
from hara.layout import Cell, method_seeds

__all__ = [
    "AnalysisRun",
    "exact_counterpart",
    "exact_runs",
    "grid_finals",
    "group_size_inputs",
    "group_size_runs",
    "host_rlvr",
    "interpretability_inputs",
    "probe_checkpoint",
    "probed_methods",
    "variants_runs",
]


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


def _runs(config: Mapping, study: str, label: str, method: str, overrides: dict[str, Any]) -> list[AnalysisRun]:
    """The study's run of ``method`` for every grid seed; overrides equal to the config are dropped."""
    changed = tuple((k, v) for k, v in overrides.items() if get_path(config, k) != v)
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


def variants_runs(config: Mapping) -> list[AnalysisRun]:
    """W, GW and FGW: the variant method at each variant's alpha, under every structure."""
    from hara.ot.exact import FGW_VARIANTS  # POT and torch: imported only when the study is on

    a = config["analyses"]
    alphas = {v: (config["hara"]["hara"]["alpha"] if v == "fgw" else FGW_VARIANTS[v]) for v in a["variants"]}
    return [
        r
        for structure in a["structures"]
        for v, alpha in alphas.items()
        for r in _runs(config, "variants", *_variant_run(a["variant_method"], v, alpha, structure))
    ]


def exact_runs(config: Mapping) -> list[AnalysisRun]:
    """Every exact method next to its exact counterpart, for analyses.exact_steps (0: training.steps)."""
    a = config["analyses"]
    steps = {"training.steps": a["exact_steps"]} if a["exact_steps"] else {}
    label = f"steps{a['exact_steps'] or config['training']['steps']}"
    return [
        r
        for m in a["exact_methods"]
        for method in (m, exact_counterpart(m))
        for r in _runs(config, "exact", label, method, steps)
    ]


def group_size_runs(config: Mapping) -> list[AnalysisRun]:
    """Every group-size method at every G of analyses.group_sizes."""
    a = config["analyses"]
    return [
        r
        for g in a["group_sizes"]
        for m in a["group_size_methods"]
        for r in _runs(config, "group_size", f"G{g}", m, {"training.group_size": int(g)})
    ]


def probe_checkpoint(config: Mapping) -> str:
    """The checkpoint the interpretability study probes: the grid cell (first size, host preset, first seed) of
    ``analyses.interpretability.method``."""
    method = config["analyses"]["interpretability"]["method"]
    cell = Cell(config["models"]["sizes"][0], host_rlvr(config), method, method_seeds(config, method)[0])
    return str(layout.run_dir(config["results_dir"], cell) / layout.FINAL_DIR)


def probed_methods(config: Mapping) -> list[str]:
    """The method whose grid cell the interpretability study probes (the grid's train rule trains it)."""
    return [config["analyses"]["interpretability"]["method"]]


def interpretability_inputs(config: Mapping) -> list[str]:
    """The probed checkpoint, the benchmark data and, with labeller llm, the labelling model (download_labeller's)."""
    labelling = config["analyses"]["interpretability"]
    model = [labelling["llm_model"]] if labelling["labeller"] == "llm" else []
    return [probe_checkpoint(config), layout.manifest_path(config["results_dir"]), *model]


def grid_finals(config: Mapping) -> list[str]:
    """Every grid cell's final checkpoint (the efficiency analysis reads their training curves)."""
    return [str(layout.run_dir(config["results_dir"], cell) / layout.FINAL_DIR) for cell in layout.grid_cells(config)]


def group_size_inputs(config: Mapping) -> list[str]:
    """The interpretability analysis' CSV when that study is on (FGW's score at G rollouts)."""
    on = config["analyses"]["interpretability"]["enabled"]
    return [f"{layout.analysis_dir(config['results_dir'], 'interpretability')}/interpretability.csv"] if on else []
