"""GPU check for a lent accelerator: GRPO steps of a Qwen3-1.7B-shaped model with `none` and `hara_tok`, and the
novelty kernel at paper scale against its memory-bandwidth floor.

Needs only torch and the repository's pure maths (hara.weighting -> hara.novelty -> hara.ot: no transformers, TRL,
POT or numpy), so it runs on a bare GPU machine that received a copy of the working tree. Everything is seeded.

1. Bandwidth: the device's copy bandwidth, measured with a large device-to-device copy in this process.
2. Novelty kernel: :func:`hara.novelty.compute_novelty` (the linearized barycenter + token/sequence novelty that
   ``hara_tok`` runs) on one prompt's 16 rollouts (8 correct, 8 incorrect) of n tokens of d = 2048 bf16 hidden
   states with planted stage structure, for n up to 8192; its floor is the time to read those hidden states once,
   16 n d x 2 bytes / bandwidth (the kernel cannot do less than read its input).
3. GRPO steps: a Qwen3-1.7B-shaped decoder (plain torch, random init, fp32 master weights with bf16 compute under
   autocast, as one GPU trains it (hara.rlvr.policy.policy_dtype), SDPA attention, gradient checkpointing per block, AdamW) on prompts x 16 rollouts with 3072-token
   completions. Generation is NOT measured: completions are random tokens with random lengths (one per prompt at
   full length), rewards random 0/1 (each prompt gets both). A step: for ``hara_tok`` one no-grad capture forward
   (final-norm hidden states of the completion positions, bf16; the trainer's extra-forward path, the worst case:
   when generation records them this pass disappears, see ``hara_tok_step_ratio_without_capture``); GRPO group
   advantages; :func:`hara.weighting.apply_weighting` -> (B, T) token advantages; the GRPO loss (sequence mean of
   token means) on per-token log-probs computed in micro-batches, the LM head chunked over tokens and
   checkpointed (never (B, T, V) logits); backward; AdamW step. One model and optimizer serve both methods, which
   alternate every step (the first of a pair flips each step, as in benchmarks/bench_step.py).

The last lines are ``key=value`` figures (docs/gpu_check.md says which to report); ``--out`` writes them and the
per-step records as JSON. Before any work the script prints a time estimate from FLOPs (6 N per token for forward +
backward, +2 N for the checkpointed recompute, +2 N for the capture forward; attention added) at an assumed
effective throughput, and it stops taking timed steps when the next pair would pass ``--budget-s``.

    python benchmarks/gpu_check.py --device cuda --scale paper --out gpu_check.json    # one H200: ~3 min
    python benchmarks/gpu_check.py --device cpu --scale toy                            # seconds
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # a copied working tree, not an installed package

from hara.novelty import compute_novelty
from hara.planning import PAPER_ARCHITECTURES, Architecture
from hara.weighting import WeightingContext, apply_weighting

METHODS = ("none", "hara_tok")
GIB = 1024**3


@dataclass(frozen=True)
class Scale:
    """Model shape (Qwen3 names), the GRPO batch and the novelty-kernel grid of one run."""

    arch: Architecture  # the decoder's shapes (hara.planning's, so the plan and this check read one table)
    prompts: int  # prompts per step
    group_size: int  # rollouts per prompt
    prompt_len: int
    completion_len: int  # maximum completion length (the padded T)
    micro_batch: int  # rows per forward/backward
    logit_chunk: int  # completion positions per LM-head chunk
    warmup_steps: int  # untimed steps per method
    steps: int  # timed steps per method
    novelty_d: int
    novelty_lengths: tuple[int, ...]
    novelty_rollouts: int = 16
    bandwidth_bytes: int = 2 * GIB  # size of the copy that measures bandwidth
    rope_theta: float = 1e6


SCALES = {
    # Qwen3-1.7B(-Base): hidden 2048, 28 layers, 16/8 heads of 128, intermediate 6144, vocab 151936, tied embeddings
    "paper": Scale(
        PAPER_ARCHITECTURES["Qwen/Qwen3-1.7B-Base"],
        prompts=4,
        group_size=16,
        prompt_len=256,
        completion_len=3072,
        micro_batch=8,
        logit_chunk=256,
        warmup_steps=1,
        steps=4,
        novelty_d=2048,
        novelty_lengths=(1024, 2048, 4096, 8192),
    ),
    "toy": Scale(
        Architecture(64, 2, 4, 2, 16, 128, 512, tied=True),
        prompts=2,
        group_size=16,
        prompt_len=8,
        completion_len=48,
        micro_batch=8,
        logit_chunk=16,
        warmup_steps=1,
        steps=2,
        novelty_d=32,
        novelty_lengths=(64, 256),
        bandwidth_bytes=64 * 1024**2,
    ),
}


# ---------------------------------------------------------------------------------------------------------------
# A Qwen3-shaped decoder in plain torch
# ---------------------------------------------------------------------------------------------------------------


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(dim)), eps

    def forward(self, x: Tensor) -> Tensor:
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.square().mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


def rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotary position embedding (rotate-half convention) of x (B, H, L, D)."""
    x1, x2 = x.chunk(2, -1)
    return (x * cos + torch.cat([-x2, x1], -1) * sin).to(x.dtype)


def attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Causal SDPA over q (B, H, L, D) with grouped KV heads (B, H_kv, L, D), repeated to H as transformers'
    sdpa path does: SDPA's enable_gqa is missing from older torch and not taken by every fused kernel."""
    rep = q.shape[1] // k.shape[1]
    return F.scaled_dot_product_attention(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1), is_causal=True)


class Block(nn.Module):
    """Qwen3 decoder layer: pre-norm GQA attention with q/k RMSNorm and rotary, pre-norm SwiGLU MLP."""

    def __init__(self, s: Scale) -> None:
        super().__init__()
        self.s = s
        self.attn_norm, self.mlp_norm = RMSNorm(s.arch.hidden), RMSNorm(s.arch.hidden)
        self.q = nn.Linear(s.arch.hidden, s.arch.heads * s.arch.head_dim, bias=False)
        self.k = nn.Linear(s.arch.hidden, s.arch.kv_heads * s.arch.head_dim, bias=False)
        self.v = nn.Linear(s.arch.hidden, s.arch.kv_heads * s.arch.head_dim, bias=False)
        self.o = nn.Linear(s.arch.heads * s.arch.head_dim, s.arch.hidden, bias=False)
        self.q_norm, self.k_norm = RMSNorm(s.arch.head_dim), RMSNorm(s.arch.head_dim)
        self.gate = nn.Linear(s.arch.hidden, s.arch.intermediate, bias=False)
        self.up = nn.Linear(s.arch.hidden, s.arch.intermediate, bias=False)
        self.down = nn.Linear(s.arch.intermediate, s.arch.hidden, bias=False)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        B, L, _ = x.shape
        h = self.attn_norm(x)
        q = self.q_norm(self.q(h).view(B, L, self.s.arch.heads, -1)).transpose(1, 2)
        k = self.k_norm(self.k(h).view(B, L, self.s.arch.kv_heads, -1)).transpose(1, 2)
        v = self.v(h).view(B, L, self.s.arch.kv_heads, -1).transpose(1, 2)
        a = attention(rotary(q, cos, sin), rotary(k, cos, sin), v)
        x = x + self.o(a.transpose(1, 2).reshape(B, L, -1))
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Decoder(nn.Module):
    """Embedding, blocks (checkpointed while gradients are on), final norm; the LM head is the tied embedding."""

    def __init__(self, s: Scale) -> None:
        super().__init__()
        self.s = s
        self.embed = nn.Embedding(s.arch.vocab, s.arch.hidden)
        self.layers = nn.ModuleList(Block(s) for _ in range(s.arch.layers))
        self.norm = RMSNorm(s.arch.hidden)
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)  # Qwen3's initializer_range

    def forward(self, ids: Tensor) -> Tensor:
        """Final-norm hidden states (B, L, d) of token ids (B, L)."""
        x = self.embed(ids)
        inv = 1.0 / self.s.rope_theta ** (
            torch.arange(0, self.s.arch.head_dim, 2, device=ids.device) / self.s.arch.head_dim
        )
        angles = torch.outer(torch.arange(ids.shape[1], device=ids.device, dtype=torch.float32), inv)
        angles = torch.cat([angles, angles], -1)
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        for layer in self.layers:
            x = checkpoint(layer, x, cos, sin, use_reentrant=False) if torch.is_grad_enabled() else layer(x, cos, sin)
        return self.norm(x)


def parameter_count(s: Scale) -> tuple[int, int]:
    """(all parameters, parameters of the decoder blocks): the tied embedding counts once."""
    attn = s.arch.hidden * s.arch.head_dim * (2 * s.arch.heads + 2 * s.arch.kv_heads) + 2 * s.arch.head_dim
    block = attn + 3 * s.arch.hidden * s.arch.intermediate + 2 * s.arch.hidden
    return s.arch.layers * block + s.arch.vocab * s.arch.hidden + s.arch.hidden, s.arch.layers * block


# ---------------------------------------------------------------------------------------------------------------
# GRPO step
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class Batch:
    """prompt (B, P) and completion (B, T) ids, completion mask (B, T), group ids (B,), rewards (B,) 0/1."""

    prompt: Tensor
    completion: Tensor
    mask: Tensor
    group_ids: Tensor
    rewards: Tensor


def make_batch(s: Scale, seed: int, device: torch.device) -> Batch:
    """Random tokens and lengths (one rollout per prompt at full length, the rest in [T/4, T]); rewards random 0/1
    with both outcomes in every prompt, so HarA has two outcome groups to work on."""
    g = torch.Generator().manual_seed(seed)
    B, T = s.prompts * s.group_size, s.completion_len
    prompt = torch.randint(0, s.arch.vocab, (s.prompts, s.prompt_len), generator=g).repeat_interleave(s.group_size, 0)
    completion = torch.randint(0, s.arch.vocab, (B, T), generator=g)
    lengths = torch.randint(T // 4, T + 1, (B,), generator=g)
    lengths[:: s.group_size] = T
    rewards = (torch.rand(B, generator=g) < 0.5).float()
    rewards[0 :: s.group_size], rewards[1 :: s.group_size] = 1.0, 0.0
    mask = torch.arange(T)[None, :] < lengths[:, None]
    group_ids = torch.arange(s.prompts).repeat_interleave(s.group_size)
    return Batch(*(t.to(device) for t in (prompt, completion, mask, group_ids, rewards)))


def grpo_advantages(rewards: Tensor, group_size: int, eps: float = 1e-4) -> Tensor:
    """GRPO: (R - mean R) / (std R + eps) within each prompt's group (TRL's normalisation)."""
    r = rewards.view(-1, group_size)
    return ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + eps)).flatten()


def _chunk_logprobs(h: Tensor, weight: Tensor, targets: Tensor) -> Tensor:
    logits = F.linear(h, weight).float()
    return logits.gather(-1, targets[..., None]).squeeze(-1) - torch.logsumexp(logits, -1)


def token_logprobs(hidden: Tensor, weight: Tensor, targets: Tensor, chunk: int) -> Tensor:
    """log p(target) (b, T) fp32 from final-norm states (b, T, d): (b, chunk, V) logits at a time, each chunk
    checkpointed so backward recomputes its logits instead of keeping them."""
    return torch.cat(
        [
            checkpoint(
                _chunk_logprobs, hidden[:, i : i + chunk], weight, targets[:, i : i + chunk], use_reentrant=False
            )
            for i in range(0, hidden.shape[1], chunk)
        ],
        1,
    )


@torch.no_grad()
def capture_hidden(model: Decoder, batch: Batch, s: Scale) -> Tensor:
    """Final-norm hidden states (B, T, d) in bf16 at the positions that predict the completion tokens."""
    P, T = s.prompt_len, s.completion_len
    parts = [
        model(torch.cat([batch.prompt[i : i + s.micro_batch], batch.completion[i : i + s.micro_batch]], 1))[
            :, P - 1 : P + T - 1
        ]
        for i in range(0, batch.prompt.shape[0], s.micro_batch)
    ]
    return torch.cat(parts).to(torch.bfloat16)


@dataclass
class PhasePeaks:
    """Peak allocated GPU memory (GiB) per phase of a step, for comparison with ``hara plan``'s phases: each phase
    resets the peak counter at its start and reads it at its end (the max over repeats, e.g. micro-batches). The
    step's peak is the largest. No counters on the CPU: nothing is recorded there."""

    cuda: bool
    peaks: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def phase(self, name: str):
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()
        yield
        if self.cuda:
            self.peaks[name] = max(self.peaks.get(name, 0.0), torch.cuda.max_memory_allocated() / GIB)


def bf16_autocast(like: Tensor):
    """bf16 matmuls on a GPU (GRPOConfig.bf16's autocast); the CPU toy run stays in fp32."""
    return torch.autocast(device_type=like.device.type, dtype=torch.bfloat16, enabled=like.is_cuda)


def policy_update(
    model: Decoder,
    opt: torch.optim.Optimizer,
    batch: Batch,
    token_adv: Tensor,
    s: Scale,
    meter: PhasePeaks | None = None,
) -> float:
    """GRPO loss -A ratio, ratio = exp(log p - log p.detach()) (on-policy: ratio = 1 and the clip never binds, so
    only its gradient, A grad log p, matters), sequence mean of token means, accumulated over micro-batches; then
    one AdamW step. Returns the loss. Autocast covers each micro-batch's forward and loss, not its backward, as in
    transformers' Trainer (accelerate wraps the model's forward; ``accelerator.backward`` runs outside), so the
    measured step is the trainer's (on one H200 the peak was the same either way)."""
    P, T, B = s.prompt_len, s.completion_len, batch.prompt.shape[0]
    meter = meter or PhasePeaks(cuda=False)
    total = torch.zeros((), device=token_adv.device)
    for i in range(0, B, s.micro_batch):
        rows = slice(i, i + s.micro_batch)
        with meter.phase("forward"), bf16_autocast(batch.mask):
            ids = torch.cat([batch.prompt[rows], batch.completion[rows]], 1)
            hidden = model(ids)[:, P - 1 : P + T - 1]
            logp = token_logprobs(hidden, model.embed.weight, batch.completion[rows], s.logit_chunk)
            mask = batch.mask[rows].float()
            ratio = torch.exp(logp - logp.detach())
            per_seq = (-(token_adv[rows] * ratio) * mask).sum(1) / mask.sum(1).clamp_min(1.0)
            loss = per_seq.sum() / B
        with meter.phase("backward"):
            loss.backward()
        total += loss.detach()
    with meter.phase("optimizer"):
        opt.step()
        opt.zero_grad(set_to_none=True)
    return float(total)


def grpo_step(model: Decoder, opt: torch.optim.Optimizer, batch: Batch, method: str, s: Scale, sync) -> dict:
    """One optimizer step of ``method``; times of its parts, peak memory (per phase and overall) and how much the
    method reweighted."""
    meter = PhasePeaks(cuda=batch.mask.is_cuda)
    sync()
    start = time.perf_counter()
    forwards = []  # the model's forward passes in the capture phase: counted, not timed (none must run none)
    counter = model.register_forward_pre_hook(lambda *_: forwards.append(1))
    with meter.phase("capture"), bf16_autocast(batch.mask):
        hidden = capture_hidden(model, batch, s) if method != "none" else None
    counter.remove()
    sync()
    captured = time.perf_counter()
    with meter.phase("weighting"):
        adv = grpo_advantages(batch.rewards, s.group_size)
        token_adv, info = apply_weighting(
            method,
            adv,
            batch.mask,
            batch.group_ids,
            batch.rewards,
            WeightingContext(hidden_states=hidden, loss_type="grpo"),
        )
    del hidden
    sync()
    weighted = time.perf_counter()
    loss = policy_update(model, opt, batch, token_adv, s, meter)
    sync()
    end = time.perf_counter()
    live = batch.mask & (adv.abs() > 0)[:, None]
    seq = adv[:, None].expand_as(token_adv)
    moved = ((token_adv - seq).abs() > 1e-4 * seq.abs()) & live
    return {
        "method": method,
        "step_s": end - start,
        "capture_s": captured - start,
        "capture_forwards": len(forwards),
        "weighting_s": weighted - captured,
        "update_s": end - weighted,
        "loss": loss,
        "finite": bool(torch.isfinite(token_adv).all()),
        "reweighted_fraction": float(moved.sum() / live.sum().clamp_min(1)),
        "peak_memory_gib": max(meter.peaks.values()) if meter.peaks else None,
        "phase_peaks_gib": meter.peaks,
        "w_std": info.get("hara/w_std", 0.0),
    }


# ---------------------------------------------------------------------------------------------------------------
# Bandwidth and the novelty kernel
# ---------------------------------------------------------------------------------------------------------------


def copy_bandwidth(nbytes: int, device: torch.device, sync, repeats: int = 10) -> float:
    """Bytes moved per second (read + write) by the fastest of ``repeats`` device-to-device copies of nbytes."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device).random_(0, 256)
    dst = torch.empty_like(src)
    best = math.inf
    for _ in range(repeats + 1):  # the first is a warm-up
        sync()
        start = time.perf_counter()
        dst.copy_(src)
        sync()
        best = min(best, time.perf_counter() - start)
    del src, dst
    return 2 * nbytes / best


def planted_hidden(rollouts: int, n: int, d: int, seed: int, device: torch.device) -> dict[str, Tensor]:
    """One prompt's rollouts (half correct) of n tokens: a common offset, stage prototypes along the sequence
    (correct and incorrect rollouts take different late stages), a per-rollout detour and noise; bf16."""
    g = torch.Generator(device=device).manual_seed(seed)
    protos = torch.randn(7, d, generator=g, device=device)
    stage = torch.div(torch.arange(n, device=device) * 5, n, rounding_mode="floor")  # 0..4 along the sequence
    rewards = (torch.arange(rollouts, device=device) < rollouts // 2).float()
    late = torch.where((rewards[:, None] == 0) & (stage[None] >= 3), stage[None] + 2, stage[None])  # (R, n)
    h = protos[late] + 0.5 * torch.randn(rollouts, n, d, generator=g, device=device)
    h += 10.0 * torch.randn(d, generator=g, device=device)
    detour = torch.rand(rollouts, 1, 1, generator=g, device=device) * 0.4 + 0.05  # share of tokens off-path
    off = torch.rand(rollouts, n, 1, generator=g, device=device) < detour
    h += off * 1.5 * torch.randn(rollouts, 1, d, generator=g, device=device)
    return {
        "hidden_states": h.to(torch.bfloat16),
        "completion_mask": torch.ones(rollouts, n, dtype=torch.bool, device=device),
        "group_ids": torch.zeros(rollouts, dtype=torch.long, device=device),
        "rewards": rewards,
        "advantages": grpo_advantages(rewards, rollouts),
    }


def novelty_kernel(s: Scale, device: torch.device, sync, bandwidth: float, seed: int, repeats: int = 3) -> list[dict]:
    """Best-of-``repeats`` time of compute_novelty at every n, against the floor of reading its input once."""
    rows = []
    for n in s.novelty_lengths:
        batch = planted_hidden(s.novelty_rollouts, n, s.novelty_d, seed + n, device)
        compute_novelty(**batch)  # warm-up (allocator, kernels)
        best, res = math.inf, None
        for _ in range(repeats):
            sync()
            start = time.perf_counter()
            res = compute_novelty(**batch)
            sync()
            best = min(best, time.perf_counter() - start)
        nbytes = batch["hidden_states"].numel() * batch["hidden_states"].element_size()
        floor = nbytes / bandwidth
        row = {
            "n": n,
            "d": s.novelty_d,
            "rollouts": s.novelty_rollouts,
            "time_s": best,
            "floor_s": floor,
            "ratio_to_floor": best / floor,
            "bytes_read": nbytes,
            "groups": res.info["hara/groups"],
            "sinkhorn_iters": res.info["hara/sinkhorn_iters"],
            "barycenter_iters": res.info["hara/barycenter_iters"],
            "finite": bool(torch.isfinite(res.token).all() and torch.isfinite(res.sequence).all()),
        }
        rows.append(row)
        print(
            f"  novelty n={n:5d}: {1e3 * best:8.2f} ms, floor {1e3 * floor:7.3f} ms, "
            f"ratio {best / floor:8.1f}, {row['sinkhorn_iters']:.0f} Sinkhorn / {row['barycenter_iters']:.0f} "
            f"barycenter iterations",
            flush=True,
        )
        del batch, res
    return rows


def length_exponent(rows: list[dict]) -> float:
    """Least-squares slope of log(time) against log(n) (1 = linear in the rollout length)."""
    xs, ys = [math.log(r["n"]) for r in rows], [math.log(r["time_s"]) for r in rows]
    if len(xs) < 2:
        return math.nan
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


# ---------------------------------------------------------------------------------------------------------------
# Estimate, plan and main
# ---------------------------------------------------------------------------------------------------------------


def step_flops(s: Scale) -> dict[str, float]:
    """FLOPs of one step per method: 8 N per token for the policy (6 N forward + backward, 2 N recompute of the
    checkpointed blocks), 2 N_blocks per token for the capture forward, causal attention on top."""
    n_all, n_blocks = parameter_count(s)
    B, L = s.prompts * s.group_size, s.prompt_len + s.completion_len
    attn_fwd = 2.0 * B * L * L * s.arch.heads * s.arch.head_dim * s.arch.layers  # QK^T and AV, causal half
    policy = 8.0 * n_all * B * L + 4.0 * attn_fwd
    capture = 2.0 * n_blocks * B * L + attn_fwd
    return {"none": policy, "hara_tok": policy + capture}


PLAN_PHASES = ("scoring", "training", "optimizer")  # hara plan's phases that this script runs
#: which measured phases (PhasePeaks) each plan phase covers
MEASURED_PHASES = {
    "scoring": ("capture", "weighting"),
    "training": ("forward", "backward"),
    "optimizer": ("optimizer",),
}


def plan_prediction(s: Scale) -> tuple[dict[str, dict[str, float]], str]:
    """Per method, GPU memory (GiB) that ``hara plan``'s model (hara.planning) predicts for this run's shape: what
    every phase holds ("resident"), resident + each phase this script runs, and the peak over them. The
    setup is this script's: one GPU, fp32 weights/grads/AdamW states, bf16 compute, gradient checkpointing, no vLLM,
    the capture forward for hara_tok; the plan's generation phase is left out (no generation runs here) and its
    runtime overhead set to 0 (max_memory_allocated does not count the CUDA context or the allocator's cache).
    Not modelled alike: the plan assumes TRL's fused LM head, this script a checkpointed chunked one."""
    from hara import planning

    out: dict[str, dict[str, float]] = {}
    for method in METHODS:
        setup = planning.Setup(
            gpu=True,
            world=1,
            rollouts=s.prompts * s.group_size,
            micro_batch=s.micro_batch,
            prompt_tokens=s.prompt_len,
            completion_tokens=s.completion_len,
            steps=s.warmup_steps + s.steps,
            compute_bytes=2,
            master_bytes=4,
            sharded=False,
            checkpointing=True,
            use_vllm=False,
            vllm_share=0.0,
            vllm_sleep=False,
            vllm_tp=1,
            vllm_max_len=None,
            reference_model=False,
            old_logps_pass=False,
            capture_forward=method != "none",
            entropy_chunk=s.logit_chunk,
            save_total_limit=1,
            sync_each_batch=True,
        )
        mem = planning.training_memory(s.arch, setup, method, 0.0, 0.0)
        resident = sum(mem.resident.values())
        out[method] = {
            "resident": resident / GIB,
            **{p: (resident + sum(mem.phases[p].values())) / GIB for p in PLAN_PHASES},
        }
        out[method]["peak"] = max(out[method][p] for p in PLAN_PHASES)
    return out, "hara.planning.training_memory, generation phase and runtime overhead left out"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--scale", choices=sorted(SCALES), default="paper")
    parser.add_argument("--steps", type=int, help="timed steps per method (default: the scale's)")
    parser.add_argument("--prompts", type=int, help="prompts per step, 16 rollouts each (default: the scale's)")
    parser.add_argument("--micro-batch", type=int, help="rows per forward/backward (default: the scale's)")
    parser.add_argument(
        "--logit-chunk",
        type=int,
        help="completion positions per LM-head chunk (default: the "
        "scale's; the training phase's peak against it says what the head holds)",
    )
    parser.add_argument("--tflops", type=float, default=400.0, help="effective TFLOP/s assumed by the estimate")
    parser.add_argument("--budget-s", type=float, default=360.0, help="no further timed step pair past this")
    parser.add_argument("--threads", type=int, default=1, help="torch threads on --device cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="write the figures and per-step records as JSON")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    t0 = time.perf_counter()
    s = SCALES[args.scale]
    s = replace(
        s,
        **{
            k: v
            for k, v in {
                "steps": args.steps,
                "prompts": args.prompts,
                "micro_batch": args.micro_batch,
                "logit_chunk": args.logit_chunk,
            }.items()
            if v is not None
        },
    )
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA device (use --device cpu --scale toy on a CPU machine)")
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if not cuda:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    name = torch.cuda.get_device_name(device) if cuda else "cpu"
    flops = step_flops(s)
    pairs = s.warmup_steps + s.steps
    estimate = pairs * (flops["none"] + flops["hara_tok"]) / (args.tflops * 1e12)
    n_all, _ = parameter_count(s)
    print(
        f"gpu_check: {name}, torch {torch.__version__}, scale {args.scale}: {n_all / 1e6:.1f} M parameters, "
        f"{s.prompts} prompts x {s.group_size} rollouts, prompt {s.prompt_len} + completion {s.completion_len} "
        f"tokens, micro-batch {s.micro_batch}, {s.warmup_steps} warm-up + {s.steps} timed steps per method",
        flush=True,
    )
    print(
        f"estimate: {flops['none'] / 1e15:.2f} / {flops['hara_tok'] / 1e15:.2f} PFLOP per none / hara_tok step, "
        f"{estimate:.0f} s of GRPO steps at {args.tflops:.0f} TFLOP/s effective (+ model init and the novelty "
        f"kernel, ~1 min on one H200); timed steps stop at --budget-s {args.budget_s:.0f} s",
        flush=True,
    )

    print("bandwidth: device-to-device copy ...", flush=True)
    bandwidth = copy_bandwidth(s.bandwidth_bytes, device, sync)
    print(f"  {bandwidth / 1e9:.1f} GB/s (read + write of a {s.bandwidth_bytes / GIB:.2f} GiB copy)", flush=True)
    print(f"novelty kernel: d={s.novelty_d}, {s.novelty_rollouts} rollouts, bf16 hidden states", flush=True)
    novelty = novelty_kernel(s, device, sync, bandwidth, args.seed)

    print("GRPO steps: building the model ...", flush=True)
    with torch.device(device):  # fp32 master weights, bf16 compute under autocast: one GPU as hara.rlvr.train trains it
        model = Decoder(s)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.0, **({"fused": True} if cuda else {}))
    records: list[dict] = []
    for step in range(pairs):
        if step >= s.warmup_steps + 1 and records:
            last = sum(r["step_s"] for r in records[-2:])
            if time.perf_counter() - t0 + last > args.budget_s:
                print(f"  budget: stopping after {step - s.warmup_steps} timed steps", flush=True)
                break
        batch = make_batch(s, args.seed * 1000 + step, device)
        order = METHODS if step % 2 == 0 else METHODS[::-1]
        for method in order:
            rec = {**grpo_step(model, opt, batch, method, s, sync), "step": step, "warmup": step < s.warmup_steps}
            records.append(rec)
            print(
                f"  step {step} {method:8s}: {rec['step_s']:.3f} s (capture {rec['capture_s']:.3f}, weighting "
                f"{rec['weighting_s']:.3f}, update {rec['update_s']:.3f}), loss {rec['loss']:+.3e}"
                + (f", peak {rec['peak_memory_gib']:.1f} GiB" if cuda else ""),
                flush=True,
            )
        del batch
    resident = torch.cuda.memory_allocated() / GIB if cuda else None  # weights + AdamW states between steps
    figures = summarise(records, novelty, bandwidth, s, cuda, resident, time.perf_counter() - t0, estimate)
    if args.out:
        args.out.write_text(
            json.dumps(
                {
                    "figures": figures,
                    "device": name,
                    "torch": torch.__version__,
                    "scale": asdict(s),
                    "args": {k: str(v) for k, v in vars(args).items()},
                    "steps": records,
                    "novelty": novelty,
                },
                indent=2,
            )
        )
    for key, value in figures.items():
        print(f"{key}={value}")
    return figures


def phase_figures(records: list[dict], plan: dict, method: str) -> dict:
    """Measured peak per plan phase (max over the steps and the phase's parts) next to the plan's resident + phase,
    so a gap between peak and plan is pinned to a phase; printed as one line per method."""
    fig = {}
    for phase, parts in MEASURED_PHASES.items():
        peaks = [r["phase_peaks_gib"].get(part, 0.0) for r in records if r["method"] == method for part in parts]
        fig[f"peak_gib_{phase}_{method}"] = round(max(peaks, default=0.0), 2)
        fig[f"plan_gib_{phase}_{method}"] = round(plan[method][phase], 2)
    parts = [f"{p} {fig[f'peak_gib_{p}_{method}']} (plan {fig[f'plan_gib_{p}_{method}']})" for p in MEASURED_PHASES]
    print(f"  by phase, {method}: " + ", ".join(parts) + " GiB", flush=True)
    return fig


def summarise(
    records: list[dict],
    novelty: list[dict],
    bandwidth: float,
    s: Scale,
    cuda: bool,
    resident: float | None,
    wall: float,
    estimate: float,
) -> dict:
    """The key=value figures: medians over the timed steps, peaks over all steps, the novelty kernel's ratios."""
    timed = {m: [r for r in records if r["method"] == m and not r["warmup"]] for m in METHODS}
    med = {
        m: {k: statistics.median(r[k] for r in timed[m]) for k in ("step_s", "capture_s", "weighting_s")}
        for m in METHODS
    }
    plan, plan_note = plan_prediction(s)
    fig: dict = {"timed_steps": len(timed["none"]), "wall_s": round(wall, 1), "estimate_s": round(estimate, 1)}
    for m in METHODS:
        fig[f"step_s_{m}"] = round(med[m]["step_s"], 4)
    fig["capture_s_hara_tok"] = round(med["hara_tok"]["capture_s"], 4)
    fig["weighting_s_hara_tok"] = round(med["hara_tok"]["weighting_s"], 4)
    ratios = [h["step_s"] / g["step_s"] for h, g in zip(timed["hara_tok"], timed["none"])]
    without = [(h["step_s"] - h["capture_s"]) / g["step_s"] for h, g in zip(timed["hara_tok"], timed["none"])]
    fig["hara_tok_step_ratio"] = round(statistics.median(ratios), 4)
    # significant digits, not decimals: the toy run on a loaded CPU reaches ~1e-4 TFLOP/s, which 3 decimals print as 0
    fig["achieved_tflops_none"] = float(f"{step_flops(s)['none'] / med['none']['step_s'] / 1e12:.4g}")
    fig["hara_tok_step_ratio_without_capture"] = round(statistics.median(without), 4)
    for m in METHODS:
        peak = max((r["peak_memory_gib"] for r in records if r["method"] == m), default=None) if cuda else None
        fig[f"peak_memory_gib_{m}"] = round(peak, 2) if peak is not None else "unavailable"
    fig["resident_memory_gib"] = round(resident, 2) if resident is not None else "unavailable"
    for m in METHODS:
        fig[f"plan_memory_gib_{m}"] = float(f"{plan[m]['peak']:.4g}")
        if cuda:
            fig[f"peak_over_plan_{m}"] = round(fig[f"peak_memory_gib_{m}"] / plan[m]["peak"], 3)
        print(
            f"peak GPU memory of {m} (max_memory_allocated): {fig[f'peak_memory_gib_{m}']} GiB; plan "
            f"{fig[f'plan_memory_gib_{m}']} GiB",
            flush=True,
        )
        if cuda:
            fig.update(phase_figures(records, plan, m))
    print(f"plan: {plan_note}", flush=True)
    fig["hara_tok_reweighted_fraction"] = round(
        min(r["reweighted_fraction"] for r in records if r["method"] == "hara_tok"), 4
    )
    fig["none_reweighted_fraction"] = round(max(r["reweighted_fraction"] for r in records if r["method"] == "none"), 4)
    fig["token_advantages_finite"] = int(all(r["finite"] for r in records))
    fig["bandwidth_gb_s"] = round(bandwidth / 1e9, 1)
    fig["novelty_finite"] = int(all(r["finite"] for r in novelty))
    fig["novelty_length_exponent"] = round(length_exponent(novelty), 3)
    for r in novelty:
        fig[f"novelty_ms@{r['n']}"] = round(1e3 * r["time_s"], 3)
    for r in novelty:
        fig[f"ratio_to_bandwidth_floor@{r['n']}"] = round(r["ratio_to_floor"], 1)
    return fig


if __name__ == "__main__":
    main()
