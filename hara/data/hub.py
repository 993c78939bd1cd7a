"""Loaders for the paper's hub datasets, saved as local files, mapped to the canonical problem record.

On a cluster a rule downloads each dataset once into a folder (``ds.to_json(...)`` / ``ds.to_parquet(...)`` of one
split); training and evaluation then read the folder here, offline. Every dataset keeps its own column names, so
a :class:`HubSchema` records, per dataset, where the problem, answer and solution are and how to clean the answer: the
training sets' in :data:`TRAINING_SETS` here, each benchmark's in its declaration (hara.data.catalog, which also loads
a dataset by its id: ``load_local_dataset``).

Schemas (looked up with the project's search tool over dataset cards, evaluation code and docs):

- ``hiyouga/math12k`` (splits train 12,000 / test 500): ``problem``, ``answer``. Source: EasyR1's
  ``examples/config.yaml`` and its math12k presets (``train_files: hiyouga/math12k@train``, ``prompt_key: problem``,
  ``answer_key: answer``), found in several repositories by code search. Whether it also has a ``solution`` column
  was not found, so the solution is optional.
- ``joyheyueya/math500`` (train 12,000 / test 500): ``problem``, ``solution``, ``answer``, ``subject``,
  ``level`` (int64), ``unique_id``. Source: huggingface.co/datasets/joyheyueya/math500 README (dataset_info).
- ``HuggingFaceH4/MATH-500`` (test 500): ``problem``, ``solution``, ``answer``, ``subject``, ``level`` (int64),
  ``unique_id``. Sources: the dataset's eval.yaml (``input: problem``, ``target: answer``), lighteval 0.13
  ``tasks/tasks/math_500.py``, and the dataset_info of its mirrors (e.g. macabdul9/MATH-500).
- ``HuggingFaceH4/aime_2024`` (train 30): ``id`` (int64), ``problem``, ``solution``, ``answer`` (string), ``url``,
  ``year``. Source: huggingface.co/datasets/HuggingFaceH4/aime_2024 README; lighteval ``tasks/tasks/aime.py``.
- ``math-ai/amc23`` (test 40): ``question``, ``answer``. Sources: evaluation code reading it
  (``row["question"]``, ``row["answer"]``; one converter writes ``str(item["answer"])``); a mirror with the same
  40 problems (FlippyDora/amc23) stores ``answer`` as float64, so numeric answers are printed as integers
  (``27.0`` -> ``"27"``).
- ``math-ai/minervamath`` (test 272): ``question``, ``answer`` (strings). Source: its README (dataset_info).
- ``Hothan/OlympiadBench``, config ``OE_TO_maths_en_COMP`` (train 674): ``id``, ``question``, ``solution``
  (list of str), ``final_answer`` (list of str, LaTeX usually wrapped in ``$``), ``context``, ``image_1..5``,
  ``modality``, ``difficulty``, ``is_multiple_answer``, ``unit``, ``answer_type``, ``error``, ``question_type``,
  ``subfield``, ``subject``, ``language``. Sources: lighteval 0.13 ``tasks/tasks/olympiade_bench.py`` (reads
  ``question``, ``final_answer``, ``unit``, ``is_multiple_answer``; split ``train``), the dataset_info of the mirror
  macabdul9/OlympiadBenchMath, evalscope's OlympiadBench page (674 problems in OE_TO_maths_en_COMP). The answer
  list is joined with ``", "`` after stripping the ``$`` delimiters.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hara.data.io import DataError, read_jsonl

__all__ = ["TRAINING_SETS", "HubSchema", "read_dataset"]


# ------------------------------------------------------------------------------------------------ value cleaning
def as_text(value: Any) -> str:
    """A cell as answer/solution text: None -> "", integral floats without ``.0`` (AMC's 27.0 -> "27")."""
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


def strip_math_delimiters(text: str) -> str:
    """``"$\\frac{1}{2}$"`` -> ``"\\frac{1}{2}"``; also ``\\( \\)`` and ``\\[ \\]`` delimiters."""
    text = text.strip()
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if len(text) >= len(left) + len(right) and text.startswith(left) and text.endswith(right):
            return text[len(left) : -len(right)].strip()
    return text


def _as_list(value: Any) -> list:
    """A list cell (parquet gives a list, some JSON exports a JSON-encoded string, or a bare string)."""
    if isinstance(value, str):
        try:
            decoded = json.loads(value)
        except json.JSONDecodeError:
            return [value]
        return decoded if isinstance(decoded, list) else [value]
    return list(value) if value is not None else []


def answer_list(value: Any) -> str:
    """OlympiadBench ``final_answer``: a list of LaTeX answers, joined with ``", "`` without their ``$``."""
    return ", ".join(strip_math_delimiters(as_text(v)) for v in _as_list(value) if as_text(v))


def solution_list(value: Any) -> str:
    """OlympiadBench ``solution``: a list of solution texts (alternative solutions), the first one kept."""
    items = [as_text(v) for v in _as_list(value) if as_text(v)]
    return items[0] if items else ""


def parse_level(value: Any) -> int | None:
    """MATH levels as an int: ``3`` or ``"Level 3"`` -> 3; anything else -> None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    match = re.search(r"\d+", str(value)) if value is not None else None
    return int(match.group()) if match else None


# ------------------------------------------------------------------------------------------------------- schemas
@dataclass(frozen=True)
class HubSchema:
    """Where one hub dataset keeps each field of the canonical record, and how to clean them."""

    role: str  # "train" or "benchmark"
    split: str  # the split the paper uses
    problem: str
    answer: str
    solution: str | None = None
    level: str | None = None
    skill: str | None = None
    id: str | None = None
    config: str | None = None  # hub configuration (subset) name, where the dataset has several
    clean_answer: Callable[[Any], str] = as_text
    clean_solution: Callable[[Any], str] = as_text


#: Hub dataset id -> schema of the training sets (the benchmarks' schemas are declared in hara.data.catalog).
TRAINING_SETS: dict[str, HubSchema] = {
    "hiyouga/math12k": HubSchema("train", "train", problem="problem", answer="answer", solution="solution"),
    "joyheyueya/math500": HubSchema(
        "train",
        "train",
        problem="problem",
        answer="answer",
        solution="solution",
        level="level",
        skill="subject",
        id="unique_id",
    ),
}


# -------------------------------------------------------------------------------------------------------- reading
def _rows_json(path: Path) -> list[dict]:
    """Rows of a ``.json`` file: a JSON array of objects, or JSON Lines (what ``Dataset.to_json`` writes)."""
    text = path.read_text(encoding="utf-8")
    if not text.lstrip().startswith("["):
        return read_jsonl(path)
    try:
        rows = json.loads(text)
    except json.JSONDecodeError as err:
        raise DataError(f"{path}:{err.lineno}: invalid JSON ({err.msg})") from None
    bad = next((i for i, row in enumerate(rows) if not isinstance(row, dict)), None)
    if bad is not None:
        raise DataError(f"{path}: element {bad} of the array is not a JSON object")
    return rows


def _rows_parquet(path: Path) -> list[dict]:
    """Rows of a parquet file."""
    import pyarrow.parquet as pq  # imported here: only cluster runs read parquet

    try:
        return pq.read_table(path).to_pylist()
    except Exception as err:  # noqa: BLE001 - pyarrow raises several types for corrupt files
        raise DataError(f"{path}: cannot read parquet ({err})") from None


_READERS: dict[str, Callable[[Path], list[dict]]] = {
    ".jsonl": read_jsonl,
    ".json": _rows_json,
    ".parquet": _rows_parquet,
}


def _data_files(folder: Path, split: str | None) -> list[Path]:
    """Data files under ``folder`` (recursively, sorted); with ``split``, only those whose name starts with it."""
    if not folder.is_dir():
        raise DataError(f"{folder}: not a directory")
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in _READERS)
    if split is not None:
        files = [p for p in files if any(part.startswith(split) for part in p.relative_to(folder).parts)]
    if not files:
        wanted = f" for split {split!r}" if split else ""
        raise DataError(f"{folder}: no {'/'.join(_READERS)} files{wanted}")
    return files


def _column(row: dict, column: str, path: Path, index: int) -> Any:
    """``row[column]``, or a DataError naming the file, the row and the missing column."""
    if column not in row:
        raise DataError(f"{path}: row {index + 1}: missing column {column!r} (columns: {', '.join(row)})")
    return row[column]


def _to_record(name: str, schema: HubSchema, row: dict, path: Path, index: int) -> dict:
    """Map one row of a hub dataset to the canonical record."""
    problem = as_text(_column(row, schema.problem, path, index))
    answer = schema.clean_answer(_column(row, schema.answer, path, index))
    if not problem or not answer:
        empty = schema.problem if not problem else schema.answer
        raise DataError(f"{path}: row {index + 1}: empty {empty!r}")
    optional = {
        field: row.get(column) if column else None
        for field, column in (
            ("solution", schema.solution),
            ("level", schema.level),
            ("skill", schema.skill),
            ("id", schema.id),
        )
    }
    row_id = optional["id"] if optional["id"] is not None else index
    return {
        "id": f"{name}:{row_id}",
        "problem": problem,
        "solution": schema.clean_solution(optional["solution"]),
        "answer": answer,
        "skill": as_text(optional["skill"]) or None,
        "level": parse_level(optional["level"]),
        "source": f"hub:{name}" + (f":{schema.config}" if schema.config else ""),
    }


def _iter_rows(files: list[Path]) -> Iterator[tuple[Path, int, dict]]:
    """(file, row index within the file, row) over all files in order."""
    for path in files:
        for index, row in enumerate(_READERS[path.suffix](path)):
            yield path, index, row


def read_dataset(name: str, schema: HubSchema, folder: str | Path, split: str | None = None) -> list[dict]:
    """Read the hub dataset ``name`` saved under ``folder`` in its ``schema`` and map it to canonical records.

    Args:
        name: the hub repository name (the records' ids and source start with it).
        schema: where its columns are (hara.data.catalog.hub_schemas holds every known one).
        folder: directory holding ``.jsonl``, ``.json`` (JSON Lines or an array) and/or ``.parquet`` files of one
            split, read recursively in sorted order.
        split: if given, only files with a path component starting with it (``train.jsonl``,
            ``data/test-00000-of-00001.parquet``).

    Raises:
        DataError: no data files, unreadable file, missing column (names file, row and column), empty answer.
    """
    files = _data_files(Path(folder), split)
    return [_to_record(name, schema, row, path, index) for path, index, row in _iter_rows(files)]
