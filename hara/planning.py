"""Resource plan of an experiment grid: GPU memory per rank, host memory, disk, tokens and device-hours per cell.

``hara plan`` prints it; docs/plan.md explains every term. The model is pure arithmetic over the config and a
model architecture (:class:`Architecture`): no torch, no files, except the architecture lookup at the edge
(:func:`architecture_of`). One *cell* is a size x rlvr x method of the grid (seeds cost the same).

What it models is what the code runs (hara.rlvr.train, TRL 1.16, accelerate 1.15, torch 2.13):

- Precision. One GPU process (no FSDP): the policy is loaded in fp32 (``policy_dtype``) and computes under bf16
  autocast, so weights, grads and AdamW states (which follow the parameter dtype) are fp32. Several GPU processes
  (FSDP2 full shard, config/accelerate/fsdp.yaml): loaded in bf16, accelerate upcasts trainable parameters to fp32
  master weights before sharding (mixed precision bf16), so the sharded weights, grads and AdamW states are fp32
  and the gathered compute copies bf16. On the CPU (tiny family) everything is fp32 and several processes are plain data parallel (no sharding).
- The loss never materialises (rows, T, V) logits: TRL 1.16 patches a fused LM head (``add_fused_lm_head``) that
  projects tiles of 4096 tokens x 32768 vocabulary entries and, in the backward, accumulates the head's weight
  gradient (V, d) and the hidden-state gradient (N, d) in fp32.
- Phases of a step do not overlap: generation, scoring (old log-probs, the HarA/entropy capture, the novelty
  computation), the micro-batch forward/backward passes, the optimizer step. The peak of a rank is what every
  phase shares (weights, grads, optimizer states, vLLM's share, runtime overhead, the batch's tensors) plus the
  largest phase.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hara.data.catalog import get_benchmark
from hara.data.embedded import VALIDATION
from hara.evaluation.settings import benchmark_settings
from hara.layout import candidate_steps, method_seeds
from hara.methods import methods
from hara.rlvr.presets import config_preset

__all__ = [
    "PAPER_ARCHITECTURES",
    "Architecture",
    "CellPlan",
    "GridPlan",
    "architecture_of",
    "format_plan_table",
    "plan_cell",
    "plan_grid",
    "setup_of",
    "write_plan",
]

GB = 1e9  # decimal gigabytes, as GPU data sheets and Slurm's MB count them
FUSED_HEAD_TOKENS, FUSED_HEAD_VOCAB = 4096, 32768  # trl/kernels/chunked_logprob.py TOKEN_CHUNK_SIZE, chunk size
# Without Triton (the CPU), TRL folds each tile with torch ops: its backward keeps about seven tile-sized fp32
# temporaries alive at once (scaled logits, z, log p, p, the gradient, and the target-mask products), its forward
# about four. With Triton (CUDA) the fold runs in registers and only the tile itself is allocated.
FOLD_TEMPORARIES_BACKWARD, FOLD_TEMPORARIES_FORWARD = 7, 4
# Live (rows, chunk, V) tensors of one entropy chunk (hara.models.capture.chunked_token_entropies), in fp32 units:
# the LM head's output in the compute dtype, its fp32 copy, softmax, softmax * logits (logsumexp's temporary).
ENTROPY_LIVE_FP32_TENSORS = 3.5
# Which methods read hidden states / entropies, and whose novelty code converts the captured rows to fp32
# (hara.novelty._work_rows: one fp32 copy of every reweighted row of the process's generation batch, before any
# projection): the method registry's declarations (hara/methods.py, torch-free).
CONTEXT_NEEDS = {name: tuple(sorted(spec.captures)) for name, spec in methods().items()}
NOVELTY_FP32_METHODS = {name for name, spec in methods().items() if spec.novelty_fp32}


@dataclass(frozen=True)
class Architecture:
    """Shapes of a Qwen3 decoder (transformers' Qwen3Config names)."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool
    max_positions: int = 32768

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def block_params(self) -> int:
        """One decoder block: q/k/v/o projections (no biases), q/k RMSNorms, SwiGLU MLP, two RMSNorms."""
        d = self.hidden
        attention = d * self.q_dim + 2 * d * self.kv_dim + self.q_dim * d + 2 * self.head_dim
        return attention + 3 * d * self.intermediate + 2 * d

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def head_params(self) -> int:
        """Parameters of the tail FSDP unit: final norm + LM head (+ the embedding it shares when tied)."""
        return self.hidden + self.embedding_params

    @property
    def params(self) -> int:
        untied_head = 0 if self.tied else self.embedding_params
        return self.embedding_params + self.layers * self.block_params + self.hidden + untied_head

    @property
    def largest_tensor(self) -> int:
        return max(self.embedding_params, self.hidden * self.intermediate)

    def kv_cache_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        return 2 * self.layers * self.kv_dim * dtype_bytes

    def layer_activation_units(self) -> int:
        """Elements per token one decoder block saves for its backward, in compute-dtype units (fp32 tensors count
        twice): 8 d (the two RMSNorms' fp32 inputs, their outputs, the residual branch outputs), 6 q_dim (q
        projection, q-norm's fp32 input, rotary, attention output and its transposed copy), 4 kv_dim (k, v, k-norm's
        fp32 input), 4 intermediate (gate, up, SiLU(gate), their product). Fitted to the bytes torch's saved-tensor
        hooks see for Qwen3 blocks in bf16 with a padded batch (SDPA, GQA repeated by transformers): within 6% over
        nine block shapes, 2% low at Qwen3-1.7B's (tests/test_planning.py). In fp32 the norms keep no extra copies
        and the count is 10-17% high."""
        return 8 * self.hidden + 6 * self.q_dim + 4 * self.kv_dim + 4 * self.intermediate

    def nograd_layer_units(self) -> int:
        """Elements per token alive at once inside one block of a no-grad forward (residual, normed input, the
        larger of attention's q/k/v/out and the MLP's gate/up/product)."""
        return 3 * self.hidden + max(3 * self.q_dim + 2 * self.kv_dim, 3 * self.intermediate)

    def forward_flops_per_token(self, context: int) -> float:
        """2 x matmul parameters (blocks + LM head) + causal attention scores and values over ``context`` tokens."""
        matmul = self.layers * self.block_params + self.embedding_params
        return 2.0 * matmul + 2.0 * self.layers * context * self.q_dim


# The paper's models (config.json of each hub snapshot), used when no local snapshot is at hand.
PAPER_ARCHITECTURES: dict[str, Architecture] = {
    "Qwen/Qwen3-1.7B-Base": Architecture(2048, 28, 16, 8, 128, 6144, 151936, tied=True),
    "Qwen/Qwen3-4B-Base": Architecture(2560, 36, 32, 8, 128, 9728, 151936, tied=True),
    "Qwen/Qwen3-8B-Base": Architecture(4096, 36, 32, 8, 128, 12288, 151936, tied=False),
}


def architecture_from_hf_config(hf: Mapping) -> Architecture:
    """An :class:`Architecture` from a config.json dictionary (Qwen3 / Llama-style keys)."""
    heads = hf["num_attention_heads"]
    return Architecture(
        hidden=hf["hidden_size"],
        layers=hf["num_hidden_layers"],
        heads=heads,
        kv_heads=hf.get("num_key_value_heads") or heads,
        head_dim=hf.get("head_dim") or hf["hidden_size"] // heads,
        intermediate=hf["intermediate_size"],
        vocab=hf["vocab_size"],
        tied=bool(hf.get("tie_word_embeddings", False)),
        max_positions=hf.get("max_position_embeddings", 32768),
    )


def _hub_cache_config(hub_id: str) -> Path | None:
    """config.json of ``hub_id`` in the local Hugging Face cache (HF_HOME / HF_HUB_CACHE), never the network."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - huggingface_hub ships with transformers
        return None
    found = try_to_load_from_cache(hub_id, "config.json")
    return Path(found) if isinstance(found, str) else None


def architecture_of(config: Mapping, size: str) -> Architecture:
    """The architecture of one size. Tiny family: hara.models.tiny.TINY_SIZES and the tokenizer's vocabulary. Hub
    family: config.json of the local snapshot (models.local_dir/<size>), else of the local Hugging Face cache, else
    the shipped table of the paper's models."""
    models = config["models"]
    if models["family"] == "tiny":
        return _tiny_architecture(size, models["tokenizer"])
    hub_id = models["hub_ids"][size]
    for candidate in (Path(models["local_dir"]) / size / "config.json", _hub_cache_config(hub_id)):
        if candidate is not None and candidate.is_file():
            return architecture_from_hf_config(json.loads(candidate.read_text(encoding="utf-8")))
    if hub_id in PAPER_ARCHITECTURES:
        return PAPER_ARCHITECTURES[hub_id]
    from hara.errors import ConfigError

    raise ConfigError(
        f"models.hub_ids.{size}: no config.json for {hub_id!r} in {models['local_dir']}/{size} or the "
        f"local Hugging Face cache, and it is not one of the shipped {', '.join(PAPER_ARCHITECTURES)}"
    )


def _tiny_architecture(size: str, tokenizer: str) -> Architecture:
    from hara.models.tiny import TINY_SIZES
    from hara.models.tokenizer import build_tokenizer

    shape = TINY_SIZES[size]
    return Architecture(
        hidden=shape.hidden_size,
        layers=shape.num_hidden_layers,
        heads=shape.num_attention_heads,
        kv_heads=shape.num_key_value_heads,
        head_dim=shape.head_dim,
        intermediate=shape.intermediate_size,
        vocab=len(build_tokenizer(tokenizer)),
        tied=True,
        max_positions=1024,
    )


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
    cpu_ram_efficient_loading: bool

    @property
    def context(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def rollouts_per_process(self) -> int:
        return self.rollouts // self.world


def _accelerate_flag(config: Mapping, key: str) -> bool:
    """A boolean of the fsdp_config of training.accelerate_config (False when the file is not found)."""
    import yaml

    from hara.rlvr.launch import resolve_accelerate_config

    try:
        path = resolve_accelerate_config(config["training"]["accelerate_config"])
    except FileNotFoundError:
        return False
    return bool((yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("fsdp_config", {}).get(key, False))


def training_world(config: Mapping, size: str) -> int:
    """Processes of one run: the GPUs of the job (hub family, models.train_gpus) or training.processes (tiny)."""
    if config["models"]["family"] == "hub":
        return config["models"]["train_gpus"].get(size, 1)
    return config["training"]["processes"]


def setup_of(config: Mapping, size: str, rlvr: str, method: str) -> Setup:
    """The :class:`Setup` of one cell; the same divisibility rules as hara.rlvr.train.grpo_args."""
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
    needs = CONTEXT_NEEDS[method]
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
        sharded=sharded,  # fp32 master weights everywhere (hara.rlvr.train.policy_dtype)
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
        cpu_ram_efficient_loading=sharded and _accelerate_flag(config, "fsdp_cpu_ram_efficient_loading"),
    )


# ---------------------------------------------------------------------------------------------------------------
# GPU (or, for CPU runs, host) memory of one training rank, in bytes per term.


def resident_terms(arch: Architecture, s: Setup, gpu_memory: float, overhead: float) -> dict[str, float]:
    """What every phase of a step holds: the rank's share of weights, grads and AdamW's two moments, vLLM's share
    (all phases unless its sleep mode frees it while training), a reference model (beta > 0), the CUDA runtime
    (context, cuBLAS/NCCL workspaces, allocator fragmentation) and the generation batch's own tensors."""
    shard = arch.params / s.world if s.sharded else arch.params
    terms = {"weights": shard * s.master_bytes, "grads": shard * s.master_bytes, "adam": 2 * shard * s.master_bytes}
    if not s.gpu and s.world > 1:  # DDP on the CPU: gradient buckets hold a second copy of the grads
        terms["ddp_buckets"] = shard * s.master_bytes
    if s.use_vllm and not s.vllm_sleep:
        terms["vllm"] = s.vllm_share * gpu_memory
    if s.reference_model:
        terms["reference_model"] = arch.params * s.compute_bytes / (s.world if s.sharded else 1)
    if s.gpu:
        terms["runtime"] = overhead
    # prompt/completion ids and masks (int64), advantages, old log-probs, token advantages (fp32)
    terms["batch_tensors"] = s.rollouts_per_process * (4 * 8 * s.context + 4 * 4 * s.completion_tokens)
    return terms


def generation_terms(arch: Architecture, s: Setup, method: str, gpu_memory: float) -> dict[str, float]:
    """Generation without vLLM (transformers ``generate`` over the process's whole generation batch): its KV cache,
    one decoding step's fp32 logits and their processed / softmaxed copies, the hidden states the recorder keeps,
    and (FSDP) the gathered full weights TRL generates with. With vLLM the engine's share is all (resident, or here
    when its sleep mode frees it outside generation)."""
    if s.use_vllm:
        return {"vllm": s.vllm_share * gpu_memory} if s.vllm_sleep else {}
    rows = s.rollouts_per_process
    terms = {
        "kv_cache": rows * s.context * arch.kv_cache_bytes_per_token(s.compute_bytes),
        "step_logits": 3 * rows * arch.vocab * 4,
    }
    if "hidden" in CONTEXT_NEEDS[method]:  # the per-step slices, then their concatenation
        terms["recorded_hidden"] = 2 * rows * s.completion_tokens * arch.hidden * s.compute_bytes
    if s.sharded:
        terms["gathered_model"] = arch.params * s.compute_bytes
    return terms


def nograd_forward_bytes(arch: Architecture, s: Setup) -> float:
    """One micro-batch's no-grad forward (old log-probs or the capture): one block's intermediates at a time and
    the fused head's tile (N tokens x 32768 vocabulary entries)."""
    tokens = s.micro_batch * s.context
    return tokens * arch.nograd_layer_units() * s.compute_bytes + _fused_tile_bytes(arch, s, FOLD_TEMPORARIES_FORWARD)


def _scored_tokens(s: Setup) -> int:
    """Positions the fused LM head projects: valid completion tokens on CUDA (Triton compacts them; upper bound
    micro_batch x T), every position but the last elsewhere."""
    return s.micro_batch * (s.completion_tokens if s.gpu else s.context - 1)


def _fused_tile_bytes(arch: Architecture, s: Setup, temporaries: int = 0) -> float:
    """The fused head's (4096, 32768) tile buffer, only the columns the vocabulary touches (pages never written
    stay unallocated), plus ``temporaries`` fp32 copies of it where the fold runs without Triton (CPU)."""
    tile = min(_scored_tokens(s), FUSED_HEAD_TOKENS) * min(arch.vocab, FUSED_HEAD_VOCAB)
    return tile * (s.compute_bytes + (0 if s.gpu else 4 * temporaries))


def scoring_terms(arch: Architecture, s: Setup, method: str) -> dict[str, float]:
    """After generation: the captured context of the process's generation batch, then whichever is largest of the
    forward that captures it (or TRL's old log-prob pass), the concatenation of the captured micro-batches
    (capture_context's torch.cat: a second copy), the entropy chunk, and the novelty code's fp32 copy."""
    rows, needs = s.rollouts_per_process, CONTEXT_NEEDS[method]
    hidden = rows * s.completion_tokens * arch.hidden * s.compute_bytes if "hidden" in needs else 0.0
    terms: dict[str, float] = {"captured_hidden": hidden} if hidden else {}
    if "entropy" in needs:
        terms["captured_entropies"] = rows * s.completion_tokens * 4
    candidates = {}
    if s.old_logps_pass or s.capture_forward:
        candidates["nograd_forward"] = nograd_forward_bytes(arch, s)
    if hidden and s.capture_forward:
        candidates["capture_concat"] = hidden
    if "entropy" in needs:  # the final norm's states of a micro-batch, then one chunk through the LM head
        candidates["entropy_chunk"] = (
            s.micro_batch * s.completion_tokens * arch.hidden * s.compute_bytes
            + ENTROPY_LIVE_FP32_TENSORS * 4 * s.micro_batch * arch.vocab * min(s.entropy_chunk, s.completion_tokens)
        )
    if method in NOVELTY_FP32_METHODS:
        candidates["novelty_fp32"] = rows * s.completion_tokens * arch.hidden * 4
    if candidates:
        name = max(candidates, key=candidates.get)
        terms[name] = candidates[name]
    return terms


def training_terms(arch: Architecture, s: Setup) -> dict[str, float]:
    """One micro-batch's forward + backward: gathered bf16 weights (FSDP), saved activations (checkpointed block
    inputs, or every block's activations without checkpointing), the padding attention mask, the head's inputs,
    and the larger of the fused head's backward and one block's recompute."""
    m, S, b = s.micro_batch, s.context, s.compute_bytes
    tokens = m * S
    terms: dict[str, float] = {}
    if s.sharded:  # tail unit (norm + head, + shared embedding) stays gathered fwd->bwd; a block + its prefetch
        terms["gathered_weights"] = (arch.head_params + 2 * arch.block_params) * b
    per_block = arch.hidden if s.checkpointing else arch.layer_activation_units()
    terms["saved_activations"] = arch.layers * tokens * per_block * b
    terms["attention_mask"] = m * S * S * b  # (m, 1, S, S) in the compute dtype: padding forces an SDPA mask
    n = _scored_tokens(s)
    terms["head_inputs"] = 2 * tokens * arch.hidden * b + n * arch.hidden * b  # final norm in/out, compacted rows
    head_backward = (
        _head_weight_grad_bytes(arch, s) + n * arch.hidden * 4 + _fused_tile_bytes(arch, s, FOLD_TEMPORARIES_BACKWARD)
    )
    block_backward = 2 * tokens * arch.hidden * b  # gradients in and out of a block
    if s.checkpointing:
        block_backward += tokens * arch.layer_activation_units() * b
    if s.sharded:
        block_backward += arch.block_params * b  # the block's unsharded bf16 grads before the reduce-scatter
    name, value = max((("head_backward", head_backward), ("block_backward", block_backward)), key=lambda x: x[1])
    terms[name] = value
    return terms


def _head_weight_grad_bytes(arch: Architecture, s: Setup) -> float:
    """The fused head's backward accumulates the (V, d) weight gradient in fp32 and casts it to the weight's dtype.
    Unsharded fp32 weights (CPU): that buffer becomes the .grad (counted in grads). bf16 weights: the fp32 buffer is
    a temporary; under FSDP the bf16 cast is too, until the reduce-scatter."""
    if s.master_bytes == 4 and not s.sharded:
        return 0.0
    return arch.embedding_params * (4 + (s.compute_bytes if s.sharded else 0))


def optimizer_terms(arch: Architecture, s: Setup) -> dict[str, float]:
    """AdamW's step: torch's foreach implementation (CUDA) makes one temporary the size of the rank's states per
    list operation; the single-tensor one (CPU) a few of the largest parameter."""
    if s.gpu:
        shard = arch.params / s.world if s.sharded else arch.params
        return {"adam_step_temporaries": shard * s.master_bytes}
    return {"adam_step_temporaries": 2 * arch.largest_tensor * s.master_bytes}


@dataclass
class MemoryPlan:
    """Bytes per term: resident (every phase) and each phase's own; the peak is resident + the largest phase."""

    resident: dict[str, float]
    phases: dict[str, dict[str, float]]

    @property
    def peak_phase(self) -> str:
        return max(self.phases, key=lambda p: sum(self.phases[p].values()))

    @property
    def peak(self) -> float:
        return sum(self.resident.values()) + sum(self.phases[self.peak_phase].values())


def training_memory(arch: Architecture, s: Setup, method: str, gpu_memory: float, overhead: float) -> MemoryPlan:
    return MemoryPlan(
        resident=resident_terms(arch, s, gpu_memory, overhead),
        phases={
            "generation": generation_terms(arch, s, method, gpu_memory),
            "scoring": scoring_terms(arch, s, method),
            "training": training_terms(arch, s),
            "optimizer": optimizer_terms(arch, s),
        },
    )


# ---------------------------------------------------------------------------------------------------------------
# vLLM engines: what the share holds and how many sequences its KV cache serves.


@dataclass(frozen=True)
class EnginePlan:
    share_bytes: float
    weights_bytes: float
    kv_cache_bytes: float
    kv_tokens: int
    max_model_len: int
    concurrent_sequences: int  # at the config's prompt + completion lengths

    @property
    def starts(self) -> bool:
        """vLLM refuses to start when the KV cache cannot hold one sequence of max_model_len."""
        return self.kv_tokens >= self.max_model_len


def engine_plan(
    arch: Architecture,
    share: float,
    gpu_memory: float,
    tp: int,
    overhead: float,
    sequence: int,
    max_model_len: int | None,
) -> EnginePlan:
    """A vLLM engine of ``share`` x GPU memory per GPU over ``tp`` GPUs: bf16 weights (split by TP), its activation /
    CUDA-graph / sampler reserve (``overhead`` per GPU), the rest KV cache."""
    share_bytes = share * gpu_memory
    weights = arch.params * 2 / tp
    kv = max(0.0, share_bytes - weights - overhead)
    kv_tokens = int(kv * tp // arch.kv_cache_bytes_per_token(2))
    return EnginePlan(
        share_bytes, weights, kv, kv_tokens, max_model_len or arch.max_positions, kv_tokens // max(1, sequence)
    )


# ---------------------------------------------------------------------------------------------------------------
# Host memory, disk, tokens and device-hours.


def training_host_bytes(
    arch: Architecture, s: Setup, process_host: float, device_peak: float = 0.0
) -> dict[str, float]:
    """Host memory of one training job (all its processes on one node): each process's own footprint, plus the
    larger of loading and checkpoint saving. Loading: without FSDP the fp32 weights (``policy_dtype``) pass through
    host memory once; under FSDP every process loads bf16 and accelerate upcasts to fp32 on the CPU before
    sharding, in every process unless fsdp_cpu_ram_efficient_loading, where only rank 0 reads and upcasts but the
    others still hold zeros of the bf16 model's size (transformers 5.17, resident) until FSDP shards it. Saving
    (FULL_STATE_DICT): rank 0
    gathers the full fp32 optimizer state (the model's state dict, half that, is written and freed before).
    CPU runs: the device is the host, so every process's training peak (``device_peak``) is host memory too."""
    processes = s.world * (process_host + (0.0 if s.gpu else device_peak))
    if s.sharded:
        loaders = 1 if s.cpu_ram_efficient_loading else s.world
        load = loaders * (arch.params * 4 + arch.largest_tensor * s.compute_bytes)
        if s.cpu_ram_efficient_loading:  # the other ranks' bf16 zeros
            load += (s.world - 1) * arch.params * s.compute_bytes
        save = 2 * arch.params * 4
    else:
        load = s.world * arch.params * s.master_bytes
        save = 2 * arch.largest_tensor * s.master_bytes  # torch.save copies one storage at a time to the host
        if not s.gpu:  # CPU runs: the whole training state lives in host memory (the device terms)
            save = 0.0
    return {"processes": processes, "load_or_save": max(load, save), "load": load, "save": save}


def checkpoint_bytes(arch: Architecture, s: Setup, finished: str = "keep") -> dict[str, float]:
    """One checkpoint (model in the master dtype, FSDP's fp32 model copy where sharded, both AdamW moments, small
    states), the final model, a run's peak
    (save_total_limit checkpoints plus the one being written, or the final model) and what stays once the run is
    finished (training.finished_checkpoints: keep everything, the checkpoints' weights only, or final/ only)."""
    weights = arch.params * s.master_bytes
    small = 1e6  # scheduler, RNG, trainer state, manifest
    fsdp_model = arch.params * 4 if s.sharded else 0.0  # FSDP's own fp32 copy, pytorch_model_fsdp.bin (resume only)
    one = weights + fsdp_model + 2 * arch.params * s.master_bytes + small
    peak = s.save_total_limit * one + max(one, weights)
    kept_per_checkpoint = {"keep": one, "weights": weights + small, "delete": 0.0}[finished]
    return {
        "checkpoint": one,
        "final": weights,
        "run_peak": peak,
        "kept": s.save_total_limit * kept_per_checkpoint + weights,
    }


def generated_tokens(s: Setup) -> int:
    """Upper bound: every rollout of every step runs to max_completion_length."""
    return s.steps * s.rollouts * s.completion_tokens


def evaluation_tokens(config: Mapping) -> int:
    """Upper bound of one evaluation on the config's benchmarks: problems x n x max_new_tokens, each benchmark with
    its own sampling settings. All problems: ``evaluation.limit`` caps only quick accuracy checks."""
    total = 0
    for bench in config["data"]["benchmarks"]:
        settings, problems = benchmark_settings(config, bench), get_benchmark(bench).size(config)
        total += problems * settings.n * settings.max_new_tokens
    return total


def selection_tokens(config: Mapping) -> int:
    """Upper bound of checkpoint selection, which a run's evaluate job adds after the final's evaluation: every
    candidate (final/ included) on the validation split, then the benchmarks again for a selected checkpoint that is
    not final/ (hara/evaluation/selection.py)."""
    selection = config["selection"]
    if not selection["enabled"]:
        return 0
    candidates, settings = len(candidate_steps(config)), benchmark_settings(config, VALIDATION)
    validation = candidates * selection["validation_problems"] * settings.n * settings.max_new_tokens
    return validation + (evaluation_tokens(config) if candidates > 1 else 0)


def by_size(value: Any, size: str) -> float:
    """A number, or a table by model size (a size not listed takes the table's smallest, i.e. slowest, value)."""
    if isinstance(value, Mapping):
        return value.get(size, min(value.values()))
    return value


def training_device_hours(arch: Architecture, s: Setup, plan: Mapping, size: str) -> dict[str, float]:
    """Generation at plan.generation_tokens_per_s per GPU; the passes over prompt + completion (forward, backward
    = 2 forwards, checkpointing's recompute, the no-grad old-log-prob and capture forwards) at plan.mfu x
    plan.peak_tflops per GPU. Perfect scaling over the job's GPUs, so device-hours do not depend on them."""
    generation_s = generated_tokens(s) / by_size(plan["generation_tokens_per_s"], size)
    passes = 3 + s.checkpointing + s.old_logps_pass + s.capture_forward
    flops = s.steps * s.rollouts * s.context * arch.forward_flops_per_token(s.context) * passes
    compute_s = flops / (plan["peak_tflops"] * 1e12 * plan["mfu"])
    return {"generation": generation_s / 3600, "compute": compute_s / 3600, "total": (generation_s + compute_s) / 3600}


# ---------------------------------------------------------------------------------------------------------------
# One cell and the grid.


@dataclass
class CellPlan:
    size: str
    rlvr: str
    method: str
    setup: Setup
    memory: MemoryPlan
    gpu_memory: float
    host: dict[str, float]
    disk: dict[str, float]
    tokens: int
    device_hours: dict[str, float]
    engine: EnginePlan | None = None
    host_asked: float = 0.0  # resources.train.mem_mb of the size, in bytes
    runtime_asked_hours: float = 0.0  # resources.train.runtime of the size
    memory_error: float = 1.0  # plan.memory_error: measured peak over planned peak

    @property
    def peak_with_error(self) -> float:
        """The peak with the plan's measured error on every term but vLLM's share, which vLLM allocates exactly
        (gpu_memory_utilization x the GPU)."""
        share = self.memory.resident.get("vllm", 0.0)
        return share + (self.memory.peak - share) * self.memory_error

    @property
    def host_need(self) -> float:
        return self.host["processes"] + self.host["load_or_save"]

    @property
    def wall_hours(self) -> float:
        """The training job's wall time: its device-hours spread over its GPUs (the plan's perfect scaling)."""
        return self.device_hours["total"] / self.setup.world

    @property
    def in_time(self) -> bool:
        """Planned to finish within the job's Slurm time limit (GPU runs; the CPU plan has no speed model)."""
        return not self.setup.gpu or self.wall_hours <= self.runtime_asked_hours

    @property
    def fits(self) -> bool:
        """Peak, times the plan's measured error, within the device memory (GPU runs) and a colocated vLLM engine
        that can start."""
        if not self.setup.gpu:
            return True  # CPU runs: checked against the job's host memory instead
        return self.peak_with_error <= self.gpu_memory and (self.engine is None or self.engine.starts)

    def to_json(self) -> dict:
        return {
            "size": self.size,
            "rlvr": self.rlvr,
            "method": self.method,
            "setup": asdict(self.setup),
            "gpu_memory_per_rank": {
                "resident": self.memory.resident,
                "phases": self.memory.phases,
                "peak_phase": self.memory.peak_phase,
                "peak": self.memory.peak,
                "peak_with_error": self.peak_with_error,
                "memory_error": self.memory_error,
            },
            "fits": self.fits,
            "gpu_memory": self.gpu_memory,
            "host": self.host,
            "host_need": self.host_need,
            "host_asked": self.host_asked,
            "disk": self.disk,
            "generated_tokens": self.tokens,
            "device_hours": self.device_hours,
            "wall_hours": self.wall_hours,
            "runtime_asked_hours": self.runtime_asked_hours,
            "in_time": self.in_time,
            "colocated_vllm": asdict(self.engine) if self.engine else None,
        }


def plan_cell(config: Mapping, arch: Architecture, size: str, rlvr: str, method: str) -> CellPlan:
    plan, s = config["plan"], setup_of(config, size, rlvr, method)
    gpu_memory, overhead = plan["gpu_memory_gb"] * GB, plan["runtime_overhead_gb"] * GB
    engine = None
    if s.use_vllm:
        engine = engine_plan(
            arch, s.vllm_share, gpu_memory, s.vllm_tp, plan["vllm_overhead_gb"] * GB, s.context, s.vllm_max_len
        )
    memory = training_memory(arch, s, method, gpu_memory, overhead)
    process = plan["process_host_gb" if s.gpu else "cpu_process_host_gb"] * GB
    return CellPlan(
        size=size,
        rlvr=rlvr,
        method=method,
        setup=s,
        memory=memory,
        gpu_memory=gpu_memory,
        host=training_host_bytes(arch, s, process, memory.peak),
        disk=checkpoint_bytes(arch, s, config["training"].get("finished_checkpoints", "keep")),
        tokens=generated_tokens(s),
        device_hours=training_device_hours(arch, s, plan, size),
        engine=engine,
        host_asked=asked(config, "train", "mem_mb", size) * 1e6,
        runtime_asked_hours=asked(config, "train", "runtime", size) / 60,
        memory_error=plan["memory_error"],
    )


def asked(config: Mapping, job: str, key: str, size: str) -> float:
    """resources.<job>.<key> (mem_mb: MB, runtime: minutes) for ``size``, as workflows/common.smk asks Slurm (a size
    missing from a table takes the table's largest value)."""
    value = config["resources"][job][key]
    return value.get(size, max(value.values())) if isinstance(value, Mapping) else value


@dataclass
class JobPlans:
    """Per size, the job kinds besides training: download / base_model (the hub snapshot) and evaluation."""

    size: str
    architecture: Architecture
    params: int
    snapshot_bytes: float
    evaluate: dict[str, float]
    evaluate_engine: EnginePlan | None
    base_model_host: float


def size_jobs(config: Mapping, arch: Architecture, size: str) -> JobPlans:
    """The download / base-model job (the bf16 snapshot on disk; the copy loads no weights) and one evaluation job
    (the engine's weights read through host memory once; tokens and device-hours at
    plan.evaluation_tokens_per_s per GPU): a run's, with its checkpoint selection, and the Base model's (base_*)."""
    plan, ev = config["plan"], config["evaluation"]
    gpu_memory = plan["gpu_memory_gb"] * GB
    base_tokens = evaluation_tokens(config)
    tokens = base_tokens + selection_tokens(config)  # a run's job; the Base model's has no selection
    hub = config["models"]["family"] == "hub"
    gpus = ev["vllm"]["tensor_parallel_size"] if hub else 1
    process = plan["process_host_gb" if hub else "cpu_process_host_gb"] * GB
    engine = None
    if config["models"]["family"] == "hub":
        engine = engine_plan(
            arch,
            ev["vllm"]["gpu_memory_utilization"],
            gpu_memory,
            gpus,
            plan["vllm_overhead_gb"] * GB,
            plan["prompt_tokens"] + ev["max_new_tokens"],
            ev["vllm"]["max_model_len"],
        )
    rate = by_size(plan["evaluation_tokens_per_s"], size) * 3600  # per-GPU rate: device-hours
    return JobPlans(
        size=size,
        architecture=arch,
        params=arch.params,
        snapshot_bytes=arch.params * 2,
        evaluate={
            "host": process + arch.params * (2 if hub else 4),
            "tokens": tokens,
            "device_hours": tokens / rate,
            "base_tokens": base_tokens,
            "base_device_hours": base_tokens / rate,
            "gpus": gpus,
            "wall_hours": tokens / rate / gpus,
            "runtime_asked_hours": asked(config, "evaluate", "runtime", size) / 60,
        },
        evaluate_engine=engine,
        base_model_host=process,
    )


@dataclass
class GridPlan:
    cells: list[CellPlan]
    jobs: dict[str, JobPlans]
    seeds: int
    totals: dict[str, float] = field(default_factory=dict)
    extra_seeds: dict[str, int] = field(default_factory=dict)  # method -> seeds it has beyond grid.seeds
    gpu_model: str | None = None  # the GPU every time assumes (plan.gpu_model); None for a CPU grid

    def to_json(self) -> dict:
        jobs = {size: {**asdict(job), "architecture": asdict(job.architecture)} for size, job in self.jobs.items()}
        return {
            "seeds": self.seeds,
            "gpu_model": self.gpu_model,
            "cells": [c.to_json() for c in self.cells],
            "jobs": jobs,
            "totals": self.totals,
        }


def plan_grid(config: Mapping, architectures: Mapping[str, Architecture] | None = None) -> GridPlan:
    """Every size x rlvr x method cell of the grid and each size's other jobs; grid totals count every seed and
    one evaluation job per run (with its checkpoint selection) plus one per size (the Base model)."""
    sizes, grid = config["models"]["sizes"], config["grid"]
    archs = {size: (architectures or {}).get(size) or architecture_of(config, size) for size in sizes}
    cells = [
        plan_cell(config, archs[size], size, rlvr, method)
        for size in sizes
        for rlvr in grid["rlvr"]
        for method in grid["methods"]
    ]
    jobs = {size: size_jobs(config, archs[size], size) for size in sizes}
    seeds = {method: len(method_seeds(config, method)) for method in grid["methods"]}  # grid.extra_seeds included
    runs = {size: sum(seeds[c.method] for c in cells if c.size == size) for size in sizes}
    totals = {
        "runs": sum(runs.values()),
        "train_device_hours": sum(seeds[c.method] * c.device_hours["total"] for c in cells),
        "evaluate_device_hours": sum(
            runs[s] * jobs[s].evaluate["device_hours"] + jobs[s].evaluate["base_device_hours"] for s in sizes
        ),
        "checkpoint_disk_bytes": sum(seeds[c.method] * c.disk["kept"] for c in cells),  # every run finished
        "snapshot_disk_bytes": sum(job.snapshot_bytes for job in jobs.values()),
        "generated_tokens": sum(seeds[c.method] * c.tokens for c in cells),
        "evaluation_tokens": sum(runs[s] * jobs[s].evaluate["tokens"] + jobs[s].evaluate["base_tokens"] for s in sizes),
    }
    totals["device_hours"] = totals["train_device_hours"] + totals["evaluate_device_hours"]
    gpu = cells[0].setup.gpu if cells else False
    return GridPlan(
        cells=cells,
        jobs=jobs,
        seeds=len(grid["seeds"]),
        totals=totals,
        extra_seeds={m: n - len(grid["seeds"]) for m, n in seeds.items() if n > len(grid["seeds"])},
        gpu_model=(
            f"{config['plan']['gpu_model']} ({config['plan']['peak_tflops']:g} bf16 TFLOP/s at "
            f"{config['plan']['mfu']:g} MFU)"
        )
        if gpu
        else None,
    )


# ---------------------------------------------------------------------------------------------------------------
# The terminal table.


def _gb(value: float) -> str:
    return f"{value / GB:.1f}"


def _memory_columns(memory: MemoryPlan) -> list[str]:
    """Resident: sharded states (weights + grads + AdamW), vLLM's share, the rest (runtime, batch, reference
    model); then each phase's own total."""
    states = sum(memory.resident.get(k, 0.0) for k in ("weights", "grads", "adam", "ddp_buckets"))
    vllm = memory.resident.get("vllm", 0.0)
    other = sum(memory.resident.values()) - states - vllm
    phases = [sum(memory.phases[p].values()) for p in ("generation", "scoring", "training", "optimizer")]
    return [_gb(v) for v in (states, vllm, other, *phases)]


def _host_cell(cell: CellPlan) -> str:
    flag = "" if cell.host_need <= cell.host_asked else " NO"
    return f"{_gb(cell.host_need)}/{cell.host_asked / GB:.0f}{flag}"


def _time_cell(cell: CellPlan) -> str:
    if not cell.setup.gpu:
        return "-"
    return f"{cell.wall_hours:.1f}/{cell.runtime_asked_hours:.0f}{'' if cell.in_time else ' NO'}"


def format_plan_table(grid: GridPlan) -> str:
    """One row per cell: GPU memory per rank (resident terms, each phase, the peak), fits, host memory of the
    training job, a run's checkpoint disk, generated tokens and device-hours; then each size's other jobs and the
    grid's totals. Every term is in the JSON (``--out``)."""
    header = [
        "size",
        "rlvr",
        "method",
        "gpus",
        "mb",
        "w+g+adam",
        "vllm",
        "rt+batch",
        "gen",
        "score",
        "train",
        "optim",
        "peak",
        "+err",
        "fits",
        "host/asked",
        "disk",
        "Mtok",
        "dev-h",
        "h/asked",
    ]
    rows = [
        [
            c.size,
            c.rlvr,
            c.method,
            str(c.setup.world),
            str(c.setup.micro_batch),
            *_memory_columns(c.memory),
            _gb(c.memory.peak),
            _gb(c.peak_with_error),
            "yes" if c.fits else "NO",
            _host_cell(c),
            f"{c.disk['run_peak'] / GB:.0f}/{c.disk['kept'] / GB:.0f}",
            f"{c.tokens / 1e6:.0f}",
            f"{c.device_hours['total']:.1f}",
            _time_cell(c),
        ]
        for c in grid.cells
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [header, *rows]]
    legend = (
        f"{_gpu_assumption(grid)}GB per rank of a {grid.cells[0].gpu_memory / GB:.0f} GB GPU "
        "(gen/score/train/optim: each phase's own "
        "terms; peak = resident + largest phase; +err = the peak with plan.memory_error on all but vLLM's share, "
        "what fits is judged on); host/asked = the training job's host memory against "
        "resources.train.mem_mb (GB); disk = a run's checkpoints at their peak / kept once finished (GB); "
        "Mtok = generated tokens "
        "(upper bound); dev-h = GPU-hours of a run; h/asked = its wall hours on the job's GPUs against "
        "resources.train.runtime (NO: Slurm stops it first)."
    )
    return "\n".join([legend, *lines, "", *_job_lines(grid), "", _totals_line(grid)])


def _gpu_assumption(grid: GridPlan) -> str:
    """The GPU the times assume, for GPU grids (a sentence ending in a space), else nothing."""
    if grid.gpu_model is None:
        return ""
    return f"Times assume {grid.gpu_model} GPUs (plan.gpu_model): pin the Slurm constraint to that model. "


def _evaluate_time(job: JobPlans) -> str:
    """A GPU evaluation job's wall hours against resources.evaluate.runtime (the CPU plan has no speed model)."""
    if job.evaluate_engine is None:
        return ""
    wall, limit = job.evaluate["wall_hours"], job.evaluate["runtime_asked_hours"]
    return f", {wall:.1f} h on {job.evaluate['gpus']} GPU of {limit:.0f} h asked{'' if wall <= limit else ' NO'}"


def _job_lines(grid: GridPlan) -> list[str]:
    lines = []
    for size, job in grid.jobs.items():
        engine = job.evaluate_engine
        kv = f", vLLM KV {_gb(engine.kv_cache_bytes)} GB = {engine.concurrent_sequences} sequences" if engine else ""
        lines.append(
            f"{size}: {job.params / 1e9:.2f}B params; snapshot {_gb(job.snapshot_bytes)} GB; evaluate: "
            f"host {_gb(job.evaluate['host'])} GB, {job.evaluate['tokens'] / 1e6:.1f} Mtok, "
            f"{job.evaluate['device_hours']:.1f} dev-h per run (selection included; the Base model's "
            f"{job.evaluate['base_tokens'] / 1e6:.1f} Mtok){_evaluate_time(job)}{kv}"
        )
    for c in grid.cells:
        if c.engine and c.rlvr == grid.cells[0].rlvr and c.method == grid.cells[0].method:
            lines.append(
                f"{c.size}: colocated vLLM {_gb(c.engine.share_bytes)} GB = weights "
                f"{_gb(c.engine.weights_bytes)} + KV {_gb(c.engine.kv_cache_bytes)} GB "
                f"({c.engine.kv_tokens} tokens, {c.engine.concurrent_sequences} sequences of "
                f"{c.setup.context}; starts: {'yes' if c.engine.starts else 'NO'})"
            )
    return lines


def _totals_line(grid: GridPlan) -> str:
    t = grid.totals
    extra = "".join(f", +{count} for {method}" for method, count in grid.extra_seeds.items())
    return (
        f"grid: {t['runs']} runs ({grid.seeds} seeds{extra}); checkpoint disk kept "
        f"{t['checkpoint_disk_bytes'] / 1e12:.1f} TB; generated {t['generated_tokens'] / 1e9:.1f} Gtok + evaluation {t['evaluation_tokens'] / 1e9:.2f} "
        f"Gtok; device-hours {t['train_device_hours']:.0f} train + {t['evaluate_device_hours']:.0f} evaluate "
        f"= {t['device_hours']:.0f}"
    )


def write_plan(grid: GridPlan, path: str | Path, power: Mapping | None = None) -> None:
    """The plan as JSON; ``power``: the power section (hara.power_plan), under the key "power"."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    found = grid.to_json() | ({"power": power} if power is not None else {})
    Path(path).write_text(json.dumps(found, indent=2) + "\n", encoding="utf-8")


def ceil_mb(value: float) -> int:
    return math.ceil(value / 1e6)
