"""lighteval custom tasks for the registered benchmarks: the paper's five (local folders) and the embedded ones
(generated).

Every task is built from canonical problem records (``id``, ``problem``, ``answer``, ...):

- given a `hara data` folder (``--data``, what the workflow passes), the canonical records the data stage wrote there,
  for every source;
- else hub benchmarks are read from the folder `hara fetch-data` wrote (``<data.local_dir>/<owner>/<name>``), in each
  dataset's own schema (:func:`hara.data.pipeline.hub_benchmark`; hara.data.catalog holds the schemas),
  and mini benchmarks are generated from the config exactly as the data stage does (same seed, same benchmark
  order, so the same problems).

The prompt is the config's prompt format (:class:`hara.data.format.PromptFormat`: template and stop sequences), the
one training uses, with zero few-shot examples and no system prompt or chat template: evaluation conditions the
policy on exactly what RL training conditioned it on, and stops where its rollouts stopped.
The records never go through ``datasets.load_dataset``: the task's dataset is set from memory, so nothing is
downloaded. The task config carries a fingerprint of the records and the prompt format (``hf_revision``), which lighteval
folds into its prediction-cache key: edited benchmark files or another prompt cannot be answered from an old cache.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from lighteval.tasks.lighteval_task import LightevalTaskConfig
from lighteval.tasks.requests import Doc

from hara.data.catalog import benchmarks, get_benchmark
from hara.data.format import PROMPT_TEMPLATE, PromptFormat, format_prompt
from hara.data.pipeline import hub_benchmark
from hara.evaluation.scoring import pass_at_1_metric
from hara.evaluation.settings import SamplingSettings

__all__ = [
    "BENCHMARK_LOADERS",
    "SPLIT",
    "TASK_VERSION",
    "EvalTask",
    "benchmark_records",
    "build_task",
    "prompt_fingerprint",
    "record_to_doc",
    "records_fingerprint",
    "task_name",
]

SPLIT = "test"  # the single split every task exposes to lighteval
TASK_VERSION = 1  # bump when the prompt or the scoring rule changes: it is part of lighteval's cache key


def task_name(benchmark: str) -> str:
    """lighteval task name of a benchmark (``hara_`` prefix: never clashes with a built-in task)."""
    return f"hara_{benchmark}"


def record_to_doc(line: dict, task: str, template: str = PROMPT_TEMPLATE) -> Doc:
    """lighteval prompt function: one canonical record -> a generative Doc with the gold answer as its only choice."""
    return Doc(
        query=format_prompt(line["problem"], template),
        choices=[str(line["answer"])],
        gold_index=0,
        specific={"record_id": str(line["id"]), "problem": line["problem"]},
        task_name=task,
    )


def load_mini(config: Mapping, benchmark: str) -> list[dict]:
    """A mini benchmark generated like the data stage (order matters: later benchmarks exclude earlier problems, so
    the config's own benchmark list is used)."""
    from hara.data.embedded import build_embedded_datasets
    from hara.data.pipeline import embedded_options

    names = list(config["data"]["benchmarks"])
    names = names if benchmark in names else [*names, benchmark]
    datasets = build_embedded_datasets(config["seed"], train_size=0, benchmarks=names, **embedded_options(config))
    return datasets[benchmark]


def load_prepared(data_dir: str | Path, benchmark: str) -> list[dict]:
    """The canonical records of a benchmark as the data stage wrote them (``<data_dir>/benchmarks/<name>.jsonl``),
    whatever the source: what the workflow's evaluation jobs read."""
    from hara.data.io import DataError, read_jsonl
    from hara.data.pipeline import REQUIRED_KEYS

    path = Path(data_dir) / "benchmarks" / f"{benchmark}.jsonl"
    if not path.is_file():
        raise DataError(f"{path}: missing (run `hara data` with the same config into {data_dir})")
    return read_jsonl(path, required_keys=REQUIRED_KEYS)


#: How a benchmark of each source (hara.data.catalog) is built when no `hara data` folder is given.
BENCHMARK_LOADERS: dict[str, Callable[[Mapping, str], list[dict]]] = {"embedded": load_mini, "hub": hub_benchmark}


def benchmark_records(config: Mapping, benchmark: str, data_dir: str | Path | None = None) -> list[dict]:
    """Canonical records of one benchmark: from a `hara data` folder when ``data_dir`` is given (any source), else
    from the config's source. An unknown name raises an UnknownNameError (a KeyError) that lists the valid ones."""
    source = get_benchmark(benchmark).source  # UnknownNameError listing the valid names
    if data_dir is not None:
        records = load_prepared(data_dir, benchmark)
    else:
        records = BENCHMARK_LOADERS[source](config, benchmark)
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


def prompt_fingerprint(prompt: PromptFormat) -> str:
    """sha256 of the prompt template and stop sequences."""
    payload = json.dumps([prompt.template, list(prompt.stop)], ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def build_task(
    benchmark: str, records: list[dict], settings: SamplingSettings, prompt: PromptFormat = PromptFormat()
) -> EvalTask:
    """The lighteval task of a benchmark: the config's prompt format, pass@1 over ``settings.n`` samples, the token
    budget. The stop sequences reach the models through each Doc's ``stop_sequences``."""
    revision = hashlib.sha256(f"{records_fingerprint(records)}:{prompt_fingerprint(prompt)}".encode()).hexdigest()
    config = LightevalTaskConfig(
        name=task_name(benchmark),
        prompt_function=functools.partial(record_to_doc, template=prompt.template),
        hf_repo=hub[benchmark].hub_id if benchmark in (hub := benchmarks("hub")) else "hara/embedded",
        hf_subset=benchmark,
        hf_revision=revision,
        metrics=[pass_at_1_metric(settings.n)],
        hf_avail_splits=[SPLIT],
        evaluation_splits=[SPLIT],
        few_shots_split=SPLIT,
        few_shots_select=None,
        generation_size=settings.max_new_tokens,
        stop_sequence=list(prompt.stop),
        version=TASK_VERSION,
    )
    return EvalTask(benchmark=benchmark, config=config, records=records)
