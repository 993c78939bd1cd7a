"""What one training rank runs of a grid cell (:class:`Setup`): batch shapes, processes, vLLM, precision."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hara.methods import get_method
from hara.rlvr.presets import config_preset
from hara.rlvr.seam import GRADIENT_ACCUMULATION_KWARGS


@dataclass(frozen=True)
class Setup:
    """What one training run of a size does, read from the config (the run's GRPOConfig, hara.rlvr.train)."""

    gpu: bool  # hub family: GPU jobs; tiny family: CPU processes
    world: int  # processes = GPUs of the job
    rollouts: int  # per optimizer step, all processes
    micro_batch: int  # rollouts per process per backward pass
    prompt_tokens: int
    completion_tokens: int
    steps: int
    compute_bytes: int  # activations, gathered weights, captured hidden states
    master_bytes: int  # sharded / resident weights, grads and AdamW states
    sharded: bool  # FSDP full shard over the world
    checkpointing: bool
    use_vllm: bool
    vllm_share: float  # training.vllm.gpu_memory_utilization
    vllm_sleep: bool
    vllm_tp: int
    vllm_max_len: int | None
    reference_model: bool  # a KL term (beta > 0) loads a reference model
    old_logps_pass: bool  # TRL recomputes old log-probs (vLLM importance sampling correction, num_iterations > 1)
    capture_forward: bool  # the capture runs an extra forward (vLLM generation, or hara.capture: forward)
    entropy_chunk: int
    save_total_limit: int
    sync_each_batch: bool  # FSDP reduce-scatters every micro-batch (no unsharded gradient held across them)

    @property
    def context(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def rollouts_per_process(self) -> int:
        return self.rollouts // self.world


def training_world(config: Mapping, size: str) -> int:
    """Processes of one run: the GPUs of the job (hub family, models.train_gpus) or training.processes (tiny)."""
    if config["models"]["family"] == "hub":
        return config["models"]["train_gpus"].get(size, 1)
    return config["training"]["processes"]


def setup_of(config: Mapping, size: str, rlvr: str, method: str) -> Setup:
    """The :class:`Setup` of one cell; the same divisibility rules as hara.rlvr.grpo_config.grpo_args."""
    t, gpu = config["training"], config["models"]["family"] == "hub"
    world = training_world(config, size)
    rollouts = t["prompts_per_step"] * t["group_size"]
    accum = t["grad_accum_steps"]
    micro = rollouts // (accum * world)
    if micro < 1 or rollouts % (accum * world):
        from hara.errors import ConfigError

        raise ConfigError(
            f"training.grad_accum_steps: {accum} micro-batches x {world} processes do not split the "
            f"{rollouts} rollouts of a step of {size}"
        )
    use_vllm = gpu and t["use_vllm"]
    needs = get_method(method).captures  # what the trainer captures for it (hara/methods.py)
    bf16 = gpu and t["bf16"]
    sharded = gpu and world > 1
    old_logps = use_vllm or t["num_iterations"] > 1  # TRL's importance-sampling correction is on by default
    return Setup(
        gpu=gpu,
        world=world,
        rollouts=rollouts,
        micro_batch=micro,
        prompt_tokens=config["plan"]["prompt_tokens"],
        completion_tokens=t["max_completion_length"],
        steps=t["steps"],
        compute_bytes=2 if bf16 else 4,
        master_bytes=4,
        sharded=sharded,  # fp32 master weights everywhere (hara.rlvr.policy.policy_dtype)
        checkpointing=gpu and t["gradient_checkpointing"],
        use_vllm=use_vllm,
        vllm_share=t["vllm"]["gpu_memory_utilization"],
        vllm_sleep=t["vllm"]["enable_sleep_mode"],
        vllm_tp=t["vllm"]["tensor_parallel_size"],
        vllm_max_len=t["vllm"]["max_model_len"],
        reference_model=config_preset(config, rlvr).beta > 0,
        old_logps_pass=old_logps,
        # under vLLM the capture rides on TRL's old log-prob pass when it runs (hara.models.capture.PassRecorder)
        capture_forward=bool(needs) and (config["hara"]["capture"] == "forward" or (use_vllm and not old_logps)),
        entropy_chunk=config["hara"]["entropy_chunk"],
        save_total_limit=t["save_total_limit"],
        sync_each_batch=bool(GRADIENT_ACCUMULATION_KWARGS.get("sync_each_batch")),
    )
