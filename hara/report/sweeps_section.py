"""The "Sweeps" section of the main report: every study under results/sweeps/ that `hara sweep report` summarised.

hara.report calls :func:`sweep_studies` and renders the studies with the page templates' `sweeps` macros
(hara.report.render); the list is empty when no sweep was run, and the section is then left out, so a report without
sweeps is unchanged.
"""

from __future__ import annotations

from pathlib import Path

from hara import layout
from hara.results.study_summary import SearchFindings, StudySummary, read_summary

__all__ = ["study_summaries", "sweep_studies"]


def study_summaries(results_dir: str | Path) -> list[tuple[Path, StudySummary]]:
    """(study folder, its summary.json) of every summarised study, by name."""
    root = Path(results_dir) / layout.SWEEPS
    if not root.is_dir():
        return []
    return [(path.parent, read_summary(path)) for path in sorted(root.glob(f"*/{layout.SUMMARY_FILE}"))]


def best_line(summary: StudySummary) -> str:
    """The study in one paragraph: a search's choice (and how much it shrank on fresh seeds), or a sensitivity
    study's conclusion."""
    states = ", ".join(f"{n} {s.lower()}" for s, n in summary.states.items() if n)
    head = f"{summary.description} {summary.metric} ({summary.metric_description})"
    if not isinstance(summary.findings, SearchFindings):
        return (
            f"{head}, seeds {', '.join(map(str, summary.seeds))} for every value: {summary.findings.conclusion} "
            f"Trials: {states}."
        )
    best = summary.findings.best
    params = ", ".join(f"{k} = {v:.4g}" if isinstance(v, float) else f"{k} = {v}" for k, v in best.params.items())
    if best.reevaluated is not None:
        found = (
            f"best {best.reevaluated:.4g} on {len(best.reevaluation_seeds)} fresh seeds at trial "
            f"{best.trial} ({params}), chosen among the top {best.candidates} re-evaluated: its search "
            f"value {best.search_value:.4g} shrank by {best.shrinkage:.3g}"
        )
    else:
        found = (
            f"best {best.value:.4g} at trial {best.trial} ({params}), not re-evaluated: inflated by the "
            "selection over the trials"
        )
    return f"{head}, {summary.direction}d: {found}; trials: {states}."


EFFECT_HEADER = ["value", "mean", "effect [95% CI]", "after correction", "verdict", "MDE"]


def effect_rows(summary: StudySummary) -> list[list[str]]:
    """A sensitivity study's table: each value's mean objective, raw and corrected effect, verdict and MDE."""
    return [
        [
            row.label,
            f"{row.mean:.3g}",
            f"{row.effect:+.2f} [{row.ci_low:+.2f}, {row.ci_high:+.2f}]",
            f"[{row.corrected_low:+.2f}, {row.corrected_high:+.2f}]",
            row.verdict,
            f"{row.mde:.2f}",
        ]
        for row in getattr(summary.findings, "effects", [])
    ]


def sweep_studies(results_dir: str | Path) -> list[tuple[Path, StudySummary, str, list, list]]:
    """(folder, summary, best line, table header, effect rows) of every study below ``results_dir``/sweeps, for the
    report page."""
    return [
        (folder, summary, best_line(summary), EFFECT_HEADER, effect_rows(summary))
        for folder, summary in study_summaries(results_dir)
    ]
