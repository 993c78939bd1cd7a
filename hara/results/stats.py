"""Aggregation over seeds and the training-curve measures of the efficiency table. Pure functions, no I/O."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hara.metric_keys import ACCURACY, CPU_S, STEP_S

if TYPE_CHECKING:
    from hara.results.collect import Run

__all__ = [
    "TARGET_FRACTION",
    "CurvePair",
    "Estimate",
    "cost_axis",
    "cumulative_time",
    "curve_pair",
    "efficiency_measures",
    "final_value",
    "first_passage",
    "mean_se",
    "shared_target",
    "smooth",
    "smoothed_accuracy",
    "step_costs",
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


#: Where between the start and the end of the two runs' mean smoothed curve a first-passage target lies (the
#: config's claims give their own): half the gain both runs made, a level either may reach before its end.
TARGET_FRACTION = 0.5


def cost_axis(*runs: Sequence[dict]) -> tuple[list[list[float]], str]:
    """Each run's cumulative cost at the end of each step: process CPU seconds when every step of every run logged
    them (comparable between runs that shared the machine), else the step count (never wall time, which grows with
    the other jobs' load)."""
    if all(metrics and all(CPU_S in row for row in metrics) for metrics in runs):
        return [list(itertools.accumulate(float(row[CPU_S]) for row in metrics)) for metrics in runs], "CPU s"
    return [[float(i + 1) for i in range(len(metrics))] for metrics in runs], "steps"


def smoothed_accuracy(metrics: Sequence[dict], key: str = ACCURACY) -> list[float]:
    _, values = series(metrics, key)
    return smooth(values, window_of(len(values))) if values else []


def shared_target(a: Sequence[float], b: Sequence[float], fraction: float = TARGET_FRACTION) -> float | None:
    """A target both runs are measured against, from their mean smoothed curve (so that neither run's own end sets
    it): its first full window's value plus ``fraction`` of its gain to the end; None when the mean curve gained
    nothing (no level to reach)."""
    n = min(len(a), len(b))
    if n < 2:
        return None
    mean = [(x + y) / 2 for x, y in zip(a[:n], b[:n])]
    start, end = mean[window_of(n) - 1], mean[-1]
    return start + fraction * (end - start) if end > start else None


def first_passage(costs: Sequence[float], smoothed: Sequence[float], target: float) -> tuple[float, bool]:
    """(cost at the first step whose smoothed value reaches ``target``, True), or (the run's whole cost, False):
    a run that never reaches it is censored at its end (its time is at least that), never dropped."""
    for cost, value in zip(costs, smoothed):
        if value >= target - 1e-12:
            return cost, True
    return costs[len(smoothed) - 1], False


@dataclass(frozen=True)
class CurvePair:
    """A run against its baseline (same seed) on training curves: the baseline's first-passage cost over the run's
    to their shared target (both censored at their end when not reached: a restricted time), and the run's smoothed
    accuracy after the baseline's whole cost minus the baseline's final one; ``axis``: CPU s or steps."""

    speedup: float | None
    reached: tuple[bool, bool]
    target: float | None
    equal_time: float | None
    axis: str


def curve_pair(run: Sequence[dict], baseline: Sequence[dict], fraction: float = TARGET_FRACTION) -> CurvePair:
    mine, theirs = smoothed_accuracy(run), smoothed_accuracy(baseline)
    (my_costs, their_costs), axis = cost_axis(run, baseline)
    if not mine or not theirs:
        return CurvePair(None, (False, False), None, None, axis)
    within = [v for v, c in zip(mine, my_costs) if c <= their_costs[len(theirs) - 1] + 1e-9]
    equal_time = within[-1] - theirs[-1] if within else None
    target = shared_target(mine, theirs, fraction)
    if target is None:
        return CurvePair(None, (False, False), None, equal_time, axis)
    (my_cost, my_reach), (their_cost, their_reach) = (
        first_passage(my_costs, mine, target),
        first_passage(their_costs, theirs, target),
    )
    return CurvePair(their_cost / my_cost, (my_reach, their_reach), target, equal_time, axis)


def efficiency_measures(run: Run, baseline: Run | None) -> dict[str, float | None]:
    """Per-step time and CPU time, their overhead vs the baseline, and the curve measures against the baseline of
    the same seed (:func:`curve_pair`): speed-up to the shared target and accuracy at the baseline's cost (None
    where the logs do not give it)."""
    step_times = [row[STEP_S] for row in run.metrics if STEP_S in row]
    base_times = [row[STEP_S] for row in baseline.metrics if STEP_S in row] if baseline else []
    step_s = sum(step_times) / len(step_times) if step_times else None
    base_s = sum(base_times) / len(base_times) if base_times else None
    cpu_s, base_cpu_s = _mean_cpu_s(run.metrics), _mean_cpu_s(baseline.metrics) if baseline else None
    pair = curve_pair(run.metrics, baseline.metrics) if baseline and baseline.metrics and run.metrics else None
    return {
        "cpu_s": cpu_s,
        "cpu_overhead": (cpu_s / base_cpu_s - 1.0) if cpu_s is not None and base_cpu_s else None,
        "step_s": step_s,
        "overhead": (step_s / base_s - 1.0) if step_s is not None and base_s else None,
        "speedup": pair.speedup if pair else None,
        "equal_time": pair.equal_time if pair else None,
    }


def _mean_cpu_s(metrics: list[dict]) -> float | None:
    """Mean per-step process CPU time, when every step logged it (runs trained before it was logged: None)."""
    costs, kind = step_costs(metrics)
    return sum(costs) / len(costs) if costs and kind == "CPU time" else None
