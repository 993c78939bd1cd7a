"""The "Sweeps" section of the main report: every study under results/sweeps/ that `hara sweep report` summarised.

hara.report calls :func:`sweeps_markdown` and :func:`sweeps_html`; both return "" when no sweep was run, so a report
without sweeps is unchanged.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["study_summaries", "sweep_studies", "sweeps_html", "sweeps_markdown"]


def study_summaries(results_dir: str | Path) -> list[tuple[Path, dict]]:
    """(study folder, summary.json) of every summarised study, by name."""
    root = Path(results_dir) / "sweeps"
    return [(path.parent, json.loads(path.read_text(encoding="utf-8")))
            for path in sorted(root.glob("*/summary.json"))] if root.is_dir() else []


def best_line(summary: dict) -> str:
    best = summary["best"]
    params = ", ".join(f"{k} = {v:.4g}" if isinstance(v, float) else f"{k} = {v}" for k, v in best["params"].items())
    states = ", ".join(f"{n} {s.lower()}" for s, n in summary["states"].items() if n)
    return (f"{summary['description']} {summary['direction'].capitalize()} {summary['metric']} "
            f"({summary['metric_description']}): best {best['value']:.4g} at trial {best['trial']} ({params}); "
            f"trials: {states}.")


def sweeps_markdown(results_dir: str | Path, out_dir: str | Path) -> str:
    """Markdown section (figure links relative to the report folder ``out_dir``)."""
    studies = study_summaries(results_dir)
    if not studies:
        return ""
    parts = ["", "## Sweeps", ""]  # a blank line first: the section is appended to the report's Markdown
    for folder, summary in studies:
        parts += [f"### {summary['study']}", "", best_line(summary), ""]
        for name in summary["figures"].values():
            parts += [f"![{summary['study']} {name}]({Path(os.path.relpath(folder / name, out_dir)).as_posix()})", ""]
    return "\n".join(parts)


def sweeps_html(results_dir: str | Path) -> str:
    """HTML section with the figures embedded (the report stays one self-contained file); "" without a study."""
    from hara.report.render import page_macros

    return str(page_macros().sweeps(sweep_studies(results_dir)))


def sweep_studies(results_dir: str | Path) -> list[tuple[Path, dict, str]]:
    """(folder, summary, best line) of every study below ``results_dir``/sweeps, for the report page."""
    return [(folder, summary, best_line(summary)) for folder, summary in study_summaries(results_dir)]
