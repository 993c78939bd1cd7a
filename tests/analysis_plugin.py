"""An analysis from outside hara, as a plug-in package would ship it (tests/workflow/test_smoke_run.py installs it
through a ``hara.analyses`` entry point): the grid's benchmark scores counted per method, and, when its knobs give
``steps``, one extra training run of ``none`` with that many steps."""

from __future__ import annotations

import json
from pathlib import Path

from hara import layout
from hara.analysis.output import AnalysisResult
from hara.analysis.registry import AnalysisSpec, plugin_knobs
from hara.analysis.runs import AnalysisRun, host_rlvr


def toy_runs(config):
    steps = (plugin_knobs(config, "toy_count") or {}).get("steps")
    if not steps:
        return []
    size, rlvr = config["models"]["sizes"][0], host_rlvr(config)
    overrides = (("training.steps", int(steps)),)
    return [
        AnalysisRun("toy_count", f"steps{steps}", size, rlvr, "none", int(s), overrides)
        for s in config["grid"]["seeds"]
    ]


def toy_inputs(config):
    return [f"{layout.eval_dir(config['results_dir'], cell)}/scores.json" for cell in layout.grid_cells(config)]


def toy_count(config, results: Path, out: Path) -> AnalysisResult:
    rows = []
    for cell in layout.grid_cells(config):
        scores = json.loads((layout.eval_dir(results, cell) / "scores.json").read_text(encoding="utf-8"))
        rows.append([cell.method, str(cell.seed), str(len(scores["benchmarks"]))])
    return AnalysisResult(
        "toy_count",
        "Toy: benchmarks scored per run",
        "",
        f"{len(rows)} runs scored.",
        ["method", "seed", "benchmarks"],
        rows,
    )


SPEC = AnalysisSpec("toy_count", "tests.analysis_plugin:toy_count", runs=toy_runs, inputs=toy_inputs)
