"""Aggregation over seeds and the training-curve measures of the efficiency table. Pure functions, no I/O."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from hara.metric_keys import ACCURACY, CPU_S, STEP_S

if TYPE_CHECKING:
    from hara.results.collect import Run

__all__ = [
    "efficiency_measures",
    "Estimate",
    "cumulative_time",
    "final_value",
    "mean_se",
    "smooth",
    "step_costs",
    "step_reaching",
    "value_at_time",
]

#: Placeholder of a cell without data; the report never invents a number.
NA = "n/a"


class Estimate(tuple):
    """(mean, standard error, number of values); se is None for a single value, mean None for none."""

    __slots__ = ()

    def __new__(cls, mean: float | None, se: float | None, n: int):
        return super().__new__(cls, (mean, se, n))

    mean = property(lambda self: self[0])
    se = property(lambda self: self[1])
    n = property(lambda self: self[2])

    def format(self, scale: float = 1.0, digits: int = 1, expected: int | None = None) -> str:
        """``mean ± se`` (scaled), the mean alone for one value (the table states its seeds once, not per cell),
        ``n/a`` for none; ``[k/n seeds]`` if partial."""
        if self.mean is None:
            return NA
        text = f"{self.mean * scale:.{digits}f}"
        text += f" ± {self.se * scale:.{digits}f}" if self.se is not None else ""
        if expected is not None and self.n < expected:
            text += f" [{self.n}/{expected} seeds]"
        return text


def mean_se(values: Sequence[float | None]) -> Estimate:
    """Mean and standard error of the mean (sample std / sqrt(n)) of the values that are not None."""
    xs = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not xs:
        return Estimate(None, None, 0)
    mean = sum(xs) / len(xs)
    if len(xs) == 1:
        return Estimate(mean, None, 1)
    var = sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)
    return Estimate(mean, math.sqrt(var / len(xs)), len(xs))


def smooth(values: Sequence[float], window: int) -> list[float]:
    """Trailing moving average (the first points average what exists): RL training accuracy is noisy per step."""
    out, total = [], 0.0
    for i, value in enumerate(values):
        total += value
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def window_of(n_steps: int) -> int:
    """Smoothing window: a tenth of the run (at least one step)."""
    return max(1, n_steps // 10)


def series(metrics: Sequence[dict], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of one metric, skipping steps that did not log it."""
    pairs = [(row["step"], float(row[key])) for row in metrics if key in row]
    return [s for s, _ in pairs], [v for _, v in pairs]


def step_costs(metrics: Sequence[dict]) -> tuple[list[float], str]:
    """Per-step cost: process CPU time (time/cpu_s) when every step logged it, else wall time (time/step_s).

    CPU time does not grow when other jobs share the cores; wall time does, so wall costs of runs made side by side
    are not comparable (the report says which one it used)."""
    if metrics and all(CPU_S in row for row in metrics):
        return [float(row[CPU_S]) for row in metrics], "CPU time"
    return [float(row[STEP_S]) for row in metrics if STEP_S in row], "wall time"


def cumulative_time(metrics: Sequence[dict], key: str = STEP_S) -> list[float] | None:
    """Wall time in seconds at the end of each logged step (None when a step has no time)."""
    if not metrics or any(key not in row for row in metrics):
        return None
    total, out = 0.0, []
    for row in metrics:
        total += float(row[key])
        out.append(total)
    return out


def final_value(metrics: Sequence[dict], key: str) -> float | None:
    """The last smoothed value of a metric (None without data)."""
    _, values = series(metrics, key)
    return smooth(values, window_of(len(values)))[-1] if values else None


def step_reaching(metrics: Sequence[dict], key: str, target: float) -> tuple[int, float] | None:
    """(step, wall seconds) where the smoothed metric first reaches ``target``; None if never (or no timing)."""
    times = cumulative_time(metrics)
    steps, values = series(metrics, key)
    if not values or times is None or len(times) != len(values):
        return None
    for step, value, seconds in zip(steps, smooth(values, window_of(len(values))), times):
        if value >= target - 1e-12:
            return step, seconds
    return None


def value_at_time(metrics: Sequence[dict], key: str, budget_s: float) -> float | None:
    """The smoothed metric at the last step finished within ``budget_s`` wall seconds (None if none is)."""
    times = cumulative_time(metrics)
    _, values = series(metrics, key)
    if not values or times is None or len(times) != len(values):
        return None
    smoothed = smooth(values, window_of(len(values)))
    inside = [v for v, t in zip(smoothed, times) if t <= budget_s + 1e-9]
    return inside[-1] if inside else None


def efficiency_measures(run: Run, baseline: Run | None) -> dict[str, float | None]:
    """Per-step time, its overhead vs the baseline, steps / seconds to the baseline's final training accuracy,
    and training accuracy at the baseline's total wall time (None where the logs do not give it)."""
    step_times = [row[STEP_S] for row in run.metrics if STEP_S in row]
    base_times = [row[STEP_S] for row in baseline.metrics if STEP_S in row] if baseline else []
    step_s = sum(step_times) / len(step_times) if step_times else None
    base_s = sum(base_times) / len(base_times) if base_times else None
    target = final_value(baseline.metrics, ACCURACY) if baseline else None
    reached = step_reaching(run.metrics, ACCURACY, target) if target is not None else None
    cpu_s, base_cpu_s = _mean_cpu_s(run.metrics), _mean_cpu_s(baseline.metrics) if baseline else None
    return {
        "cpu_s": cpu_s,
        "cpu_overhead": (cpu_s / base_cpu_s - 1.0) if cpu_s is not None and base_cpu_s else None,
        "step_s": step_s,
        "overhead": (step_s / base_s - 1.0) if step_s is not None and base_s else None,
        "steps_to_target": float(reached[0]) if reached else None,
        "seconds_to_target": reached[1] if reached else None,
        "acc_at_budget": value_at_time(run.metrics, ACCURACY, sum(base_times)) if base_times else None,
    }


def _mean_cpu_s(metrics: list[dict]) -> float | None:
    """Mean per-step process CPU time, when every step logged it (runs trained before it was logged: None)."""
    costs, kind = step_costs(metrics)
    return sum(costs) / len(costs) if costs and kind == "CPU time" else None
