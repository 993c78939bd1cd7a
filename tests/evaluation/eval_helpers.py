"""Helpers of the evaluation tests: stand-in models, tiny checkpoints, hub rows in each dataset's own schema.

(A uniquely named module rather than conftest.py: ``from conftest import`` is ambiguous with tests/conftest.py.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from hara.config import load_config, validate_config
from hara.data.catalog import benchmarks
from tests.helpers import SMOKE
from tests.hub_assets import olympiad_row

#: Short name -> hub dataset id of every registered hub benchmark.
HUB_IDS = {name: benchmark.hub_id for name, benchmark in benchmarks("hub").items()}
# Per hub benchmark: rows in the dataset's own columns and value types, each with the answer a correct model would
# write in its box (written by hand here, not derived by hara.data.hub: the oracle must not share the mapping code).
HUB_ROWS = {
    "math500": [
        (
            {
                "problem": "Compute $\\frac{1}{2}+\\frac{1}{4}$.",
                "solution": "It is $\\boxed{\\frac34}$.",
                "answer": "\\frac34",
                "subject": "Prealgebra",
                "level": 3,
                "unique_id": "test/prealgebra/7.json",
            },
            "\\frac{3}{4}",
        ),
        (
            {
                "problem": "Solve $x+1=3$.",
                "solution": "$x=\\boxed{2}$",
                "answer": "2",
                "subject": "Algebra",
                "level": 1,
                "unique_id": "test/algebra/1.json",
            },
            "2",
        ),
        (
            {
                "problem": "Find the interval.",
                "solution": "...",
                "answer": "(0,1]",
                "subject": "Algebra",
                "level": 4,
                "unique_id": "test/algebra/9.json",
            },
            "(0,1]",
        ),
    ],
    "aime24": [
        (
            {
                "id": 60,
                "problem": "Find the number of ways.",
                "solution": "Long.",
                "answer": "204",
                "url": "https://artofproblemsolving.com/x",
                "year": "2024",
            },
            "204",
        ),
        (
            {
                "id": 61,
                "problem": "Find the remainder.",
                "solution": "Long.",
                "answer": "033",
                "url": "https://artofproblemsolving.com/y",
                "year": "2024",
            },
            "33",
        ),
    ],
    "amc23": [
        ({"question": "How many digits?", "answer": 27.0}, "27"),
        ({"question": "What is the area?", "answer": 0.5}, "\\frac{1}{2}"),
    ],
    "minerva": [
        ({"question": "Compute the energy in eV.", "answer": "1.5 \\times 10^{3}"}, "1500"),
        ({"question": "Give the speed.", "answer": "7"}, "7"),
    ],
    "olympiadbench": [
        (
            olympiad_row(1606, "Find all $x$.", ["First way.", "Second way."], ["$\\frac{1}{2}$", "$3$"]),
            "\\frac{1}{2}, 3",
        ),
        (
            olympiad_row(1607, "Compute $n$.", ["Only way."], ["$12$"], "Number Theory"),
            "12",
        ),
    ],
}
HUB_FILES = {
    "math500": "test.jsonl",
    "aime24": "train.jsonl",
    "amc23": "test.parquet",
    "minerva": "test.jsonl",
    "olympiadbench": "train-00000-of-00001.parquet",
}
WRONG = "\\boxed{-123456789}"


def write_hub_fixtures(root: Path) -> Path:
    """Write every hub benchmark under ``root/<owner>/<name>/`` in its own schema (JSON Lines or parquet)."""
    for name, rows in HUB_ROWS.items():
        folder = root / HUB_IDS[name]
        folder.mkdir(parents=True, exist_ok=True)
        path, data = folder / HUB_FILES[name], [row for row, _ in rows]
        if path.suffix == ".parquet":
            pq.write_table(pa.Table.from_pylist(data), path)
        else:
            path.write_text("".join(json.dumps(row) + "\n" for row in data), encoding="utf-8")
    return root


def hub_config(root: Path, **evaluation) -> dict:
    """A resolved config reading the hub fixtures under ``root``."""
    raw = {
        "data": {"source": "hub", "benchmarks": list(HUB_IDS), "local_dir": str(root)},
        "models": {"family": "tiny"},
        "threads": 1,
        "evaluation": {"backend": "transformers", **evaluation},
        "results_dir": str(root / "results"),
    }
    return validate_config(raw, source="test")


def smoke_config(*overrides: str) -> dict:
    return load_config(SMOKE, overrides)


class StandInEngine:
    """A generation engine that answers from a table ``prompt -> list of completions`` (cycled to n samples)."""

    tokenizer = None

    def __init__(self, answers: dict[str, list[str]]):
        self.answers = answers
        self.calls = 0
        self.closed = False

    def generate(self, prompts, n, sampling, stop=()):
        self.calls += 1
        texts = [self.answers[p][i % len(self.answers[p])] for p in prompts for i in range(n)]
        return texts, [[] for _ in texts]

    def close(self):
        self.closed = True


def make_tiny_checkpoint(out: Path, seed: int) -> Path:
    """A randomly initialized tiny-s model with the char tokenizer, saved like `hara base-model` saves one."""
    from hara.models.tiny import build_tiny_model
    from hara.models.tokenizer import build_tokenizer

    tokenizer = build_tokenizer("char")
    model = build_tiny_model("tiny-s", tokenizer, seed=seed)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
