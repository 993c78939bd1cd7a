"""The GRPOConfig of a training run: the config's ``training`` section and an RLVR preset in TRL's words."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from hara.errors import ConfigError
from hara.layout import CHECKPOINTS_DIR
from hara.rlvr.policy import world_size
from hara.rlvr.presets import RLVRPreset, grpo_config_kwargs
from hara.rlvr.seam import GRADIENT_ACCUMULATION_KWARGS, stop_kwargs

__all__ = ["grpo_args"]


def grpo_args(config: Mapping, preset: RLVRPreset, out: Path, seed: int, params: int):
    """GRPOConfig from the config's ``training`` section and the preset (CPU: no bf16, no checkpointing), for a
    policy of ``params`` parameters (the collective timeout waits out its checkpoint save).

    ``training.use_vllm`` generates with vLLM wherever vLLM can run (:func:`hara.vllm_cpu.generates_with_vllm`): on
    a GPU with the gpu extra, and on a CPU with vLLM's CPU build (the cluster's code path, in CI); on a CPU without
    it TRL's transformers ``generate``; on a GPU without vllm, an error."""
    import torch
    from trl import GRPOConfig

    from hara.rlvr.checkpoints import collective_timeout_s
    from hara.vllm_cpu import generates_with_vllm

    t = config["training"]
    gpu = torch.cuda.is_available()
    use_vllm = generates_with_vllm(t["use_vllm"])
    rollouts, accum, world = t["prompts_per_step"] * t["group_size"], t["grad_accum_steps"], world_size()
    if t["prompts_per_step"] % world:
        raise ConfigError(
            f"training.prompts_per_step: {t['prompts_per_step']} prompts cannot be split into whole "
            f"groups over {world} processes"
        )
    if (rollouts // world) % accum:
        raise ConfigError(
            f"training.grad_accum_steps: {accum} does not divide the {rollouts // world} rollouts per process of a step"
        )
    # One generation batch per optimizer step: prompts_per_step x group_size rollouts in all, each process holding
    # whole groups (TRL's RepeatSampler lays a prompt's rollouts out consecutively), split into `accum` micro-batches
    # after the advantages are computed on the whole batch (so groups stay whole for the HarA hook).
    return GRPOConfig(
        output_dir=str(Path(out) / CHECKPOINTS_DIR),
        seed=seed,
        data_seed=seed,
        max_steps=t["steps"],
        per_device_train_batch_size=rollouts // (accum * world),
        num_generations=t["group_size"],
        gradient_accumulation_steps=accum,
        steps_per_generation=accum,
        num_iterations=t["num_iterations"],
        max_completion_length=t["max_completion_length"],
        temperature=t["temperature"],
        top_p=t["top_p"],
        learning_rate=t["lr"],
        lr_scheduler_type=t["lr_scheduler"],
        warmup_steps=t["warmup_steps"],
        weight_decay=t["weight_decay"],
        max_grad_norm=t["max_grad_norm"],
        save_strategy="steps",
        save_steps=t["save_steps"],
        save_total_limit=t["save_total_limit"],
        logging_steps=1,
        report_to=[],
        disable_tqdm=not t["progress"],
        log_completions=False,
        disable_dropout=True,
        use_cpu=not gpu,
        bf16=gpu and t["bf16"],
        gradient_checkpointing=gpu and t["gradient_checkpointing"],
        use_vllm=use_vllm,
        vllm_mode=t["vllm_mode"],
        vllm_gpu_memory_utilization=t["vllm"]["gpu_memory_utilization"],
        vllm_max_model_length=t["vllm"]["max_model_len"],
        vllm_tensor_parallel_size=t["vllm"]["tensor_parallel_size"],
        vllm_enable_sleep_mode=t["vllm"]["enable_sleep_mode"],
        generation_kwargs=stop_kwargs(config["prompt"]["stop"], vllm=use_vllm),
        accelerator_config={"gradient_accumulation_kwargs": dict(GRADIENT_ACCUMULATION_KWARGS)},
        ddp_timeout=collective_timeout_s(params, t["checkpoint_write_mb_s"]),
        **grpo_config_kwargs(preset),
    )
