"""The plan as the terminal table and plan.json."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path

from hara.planning.grid import CellPlan, GridPlan, JobPlans
from hara.planning.memory import GB, MemoryPlan

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
        f"{t['checkpoint_disk_bytes'] / 1e12:.1f} TB (at most {t['checkpoint_disk_peak_bytes'] / 1e12:.1f} TB while "
        f"every run trains at once); generated {t['generated_tokens'] / 1e9:.1f} Gtok + evaluation {t['evaluation_tokens'] / 1e9:.2f} "
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
