"""Paired differences between two methods with bootstrap confidence intervals. Pure numpy, no I/O.

Two runs of the same (size, rlvr) are compared on the problems they were both evaluated on: run A's pass@1 on a
problem minus run B's on the same problem, with seed k of A paired with seed k of B (same data order, same
initialisation). The point estimate is the mean of those differences, i.e. the difference of the report's means.
Its 95% interval is a percentile bootstrap that resamples what varies between reruns and benchmarks:

- one seed: the problems, with replacement (the paired bootstrap of ``scipy.stats.bootstrap(..., paired=True,
  method="percentile")``; with the same generator seed the intervals are identical, which the tests check);
- several seeds: hierarchically, the seeds with replacement, then the problems of each drawn seed with replacement.

The draw protocol, so that anyone can recompute an interval from the saved predictions: ``rng =
numpy.random.default_rng(seed)``; with S > 1 seeds first ``rng.integers(0, S, (R, S))``, then per benchmark in
the given order ``rng.integers(0, P, (R, P))`` for one seed or ``rng.integers(0, P, (R, S, P))`` for several.
Each benchmark's own interval starts from a fresh generator with the same seed; the average over benchmarks draws
all benchmarks from one generator, sharing the seed draw, so each replicate's average is the mean of its
benchmarks' replicate differences (the average of the report is the plain mean over benchmarks).

A verdict reads the interval: ``better`` when it lies above 0, ``worse`` below 0, else ``within noise``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["BETTER", "WITHIN_NOISE", "WORSE", "Bootstrap", "Difference", "Interval", "bootstrap_difference",
           "bootstrap_mean", "bootstrap_ratio", "paired_matrix"]

BETTER, WORSE, WITHIN_NOISE = "better", "worse", "within noise"


@dataclass(frozen=True)
class Bootstrap:
    """The resampling settings (config ``report.bootstrap``)."""

    resamples: int = 10_000
    seed: int = 0
    confidence: float = 0.95

    @classmethod
    def from_config(cls, config: Mapping) -> Bootstrap:
        section = config["report"]["bootstrap"]
        return cls(int(section["resamples"]), int(section["seed"]), float(section["confidence"]))


@dataclass(frozen=True)
class Difference:
    """A - B with its bootstrap interval, over ``seeds`` paired seeds and ``problems`` paired problems."""

    mean: float
    low: float
    high: float
    seeds: int
    problems: int

    @property
    def verdict(self) -> str:
        if self.low > 0:
            return BETTER
        if self.high < 0:
            return WORSE
        return WITHIN_NOISE

    def format(self, scale: float = 100.0, digits: int = 1) -> str:
        """``+0.3 [-1.2, +1.8]`` (scaled: percentage points by default)."""
        return (f"{self.mean * scale:+.{digits}f} [{self.low * scale:+.{digits}f}, "
                f"{self.high * scale:+.{digits}f}]")

    def as_dict(self) -> dict:
        return {"difference": self.mean, "ci_low": self.low, "ci_high": self.high, "verdict": self.verdict,
                "seeds": self.seeds, "problems": self.problems}


def paired_matrix(a: Mapping[int, Mapping[str, float]], b: Mapping[int, Mapping[str, float]]) -> np.ndarray:
    """(seeds, problems) matrix of A - B from per-seed {problem id: pass@1}, over the seeds both have.

    Raises ValueError when a paired seed's two runs were not scored on the same problems (they are then not
    comparable; the evaluation fingerprints say why)."""
    seeds = sorted(set(a) & set(b))
    if not seeds:
        raise ValueError("no seed was evaluated for both runs")
    ids = sorted(a[seeds[0]])
    rows = []
    for seed in seeds:
        if set(a[seed]) != set(ids) or set(b[seed]) != set(ids):
            raise ValueError(f"seed {seed}: the two runs were scored on different problems")
        rows.append([a[seed][i] - b[seed][i] for i in ids])
    return np.asarray(rows, dtype=np.float64)


def _replicates(diffs: np.ndarray, seed_draw: np.ndarray | None, rng: np.random.Generator, resamples: int
                ) -> np.ndarray:
    """Bootstrap replicates (R,) of the mean of one benchmark's (S, P) differences."""
    n_seeds, n_problems = diffs.shape
    if seed_draw is None:  # one seed: problems only
        problems = rng.integers(0, n_problems, (resamples, n_problems))
        return diffs[0][problems].mean(axis=-1)
    problems = rng.integers(0, n_problems, (resamples, n_seeds, n_problems))
    return diffs[seed_draw[:, :, None], problems].mean(axis=(1, 2))


def bootstrap_difference(diffs: Sequence[np.ndarray], settings: Bootstrap) -> Difference:
    """The paired difference over one or more benchmarks' (S, P) matrices (several: their plain mean)."""
    n_seeds = {d.shape[0] for d in diffs}
    if len(n_seeds) != 1:
        raise ValueError("every benchmark must pair the same seeds")
    (n_seeds,) = n_seeds
    rng = np.random.default_rng(settings.seed)
    seed_draw = rng.integers(0, n_seeds, (settings.resamples, n_seeds)) if n_seeds > 1 else None
    replicates = np.mean([_replicates(d, seed_draw, rng, settings.resamples) for d in diffs], axis=0)
    low, high = _percentiles(replicates, settings.confidence)
    point = float(np.mean([d.mean() for d in diffs]))
    return Difference(point, low, high, n_seeds, int(sum(d.shape[1] for d in diffs)))


@dataclass(frozen=True)
class Interval:
    """A point estimate with its bootstrap interval."""

    value: float
    low: float
    high: float

    def format(self, fmt: str = "{:.2f}") -> str:
        return f"{fmt.format(self.value)} [{fmt.format(self.low)}, {fmt.format(self.high)}]"


def _percentiles(replicates: np.ndarray, confidence: float) -> tuple[float, float]:
    alpha = (1 - confidence) / 2
    low, high = np.percentile(replicates, [100 * alpha, 100 * (1 - alpha)])
    return float(low), float(high)


def bootstrap_ratio(a: Sequence[float], b: Sequence[float], settings: Bootstrap) -> Interval:
    """mean(a) / mean(b) of two independent samples (e.g. two runs' per-step costs), each resampled with
    replacement: ``rng.integers(0, len(a), (R, len(a)))``, then the same for b."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    rng = np.random.default_rng(settings.seed)
    draw_a = rng.integers(0, len(a), (settings.resamples, len(a)))
    draw_b = rng.integers(0, len(b), (settings.resamples, len(b)))
    return Interval(float(a.mean() / b.mean()),
                    *_percentiles(a[draw_a].mean(axis=1) / b[draw_b].mean(axis=1), settings.confidence))


def bootstrap_mean(values: Sequence[float], settings: Bootstrap) -> Interval:
    """The mean of independent units (e.g. one value per seed) with its percentile interval."""
    values = np.asarray(values, dtype=np.float64)
    draw = np.random.default_rng(settings.seed).integers(0, len(values), (settings.resamples, len(values)))
    return Interval(float(values.mean()), *_percentiles(values[draw].mean(axis=1), settings.confidence))
