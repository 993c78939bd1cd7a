"""The analyses' report sections: one per enabled analysis (config ``analyses``), each stating the paper's claim
next to what our run shows, with the analysis' table and figures (read from <results>/analysis/<name>/<name>.json,
written by `hara analysis`). An enabled analysis without output reads n/a; nothing is filled in."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from hara.analysis.output import AnalysisResult, read_result
from hara.analysis.workflow import analysis_outputs, enabled_analyses

__all__ = ["Section", "collect_sections"]


@dataclass
class Section:
    """One analysis section: its result (None = not produced) and its figures copied into the report folder."""

    name: str
    result: AnalysisResult | None
    figures: list[Path] = field(default_factory=list)


def collect_sections(config: Mapping, results: str | Path, out_dir: Path) -> list[Section]:
    """Every enabled analysis' result; figures are copied to <out>/figures/analysis_<file> (Markdown links)."""
    sections = []
    for name in enabled_analyses(config):
        json_path = Path(results) / Path(analysis_outputs(config, name)["json"]).relative_to(config["results_dir"])
        result = read_result(json_path)
        figures = []
        for figure in result.figures if result else []:
            source = json_path.parent / figure
            if source.is_file():
                target = out_dir / "figures" / f"analysis_{figure}"
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, target)
                figures.append(target)
        sections.append(Section(name, result, figures))
    return sections
