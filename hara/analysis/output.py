"""What every analysis writes: <name>.csv (the numbers), <name>.json (title, the paper's claim, what our run shows,
the table and the figure files) and PNG figures, all in <results>/analysis/<name>/. The report renders the JSON."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hara.results.files import read_json

__all__ = ["PROBLEM_SCORES", "AnalysisResult", "fmt", "read_result", "write_result"]

#: The interpretability analysis' per-problem held-out likelihood scores per (variant, structure, rollouts): the units
#: of the paper's interpretability claims' intervals over problems (hara.report.repro, analysis/paper_claims.yaml).
PROBLEM_SCORES = "problem_scores.json"


def fmt(value: float | None, digits: int = 3) -> str:
    """A number for the CSV / report; 'n/a' when missing (the report never invents a value)."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return f"{value:.{digits}f}"


@dataclass
class AnalysisResult:
    """One analysis' outcome. ``finding`` is one or two sentences computed from the rows."""

    name: str
    title: str
    claim: str
    finding: str
    header: list[str]
    rows: list[list[str]]
    figures: list[str] = field(default_factory=list)  # PNG file names in the analysis folder
    note: str = ""


def write_result(result: AnalysisResult, out_dir: str | Path) -> Path:
    """Write <out>/<name>.csv and <out>/<name>.json; returns the JSON path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / f"{result.name}.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(result.header)
        writer.writerows(result.rows)
    path = out / f"{result.name}.json"
    path.write_text(json.dumps(asdict(result), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def read_result(path: str | Path) -> AnalysisResult | None:
    """An analysis' JSON (None when it was not written)."""
    path = Path(path)
    if not path.is_file():
        return None
    return AnalysisResult(**read_json(path, f"rule analysis (hara analysis {path.stem})"))


def save_figure(fig, path: Path) -> str:
    """Save a matplotlib figure as PNG; returns its file name."""
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


def pyplot():
    """matplotlib's pyplot on the Agg backend (no display on clusters and CI)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def column(rows: Sequence[Sequence[str]], index: int) -> list[float | None]:
    """A numeric column of formatted rows (None for n/a)."""
    return [None if row[index] == "n/a" else float(row[index]) for row in rows]
