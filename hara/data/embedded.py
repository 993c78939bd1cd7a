"""The embedded data world: a synthetic training set and held-out mini benchmarks.

Five mini benchmarks stand in for the paper's MATH-500, Minerva, OlympiadBench, AMC23 and AIME24, in that order of
increasing difficulty: each is a mix of synthetic skills and levels (see :data:`BENCHMARKS`). Benchmarks are drawn
first, in the order listed, and every later set excludes the normalized text of every earlier problem, so no
benchmark problem appears in another benchmark or in the training set.

Each set has its own seed derived from the run seed and the set's name (``random.Random`` seeded with a string is
stable across runs and platforms), so adding a benchmark or resizing one does not reshuffle the others. Only the
benchmarks a config lists are drawn, so a registered benchmark it does not list takes no problem from its training set.

``in_distribution`` is drawn from the RL prompts' own skills and levels (``data.skills`` and
``training.prompt_selection.levels``), 1,000 problems by default: the in-distribution endpoint of a control, where a
credit-assignment effect on what RL trains on is not diluted by other skills and levels.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import hara
from hara.data.io import lookup, write_jsonl
from hara.data.synthetic import LEVELS, SKILLS, generate_problems, normalize_problem
from hara.hashing import file_sha256
from hara.layout import MANIFEST_FILE

__all__ = [
    "BENCHMARKS",
    "TRAIN",
    "VALIDATION",
    "BenchmarkSpec",
    "benchmark_spec",
    "build_embedded_datasets",
    "embedded_size",
    "write_datasets",
]

TRAIN = "train"
#: Training problems held out for model selection (checkpoints, sweep trials): never trained on, never a test set.
VALIDATION = "validation"


@dataclass(frozen=True)
class BenchmarkSpec:
    """How one mini benchmark is drawn: which levels with which weights, from which skills, how many problems.

    ``levels`` None: the RL prompts' levels, uniformly (``prompt_levels`` of :func:`build_embedded_datasets`);
    ``skills`` None: the run's skills (``data.skills``); ``size`` None: ``data.benchmark_size``."""

    description: str
    levels: tuple[int, ...] | None
    level_weights: tuple[float, ...] | None
    skills: tuple[str, ...] | None = field(default_factory=lambda: tuple(SKILLS))
    size: int | None = None

    @property
    def mean_level(self) -> float | None:
        """Expected difficulty level, used to check the benchmarks are ordered by difficulty (None: the RL prompts')."""
        if self.levels is None:
            return None
        return sum(l * w for l, w in zip(self.levels, self.level_weights)) / sum(self.level_weights)


_APPLIED = ("arithmetic", "fractions", "percent", "word_problem", "linear_equation")
_NUMBER_THEORY = ("remainder", "gcd_lcm", "sequence", "powers", "linear_equation", "fractions")

# Ordered from easiest to hardest, like the paper's benchmarks.
BENCHMARKS: dict[str, BenchmarkSpec] = {
    "mini_math500": BenchmarkSpec("all skills, mostly easy (stands in for MATH-500)", (1, 2, 3), (3, 4, 3)),
    "mini_minerva": BenchmarkSpec("applied skills, easy to medium (Minerva Math)", (2, 3, 4), (3, 4, 3), _APPLIED),
    "mini_olympiad": BenchmarkSpec(
        "number theory and algebra, medium (OlympiadBench)", (3, 4, 5), (4, 4, 2), _NUMBER_THEORY
    ),
    "mini_amc23": BenchmarkSpec("all skills, medium to hard (AMC23)", (3, 4, 5), (2, 4, 4)),
    "mini_aime24": BenchmarkSpec("all skills, hardest (AIME24)", (4, 5), (1, 4)),
    # large, so a few points between methods on what RL trains on stay above the problems' sampling noise
    "in_distribution": BenchmarkSpec("the RL prompts' own skills and levels", None, None, None, 1000),
}


def benchmark_spec(name: str) -> BenchmarkSpec:
    """The spec of a mini benchmark; an unknown name raises an error listing the valid ones."""
    return lookup(BENCHMARKS, name, "benchmark")


def restrict_skills(own: Sequence[str] | None, allowed: Sequence[str] | None) -> tuple[str, ...] | None:
    """A set's skills limited to ``allowed`` (None = no limit); falls back to ``allowed`` if they do not meet."""
    if allowed is None:
        return None if own is None else tuple(own)
    for name in allowed:
        lookup(SKILLS, name, "skill")
    kept = tuple(name for name in (own or allowed) if name in allowed)
    return kept or tuple(allowed)


def _set_seed(seed: int, name: str) -> str:
    """The seed of one set: the run seed and the set name, so sets do not share random streams."""
    return f"hara-embedded:{seed}:{name}"


def embedded_size(name: str, benchmark_size: int, sizes: Mapping[str, int] | None = None) -> int:
    """Problems of one benchmark: ``sizes[name]`` (``data.benchmark_sizes``), else its own size, else
    ``benchmark_size`` (``data.benchmark_size``)."""
    own = benchmark_spec(name).size
    return (sizes or {}).get(name, benchmark_size if own is None else own)


def build_embedded_datasets(
    seed: int,
    train_size: int = 12000,
    benchmark_size: int = 200,
    benchmarks: Sequence[str] | None = None,
    skills: Sequence[str] | None = None,
    *,
    prompt_levels: Sequence[int] = (),
    benchmark_sizes: Mapping[str, int] | None = None,
) -> dict[str, list[dict]]:
    """The training set (key ``"train"``) and the mini benchmarks, all disjoint by normalized problem text.

    Args:
        seed: run seed; same seed, identical datasets.
        train_size: number of training problems (all skills, levels 1..5 uniformly).
        benchmark_size: problems per benchmark that declares no size of its own.
        benchmarks: names to build, drawn in this order (default: all of :data:`BENCHMARKS`, in registry order).
        skills: restrict every set to these skills (default: all of :data:`SKILLS`). A benchmark keeps the
            intersection with its own skill mix, or all of ``skills`` when the two do not meet.
        prompt_levels: the RL prompts' levels (``training.prompt_selection.levels``; empty: all), drawn by the
            benchmarks that follow them (``levels`` None).
        benchmark_sizes: problems of named benchmarks, above their own size and ``benchmark_size``.

    Raises:
        UnknownNameError: for a benchmark name not in :data:`BENCHMARKS`.
    """
    names = list(BENCHMARKS) if benchmarks is None else list(benchmarks)
    specs = {name: benchmark_spec(name) for name in names}
    taken: set[str] = set()
    datasets: dict[str, list[dict]] = {}
    for name, spec in specs.items():
        records = generate_problems(
            embedded_size(name, benchmark_size, benchmark_sizes),
            _set_seed(seed, name),
            spec.levels if spec.levels is not None else tuple(prompt_levels) or LEVELS,
            restrict_skills(spec.skills, skills),
            level_weights=spec.level_weights,
            exclude=taken,
            id_prefix=name,
        )
        taken.update(normalize_problem(r["problem"]) for r in records)
        datasets[name] = records
    datasets[TRAIN] = generate_problems(
        train_size, _set_seed(seed, TRAIN), skills=restrict_skills(None, skills), exclude=taken, id_prefix=TRAIN
    )
    return {TRAIN: datasets.pop(TRAIN), **datasets}


def write_datasets(datasets: Mapping[str, list[dict]], out_dir: str | Path, *, seed: int | None = None) -> dict:
    """Write ``train.jsonl``, ``benchmarks/<name>.jsonl`` and ``manifest.json`` under ``out_dir``.

    The manifest lists every file with its record count and sha256, the seed and the package version; it holds no
    time stamps or absolute paths, so the same datasets give byte-identical output. Returns the manifest.
    """
    out_dir = Path(out_dir)
    files = {}
    for name, records in datasets.items():
        rel = f"{name}.jsonl" if name in (TRAIN, VALIDATION) else f"benchmarks/{name}.jsonl"
        count = write_jsonl(out_dir / rel, records)
        files[rel] = {"count": count, "sha256": file_sha256(out_dir / rel)}
    manifest = {
        "seed": seed,
        "hara_version": hara.__version__,
        "train": f"{TRAIN}.jsonl" if TRAIN in datasets else None,
        "benchmarks": [name for name in datasets if name not in (TRAIN, VALIDATION)],
        **({"validation": f"{VALIDATION}.jsonl"} if VALIDATION in datasets else {}),
        "files": files,
    }
    (out_dir / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return manifest
