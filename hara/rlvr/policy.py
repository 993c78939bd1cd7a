"""The policy and the processes that train it: how many there are and which one writes, the process group under
``accelerate launch``, the dtype of the weights, and the model loaded from a local folder."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

__all__ = [
    "end_process_group",
    "is_main_process",
    "load_policy",
    "policy_dtype",
    "start_process_group",
    "stored_params",
    "world_size",
]


def world_size() -> int:
    """Number of training processes (set by ``accelerate launch``; 1 when run directly)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main_process() -> bool:
    """Rank 0 (the only process when run directly): the one that writes files and talks to MLflow."""
    return int(os.environ.get("RANK", "0")) == 0


def policy_dtype(config: Mapping) -> str:
    """The dtype the policy's weights are loaded in. Under FSDP (several GPU processes, training.bf16) bf16, which
    halves each rank's host copy; accelerate then upcasts the sharded parameters to fp32 master weights and computes
    in bf16. One process keeps the weights as loaded, so there fp32 (bf16 compute comes from the autocast of
    GRPOConfig.bf16): pure bf16 weights and AdamW states would round an lr 1e-6 update of a weight ~0.02 away
    (bf16 resolves 2^-8 of it, 8e-5). fp32 on the CPU."""
    import torch

    sharded = torch.cuda.is_available() and world_size() > 1
    return "bfloat16" if sharded and config["training"]["bf16"] else "float32"


def start_process_group(base_model: Path, config: Mapping) -> None:
    """Under ``accelerate launch``, the process group, before the policy is loaded: with FSDP's
    ``fsdp_cpu_ram_efficient_loading`` (config/accelerate/fsdp.yaml) transformers then reads the weights in local
    rank 0 only and the other ranks take them from its broadcast (FSDP's sync_module_states on GPUs, DDP's initial
    broadcast on the CPU), so a node reads the checkpoint once, not once per GPU. Host memory is not saved by it in
    transformers 5.17: the other ranks fill their parameters with zeros on the CPU (resident) until FSDP moves the
    model to the meta device and shards it; bf16 (:func:`policy_dtype`) is what halves it. The group is started
    here, so its timeout is set here: the trainer's ``ddp_timeout`` does not reach a group that already exists
    (transformers' TrainingArguments passes it to a PartialState that finds torch.distributed initialized)."""
    if world_size() > 1:
        from datetime import timedelta

        from accelerate import PartialState

        from hara.rlvr.checkpoints import collective_timeout_s

        seconds = collective_timeout_s(stored_params(base_model), config["training"]["checkpoint_write_mb_s"])
        PartialState(timeout=timedelta(seconds=seconds))


def end_process_group() -> None:
    """Destroy torch.distributed's group at the end of a run: an NCCL group left to the interpreter's exit can hang
    or abort it, and a job that exits non-zero after writing final/ has final/ deleted by Snakemake."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def stored_params(folder: Path) -> int:
    """Parameters of the model saved in ``folder``, read from its safetensors headers (no tensor is loaded)."""
    import math

    from safetensors import safe_open

    total = 0
    for file in sorted(Path(folder).glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as handle:
            names = handle.keys()  # the header's tensor names (the handle itself is not iterable)
            total += sum(math.prod(handle.get_slice(name).get_shape()) for name in names)
    return total


def load_policy(base_model: Path, dtype: str = "float32"):
    """Model + tokenizer from a local folder (never the hub); on a CPU machine the model generates with the grouped
    attention of :mod:`hara.models.attention` (same tokens, faster)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hara.models.attention import use_cpu_attention

    if not (base_model / "config.json").is_file():
        raise FileNotFoundError(f"--base-model: no model at {base_model} (run `hara base-model` first)")
    tokenizer = AutoTokenizer.from_pretrained(str(base_model), local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(str(base_model), local_files_only=True, dtype=dtype)
    return use_cpu_attention(model), tokenizer
