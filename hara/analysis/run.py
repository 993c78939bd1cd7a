"""Run one analysis of the registry (`hara analysis NAME --config CFG [--results DIR] [--out DIR]`, hara/cli.py)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["run_analysis"]


def _registry() -> dict:
    """Analysis name -> function (config, results, out) -> AnalysisResult (imported on demand: torch, models)."""
    from hara.analysis.interpret import interpretability_study
    from hara.analysis.studies import STUDIES

    return {**STUDIES, "interpretability": interpretability_study}


def run_analysis(name: str, config: dict, results: str | Path, out: str | Path) -> Path:
    """Run analysis ``name`` and write its files into ``out``; returns the JSON path."""
    from hara.analysis.output import write_result

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    return write_result(_registry()[name](config, Path(results), out), out)
