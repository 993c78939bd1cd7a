"""`hara report`: the paper's tables and training-dynamics figures over the workflow's results.

Writes ``<out>/index.html`` (self-contained), ``<out>/report.md``, ``<out>/figures/*.png``, ``<out>/tables.json`` and
``<out>/comparisons.json`` (every paired comparison the tables make, as numbers), and logs the folder as artifacts of
a ``report`` MLflow run in the config's tracking store.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path

from hara.layout import COMPARISONS, REPORT_HTML, REPORT_MD
from hara.report.compare import grid_comparisons
from hara.report.figures import write_figures
from hara.report.render import render_html, render_markdown
from hara.report.sections import collect_sections
from hara.report.tables import build_tables
from hara.results.collect import Cell, Run, collect_runs, read_base_scores

__all__ = ["build_report", "log_report"]


def summary_line(config: Mapping, runs: Mapping) -> str:
    """What the report covers, and how much of the grid has results."""
    trained = sum(1 for run in runs.values() if run.metrics)
    scored = sum(1 for run in runs.values() if run.scores)
    return (
        f"Config {config['name']}: {len(runs)} grid cells (sizes x rlvr x methods x seeds), {trained} with "
        f"training metrics, {scored} with benchmark scores. Cells without data read n/a."
    )


def comparisons(config: Mapping, runs: Mapping[Cell, Run]) -> list[dict]:
    """Every paired comparison of the tables (each method against the baseline, hara_tok against hara_seq, per
    (size, rlvr) where both have per-problem predictions) with its raw interval, its verdict after correction over
    its family and its minimum detectable effect (hara.report.compare.grid_comparisons)."""
    return grid_comparisons(config, runs).records()


def log_report(config: Mapping, results: str | Path, out_dir: Path) -> str:
    """Log the report folder as artifacts of the ``report`` run of the config's experiment, in the store of the
    results folder (a copy's own: hara.tracking.results_store); returns the run id."""
    from hara.tracking import results_store, start_run

    run, _ = start_run(
        results_store(config, results),
        config["name"],
        "report",
        out_dir,
        {"stage": "report"},
        {"results_dir": str(results)},
    )
    run.client.log_artifacts(run.run_id, str(out_dir), artifact_path="report")
    run.finish()
    return run.run_id


def staged_decisions(config: Mapping, results: str | Path) -> dict[str, str]:
    """With staged seeds (plan.stages): each claim's stage and its group-sequential decision, for the claims table."""
    if not config["plan"].get("stages"):
        return {}
    from hara.report.stages import stage_checks

    return {
        check.claim: f"{'before stage 1' if check.stage is None else f'stage {check.stage + 1}'}: {check.decision}"
        for check in stage_checks(config, results)
    }


def build_report(config: Mapping, results: str | Path, out_dir: str | Path, mlflow: bool = True) -> dict:
    """Collect, tabulate, plot, render, and (unless ``mlflow`` is False) log; returns what was written."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    runs = collect_runs(config, results)
    from hara.report.ablation import ablation_table
    from hara.report.repro import check_claims, claims_table

    tables = [
        claims_table(check_claims(config, results, runs), staged_decisions(config, results)),
        *build_tables(config, runs, read_base_scores(config, results)),
        ablation_table(config, results),
    ]
    figures = write_figures(config, runs, out_dir)
    sections = collect_sections(config, results, out_dir)
    title, summary = f"HarA report: {config['name']}", summary_line(config, runs)
    (out_dir / "tables.json").write_text(
        json.dumps([dataclasses.asdict(t) for t in tables], indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    (out_dir / COMPARISONS).write_text(
        json.dumps(comparisons(config, runs), indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    from hara.report.sweeps_section import sweep_studies  # none when results/sweeps/ has no study

    studies = sweep_studies(results)
    (out_dir / REPORT_MD).write_text(
        render_markdown(title, summary, tables, figures, out_dir, sections, studies), encoding="utf-8"
    )
    (out_dir / REPORT_HTML).write_text(
        render_html(title, summary, tables, figures, sections, studies), encoding="utf-8"
    )
    run_id = log_report(config, results, out_dir) if mlflow else None
    from hara.report.mlflow_runs import log_run_summaries  # each training run: scores, vs none, description

    log_run_summaries(config, results, runs, out_dir, run_id)
    return {
        "out": str(out_dir),
        "tables": [t.key for t in tables],
        "figures": {size: str(path) if path else None for size, path in figures.items()},
        "analyses": [s.name for s in sections if s.result is not None],
        "mlflow_run": run_id,
    }
