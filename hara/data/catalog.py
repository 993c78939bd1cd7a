"""The benchmark registry: every benchmark the harness evaluates, declared once.

An entry is a :class:`Benchmark`: the short name that configs, result paths and MLflow metric keys use
(``eval/math500/pass@1``), its source, and for a hub benchmark the dataset id and its :class:`~hara.data.hub.HubSchema`
(split, configuration, which column holds the problem, answer, solution, id, and how to clean them). Registering a
hub benchmark also makes its dataset readable by :func:`load_local_dataset` and fetchable by ``hara fetch-data``;
config validation, the data stage, the evaluation tasks and the report read the registry.

- ``embedded``: the mini benchmarks of the offline default (hara.data.embedded generates them, sources synthetic and
  champ);
- ``hub``: the paper's benchmarks, read from the folders ``hara fetch-data`` wrote (source hub).

Another package (or a test) adds one with :func:`register_benchmark` (:data:`BENCHMARKS`, a
:class:`hara.plugins.Registry`); it is then valid in ``data.benchmarks``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import hara.data.hub as hub  # noqa: PLR0402 - `from hara.data import hub` would import the package from inside it
from hara.data.embedded import BENCHMARKS as MINI_BENCHMARKS
from hara.data.embedded import embedded_size
from hara.data.hub import HubSchema, answer_list, solution_list
from hara.data.io import lookup
from hara.plugins import Registry

__all__ = [
    "BENCHMARKS",
    "SOURCES",
    "Benchmark",
    "benchmarks",
    "get_benchmark",
    "hub_schemas",
    "load_local_dataset",
    "register_benchmark",
]

#: Benchmark sources: which data sources provide them (config data.source).
SOURCES = {"embedded": ("synthetic", "champ"), "hub": ("hub",)}


@dataclass(frozen=True)
class Benchmark:
    """One benchmark: its short name, its source and, for the hub, its dataset id, schema and size."""

    name: str
    source: str  # a key of SOURCES
    hub_id: str | None = None
    schema: HubSchema | None = None
    problems: int | None = None  # problems of a hub benchmark (hara plan); embedded ones: embedded_size

    def size(self, config: Mapping) -> int:
        """How many problems an evaluation of this benchmark scores under ``config`` (the planner's count)."""
        if self.source == "embedded":
            data = config["data"]
            return embedded_size(self.name, data["benchmark_size"], data["benchmark_sizes"])
        if self.problems is None:
            raise ValueError(f"benchmark {self.name!r}: its number of problems is not declared (Benchmark.problems)")
        return self.problems

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"benchmark {self.name!r}: source {self.source!r} (valid: {', '.join(SOURCES)})")
        if self.source == "hub" and (not self.hub_id or self.schema is None or self.schema.role != "benchmark"):
            raise ValueError(f"benchmark {self.name!r}: a hub benchmark needs a hub_id and a benchmark schema")
        if self.hub_id in hub.TRAINING_SETS:  # its scores would measure recall of trained problems
            raise ValueError(
                f"benchmark {self.name!r}: hub_id {self.hub_id!r} is a training set (hara.data.hub.TRAINING_SETS); "
                "evaluate on a dataset the runs do not train on"
            )


#: Every benchmark, in registration order; no two hub benchmarks read the same hub dataset.
BENCHMARKS: Registry[Benchmark] = Registry("benchmark", unique=("hub_id",))
get_benchmark, register_benchmark = BENCHMARKS.get, BENCHMARKS.register


def benchmarks(data_source: str | None = None) -> dict[str, Benchmark]:
    """Every registered benchmark in registration order, or those a data source provides (synthetic, champ, hub)."""
    return {n: b for n, b in BENCHMARKS.entries().items() if data_source is None or data_source in SOURCES[b.source]}


def hub_schemas() -> dict[str, HubSchema]:
    """Hub dataset id -> schema of every hub dataset the harness reads: the training sets (hara.data.hub), then the
    registered hub benchmarks."""
    return {**hub.TRAINING_SETS, **{b.hub_id: b.schema for b in benchmarks("hub").values()}}


def load_local_dataset(hub_id: str, folder: str | Path, split: str | None = None) -> list[dict]:
    """The hub dataset ``hub_id`` saved under ``folder`` as canonical records (:func:`hara.data.hub.read_dataset`
    in its schema); an unknown id raises an UnknownNameError listing the known ones."""
    return hub.read_dataset(hub_id, lookup(hub_schemas(), hub_id, "hub dataset"), folder, split)


for _name in MINI_BENCHMARKS:
    register_benchmark(Benchmark(_name, "embedded"))

_MATH_COLUMNS = dict(
    problem="problem", answer="answer", solution="solution", level="level", skill="subject", id="unique_id"
)
# Schemas: see hara.data.hub's docstring for where each was looked up.
for _benchmark in (
    Benchmark("math500", "hub", "HuggingFaceH4/MATH-500", HubSchema("benchmark", "test", **_MATH_COLUMNS), 500),
    Benchmark(
        "aime24",
        "hub",
        "HuggingFaceH4/aime_2024",
        HubSchema("benchmark", "train", problem="problem", answer="answer", solution="solution", id="id"),
        30,
    ),
    Benchmark(
        "amc23",
        "hub",
        "math-ai/amc23",
        HubSchema("benchmark", "test", problem="question", answer="answer", id="id"),
        40,
    ),
    Benchmark(
        "minerva",
        "hub",
        "math-ai/minervamath",
        HubSchema("benchmark", "test", problem="question", answer="answer"),
        272,
    ),
    Benchmark(
        "olympiadbench",
        "hub",
        "Hothan/OlympiadBench",
        HubSchema(
            "benchmark",
            "train",
            problem="question",
            answer="final_answer",
            solution="solution",
            skill="subfield",
            id="id",
            config="OE_TO_maths_en_COMP",
            clean_answer=answer_list,
            clean_solution=solution_list,
        ),
        674,
    ),
):
    register_benchmark(_benchmark)
