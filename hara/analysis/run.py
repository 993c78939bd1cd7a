"""Run one analysis of the registry (`hara analysis NAME --config CFG [--results DIR] [--out DIR]`, hara/cli.py)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["run_analysis"]


def run_analysis(name: str, config: dict, results: str | Path, out: str | Path) -> Path:
    """Run analysis ``name`` and write its files into ``out``; returns the JSON path."""
    from hara.analysis.output import write_result
    from hara.analysis.registry import get_analysis

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    return write_result(get_analysis(name).load_run()(config, Path(results), out), out)
