"""The analysis registry: everything the harness knows about an analysis, declared once.

An :class:`AnalysisSpec` names the analysis, says when the config switches it on, which extra training runs it needs
(grid cells with config overrides), which other files its job reads, which grid methods it probes, whether its job
runs a model (a GPU on the cluster), the paper's claim its report section tests, and its function
(``"module:function"``, imported only when the analysis runs). The workflow (rules ``analysis_train``,
``analysis_evaluate``, ``analysis``), `hara analysis`, the report's sections and the claims read it from here through
:mod:`hara.analysis.workflow`. Registry order is report order.

Analyses from outside the repository: a package declares an entry point in the ``hara.analyses`` group whose object is
an :class:`AnalysisSpec` (or a list of them); its knobs live in the config's ``analyses.plugins.<name>`` mapping, and it
is on when ``analyses.enabled`` is and that mapping is given (unless the spec says otherwise). This module imports
nothing heavy (no torch): the Snakefile reads it when it builds the DAG.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hara.analysis import runs
from hara.analysis.claims import PAPER_NUMBERS
from hara.plugins import Registry, load_reference

__all__ = [
    "ANALYSES",
    "ENTRY_POINT_GROUP",
    "AnalysisSpec",
    "analyses",
    "get_analysis",
    "plugin_knobs",
    "register_analysis",
]

ENTRY_POINT_GROUP = "hara.analyses"


def plugin_knobs(config: Mapping, name: str) -> dict | None:
    """A plug-in analysis' knobs (``analyses.plugins.<name>``), None when the config does not give them."""
    return config["analyses"].get("plugins", {}).get(name)


def _nothing(config: Mapping) -> list:
    return []


@dataclass(frozen=True)
class AnalysisSpec:
    """One analysis, as the workflow, the CLI and the report see it. Every callable takes the resolved config."""

    name: str
    run: str  # "module:function", (config, results folder, output folder) -> hara.analysis.output.AnalysisResult
    claim: str = ""  # the paper's statement its section tests ("" where the paper states none)
    enabled: Callable[[Mapping], bool] | None = None  # on when analyses.enabled and this (None: its knobs are given)
    runs: Callable[[Mapping], list[runs.AnalysisRun]] = _nothing  # its extra training runs
    inputs: Callable[[Mapping], list[str]] = _nothing  # what else its job reads (beyond its runs' finals and scores)
    probes: Callable[[Mapping], list[str]] = _nothing  # methods whose grid cells it reads even when not in the grid
    gpu: bool = False  # its job runs a model (GPUs where evaluation jobs get them)

    def is_on(self, config: Mapping) -> bool:
        if not config["analyses"]["enabled"]:
            return False
        return self.enabled(config) if self.enabled else plugin_knobs(config, self.name) is not None

    def load_run(self) -> Callable[..., Any]:
        """The analysis function (imported now: it may need torch and the models)."""
        return load_reference(self.run, f"analysis {self.name!r}: run")


_BUILT_IN = [
    AnalysisSpec(
        "variants",
        "hara.analysis.studies:variants_study",
        "W (features only, α=0) and GW (structure only, α=1) are ablations of HarA; the paper reports FGW's "
        "interpretability advantage over both (see the interpretability section) and no accuracy numbers for them "
        "in the public summary.",
        enabled=lambda config: bool(config["analyses"]["variants"]),
        runs=runs.variants_runs,
    ),
    AnalysisSpec(
        "exact",
        "hara.analysis.studies:exact_study",
        f"Anchor-guided linearization: {PAPER_NUMBERS['exact_seq']}; {PAPER_NUMBERS['exact_tok']}; "
        f"{PAPER_NUMBERS['exact_accuracy']}.",
        enabled=lambda config: bool(config["analyses"]["exact_methods"]),
        runs=runs.exact_runs,
    ),
    AnalysisSpec(
        "group_size",
        "hara.analysis.studies:group_size_study",
        "Interpretability improves monotonically with the number of sampled rollouts (no numbers in the public "
        "summary); accuracy vs G is not reported there.",
        enabled=lambda config: bool(config["analyses"]["group_sizes"]),
        runs=runs.group_size_runs,
        inputs=runs.group_size_inputs,
    ),
    AnalysisSpec(
        "efficiency",
        "hara.analysis.studies:efficiency_study",
        f"Efficiency: {PAPER_NUMBERS['overhead']}, {PAPER_NUMBERS['speedup']}, {PAPER_NUMBERS['equal_time']}; "
        "faster convergence and higher final accuracy than GRPO.",
        enabled=lambda config: True,
        inputs=runs.grid_finals,
    ),
    AnalysisSpec(
        "interpretability",
        "hara.analysis.interpret:interpretability_study",
        "MATH500 (stages labelled by an external LLM): barycenter supports map sparsely and block-diagonally onto "
        "reasoning stages; FGW gives higher average likelihood scores than W and GW, improving monotonically with "
        "the number of sampled rollouts (no numbers in the public summary).",
        enabled=lambda config: config["analyses"]["interpretability"]["enabled"],
        inputs=runs.interpretability_inputs,
        probes=runs.probed_methods,
        gpu=True,
    ),
]
#: Every analysis in report order: the built-ins, then what installed packages declare in ``hara.analyses``.
ANALYSES: Registry[AnalysisSpec] = Registry(
    "analysis",
    _BUILT_IN,
    group=ENTRY_POINT_GROUP,
    accepts=lambda spec: isinstance(spec, AnalysisSpec),
    what="AnalysisSpec(s)",
)
analyses, get_analysis, register_analysis = ANALYSES.entries, ANALYSES.get, ANALYSES.register
