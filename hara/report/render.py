"""Tables and figures -> a self-contained index.html (figures embedded as PNG data URIs) and report.md, from the
Jinja2 templates hara/report/templates/report.html and its Markdown twin report.md (the same macros)."""

from __future__ import annotations

import base64
import functools
import html
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jinja2

from hara.report.compare import VerdictCell
from hara.report.sections import Section
from hara.report.tables import Table
from hara.results.paired import BETTER, WITHIN_NOISE, WORSE

__all__ = ["MARKDOWN_TEMPLATE", "page_macros", "render_html", "render_markdown"]

#: The Markdown twin of the page template (templates/report.md; it renders the report folder's hara.layout.REPORT_MD).
MARKDOWN_TEMPLATE = "report.md"

STYLE = (
    "body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}"
    "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}"
    "td:first-child,th:first-child,td:nth-child(2),td:nth-child(3){text-align:left}"
    ".note{color:#555;font-size:90%}img{max-width:100%}"
    "td.better{background:#dff3df}td.worse{background:#f8dddd}td.low-power{color:#777}"
)

#: The verdict a table cell states (a VerdictCell's, hara.report.compare) as the CSS class that colours it: better
#: green, worse red; a low-power "within noise" greyed (LOW_POWER_CLASS).
VERDICT_CLASSES = {BETTER: "better", WORSE: "worse"}
LOW_POWER_CLASS = "low-power"


def verdict_class(cell: str) -> str:
    """`` class="..."`` for a table cell that states a verdict (a :class:`VerdictCell`), else "". Read from the
    cell's fields: plain text is never searched for a verdict."""
    if not isinstance(cell, VerdictCell):
        return ""
    found = VERDICT_CLASSES.get(cell.verdict)
    if found is None and cell.verdict == WITHIN_NOISE and cell.low_power:
        found = LOW_POWER_CLASS
    return f' class="{found}"' if found else ""


def render_markdown(
    title: str,
    summary: str,
    tables: list[Table],
    figures: Mapping[str, Path | None],
    out_dir: Path,
    sections: Sequence[Section] = (),
    studies: Sequence[tuple] = (),
) -> str:
    """report.md: the page of templates/report.md, the Markdown twin of the HTML page's macros (figures linked
    relative to ``out_dir``)."""
    return str(page_macros(MARKDOWN_TEMPLATE).page(title, summary, tables, figures, sections, studies, out_dir))


def _png(path: Path) -> str:
    return base64.b64encode(Path(path).read_bytes()).decode("ascii")


def _relative(path: Path, out_dir: Path) -> str:
    """A figure's link from the report folder."""
    return Path(os.path.relpath(path, out_dir)).as_posix()


@functools.cache
def page_macros(template: str = "report.html") -> Any:
    """The macros of a page template (page, table, rows_table, figure, dynamics, analysis, sweeps), each callable
    -> text: report.html, or its Markdown twin report.md (written in lines: tags leave no blank line of their own)."""
    markdown = template.endswith(".md")
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("hara.report", "templates"),
        autoescape=False,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=markdown,
        lstrip_blocks=markdown,
    )
    env.filters.update(esc=html.escape, png=_png, verdict_class=verdict_class, relative=_relative)
    return env.get_template(template).module


def render_html(
    title: str,
    summary: str,
    tables: list[Table],
    figures: Mapping[str, Path | None],
    sections: Sequence[Section] = (),
    studies: Sequence[tuple] = (),
) -> str:
    """The self-contained page: tables, training dynamics, the analyses (config `analyses`) and the sweeps
    (``studies``: (folder, summary, best line, effect table) of each, hara.report.sweeps_section)."""
    return str(page_macros().page(title, summary, STYLE, tables, figures, sections, studies))
