"""Resource plan of an experiment grid: GPU memory per rank, host memory, disk, tokens and device-hours per cell.

``hara plan`` prints it; docs/plan.md explains every term. By concern: :mod:`~hara.planning.architecture` (the model's
shapes), :mod:`~hara.planning.setup` (what a rank runs), :mod:`~hara.planning.memory` (bytes per phase, engines, host
and disk), :mod:`~hara.planning.cost` (tokens, device-hours), :mod:`~hara.planning.grid` (cells, jobs, the grid),
:mod:`~hara.planning.slurm` (Slurm requests from the plan, the site's limits) and :mod:`~hara.planning.output`
(table, plan.json). The model is pure arithmetic over the config and a
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

from hara.planning.architecture import PAPER_ARCHITECTURES, Architecture, architecture_from_hf_config, architecture_of
from hara.planning.cost import (
    by_size,
    evaluation_tokens,
    generated_tokens,
    selection_tokens,
    step_flops,
    training_device_hours,
)
from hara.planning.grid import (
    CellPlan,
    GridPlan,
    JobPlans,
    peak_disk_bytes,
    plan_cell,
    plan_grid,
    size_jobs,
    slurm_resources,
)
from hara.planning.memory import (
    GB,
    EnginePlan,
    MemoryPlan,
    checkpoint_bytes,
    engine_plan,
    scoring_terms,
    training_host_bytes,
    training_memory,
)
from hara.planning.output import ceil_mb, format_plan_table, write_plan
from hara.planning.setup import Setup, setup_of
from hara.planning.slurm import PLANNED, site_problems

__all__ = [
    "GB",
    "PAPER_ARCHITECTURES",
    "PLANNED",
    "Architecture",
    "CellPlan",
    "EnginePlan",
    "GridPlan",
    "JobPlans",
    "MemoryPlan",
    "Setup",
    "architecture_from_hf_config",
    "architecture_of",
    "by_size",
    "ceil_mb",
    "checkpoint_bytes",
    "engine_plan",
    "evaluation_tokens",
    "format_plan_table",
    "generated_tokens",
    "peak_disk_bytes",
    "plan_cell",
    "plan_grid",
    "scoring_terms",
    "selection_tokens",
    "setup_of",
    "site_problems",
    "size_jobs",
    "slurm_resources",
    "step_flops",
    "training_device_hours",
    "training_host_bytes",
    "training_memory",
    "write_plan",
]
