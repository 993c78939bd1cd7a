"""The report's Markdown tables, written in one place (report.md's tables, the analyses' sections and the sweeps')."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["table_lines"]


def table_lines(header: Sequence[str], rows: Sequence[Sequence[str]], rule: str = "---|") -> list[str]:
    """A Markdown table as lines: the header, the rule (``rule`` once per column, after a leading ``|``), the rows."""
    return [
        "| " + " | ".join(header) + " |",
        "|" + rule * len(header),
        *("| " + " | ".join(row) + " |" for row in rows),
    ]
