"""One-factor ablation table: each trained run against the run it differs from in exactly one factor.

A run's factors are what decided its training: the grid coordinates it was trained with (size, rlvr preset,
method, seed; from run_info.json) and every value of its resolved config (resolved_config.yaml) except
bookkeeping that cannot change a result (names, paths, tracking, resources, the analyses' and sweeps' own
settings). A run is compared with its baseline (the grid's ``none`` cell of the same size, preset and seed, or, for
an analysis run with config overrides, the grid cell it overrides) only when exactly one factor differs: the row
gives that factor's two values, the paired difference of benchmark-average pass@1 with its interval
(hara.report.compare) and the difference of per-step CPU time. A run that differs in more than one factor is
listed and flagged, never compared silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from hara.layout import RESOLVED_CONFIG, RUN_INFO, eval_dir, grid_cells, run_dir
from hara.report.compare import compare_cells, flatten
from hara.results.collect import Cell, Run, read_run
from hara.results.files import read_json
from hara.results.stats import NA, step_costs

__all__ = ["BOOKKEEPING", "TrainedRun", "ablation_table", "factor_differences", "run_factors"]

#: Config keys (with everything below them) that name, place, track or schedule a run without changing what it
#: learns; the grid is the run's coordinates instead.
BOOKKEEPING = (
    "name",
    "results_dir",
    "tracking",
    "resources",
    "plan",
    "analyses",
    "sweeps",
    "report",
    "grid",
    "models.sizes",
    "threads",
    "training.progress",
)


@dataclass(frozen=True)
class TrainedRun:
    """A training folder with its evaluation folder and what the report knows of it."""

    label: str
    train_dir: Path
    eval_dir: Path
    coordinates: tuple[str, str, str, int]  # size, rlvr, method, seed


def run_factors(train_dir: Path) -> dict[str, object] | None:
    """The run's factors, or None when it has not written its resolved config and run info yet."""
    config_path, info_path = train_dir / RESOLVED_CONFIG, train_dir / RUN_INFO
    if not config_path.is_file() or not info_path.is_file():
        return None
    config = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    info = read_json(info_path)
    factors = {
        key: value
        for key, value in flatten(config).items()
        if not any(key == b or key.startswith(f"{b}.") for b in BOOKKEEPING)
    }
    factors.update(
        {
            "cell.size": info.get("size"),
            "cell.rlvr": info.get("rlvr"),
            "cell.method": info.get("method"),
            "cell.seed": info.get("train_seed"),
        }
    )
    return factors


def factor_differences(run: Mapping, baseline: Mapping) -> list[str]:
    """``key: baseline's -> run's`` for every factor that differs (sorted)."""
    return [
        f"{key}: {baseline.get(key, 'absent')} → {run.get(key, 'absent')}"
        for key in sorted(run.keys() | baseline.keys())
        if run.get(key) != baseline.get(key)
    ]


def grid_runs(config: Mapping, results: Path) -> list[TrainedRun]:
    return [
        TrainedRun(
            cell.path(), run_dir(results, cell), eval_dir(results, cell), (cell.size, cell.rlvr, cell.method, cell.seed)
        )
        for cell in grid_cells(config)
    ]


def analysis_runs(config: Mapping, results: Path) -> list[TrainedRun]:
    """The analyses' extra training runs (not grid cells), at their folders below ``results``."""
    from hara.analysis import workflow

    moved = {**config, "results_dir": str(results)}
    return [
        TrainedRun(
            f"{run.study}/{run.label}/{run.cell}",
            Path(workflow.study_run_dir(moved, run)),
            Path(workflow.study_eval_dir(moved, run)),
            (run.size, run.rlvr, run.method, run.seed),
        )
        for run in workflow.analysis_runs(config)
        if not workflow.is_grid_cell(config, run)
    ]


def _baseline_of(run: TrainedRun, grid: Mapping[tuple, TrainedRun]) -> TrainedRun | None:
    size, rlvr, method, seed = run.coordinates
    same_cell = grid.get(run.coordinates)
    if same_cell is not None and same_cell.train_dir != run.train_dir:
        return same_cell  # an analysis run: against the grid cell it overrides
    return grid.get((size, rlvr, "none", seed)) if method != "none" else None


def _row(config: Mapping, run: TrainedRun, baseline: TrainedRun) -> list[str] | None:
    mine, theirs = run_factors(run.train_dir), run_factors(baseline.train_dir)
    if mine is None or theirs is None:
        return None
    differing = factor_differences(mine, theirs)
    if len(differing) != 1:
        return [
            run.label,
            baseline.label,
            f"not compared: {len(differing)} factors differ ({'; '.join(differing)})",
            NA,
            NA,
        ]
    a, b = (
        read_run(Cell(*run.coordinates[:2], "a", 0), run.train_dir, run.eval_dir),
        read_run(Cell(*run.coordinates[:2], "b", 0), baseline.train_dir, baseline.eval_dir),
    )
    found = compare_cells(config, {a.cell: a, b.cell: b}, *run.coordinates[:2], "a", "b")
    return [run.label, baseline.label, differing[0], found.format() if found else NA, _cpu_difference(a, b)]


def _cpu_difference(a: Run, b: Run) -> str:
    (mine, kind), (theirs, base_kind) = step_costs(a.metrics), step_costs(b.metrics)
    if not mine or not theirs:
        return NA
    label = "CPU" if kind == base_kind == "CPU time" else "wall, not comparable under load"
    return f"{sum(mine) / len(mine) - sum(theirs) / len(theirs):+.3f} s ({label})"


def ablation_table(config: Mapping, results: str | Path):
    """Rows: run, baseline, the one factor that differs, Δ average pass@1 (points) [interval] verdict, Δ s / step."""
    from hara.report.tables import Table, paired_note

    results = Path(results)
    grid = {run.coordinates: run for run in grid_runs(config, results)}
    rows = [
        row
        for run in [*grid.values(), *analysis_runs(config, results)]
        if (baseline := _baseline_of(run, grid)) is not None and (row := _row(config, run, baseline))
    ]
    return Table(
        "ablation",
        "One-factor ablations",
        "Each run against the run it differs from in one factor (its resolved config and grid coordinates; "
        "names, paths, tracking and resources excepted): the grid's none cell of the same size, preset "
        f"and seed, or for an analysis run the grid cell it overrides. {paired_note(config)} Δ s / step: "
        "mean per-step process CPU time. Runs that differ in more than one factor are flagged, not compared.",
        ["run", "baseline", "factor (baseline → run)", "Δ average pass@1", "Δ s / step"],
        rows,
    )
