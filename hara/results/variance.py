"""A declared run variance: how much a whole training run's luck moves a paired pass@1 difference, measured once
from a multi-seed results folder of a world and then used where a comparison has fewer seeds than
``report.min_seeds`` (docs/comparisons.md, "One seed, honestly").

A one-seed interval resamples the problems only; a whole run better or worse (the seed effect of the paired
difference, ``seed_sd``) is in none of it. Simulated through the claims check on null grids of the embedded
default's shape, a run-level shift of sd 0.05 logit made "reproduced" come out in 44% of grids at one seed. So such
an interval adds the declared seed variance of the difference, or says it covers the problems only and decides no
claim.

The file (YAML, written by ``hara plan --results DIR --write-variance FILE``)::

    benchmarks:               # per benchmark: sds of a paired difference's parts (fractions of 1)
      mini_math500: {seed_sd: 0.011, problem_sd: 0.05, seed_problem_sd: 0.16, success_variance: 0.19}
    average: {seed_sd: 0.006, benchmarks: [mini_math500, ...]}   # the benchmark average's seed sd
    provenance: {folder: ..., runs: [...], seeds: [0, 1, 2], date: ..., estimator: ...}

``seed_sd`` there is an upper confidence bound (:func:`upper_variance`): three seeds estimate a variance poorly (a
chi-square with 2 degrees of freedom per comparison), and an underestimate would make every one-seed verdict too
sure, so the file errs on the wide side and says by how much.
"""

from __future__ import annotations

import datetime
import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from hara.errors import ConfigError

__all__ = [
    "COMPONENT_KEYS",
    "UPPER_CONFIDENCE",
    "RunVariance",
    "anova_components",
    "estimate_run_variance",
    "load_run_variance",
    "resolve_path",
    "upper_variance",
    "write_run_variance",
]

#: The parts of a paired difference's variance, each an sd in fractions of 1 except the Bernoulli variance.
COMPONENT_KEYS = ("seed_sd", "problem_sd", "seed_problem_sd", "success_variance")
#: One-sided level of the upper confidence bound on each declared seed variance.
UPPER_CONFIDENCE = 0.9
#: Where a relative path in the config is looked for after the working directory: the repository (its config/).
PACKAGE_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class RunVariance:
    """Declared variance components per benchmark and the seed sd of their average, with where they come from."""

    benchmarks: Mapping[str, Mapping[str, float]]
    average_seed_sd: float | None = None
    average_benchmarks: tuple[str, ...] = ()
    provenance: Mapping = field(default_factory=dict)
    path: str = ""

    @property
    def source(self) -> str:
        """``config/variance/embedded.yaml (results of 2026-12-07, 3 seeds)``: what an interval names."""
        where = self.provenance.get("folder")
        seeds = self.provenance.get("seeds")
        detail = ", ".join(
            part
            for part in (
                f"from {where}" if where else "",
                f"{len(seeds)} seeds" if isinstance(seeds, list) else "",
                str(self.provenance.get("date", "")),
            )
            if part
        )
        return f"{self.path or 'declared'}" + (f" ({detail})" if detail else "")

    def seed_sd_of(self, benchmarks: Sequence[str] | None) -> tuple[float, str]:
        """The declared seed sd of a paired difference on one benchmark or on the mean of several, and how it was
        found. The mean of the declared set reads its own estimate; another set the mean of its sds, an upper bound
        of the sd of a mean whatever the correlation (Cauchy-Schwarz); a benchmark the file does not name (a sweep's
        validation split, a test's) the largest declared sd."""
        names = tuple(benchmarks or ())
        if len(names) == 1 and names[0] in self.benchmarks:
            return float(self.benchmarks[names[0]]["seed_sd"]), names[0]
        if names and set(names) == set(self.average_benchmarks) and self.average_seed_sd is not None:
            return float(self.average_seed_sd), "benchmark average"
        if names and all(n in self.benchmarks for n in names):
            return float(np.mean([self.benchmarks[n]["seed_sd"] for n in names])), "mean of the benchmarks' sds"
        return max(float(c["seed_sd"]) for c in self.benchmarks.values()), "largest declared"

    def components(self, benchmark: str) -> Mapping[str, float]:
        """One benchmark's declared components (a benchmark the file does not name: the largest of each)."""
        if benchmark in self.benchmarks:
            return self.benchmarks[benchmark]
        return {key: max(float(c[key]) for c in self.benchmarks.values()) for key in COMPONENT_KEYS}

    def to_yaml(self) -> dict:
        return {
            "benchmarks": {name: {k: float(v) for k, v in c.items()} for name, c in self.benchmarks.items()},
            "average": {"seed_sd": self.average_seed_sd, "benchmarks": list(self.average_benchmarks)},
            "provenance": dict(self.provenance),
        }


def resolve_path(path: str | Path) -> Path:
    """A config's file path: as given when it exists (absolute, or relative to the working directory), else
    relative to the repository, where the shipped files live."""
    given = Path(path)
    if given.is_absolute() or given.exists():
        return given
    return PACKAGE_ROOT / given


def load_run_variance(path: str | Path) -> RunVariance:
    """The declared file; a missing file or key is refused in one line naming it. Read once per version of the
    file (every comparison of a report asks for it)."""
    found = resolve_path(path)
    if not found.is_file():
        raise ConfigError(
            f"report.run_variance: {path}: no such file (write one with `hara plan --results DIR --write-variance "
            f"{path}`, or set report.run_variance: null)"
        )
    return _load(str(path), found, found.stat().st_mtime_ns)


@functools.lru_cache(maxsize=32)
def _load(path: str, found: Path, version: int) -> RunVariance:
    try:
        raw = yaml.safe_load(found.read_text(encoding="utf-8")) or {}
        benchmarks = {
            str(name): {key: float(entry[key]) for key in COMPONENT_KEYS} for name, entry in raw["benchmarks"].items()
        }
    except (yaml.YAMLError, KeyError, TypeError, ValueError, AttributeError) as error:
        raise ConfigError(
            f"{found}: not a declared run variance (benchmarks.<name>.{{{', '.join(COMPONENT_KEYS)}}} needed: "
            f"{type(error).__name__}: {error})"
        ) from None
    if not benchmarks:
        raise ConfigError(f"{found}: declares no benchmark")
    average = raw.get("average") or {}
    return RunVariance(
        benchmarks,
        None if average.get("seed_sd") is None else float(average["seed_sd"]),
        tuple(average.get("benchmarks") or ()),
        raw.get("provenance") or {},
        path,
    )


def write_run_variance(variance: RunVariance, path: str | Path) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    header = (
        "# A declared run variance (hara/results/variance.py), written by `hara plan --results DIR --write-variance`.\n"
        "# seed_sd: an upper confidence bound of the seed part of a paired difference (provenance.estimator).\n"
    )
    out.write_text(header + yaml.safe_dump(variance.to_yaml(), sort_keys=False), encoding="utf-8")
    return out


def anova_components(matrix: np.ndarray) -> dict[str, float]:
    """Mean squares and their degrees of freedom of an (S, P) matrix of paired differences, S >= 2: seeds,
    problems and the residual (seed x problem interaction with sampling noise), for a crossed two-way layout."""
    s, p = matrix.shape
    rows, cols, grand = matrix.mean(axis=1), matrix.mean(axis=0), matrix.mean()
    residual = matrix - rows[:, None] - cols[None, :] + grand
    return {
        "ms_seed": float(p * rows.var(ddof=1)),
        "ms_problem": float(s * cols.var(ddof=1)),
        "ms_residual": float((residual**2).sum() / ((s - 1) * (p - 1))),
        "df_seed": s - 1,
        "problems": p,
    }


def upper_variance(mean_square: float, df: float, confidence: float = UPPER_CONFIDENCE) -> float:
    """The one-sided upper confidence bound of a variance from its mean square with ``df`` degrees of freedom:
    df * MS / chi2_{1 - confidence}(df). With 6 df at 90% it is 2.7x the estimate (1.65x the sd)."""
    from scipy import stats

    return df * mean_square / float(stats.chi2.ppf(1 - confidence, df))


def _seed_sd_bound(mean_squares: Sequence[dict]) -> float:
    """Upper bound of the seed sd of a difference from comparisons' mean squares: the pooled MS of the seed means
    (sum of squares over the sum of their df), bounded above at UPPER_CONFIDENCE, divided by the problems. It is
    the variance of a seed's mean over the problems, var(a) + var(e) / P, so it also holds the seed x problem part a
    one-seed interval already counts: the conservative side."""
    df = sum(m["df_seed"] for m in mean_squares)
    pooled = sum(m["ms_seed"] / m["problems"] * m["df_seed"] for m in mean_squares) / df
    return math.sqrt(upper_variance(pooled, df))


def estimate_run_variance(
    pairs: Mapping[str, Sequence[tuple[np.ndarray, float]]],
    average: Sequence[np.ndarray],
    provenance: Mapping,
    path: str = "",
) -> RunVariance:
    """Declared components from paired (S, P) matrices with S >= 2: ``pairs`` per benchmark of (matrix, mean
    within-problem Bernoulli variance E[p(1-p)] over its outcomes, samples per problem K); ``average`` the
    comparisons' (S, P_total) matrices of every benchmark side by side, scaled so that a row mean is the
    benchmark average (for the average's seed sd). Problem and seed x problem sds: method-of-moments point
    estimates (they are not what a one-seed interval adds); seed sd: an upper confidence bound."""
    benchmarks = {}
    for name, found in pairs.items():
        squares = [anova_components(matrix) for matrix, _, _ in found if matrix.shape[0] >= 2]
        if not squares:
            raise ValueError(f"{name}: needs comparisons with two seeds or more")
        success = float(np.mean([var for _, var, _ in found]))
        sampling = float(np.mean([2 * var / k for _, var, k in found]))
        residual = float(np.mean([m["ms_residual"] for m in squares]))
        problem = float(np.mean([max(0.0, (m["ms_problem"] - m["ms_residual"]) / (m["df_seed"] + 1)) for m in squares]))
        benchmarks[name] = {
            "seed_sd": _seed_sd_bound(squares),
            "problem_sd": math.sqrt(problem),
            "seed_problem_sd": math.sqrt(max(0.0, residual - sampling)),
            "success_variance": success,
        }
    average_squares = [anova_components(matrix) for matrix in average if matrix.shape[0] >= 2]
    stamp = {
        "date": datetime.date.today().isoformat(),
        "estimator": (
            f"seed_sd: {UPPER_CONFIDENCE:.0%} upper confidence bound (chi-square, pooled over the comparisons) of "
            "the variance of a seed's mean difference over the problems; problem_sd, seed_problem_sd: "
            "method-of-moments estimates of the crossed two-way layout, sampling noise 2 E[p(1-p)] / K removed"
        ),
        **provenance,
    }
    return RunVariance(
        benchmarks,
        _seed_sd_bound(average_squares) if average_squares else None,
        tuple(pairs),
        stamp,
        path,
    )
