"""lighteval custom tasks for the ten benchmarks: the paper's five (local folders) and the embedded five (generated).

Every task is built from canonical problem records (``id``, ``problem``, ``answer``, ...):

- hub benchmarks are read from the folder `hara fetch-data` wrote (``<data.local_dir>/<owner>/<name>``), in each
  dataset's own schema, through :func:`hara.data.hub.load_local_dataset` (the one place that knows those schemas);
- mini benchmarks are generated from the config exactly as the data stage does (same seed, same benchmark order, so
  the same problems), or read from a `hara data` folder.

The prompt is :func:`hara.data.format.format_prompt`, the one training uses, with zero few-shot examples and no
system prompt or chat template: evaluation conditions the policy on exactly what RL training conditioned it on.
The records never go through ``datasets.load_dataset``: the task's dataset is set from memory, so nothing is
downloaded. The task config carries a fingerprint of the records (``hf_revision``), which lighteval folds into its
prediction-cache key: edited benchmark files cannot be answered from an old cache.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from lighteval.tasks.lighteval_task import LightevalTaskConfig
from lighteval.tasks.requests import Doc

from hara.data.catalog import HUB_BENCHMARKS
from hara.data.embedded import BENCHMARKS as MINI_BENCHMARKS
from hara.data.format import format_prompt
from hara.evaluation.scoring import pass_at_1_metric
from hara.evaluation.settings import SamplingSettings

__all__ = [
    "BENCHMARK_LOADERS",
    "SPLIT",
    "TASK_VERSION",
    "EvalTask",
    "benchmark_records",
    "build_task",
    "record_to_doc",
    "records_fingerprint",
    "task_name",
]

SPLIT = "test"  # the single split every task exposes to lighteval
TASK_VERSION = 1  # bump when the prompt or the scoring rule changes: it is part of lighteval's cache key


def task_name(benchmark: str) -> str:
    """lighteval task name of a benchmark (``hara_`` prefix: never clashes with a built-in task)."""
    return f"hara_{benchmark}"


def record_to_doc(line: dict, task: str) -> Doc:
    """lighteval prompt function: one canonical record -> a generative Doc with the gold answer as its only choice."""
    return Doc(query=format_prompt(line["problem"]), choices=[str(line["answer"])], gold_index=0,
               specific={"record_id": str(line["id"]), "problem": line["problem"]}, task_name=task)


def load_mini(config: Mapping, benchmark: str, data_dir: str | Path | None) -> list[dict]:
    """A mini benchmark: from a `hara data` folder, or generated like the data stage (order matters: later
    benchmarks exclude earlier problems, so the config's own benchmark list is used)."""
    if data_dir is not None:
        from hara.data.io import read_jsonl

        path = Path(data_dir) / "benchmarks" / f"{benchmark}.jsonl"
        return read_jsonl(path, required_keys=("id", "problem", "answer"))
    from hara.data.embedded import build_embedded_datasets

    names = list(config["data"]["benchmarks"])
    names = names if benchmark in names else [*names, benchmark]
    data = config["data"]
    return build_embedded_datasets(config["seed"], train_size=0, benchmark_size=data["benchmark_size"],
                                   benchmarks=names, skills=data["skills"])[benchmark]


def load_hub(config: Mapping, benchmark: str, data_dir: str | Path | None) -> list[dict]:
    """A paper benchmark from its fetched local folder, mapped from the dataset's own schema."""
    from hara.data.hub import load_local_dataset

    root = Path(data_dir) if data_dir is not None else Path(config["data"]["local_dir"])
    return load_local_dataset(HUB_BENCHMARKS[benchmark], root / HUB_BENCHMARKS[benchmark])


BENCHMARK_LOADERS: dict[str, Callable[[Mapping, str, str | Path | None], list[dict]]] = {
    **{name: load_mini for name in MINI_BENCHMARKS},
    **{name: load_hub for name in HUB_BENCHMARKS},
}


def benchmark_records(config: Mapping, benchmark: str, data_dir: str | Path | None = None) -> list[dict]:
    """Canonical records of one benchmark; an unknown name raises a KeyError that lists the valid ones."""
    if benchmark not in BENCHMARK_LOADERS:
        raise KeyError(f"unknown benchmark {benchmark!r} (valid: {', '.join(BENCHMARK_LOADERS)})")
    records = BENCHMARK_LOADERS[benchmark](config, benchmark, data_dir)
    if not records:
        raise ValueError(f"benchmark {benchmark!r} has no problems")
    return records


def records_fingerprint(records: list[dict]) -> str:
    """sha256 of the problems and answers, in order: changes whenever the benchmark content does."""
    payload = json.dumps([[r["id"], r["problem"], str(r["answer"])] for r in records], ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


@dataclass
class EvalTask:
    """One benchmark ready for lighteval: its task config and the records that become its dataset."""

    benchmark: str
    config: LightevalTaskConfig
    records: list[dict]

    @property
    def name(self) -> str:
        return self.config.name


def build_task(benchmark: str, records: list[dict], settings: SamplingSettings) -> EvalTask:
    """The lighteval task of a benchmark: our prompt, pass@1 over ``settings.n`` samples, the token budget."""
    config = LightevalTaskConfig(
        name=task_name(benchmark), prompt_function=record_to_doc,
        hf_repo=HUB_BENCHMARKS.get(benchmark, "hara/embedded"), hf_subset=benchmark,
        hf_revision=records_fingerprint(records), metrics=[pass_at_1_metric(settings.n)],
        hf_avail_splits=[SPLIT], evaluation_splits=[SPLIT], few_shots_split=SPLIT, few_shots_select=None,
        generation_size=settings.max_new_tokens, stop_sequence=None, version=TASK_VERSION,
    )
    return EvalTask(benchmark=benchmark, config=config, records=records)
