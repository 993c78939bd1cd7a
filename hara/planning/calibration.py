"""The plan's speed assumptions measured by the pilot (``hara pilot``, docs/cluster.md#the-pilot): a pilot summary ->
generation tokens/s per GPU and MFU per size, the plan overlay that sets them, and the stated figures beside them.

Pure arithmetic over the summary's figures (each training run's medians over its steps after the first) and the
config; hara.pilot writes the summary, ``hara plan --calibrate`` reads it.

- Generation tokens/s per GPU = the step's generated tokens (rollouts x mean completion length, all ranks) over the
  generation phase's seconds x the job's GPUs (every rank generates its share at once), as the plan divides
  generated tokens by ``plan.generation_tokens_per_s`` to get device-seconds.
- MFU = the step's pass FLOPs (hara.planning.step_flops at prompt + the measured mean completion) over everything
  of the step that is not generation (scoring, training, optimizer and the unmarked rest: data, logging, hooks) x the
  GPUs x ``plan.peak_tflops``. The plan's wall time is generation + passes, so with these two figures it gives back
  the measured step time at the measured length; it stays an upper bound because it plans every rollout to
  ``training.max_completion_length``.
- A size with several runs (methods) takes the slowest run's figure: the request must cover every cell of the size.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hara.errors import ConfigError

SUMMARY_FORMAT = "hara-pilot-summary/1"
#: What `--calibrate` reads of each run of a summary (the rest is for the reader): field -> what it is.
RUN_FIELDS = {
    "size": "model size",
    "gpus": "GPUs of the training job",
    "step_s": "median wall seconds of a step (steps after the first)",
    "phase_s.generation": "median seconds of the generation phase",
    "generated_tokens_per_step": "rollouts x median mean completion length",
    "flops_per_step": "pass FLOPs of a step at the measured length",
}


def summary_field(run: Mapping, field: str, where: str) -> Any:
    """A run's field (dotted path) as a positive number, or a one-line error naming the file and the field."""
    value: Any = run
    for part in field.split("."):
        if not isinstance(value, Mapping) or part not in value:
            raise ConfigError(f"{where}.{field}: missing ({RUN_FIELDS[field]}); rerun `hara pilot` to write it")
        value = value[part]
    if field == "size":
        return value
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        raise ConfigError(f"{where}.{field}: {value!r} is not a positive number ({RUN_FIELDS[field]})")
    return value


def check_summary(summary: Any, source: str) -> list[Mapping]:
    """The summary's runs, each with every field `--calibrate` reads; else one line naming ``source`` and the
    field."""
    if not isinstance(summary, Mapping) or summary.get("format") != SUMMARY_FORMAT:
        found = summary.get("format") if isinstance(summary, Mapping) else type(summary).__name__
        raise ConfigError(f"{source}: format {found!r}, not {SUMMARY_FORMAT!r} (the file `hara pilot --out` writes)")
    runs = summary.get("runs")
    if not isinstance(runs, list) or not runs:
        raise ConfigError(f"{source}: runs: no training run measured (the pilot's training jobs did not finish)")
    for index, run in enumerate(runs):
        for field in RUN_FIELDS:
            summary_field(run, field, f"{source}: runs[{index}]")
    return runs


def measured_rates(run: Mapping, peak_tflops: float) -> dict[str, float]:
    """One run's generation tokens/s per GPU and MFU (the module's docstring says how)."""
    gpus, step_s, generation_s = run["gpus"], run["step_s"], run["phase_s"]["generation"]
    if generation_s >= step_s:
        raise ConfigError(
            f"runs of {run['size']}: generation {generation_s:g} s of a {step_s:g} s step leaves no time for the "
            "passes (a summary from another pilot's steps?)"
        )
    return {
        "generation_tokens_per_s": run["generated_tokens_per_step"] / (generation_s * gpus),
        "mfu": run["flops_per_step"] / ((step_s - generation_s) * gpus * peak_tflops * 1e12),
    }


def calibrated_rates(runs: list[Mapping], peak_tflops: float) -> dict[str, dict[str, float]]:
    """size -> {generation_tokens_per_s, mfu}: the slowest run of the size for each."""
    by_size: dict[str, dict[str, float]] = {}
    for run in runs:
        rates = measured_rates(run, peak_tflops)
        known = by_size.setdefault(run["size"], rates)
        by_size[run["size"]] = {key: min(known[key], value) for key, value in rates.items()}
    return by_size


def calibration_overlay(rates: Mapping[str, Mapping[str, float]]) -> dict:
    """The config overlay that plans with the measured figures: tables by size (a size the pilot did not run takes
    the table's smallest value, i.e. the slowest measured)."""
    return {
        "plan": {
            key: {size: significant(r[key]) for size, r in rates.items()} for key in ("generation_tokens_per_s", "mfu")
        }
    }


def significant(value: float) -> float:
    """Four significant digits: a figure measured over a few steps has no more, and a tiny one stays above 0."""
    return float(f"{value:.4g}")


def stated(value: float | Mapping, size: str) -> float | None:
    """A plan figure as the config states it for ``size`` (None where a table does not list it)."""
    return value.get(size) if isinstance(value, Mapping) else value


def calibrated_config(config: Mapping, rates: Mapping[str, Mapping[str, float]]) -> dict:
    """``config`` with the overlay's plan figures in place (requests set to `plan` follow them)."""
    plan = {**config["plan"], **calibration_overlay(rates)["plan"]}
    return {**config, "plan": plan}


def _figure(value: float | None, digits: int) -> str:
    return "not listed" if value is None else f"{value:,.{digits}f}"


def rate_lines(plan: Mapping, rates: Mapping[str, Mapping[str, float]], sizes: list[str]) -> list[str]:
    """Each measured size's figures beside the stated ones; what an unmeasured size of ``sizes`` plans with."""
    measured = [
        f"{size}: generation {_figure(stated(plan['generation_tokens_per_s'], size), 0)} tokens/s per GPU stated, "
        f"{r['generation_tokens_per_s']:,.0f} measured; mfu {_figure(stated(plan['mfu'], size), 3)} stated, "
        f"{r['mfu']:.3g} measured"
        for size, r in rates.items()
    ]
    slowest = {key: min(r[key] for r in rates.values()) for key in ("generation_tokens_per_s", "mfu")}
    unmeasured = [
        f"{size}: not in the pilot: plans with the slowest measured figures ({slowest['generation_tokens_per_s']:,.0f} "
        f"tokens/s per GPU, mfu {slowest['mfu']:.3g}); run the pilot with it for its own"
        for size in sizes
        if size not in rates
    ]
    return measured + unmeasured


def runtime_lines(config: Mapping, before, after, runs: list[Mapping]) -> list[str]:
    """Per size: the largest training cell's planned wall hours and its Slurm request, stated -> calibrated; per
    measured run: its median step times training.steps (what the pilot's speed gives a full run, at the measured
    completion length)."""
    lines = []
    for size in config["models"]["sizes"]:
        hours = [max(c.wall_hours for c in grid.cells if c.size == size) for grid in (before, after)]
        asked = [grid.cells[[c.size for c in grid.cells].index(size)].runtime_asked_hours for grid in (before, after)]
        lines.append(
            f"{size}: training wall {hours[0]:.1f} h planned stated, {hours[1]:.1f} h calibrated; "
            f"resources.train.runtime {asked[0]:.1f} h -> {asked[1]:.1f} h"
        )
    steps = config["training"]["steps"]
    for run in runs:
        lines.append(
            f"{run['size']}/{run.get('rlvr', '?')}/{run.get('method', '?')}: {run['step_s']:.1f} s a step measured "
            f"on {run['gpus']} GPUs = {run['step_s'] * steps / 3600:.1f} h for training.steps {steps}"
        )
    return lines
