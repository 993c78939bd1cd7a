"""The seam between the harness and TRL, transformers and vLLM: every workaround of their behaviour in one module, each
with the version it was written against (:data:`PINNED`; pyproject.toml pins the same), and the private TRL methods
that :class:`~hara.rlvr.trainer.HaraGRPOTrainer` overrides with the signatures it overrides (:data:`TRL_OVERRIDES`).

tests/rlvr/test_seam.py fails when an installed version differs from :data:`PINNED`, an overridden method's
signature differs from TRL's, TRL's constructor no longer builds the private metrics the harness appends to
(:data:`TRL_METRICS`), or a module other than this one writes TRL's privates or patches the policy's ``generate``:
after a version bump, re-read each workaround below against the new source (the docstrings say what each works
around) and update the pins. vLLM's CPU build has its own seam (hara/vllm_cpu.py).
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator
from typing import Any

__all__ = [
    "GRADIENT_ACCUMULATION_KWARGS",
    "PINNED",
    "TRL_METRICS",
    "TRL_OVERRIDES",
    "TRL_VLLM_MODULES",
    "allow_indexed_cpu_locations",
    "log_train_metric",
    "reseed_after_colocated_engine",
    "reserve_master_port",
    "stop_kwargs",
    "stop_strings_for_generate",
    "trl_imports_for",
    "without_stop_padding",
]

#: The versions the workarounds here were written against (the `vllm` pin also covers the vllm-cpu build).
PINNED = {"trl": "1.16.0", "transformers": "5.17.0", "vllm": "0.31.0"}

#: The private GRPOTrainer methods HaraGRPOTrainer overrides, with TRL's parameters as pinned (the override may take
#: ``*args, **kwargs`` for the tail it forwards): generation (stop strings, the hidden-state recorder),
#: rewards (per-rollout scores for the step oracle), advantages (the reweighting), the log-prob pass that the
#: capture rides on, and the loss (the oracle's gradient diagnostic reads its log-probs).
TRL_OVERRIDES: dict[str, tuple[str, ...]] = {
    "_calculate_rewards": ("self", "inputs", "prompts", "completions", "completion_ids_list"),
    "_generate_and_score_completions": ("self", "inputs"),
    "_generate_single_turn": (
        "self",
        "prompt_ids",
        "images",
        "multimodal_fields",
        "num_generations",
        "has_tool_images",
    ),
    "_get_per_token_logps_and_entropies": ("self", "model", "input_ids", "attention_mask", "logits_to_keep"),
    "_compute_loss": ("self", "model", "inputs"),
}


#: accelerate's gradient accumulation settings, passed through GRPOConfig's ``accelerator_config``. transformers 5.17
#: runs every micro-batch but the last of a step under ``accelerator.no_sync`` unless ``sync_each_batch``
#: (trainer.py's inner loop reads it from ``accelerator.gradient_state.plugin_kwargs``); under FSDP2 no_sync is
#: ``set_requires_gradient_sync(False)``, which keeps every unsharded parameter's bf16 gradient until the last
#: micro-batch: a whole model's gradient per GPU (+16.4 GB for 8B). With it on, each micro-batch's backward
#: reduce-scatters into the fp32 sharded gradient, so a rank holds one block's unsharded gradient at a time
#: (hara.planning counts no held gradient while this is on). Data parallel on CPUs only all-reduces more often.
GRADIENT_ACCUMULATION_KWARGS = {"sync_each_batch": True}

#: TRL's modules that import vLLM when they load, in dependency order.
TRL_VLLM_MODULES = ("trl.generation.vllm_client", "trl.generation.vllm_generation", "trl.generation")


@contextlib.contextmanager
def trl_imports_for(use_vllm: bool) -> Iterator[None]:
    """Import :class:`~hara.rlvr.trainer.HaraGRPOTrainer` (hara.rlvr.session.trainer_class) inside this, so that a run
    without vLLM does not load vLLM.

    TRL's trainer module imports vLLM whenever it is installed (trl.generation; about 12 s of imports per training
    process on a CPU, torch._inductor included), also for runs that generate with transformers. While a run without
    ``training.use_vllm`` loads TRL, TRL is told vLLM is unavailable; a later vLLM run in the same process reloads
    TRL's generation modules with vLLM (reloading keeps the module objects, so classes already imported see it)."""
    import importlib
    import sys

    import trl.import_utils as trl_imports

    generation = sys.modules.get("trl.generation.vllm_generation")
    if not use_vllm and generation is None:
        available = trl_imports.is_vllm_available
        trl_imports.is_vllm_available = lambda min_version=None: False
        try:
            yield
        finally:
            trl_imports.is_vllm_available = available
        return
    if use_vllm and generation is not None and not hasattr(generation, "LLM") and trl_imports.is_vllm_available():
        for name in TRL_VLLM_MODULES:  # loaded without vLLM by an earlier run of this process
            importlib.reload(sys.modules[name])
    yield


def reserve_master_port() -> None:
    """A ``MASTER_PORT`` of this process's own for TRL's colocated vLLM (its torch.distributed rendezvous) when no
    launcher set one. TRL takes the first free port of a fixed list (29500, 23456, ...): training jobs that start
    together on one node (the rehearsal's, or 1-GPU jobs packed on a cluster node) all pick the same one and all but
    one fail with EADDRINUSE. A port the OS hands out is different for each."""
    import socket

    if os.environ.get("MASTER_PORT", "").strip().lower() in ("", "0", "auto"):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(sock.getsockname()[1])


def reseed_after_colocated_engine(trainer: Any, seed: int) -> None:
    """TRL starts the colocated vLLM engine with ``seed=process_index // tp``, and the in-process engine seeds the
    global RNGs with it, which its sampler then draws from (requests carry no seed of their own): every training
    seed would sample the same stream. The run's seed goes back in, offset per tensor-parallel group so that ranks
    that generate different batches do not share a stream (rank 0 gets exactly ``seed``)."""
    from transformers import set_seed

    group = trainer.accelerator.process_index // trainer.args.vllm_tensor_parallel_size
    set_seed(seed + 1_000_003 * group)


def stop_kwargs(stop: list[str], vllm: bool) -> dict | None:
    """The config's stop sequences in the words of the generation backend TRL calls (vLLM's SamplingParams or
    transformers' GenerationConfig); None without stops, so TRL's defaults stay as they are."""
    if not stop:
        return None
    return {"stop": list(stop)} if vllm else {"stop_strings": list(stop)}


#: How GRPOTrainer.__init__ builds its private per-mode metric lists, which TRL averages into each logged step and
#: the harness appends its own step metrics to (:func:`log_train_metric`); tests/rlvr/test_seam.py pins the line.
TRL_METRICS = 'self._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}'


def log_train_metric(trainer: Any, key: str, value: float) -> None:
    """Add ``value`` to this step's ``key`` in TRL's private training metrics (:data:`TRL_METRICS`): TRL averages
    each key over the step's micro-batches and logs it with its own, so the metrics sink sees one dict per step."""
    trainer._metrics["train"][key].append(value)


def _restore_indexed_cpu_location(storage: Any, location: str) -> Any:
    """torch.load location hook for ``cpu:<rank>``: the storage is already in host memory."""
    return storage if location.startswith("cpu:") else None


@functools.cache
def allow_indexed_cpu_locations() -> None:
    """transformers 5.17 resumes the optimizer of a multi-process run with ``map_location=args.device``, which is
    ``cpu:<rank>`` for gloo processes on the CPU, a location torch.load does not know ("don't know how to restore
    data location ... (tagged with cpu:0)"). A deserializer for it (its tagger never tags, so saving is unchanged)
    lets the CPU multi-process resume work; GPU runs never reach it. Registered once per process."""
    import torch

    torch.serialization.register_package(99, lambda obj: None, _restore_indexed_cpu_location)


@contextlib.contextmanager
def stop_strings_for_generate(model: Any, tokenizer: Any) -> Iterator[None]:
    """transformers' ``generate`` matches ``stop_strings`` on decoded text and refuses them without the tokenizer,
    which TRL's transformers path does not pass: for the duration of TRL's call the policy's ``generate`` takes it."""
    model.generate = functools.partial(type(model).generate, model, tokenizer=tokenizer)
    try:
        yield
    finally:
        del model.generate  # the class's method again


def without_stop_padding(completion_ids: list[list[int]], pad: int) -> list[list[int]]:
    """Rows that transformers' ``generate`` ended at a stop string are padded after it, and TRL cuts rows at eos
    only: where pad is not an eos token, the padding is removed here so that it never enters the loss."""
    from hara.models.generate import strip_padding

    return [strip_padding(row, pad) for row in completion_ids]
