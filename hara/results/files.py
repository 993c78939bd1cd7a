"""The readers of the stage files (scores.json, metrics.jsonl, selection.json, summaries, manifests): JSON and JSON
Lines that fail with one line naming the file (and line) and the rule that rewrites it.

A cut or hand-edited file in a copied results folder otherwise surfaced as a 35-line JSONDecodeError traceback from
deep inside the report; the ``hara`` command prints a :class:`~hara.errors.DataError` as its one line.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hara import layout
from hara.errors import DataError

__all__ = ["WRITTEN_BY", "bad_file", "jsonl_values", "read_json"]

_EVALUATE = "rule evaluate (hara evaluate)"
#: The rule (and command) that writes each stage file, by file name: what an error about the file tells to rerun.
WRITTEN_BY = {
    layout.METRICS_FILE: "rule train (hara train; a sweep trial's: hara sweep run)",
    layout.RUN_INFO: "rule train (hara train)",
    layout.SCORES_FILE: _EVALUATE,
    layout.SELECTION_FILE: _EVALUATE,
    layout.SELECTED_SCORES: _EVALUATE,
    layout.SPEED_SCORES: _EVALUATE,
    layout.MANIFEST_FILE: "rule prepare_data (hara data)",
    layout.SUMMARY_FILE: "rule sweep_summary (hara sweep report)",
    layout.COMPARISONS: "rule report (hara report)",
    layout.RUN_FILE: "the command that opened its MLflow run (hara train, hara sweep run or hara report)",
}


def bad_file(where: str, problem: str, path: Path, writer: str | None = None) -> DataError:
    """The one-line error for a stage file: ``where`` (the file, or a line or field of it), the problem, and the rule
    that rewrites the file (``writer``, default: its name's rule in :data:`WRITTEN_BY`)."""
    writer = writer or WRITTEN_BY.get(path.name)
    return DataError(f"{where}: {problem}" + (f"; {writer} rewrites it" if writer else ""))


def read_json(path: str | Path, writer: str | None = None) -> Any:
    """A JSON file's content; invalid JSON or text that is not UTF-8 is a :class:`DataError` naming the file and
    ``writer`` (default: the file name's rule in :data:`WRITTEN_BY`). A missing file raises FileNotFoundError."""
    path = Path(path)
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as err:
        raise bad_file(str(path), f"not UTF-8 text (byte {err.start + 1})", path, writer) from None
    except json.JSONDecodeError as err:
        raise bad_file(
            str(path), f"invalid JSON ({err.msg} at line {err.lineno} column {err.colno})", path, writer
        ) from None


def jsonl_values(path: str | Path, writer: str | None = None) -> Iterator[tuple[int, Any]]:
    """(line number, value) of each non-blank line of a JSON Lines file; a bad line is a :class:`DataError` naming
    ``file:line`` and ``writer`` (as :func:`read_json`)."""
    path = Path(path)
    with open(path, "rb") as handle:  # decoded per line, so that bytes that are not UTF-8 get a file:line too
        for lineno, raw in enumerate(handle, start=1):
            where = f"{path}:{lineno}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise bad_file(where, f"not UTF-8 text (byte {err.start + 1} of the line)", path, writer) from None
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line)
            except json.JSONDecodeError as err:
                raise bad_file(where, f"invalid JSON ({err.msg} at column {err.colno})", path, writer) from None
