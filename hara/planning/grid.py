"""The plan of one cell and of the whole grid, with each job's Slurm request."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from hara.layout import method_seeds
from hara.planning.architecture import Architecture, architecture_of
from hara.planning.cost import by_size, evaluation_tokens, generated_tokens, selection_tokens, training_device_hours
from hara.planning.memory import (
    GB,
    EnginePlan,
    MemoryPlan,
    checkpoint_bytes,
    engine_plan,
    training_host_bytes,
    training_memory,
)
from hara.planning.setup import Setup, setup_of
from hara.planning.slurm import planned_resources, requested, site_problems, uses_plan

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
    host_asked: float = 0.0  # resources.train.mem_mb of the size, in bytes (set by plan_grid)
    runtime_asked_hours: float = 0.0  # resources.train.runtime of the size (set by plan_grid)
    memory_error: float = 1.0  # plan.memory_error: measured peak over planned peak

    @property
    def peak_with_error(self) -> float:
        """The peak with the plan's measured error on every term but vLLM's share, which vLLM allocates exactly
        (gpu_memory_utilization x the GPU)."""
        share = self.memory.resident.get("vllm", 0.0)
        return share + (self.memory.peak - share) * self.memory_error

    @property
    def host_need(self) -> float:
        return self.host["processes"] + self.host["engines"] + self.host["load_or_save"]

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
        host=training_host_bytes(arch, s, process, plan["vllm_host_gb"] * GB, memory.peak),
        disk=checkpoint_bytes(arch, s, config["training"].get("finished_checkpoints", "keep")),
        tokens=generated_tokens(s),
        device_hours=training_device_hours(arch, s, plan, size),
        engine=engine,
        memory_error=plan["memory_error"],
    )


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
    (its process and vLLM engine, the engine's weights read through host memory once; tokens and device-hours at
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
            "host": process + (plan["vllm_host_gb"] * GB if hub else 0.0) + arch.params * (2 if hub else 4),
            "tokens": tokens,
            "device_hours": tokens / rate,
            "base_tokens": base_tokens,
            "base_device_hours": base_tokens / rate,
            "gpus": gpus,
            "wall_hours": tokens / rate / gpus,
            "runtime_asked_hours": 0.0,  # the Slurm request, set by plan_grid
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
    resources: dict = field(default_factory=dict)  # the Slurm requests (config resources, `plan` resolved)
    site_problems: list[str] = field(default_factory=list)  # what the site cannot schedule (hara.planning.slurm)

    def to_json(self) -> dict:
        jobs = {size: {**asdict(job), "architecture": asdict(job.architecture)} for size, job in self.jobs.items()}
        return {
            "seeds": self.seeds,
            "gpu_model": self.gpu_model,
            "cells": [c.to_json() for c in self.cells],
            "jobs": jobs,
            "totals": self.totals,
            "resources": self.resources,
            "site_problems": self.site_problems,
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
    gpu = cells[0].setup.gpu if cells else False
    resources = planned_resources(config, cells, jobs, gpu)
    _set_requests(cells, jobs, resources)
    seeds = {method: len(method_seeds(config, method)) for method in grid["methods"]}  # grid.extra_seeds included
    runs = {size: sum(seeds[c.method] for c in cells if c.size == size) for size in sizes}
    kept = sum(seeds[c.method] * c.disk["kept"] for c in cells)
    totals = {
        "runs": sum(runs.values()),
        "train_device_hours": sum(seeds[c.method] * c.device_hours["total"] for c in cells),
        "evaluate_device_hours": sum(
            runs[s] * jobs[s].evaluate["device_hours"] + jobs[s].evaluate["base_device_hours"] for s in sizes
        ),
        "checkpoint_disk_bytes": kept,  # every run finished
        # every run training at once, each at its peak (save_total_limit checkpoints + the one being written): the
        # most the results_dir can hold while the grid runs, whatever the scheduler starts together
        "checkpoint_disk_peak_bytes": kept + sum(_in_flight_excess(cells, seeds)),
        "snapshot_disk_bytes": sum(job.snapshot_bytes for job in jobs.values()),
        "generated_tokens": sum(seeds[c.method] * c.tokens for c in cells),
        "evaluation_tokens": sum(runs[s] * jobs[s].evaluate["tokens"] + jobs[s].evaluate["base_tokens"] for s in sizes),
    }
    totals["device_hours"] = totals["train_device_hours"] + totals["evaluate_device_hours"]
    return GridPlan(
        cells=cells,
        jobs=jobs,
        seeds=len(grid["seeds"]),
        totals=totals,
        extra_seeds={m: n - len(grid["seeds"]) for m, n in seeds.items() if n > len(grid["seeds"])},
        gpu_model=(
            f"{config['plan']['gpu_model']} ({config['plan']['peak_tflops']:g} bf16 TFLOP/s at "
            f"{_mfu_text(config['plan']['mfu'])} MFU)"
        )
        if gpu
        else None,
        resources=resources,
        site_problems=site_problems(config, resources),
    )


def _mfu_text(mfu: float | Mapping) -> str:
    """plan.mfu as stated: one number, or the table by size."""
    if isinstance(mfu, Mapping):
        return ", ".join(f"{size} {value:g}" for size, value in mfu.items())
    return f"{mfu:g}"


def _set_requests(cells: list[CellPlan], jobs: Mapping[str, JobPlans], resources: Mapping) -> None:
    """Each training cell's and evaluation job's Slurm request (host memory, time limit), as the DAG asks it."""
    for cell in cells:
        cell.host_asked = requested(resources, "train", "mem_mb", cell.size) * 1e6
        cell.runtime_asked_hours = requested(resources, "train", "runtime", cell.size) / 60
    for size, job in jobs.items():
        job.evaluate["runtime_asked_hours"] = requested(resources, "evaluate", "runtime", size) / 60


def slurm_resources(config: Mapping) -> dict:
    """The Slurm request of every job kind (``resources`` with every ``plan`` value planned; the config's own when
    none is, without planning anything): what workflows/common.smk asks for."""
    return plan_grid(config).resources if uses_plan(config) else dict(config["resources"])


def peak_disk_bytes(config: Mapping, grid: GridPlan, concurrent_runs: int | None = None) -> float:
    """The results folder's disk at its peak: the snapshots, every run's checkpoints once finished, and on top the
    checkpoints of the ``concurrent_runs`` runs with the largest in-flight excess (run_peak - kept) training at once
    (None: every run at once, the upper bound). Snakemake's ``jobs`` bounds the runs in flight."""
    seeds = {method: len(method_seeds(config, method)) for method in config["grid"]["methods"]}
    excess = _in_flight_excess(grid.cells, seeds)
    in_flight = sum(excess[: len(excess) if concurrent_runs is None else concurrent_runs])
    return grid.totals["snapshot_disk_bytes"] + grid.totals["checkpoint_disk_bytes"] + in_flight


def _in_flight_excess(cells: list[CellPlan], seeds: Mapping[str, int]) -> list[float]:
    """What each run holds on disk while it trains beyond what it keeps once finished (run_peak - kept, at least 0),
    one entry per run (a cell's seeds), largest first."""
    return sorted(
        (max(c.disk["run_peak"] - c.disk["kept"], 0.0) for c in cells for _ in range(seeds[c.method])), reverse=True
    )
