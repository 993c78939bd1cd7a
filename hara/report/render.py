"""Tables and figures -> report.md and a self-contained index.html (figures embedded as PNG data URIs)."""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping, Sequence
from pathlib import Path

from hara.report.sections import Section, section_html, section_markdown
from hara.report.tables import Table

__all__ = ["render_html", "render_markdown"]

STYLE = ("body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}"
         "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}"
         "td:first-child,th:first-child,td:nth-child(2),td:nth-child(3){text-align:left}"
         ".note{color:#555;font-size:90%}img{max-width:100%}")


def markdown_table(table: Table) -> str:
    lines = [f"## {table.title}", "", table.note, "", "| " + " | ".join(table.header) + " |",
             "|" + "---|" * len(table.header)]
    lines += ["| " + " | ".join(row) + " |" for row in table.rows]
    return "\n".join(lines) + "\n"


def render_markdown(title: str, summary: str, tables: list[Table], figures: Mapping[str, Path | None],
                    out_dir: Path, sections: Sequence[Section] = ()) -> str:
    parts = [f"# {title}", "", summary, ""] + [markdown_table(t) for t in tables] + ["## Training dynamics", ""]
    for size, path in figures.items():
        parts.append(f"![{size}]({path.relative_to(out_dir).as_posix()})" if path else f"{size}: n/a (no metrics)")
        parts.append("")
    parts += [section_markdown(section, out_dir) for section in sections]  # the analyses (config `analyses`)
    return "\n".join(parts)


def html_table(table: Table) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in table.header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in table.rows)
    return (f'<h2 id="{table.key}">{html.escape(table.title)}</h2><p class="note">{html.escape(table.note)}</p>'
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")


def html_figure(size: str, path: Path | None) -> str:
    if path is None:
        return f"<p>{html.escape(size)}: n/a (no training metrics)</p>"
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<figure><img alt="training dynamics {html.escape(size)}" src="data:image/png;base64,{data}"></figure>'


def render_html(title: str, summary: str, tables: list[Table], figures: Mapping[str, Path | None],
                sections: Sequence[Section] = (), extra_html: str = "") -> str:
    body = "".join(html_table(t) for t in tables)
    body += '<h2 id="dynamics">Training dynamics</h2>' + "".join(html_figure(s, p) for s, p in figures.items())
    body += "".join(section_html(section) for section in sections)  # the analyses (config `analyses`)
    body += extra_html  # the Sweeps section (hara.sweeps.report_section), "" when no sweep was run
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1><p>{html.escape(summary)}</p>"
            f"{body}</body></html>\n")
