"""Read what the workflow wrote for every grid cell: training metrics (metrics.jsonl) and scores (scores.json).

Paths follow hara.layout: ``<results>/train/<size>/<rlvr>/<method>/seed<k>/metrics.jsonl``
and ``<results>/eval/<size>/<rlvr>/<method>/seed<k>/scores.json``; the Base model of a size, before RL, at
``<results>/eval/<size>/base/scores.json`` (:func:`read_base_scores`). A missing file leaves the cell empty (the
report then says "n/a"); nothing is filled in. A corrupt one is an error naming it and its rule
(:mod:`hara.results.files`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from hara.layout import (
    METRICS_FILE,
    SCORES_FILE,
    SELECTED_SCORES,
    SELECTION_FILE,
    SPEED_SCORES,
    Cell,
    base_eval_dir,
    eval_dir,
    grid_cells,
    run_dir,
)
from hara.results.files import jsonl_values, read_json

__all__ = ["Cell", "Run", "collect_runs", "grid_cells", "read_base_scores", "read_run", "seed_runs"]


@dataclass
class Run:
    """What exists for one cell: per-step metrics, pass@1 per benchmark, and per benchmark each problem's pass@1
    ({problem id: pass@1}) and the evaluation fingerprint (hara.report.compare); any of them may be empty."""

    cell: Cell
    metrics: list[dict] = field(default_factory=list)
    scores: dict[str, float] = field(default_factory=dict)
    problems: dict[str, dict[str, float]] = field(default_factory=dict)
    fingerprints: dict[str, dict] = field(default_factory=dict)
    #: checkpoint selection (eval_dir/selection.json: validation pass@1 per candidate step, the selected step) and
    #: the selected checkpoint's per-problem test pass@1 (selected_scores.json); empty without selection
    selection: dict = field(default_factory=dict)
    selected_problems: dict[str, dict[str, float]] = field(default_factory=dict)
    #: the candidates' scores on the speed benchmark (eval_dir/speed.json, config report.speed; layout in
    #: hara.evaluation.speed); empty without it
    speed: dict = field(default_factory=dict)

    def speed_curve(self, benchmark: str, steps: list[int]) -> dict[int, dict] | None:
        """{step: candidate entry} of the speed scores on ``benchmark`` at every one of ``steps``; None when the run
        has none there (another benchmark, other candidate steps, not scored)."""
        if self.speed.get("benchmark") != benchmark:
            return None
        found = {c["step"]: c for c in self.speed["candidates"]}
        return {step: found[step] for step in steps} if all(step in found for step in steps) else None


def read_metrics(path: Path) -> list[dict]:
    """metrics.jsonl as a list of dicts sorted by step ([] when absent)."""
    if not path.is_file():
        return []
    return sorted((row for _, row in jsonl_values(path)), key=lambda row: row["step"])


def read_evaluation(path: Path) -> dict[str, dict]:
    """A `hara evaluate` JSON's benchmarks ({} when absent)."""
    if not path.is_file():
        return {}
    return read_json(path).get("benchmarks", {})


def read_scores(path: Path) -> dict[str, float]:
    """pass@1 per benchmark from a `hara evaluate` JSON ({} when absent)."""
    return {name: float(entry["score"]) for name, entry in read_evaluation(path).items()}


def problem_scores(evaluation: Mapping[str, dict]) -> dict[str, dict[str, float]]:
    """Per benchmark, each problem's pass@1 from a `hara evaluate` result's saved predictions."""
    return {
        name: {str(row["id"]): float(row[entry["metric"]]) for row in entry["predictions"]}
        for name, entry in evaluation.items()
        if entry.get("predictions")
    }


def read_run(cell: Cell, train_dir: Path, eval_dir: Path) -> Run:
    """One run's metrics (train_dir/metrics.jsonl) and evaluation (eval_dir/scores.json: scores, per-problem pass@1
    from the saved predictions, fingerprints; selection.json and selected_scores.json when selection ran, speed.json
    with report.speed)."""
    evaluation = read_evaluation(eval_dir / SCORES_FILE)
    fingerprints = {
        name: entry["eval_fingerprint"] for name, entry in evaluation.items() if "eval_fingerprint" in entry
    }
    return Run(
        cell,
        read_metrics(train_dir / METRICS_FILE),
        {name: float(entry["score"]) for name, entry in evaluation.items()},
        problem_scores(evaluation),
        fingerprints,
        read_optional(eval_dir / SELECTION_FILE),
        problem_scores(read_evaluation(eval_dir / SELECTED_SCORES)),
        read_optional(eval_dir / SPEED_SCORES),
    )


def read_optional(path: Path) -> dict:
    """A stage's JSON file ({} when absent)."""
    return read_json(path) if path.is_file() else {}


def seed_runs(runs: Mapping[Cell, Run], size: str, rlvr: str, method: str) -> dict[int, Run]:
    """{seed: run} of one (size, rlvr, method) of the grid."""
    return {cell.seed: run for cell, run in runs.items() if (cell.size, cell.rlvr, cell.method) == (size, rlvr, method)}


def collect_runs(config: Mapping, results: str | Path) -> dict[Cell, Run]:
    """Every grid cell with whatever the workflow has written for it."""
    return {cell: read_run(cell, run_dir(results, cell), eval_dir(results, cell)) for cell in grid_cells(config)}


def read_base_scores(config: Mapping, results: str | Path) -> dict[str, dict[str, float]]:
    """pass@1 per benchmark of each size's Base model ({} for a size not evaluated)."""
    return {size: read_scores(base_eval_dir(results, size) / SCORES_FILE) for size in config["models"]["sizes"]}
