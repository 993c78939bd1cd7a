"""Each job's Slurm request from the plan (``resources.<job>.<key>: plan``) and the site limits it must fit.

A request the config sets by hand stays as it is. ``plan`` turns the plan's figure for one size into the request:
training, its host memory (:attr:`~hara.planning.grid.CellPlan.host_need`, the largest of the size's cells) and wall
time; evaluation, its host memory and wall time; each times its stated factor (``plan.host_memory_factor``,
``plan.runtime_factor``), rounded up. workflows/common.smk asks Slurm for what :func:`slurm_resources` returns, and
``hara plan`` prints it, so the two never disagree.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping

from hara.errors import ConfigError

PLANNED = "plan"

#: request key -> the plan's factor that turns the planned figure into the request.
FACTORS = {"mem_mb": "host_memory_factor", "runtime": "runtime_factor"}


def _train_needs(cells: list, job) -> dict[str, float]:
    return {"mem_mb": max(c.host_need for c in cells) / 1e6, "runtime": max(c.wall_hours for c in cells) * 60}


def _evaluate_needs(cells: list, job) -> dict[str, float]:
    return {"mem_mb": job.evaluate["host"] / 1e6, "runtime": job.evaluate["wall_hours"] * 60}


#: job kind -> what the plan needs of one size's job (its cells, its JobPlans), in MB and minutes.
PLANNED_NEEDS: dict[str, Callable[[list, object], dict[str, float]]] = {
    "train": _train_needs,
    "evaluate": _evaluate_needs,
}


def planned_resources(config: Mapping, cells: list, jobs: Mapping, gpu: bool) -> dict:
    """``config["resources"]`` with every ``plan`` value replaced by a table by size: the plan's need times its
    factor, rounded up to whole MB / minutes. ``gpu``: the plan has a speed model (the hub family's)."""
    resources = copy.deepcopy(dict(config["resources"]))
    for job, needs_of in PLANNED_NEEDS.items():
        for key, factor in FACTORS.items():
            if resources[job][key] != PLANNED:
                continue
            if key == "runtime" and not gpu:
                raise ConfigError(
                    f"resources.{job}.runtime: `plan` needs the hub family's speed model (the tiny family's CPU "
                    "plan has none); give the limit in minutes"
                )
            by_size = {size: [c for c in cells if c.size == size] for size in jobs}
            resources[job][key] = {
                size: math.ceil(needs_of(by_size[size], jobs[size])[key] * config["plan"][factor]) for size in jobs
            }
    return resources


def requested(resources: Mapping, job: str, key: str, size: str) -> float:
    """resources.<job>.<key> (mem_mb: MB, runtime: minutes) for ``size``, as workflows/common.smk asks Slurm (a size
    missing from a table takes the table's largest value)."""
    value = resources[job][key]
    return value.get(size, max(value.values())) if isinstance(value, Mapping) else value


def uses_plan(config: Mapping) -> bool:
    """Some request of the config is ``plan``."""
    return any(value == PLANNED for job in config["resources"].values() for value in job.values())


def site_problems(config: Mapping, resources: Mapping) -> list[str]:
    """What the site cannot schedule, one line each naming the key and the fix: a job that needs more GPUs than
    a node has (plan.gpus_per_node; one job runs on one node) or a time limit above the partition's MaxTime
    (plan.max_time_h; sbatch rejects it, and every job of that kind and size with it)."""
    return _gpu_problems(config) + _time_problems(config, resources)


def _gpu_problems(config: Mapping) -> list[str]:
    if config["models"]["family"] != "hub":
        return []  # the tiny family's jobs hold no GPU
    per_node, problems = config["plan"]["gpus_per_node"], []
    for size in config["models"]["sizes"]:
        gpus = config["models"]["train_gpus"].get(size, 1)
        if gpus > per_node:
            problems.append(
                f"models.train_gpus.{size}: {gpus} GPUs in one training job, but a node has plan.gpus_per_node "
                f"{per_node} and a job runs on one node: lower models.train_gpus.{size} to {per_node} if `hara plan` "
                f"still fits it there, or run on nodes with {gpus} GPUs"
            )
    tp = config["evaluation"]["vllm"]["tensor_parallel_size"]
    if tp > per_node:
        problems.append(
            f"evaluation.vllm.tensor_parallel_size: {tp} GPUs in one evaluation job, but a node has "
            f"plan.gpus_per_node {per_node}: lower it to {per_node}"
        )
    return problems


def _time_problems(config: Mapping, resources: Mapping) -> list[str]:
    max_hours = config["plan"]["max_time_h"]
    if max_hours is None:
        return []  # MaxTime unknown
    problems = []
    for job, keys in resources.items():
        value = keys["runtime"]
        asked = value if isinstance(value, Mapping) else {None: value}
        for size, minutes in asked.items():
            if minutes > max_hours * 60 and (size is None or size in config["models"]["sizes"]):
                where = f"resources.{job}.runtime" + (f".{size}" if size is not None else "")
                problems.append(
                    f"{where}: {minutes / 60:.1f} h asked, above the site's MaxTime plan.max_time_h {max_hours:g} "
                    f"h (sbatch would reject it): ask at most {math.floor(max_hours * 60)} minutes (a training job "
                    "resumes from its last checkpoint in its retry), give the job more GPUs, or use a partition "
                    "with a longer MaxTime"
                )
    return problems
