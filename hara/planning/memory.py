"""GPU (or host) memory of one training rank per phase, the vLLM engines' share, host memory and disk."""

from __future__ import annotations

from dataclasses import dataclass

from hara.methods import get_method
from hara.planning.architecture import Architecture
from hara.planning.setup import Setup

GB = 1e9  # decimal gigabytes, as GPU data sheets and Slurm's MB count them
FUSED_HEAD_TOKENS, FUSED_HEAD_VOCAB = 4096, 32768  # trl/kernels/chunked_logprob.py TOKEN_CHUNK_SIZE, chunk size
# Without Triton (the CPU), TRL folds each tile with torch ops: its backward keeps about seven tile-sized fp32
# temporaries alive at once (scaled logits, z, log p, p, the gradient, and the target-mask products), its forward
# about four. With Triton (CUDA) the fold runs in registers and only the tile itself is allocated.
FOLD_TEMPORARIES_BACKWARD, FOLD_TEMPORARIES_FORWARD = 7, 4
# Live (rows, chunk, V) tensors of one entropy chunk (hara.models.capture.chunked_token_entropies), in fp32 units:
# the LM head's output in the compute dtype, its fp32 copy, softmax, softmax * logits (logsumexp's temporary).
ENTROPY_LIVE_FP32_TENSORS = 3.5


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
    if "hidden" in get_method(method).captures:  # the per-step slices, then their concatenation
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
    rows, needs = s.rollouts_per_process, get_method(method).captures
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
    if get_method(method).novelty_fp32:  # hara.novelty._work_rows: an fp32 copy of every reweighted row
        candidates["novelty_fp32"] = rows * s.completion_tokens * arch.hidden * 4
    if candidates:
        name = max(candidates, key=candidates.get)
        terms[name] = candidates[name]
    return terms


def training_terms(arch: Architecture, s: Setup) -> dict[str, float]:
    """One micro-batch's forward + backward: gathered bf16 weights (FSDP), saved activations (checkpointed block
    inputs, or every block's activations without checkpointing), the padding attention mask, the head's inputs,
    the larger of the fused head's backward and one block's recompute, and (FSDP without sync_each_batch) the
    whole model's unsharded bf16 gradient that no_sync keeps across the micro-batches."""
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
    if s.sharded and not s.sync_each_batch:  # no_sync keeps every unsharded bf16 gradient to the last micro-batch
        terms["unsynced_grads"] = arch.params * b
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
    arch: Architecture, s: Setup, process_host: float, engine_host: float, device_peak: float = 0.0
) -> dict[str, float]:
    """Host memory of one training job (all its processes on one node): each process's own footprint and its
    colocated vLLM engine's (started in the trainer's ``__init__``, before the model is prepared), plus the larger
    of loading and checkpoint saving. Loading: without FSDP the fp32 weights (``policy_dtype``) pass through host
    memory once per process; under FSDP accelerate's ``fsdp2_prepare_model`` upcasts every trainable parameter to
    fp32 on every rank before the meta-device move (accelerate/utils/fsdp_utils.py; with
    fsdp_cpu_ram_efficient_loading the other ranks upcast transformers' CPU zeros) and keeps them in the state dict
    it loads the shards from, so every rank holds P x 4 bytes, plus the bf16 tensor being cast. Saving
    (FULL_STATE_DICT): rank 0 gathers the full fp32 optimizer state (the model's state dict, half that, is written
    and freed before). CPU runs: the device is the host, so every process's training peak (``device_peak``) is
    host memory too."""
    processes = s.world * (process_host + (0.0 if s.gpu else device_peak))
    engines = s.world * engine_host if s.use_vllm else 0.0
    if s.sharded:
        load = s.world * (arch.params * 4 + arch.largest_tensor * s.compute_bytes)
        save = 2 * arch.params * 4
    else:
        load = s.world * arch.params * s.master_bytes
        save = 2 * arch.largest_tensor * s.master_bytes  # torch.save copies one storage at a time to the host
        if not s.gpu:  # CPU runs: the whole training state lives in host memory (the device terms)
            save = 0.0
    return {"processes": processes, "engines": engines, "load_or_save": max(load, save), "load": load, "save": save}


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
