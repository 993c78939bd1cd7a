"""JSON Lines I/O for problem records, and the errors every data loader raises.

Files written here are byte-deterministic (sorted keys, utf-8, ``\\n`` line ends) so that the same seed gives the same
sha256 in the data manifest. Readers report the file and line of the first bad record, because a corrupt line in a
12,000-line file is otherwise hard to find.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from hara.errors import DataError, UnknownNameError
from hara.results.files import jsonl_values

__all__ = ["DataError", "UnknownNameError", "dumps_record", "lookup", "read_jsonl", "write_jsonl"]

T = TypeVar("T")


def lookup(registry: Mapping[str, T], name: str, kind: str) -> T:
    """``registry[name]``, or an :class:`UnknownNameError` that lists every valid name of this ``kind``."""
    try:
        return registry[name]
    except (KeyError, TypeError):
        raise UnknownNameError.of(kind, name, registry) from None


def dumps_record(record: Mapping[str, Any]) -> str:
    """One record as one canonical JSON line (no newline): sorted keys, non-ASCII kept as is."""
    return json.dumps(record, sort_keys=True, ensure_ascii=False, separators=(", ", ": "))


def write_jsonl(path: str | Path, records: Iterable[Mapping[str, Any]]) -> int:
    """Write records as JSON Lines; returns the number written.

    The file is written to a temporary sibling and renamed, so an interrupted write never leaves a half file
    where a complete one used to be.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    count = 0
    with open(tmp, "w", encoding="utf-8", newline="\n") as handle:
        for record in records:
            handle.write(dumps_record(record) + "\n")
            count += 1
    tmp.replace(path)
    return count


def read_jsonl(path: str | Path, required_keys: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Read a JSON Lines file into a list of dicts, skipping blank lines.

    Raises:
        DataError: ``"<file>:<line>: <problem>"`` for invalid JSON or text that is not UTF-8
            (:func:`hara.results.files.jsonl_values`), a line that is not an object, or a missing key.
        FileNotFoundError: if ``path`` does not exist.
    """
    records = []
    for lineno, record in jsonl_values(path):
        where = f"{path}:{lineno}"
        if not isinstance(record, dict):
            raise DataError(f"{where}: expected a JSON object, got {type(record).__name__}")
        missing = [key for key in required_keys if key not in record]
        if missing:
            raise DataError(f"{where}: missing key(s) {', '.join(map(repr, missing))}")
        records.append(record)
    return records
