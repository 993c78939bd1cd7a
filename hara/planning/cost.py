"""Tokens generated and device-hours of training and evaluation."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hara.data.catalog import get_benchmark
from hara.data.embedded import VALIDATION
from hara.evaluation.settings import benchmark_settings
from hara.layout import candidate_steps
from hara.planning.architecture import Architecture
from hara.planning.setup import Setup


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
    candidate (final/ included) on the validation split and, with report.speed, on the speed benchmark's scored
    problems, then the benchmarks again for a selected checkpoint that is not final/ (hara/evaluation/selection.py)."""
    selection = config["selection"]
    if not selection["enabled"]:
        return 0
    candidates, settings = len(candidate_steps(config)), benchmark_settings(config, VALIDATION)
    validation = candidates * selection["validation_problems"] * settings.n * settings.max_new_tokens
    return validation + candidates * speed_tokens(config) + (evaluation_tokens(config) if candidates > 1 else 0)


def speed_tokens(config: Mapping) -> int:
    """Upper bound of one candidate's scores on the speed benchmark (report.speed; 0 when off): its scored problems
    (report.speed.problems, at most the benchmark's) x n x max_new_tokens."""
    speed = config["report"]["speed"]
    if speed["benchmark"] is None:
        return 0
    settings, problems = benchmark_settings(config, speed["benchmark"]), get_benchmark(speed["benchmark"]).size(config)
    scored = problems if speed["problems"] is None else min(problems, speed["problems"])
    return scored * settings.n * settings.max_new_tokens


def by_size(value: Any, size: str) -> float:
    """A number, or a table by model size (a size not listed takes the table's smallest, i.e. slowest, value)."""
    if isinstance(value, Mapping):
        return value.get(size, min(value.values()))
    return value


def step_flops(arch: Architecture, s: Setup, context: int) -> float:
    """FLOPs of one optimizer step's passes over ``context`` tokens a rollout (prompt + completion): forward,
    backward (2 forwards), checkpointing's recompute, the no-grad old-log-prob and capture forwards."""
    passes = 3 + s.checkpointing + s.old_logps_pass + s.capture_forward
    return s.rollouts * context * arch.forward_flops_per_token(context) * passes


def training_device_hours(arch: Architecture, s: Setup, plan: Mapping, size: str) -> dict[str, float]:
    """Generation at plan.generation_tokens_per_s per GPU; the passes over prompt + completion (forward, backward
    = 2 forwards, checkpointing's recompute, the no-grad old-log-prob and capture forwards) at plan.mfu (a number or
    a table by size, as `hara plan --calibrate` writes it) x plan.peak_tflops per GPU. Perfect scaling over the job's GPUs, so device-hours do not depend on them."""
    generation_s = generated_tokens(s) / by_size(plan["generation_tokens_per_s"], size)
    flops = s.steps * step_flops(arch, s, s.context)
    compute_s = flops / (plan["peak_tflops"] * 1e12 * by_size(plan["mfu"], size))
    return {"generation": generation_s / 3600, "compute": compute_s / 3600, "total": (generation_s + compute_s) / 3600}
