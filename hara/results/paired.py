"""Paired differences between two methods with bootstrap confidence intervals, and their correction over a family
of comparisons. Pure numpy and scipy, no I/O.

Two runs of the same (size, rlvr) are compared on the problems they were both evaluated on: run A's pass@1 on a
problem minus run B's on the same problem, with seed k of A paired with seed k of B (same data order, same
initialisation). The point estimate is the mean of those differences, i.e. the difference of the report's means.
Its interval is a percentile bootstrap that resamples what varies between reruns and benchmarks:

- one seed: the problems, with replacement (the paired bootstrap of ``scipy.stats.bootstrap(..., paired=True,
  method="percentile")``; with the same generator seed the intervals are identical, which the tests check);
- several seeds: seeds and problems **crossed** (Owen's pigeonhole bootstrap): each replicate draws the seeds with
  replacement and, per benchmark, **one** problem index vector that every drawn seed uses. Seeds and problems are
  crossed factors (every seed is scored on the same problems, and a method's advantage on a problem persists across
  seeds); drawing problems anew inside each seed would divide that persistent per-problem variance by the number of
  seeds and give intervals that are too narrow (docs/comparisons.md, "Paired differences"; tests/report/test_paired.py
  measures it).
  With 2-5 seeds a whole run's luck (the seed effect) is estimated from 2-5 values, which no percentile bootstrap
  can widen enough: the seed part of each replicate is rescaled by sqrt(S / (S - 1)) (so that its variance is
  unbiased, as the sample variance is), and the interval is ``mean -+ t_df * se`` with se the replicates' standard
  deviation and df the Satterthwaite degrees of freedom of the two variance components (seed means: S - 1;
  per-problem means: P - 1). With a small seed effect df is large and this is the normal interval of the bootstrap;
  with a dominant one it tends to the t-interval over seeds (docs/comparisons.md gives the measured coverage).

The draw protocol, so that anyone can recompute an interval from the saved predictions: ``rng =
numpy.random.default_rng(seed)``; with S > 1 seeds first ``rng.integers(0, S, (R, S))``, then per benchmark in the
given order ``rng.integers(0, P, (R, P))``; with x[r, k] the mean of seed k's row over problem draw r, replicate r
of a benchmark is ``x[r].mean() + sqrt(S / (S - 1)) * (x[r, seeds[r]].mean() - x[r].mean())``.
Each benchmark's own interval starts from a fresh generator with the same seed; the average over
benchmarks draws all benchmarks from one generator, sharing the seed draw, so each replicate's average is the mean
of its benchmarks' replicate differences (the average of the report is the plain mean over benchmarks). Every
comparison of the same shape therefore uses the same draws: their replicates are a joint bootstrap, which the family
correction below relies on.

**Fewer seeds than ``report.min_seeds``** (:class:`Bootstrap`): a whole run's luck is estimated from too few runs
or, with one seed, not at all. With a declared run variance (:mod:`hara.results.variance`) each replicate adds the
runs' own luck: every run (a method's seed in a cell) draws one standard normal per replicate (a generator seeded by
the bootstrap seed and the run's name, so two comparisons that share a run share its luck, as a pooled or corrected
family must), scaled by the declared seed sd of the difference over sqrt(2) (one run's share); the problems are
resampled as above with the seeds held. Without one, the interval covers the problems only, and says so
(:attr:`Difference.basis`): it decides no claim.

A raw verdict reads the interval: ``better`` when it lies above 0, ``worse`` below 0, else ``within noise``.

A family (:func:`correct_family`: a claim's comparisons, a table's) is corrected with simultaneous max-T intervals
from the same replicates: each replicate is studentized by its comparison's bootstrap standard error, c is the
``confidence`` quantile over replicates of the largest |t| in the family, and comparison j's simultaneous interval is
``mean_j -+ c_j * se_j``, with c_j = c for one seed and the t quantile of the same tail probability with the
comparison's df for several: all m intervals cover their truths together with probability ``confidence`` (the
family-wise error is controlled, whatever the correlation between the comparisons). c_j is never below the
comparison's own critical value: with a few seeds and no problems to resample (a per-seed objective), the
replicates take a handful of values and their max-T quantile falls below the t quantile of the raw interval, which
a simultaneous interval must contain. Its minimum detectable effect is the true difference that its corrected verdict detects with 80% power
(Miller 2024, with the family's critical value in place of 1.96): ``(c_j + z_0.8) * se_j`` with infinite df, and with
finite df the noncentrality at which a noncentral t exceeds c_j with probability 0.8 (:func:`power_multiplier`):
``(c_j + t_0.8) * se_j`` understates it (a 3-seed sensitivity study's MDE was met 66.5% of the time), because an
estimated se adds its own spread. Max-T rather than Holm on bootstrap p-values because the
latter need p-values far below alpha / m (0.0007 for 72 comparisons), which a few thousand replicates cannot
resolve.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import zlib
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist

import numpy as np

from hara.results.variance import RunVariance, load_run_variance

__all__ = [
    "BASES",
    "BETTER",
    "CROSSED",
    "DECLARED",
    "PROBLEMS_ONLY",
    "WITHIN_NOISE",
    "WORSE",
    "Bootstrap",
    "Corrected",
    "Difference",
    "Interval",
    "block_bootstrap_ratio",
    "bootstrap_difference",
    "correct_family",
    "max_t_critical",
    "paired_matrix",
    "pool_differences",
    "power_multiplier",
    "satterthwaite_df",
    "t_interval",
    "t_quantile",
    "verdict_of",
]

BETTER, WORSE, WITHIN_NOISE = "better", "worse", "within noise"
#: The power every minimum detectable effect is stated at (80%, Miller 2024; docs/plan.md, "Power of the grid's
#: comparisons").
POWER = 0.8
#: What an interval covers (:attr:`Difference.basis`): seeds and problems crossed (report.min_seeds seeds or more, or
#: one seed where the caller set min_seeds 1: a per-seed objective's units), the problems plus a declared run
#: variance, or the problems only (fewer seeds and nothing declared: decides no claim).
CROSSED, DECLARED, PROBLEMS_ONLY = "crossed", "declared run variance", "problems only"
BASES = (CROSSED, DECLARED, PROBLEMS_ONLY)


def verdict_of(low: float, high: float) -> str:
    """``better`` when the interval lies above 0, ``worse`` below 0, else ``within noise``."""
    if low > 0:
        return BETTER
    if high < 0:
        return WORSE
    return WITHIN_NOISE


@dataclass(frozen=True)
class Bootstrap:
    """The resampling settings (config ``report.bootstrap``), the fewest seeds an interval estimates a run's luck
    from (``report.min_seeds``; 1: always from the seeds present) and the declared run variance used below it
    (``report.run_variance``)."""

    resamples: int = 10_000
    seed: int = 0
    confidence: float = 0.95
    min_seeds: int = 1
    run_variance: RunVariance | None = None

    @classmethod
    def from_config(cls, config: Mapping) -> Bootstrap:
        section, report = config["report"]["bootstrap"], config["report"]
        declared = report.get("run_variance")
        return cls(
            int(section["resamples"]),
            int(section["seed"]),
            float(section["confidence"]),
            int(report.get("min_seeds", 1)),
            load_run_variance(declared) if declared else None,
        )

    def within_run(self) -> Bootstrap:
        """The settings for differences inside one run (two of its checkpoints, two analyses of its rollouts): no
        run's luck lies between the two sides, so the problems are all there is to resample."""
        return dataclasses.replace(self, min_seeds=1, run_variance=None)

    def basis(self, seeds: int) -> str:
        """Below ``min_seeds`` the declared run variance where there is one; else two seeds or more still estimate
        the run's luck (a wide t-interval) and one seed sees the problems only."""
        if seeds >= self.min_seeds:
            return CROSSED
        if self.run_variance is not None:
            return DECLARED
        return CROSSED if seeds > 1 else PROBLEMS_ONLY


@dataclass(frozen=True)
class Difference:
    """A - B with its percentile bootstrap interval and standard error (the replicates' sd), over ``seeds`` paired
    seeds and ``problems`` paired problems; ``replicates`` are kept for the family correction."""

    mean: float
    low: float
    high: float
    seeds: int
    problems: int
    se: float = 0.0
    df: float = math.inf
    replicates: np.ndarray | None = field(default=None, compare=False, repr=False)
    basis: str = CROSSED
    run_variance: str = ""  # the declared file and the seed sd used, when basis is DECLARED

    @property
    def verdict(self) -> str:
        return verdict_of(self.low, self.high)

    @property
    def decides(self) -> bool:
        """Whether the interval may decide a claim: not when it covers the problems only."""
        return self.basis != PROBLEMS_ONLY

    def describe_basis(self) -> str:
        """``3 seeds x 200 problems``, ``one seed; run variance declared from FILE``, ``one seed; problems only``."""
        seeds = "one seed" if self.seeds == 1 else f"{self.seeds} seeds"
        if self.basis == DECLARED:
            return f"{seeds}; run variance declared from {self.run_variance}"
        if self.basis == PROBLEMS_ONLY:
            return f"{seeds}; problems only (no run variance declared: report.run_variance)"
        return f"{seeds} x {self.problems} problems"

    def format(self, scale: float = 100.0, digits: int = 1) -> str:
        """``+0.3 [-1.2, +1.8]`` (scaled: percentage points by default)."""
        return f"{self.mean * scale:+.{digits}f} [{self.low * scale:+.{digits}f}, {self.high * scale:+.{digits}f}]"

    def as_dict(self) -> dict:
        return {
            "difference": self.mean,
            "ci_low": self.low,
            "ci_high": self.high,
            "verdict": self.verdict,
            "se": self.se,
            "df": self.df if math.isfinite(self.df) else None,
            "seeds": self.seeds,
            "problems": self.problems,
            "basis": self.basis,
            "run_variance": self.run_variance or None,
        }


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


@functools.lru_cache(maxsize=8)
def _draws(
    seed: int, resamples: int, n_seeds: int, problem_counts: tuple[int, ...]
) -> tuple[np.ndarray | None, tuple[np.ndarray, ...]]:
    """The draw protocol's index arrays: the seed draw (None for one seed), then one problem draw per benchmark.
    Every comparison of the same shape uses the same draws (their replicates are a joint bootstrap), so they are
    made once and shared, read-only."""
    rng = np.random.default_rng(seed)
    seed_draw = rng.integers(0, n_seeds, (resamples, n_seeds)) if n_seeds > 1 else None
    problems = tuple(rng.integers(0, count, (resamples, count)) for count in problem_counts)
    for array in (seed_draw, *problems):
        if array is not None:
            array.flags.writeable = False
    return seed_draw, problems


def _replicates(diffs: np.ndarray, seed_draw: np.ndarray | None, problems: np.ndarray) -> np.ndarray:
    """Bootstrap replicates (R,) of the mean of one benchmark's (S, P) differences: one problem draw per replicate,
    shared by every drawn seed (crossed); the seed part rescaled by sqrt(S / (S - 1)). Without a seed draw the seeds
    are held: each replicate is the mean of every seed's row on the problem draw."""
    per_seed = np.stack([row[problems].mean(axis=-1) for row in diffs], axis=1)  # (R, S): each seed's row on draw r
    every_seed = per_seed.mean(axis=1)
    if seed_draw is None:
        return every_seed
    n_seeds = diffs.shape[0]
    drawn = np.take_along_axis(per_seed, seed_draw, axis=1).mean(axis=1)
    return every_seed + math.sqrt(n_seeds / (n_seeds - 1)) * (drawn - every_seed)


#: A run's name for its luck's draws: anything hashable with a stable repr, e.g. (size, rlvr, method, seed).
RunKey = Hashable


@functools.lru_cache(maxsize=4096)
def run_luck(seed: int, resamples: int, run: RunKey) -> np.ndarray:
    """One run's standard normal draws (R,), the same for every comparison that pairs the run."""
    draws = np.random.default_rng([seed, zlib.crc32(repr(run).encode("utf-8"))]).standard_normal(resamples)
    draws.flags.writeable = False
    return draws


def _anonymous_runs(diffs: Sequence[np.ndarray]) -> tuple[tuple, tuple]:
    """Runs named by the data when the caller names none: the same differences draw the same luck."""
    tag = zlib.crc32(b"".join(np.ascontiguousarray(d).tobytes() for d in diffs))
    seeds = range(diffs[0].shape[0])
    return tuple(("a", tag, s) for s in seeds), tuple(("b", tag, s) for s in seeds)


def _run_part(settings: Bootstrap, runs: tuple[Sequence[RunKey], Sequence[RunKey]], sd: float) -> np.ndarray:
    """Replicates (R,) of the runs' luck in a difference of seed means: each run's share of the declared seed sd of
    the difference is sd / sqrt(2); A's runs add, B's subtract, averaged over the seeds."""
    mine, theirs = runs
    draws = [run_luck(settings.seed, settings.resamples, r) for r in mine]
    draws += [-run_luck(settings.seed, settings.resamples, r) for r in theirs]
    return sd / math.sqrt(2) * np.sum(draws, axis=0) / len(mine)


def satterthwaite_df(diffs: Sequence[np.ndarray]) -> float:
    """Degrees of freedom of the variance of the mean over benchmarks of (S, P) matrices, from its two components:
    the seed means (var over S values / S, S - 1 df; one component for all benchmarks, since a seed's luck is shared)
    and each benchmark's problem means (var over P values / (S P B^2), P - 1 df). Infinite when nothing varies."""
    n_seeds, n_benchmarks = diffs[0].shape[0], len(diffs)
    seed_means = np.mean([d.mean(axis=1) for d in diffs], axis=0)
    terms = [(seed_means.var(ddof=1) / n_seeds, n_seeds - 1)]
    terms += [
        (d.mean(axis=0).var(ddof=1) / (d.shape[1] * n_benchmarks**2), d.shape[1] - 1) for d in diffs if d.shape[1] > 1
    ]
    return combined_df(terms)


def combined_df(terms: Sequence[tuple[float, float]]) -> float:
    """Satterthwaite's degrees of freedom of a sum of variances, each with its own (infinite: known) df."""
    spread = sum(v * v / df for v, df in terms if math.isfinite(df) and df > 0)
    total = sum(v for v, _ in terms)
    return total**2 / spread if spread > 0 else math.inf


def bootstrap_difference(
    diffs: Sequence[np.ndarray],
    settings: Bootstrap,
    benchmarks: Sequence[str] | None = None,
    runs: tuple[Sequence[RunKey], Sequence[RunKey]] | None = None,
) -> Difference:
    """The paired difference over one or more benchmarks' (S, P) matrices (several: their plain mean).

    ``benchmarks`` name the matrices (for the declared run variance's lookup) and ``runs`` the paired runs, A's
    and B's seed by seed (for their luck's draws), when the seeds are fewer than ``settings.min_seeds``."""
    n_seeds = {d.shape[0] for d in diffs}
    if len(n_seeds) != 1:
        raise ValueError("every benchmark must pair the same seeds")
    (n_seeds,) = n_seeds
    basis = settings.basis(n_seeds)
    crossed = basis == CROSSED and n_seeds > 1
    seed_draw, problems = _draws(settings.seed, settings.resamples, n_seeds, tuple(d.shape[1] for d in diffs))
    replicates = np.mean(
        [_replicates(d, seed_draw if crossed else None, draw) for d, draw in zip(diffs, problems)], axis=0
    )
    declared = ""
    if basis == DECLARED:
        sd, how = settings.run_variance.seed_sd_of(benchmarks)
        replicates = replicates + _run_part(settings, runs or _anonymous_runs(diffs), sd)
        declared = f"{settings.run_variance.source}, seed sd {100 * sd:.2f} points ({how})"
    point, se = float(np.mean([d.mean() for d in diffs])), float(replicates.std(ddof=1))
    problems = int(sum(d.shape[1] for d in diffs))
    if not crossed:
        low, high = _percentiles(replicates, settings.confidence)
        return Difference(point, low, high, n_seeds, problems, se, math.inf, replicates, basis, declared)
    df = satterthwaite_df(diffs)
    half = t_quantile((1 + settings.confidence) / 2, df) * se
    return Difference(point, point - half, point + half, n_seeds, problems, se, df, replicates, basis)


def pool_differences(differences: Sequence[Difference], confidence: float) -> Difference:
    """The mean of several comparisons' differences (a primary endpoint pooled over the grid's cells), from their
    joint replicates: the problem draws are shared (the same problems in every cell) and so are the runs' luck
    draws, so the pooled replicates keep every covariance the comparisons have. df: Satterthwaite over the
    comparisons' variances."""
    if not differences:
        raise ValueError("nothing to pool")
    replicates = np.mean([d.replicates for d in differences], axis=0)
    point, se = float(np.mean([d.mean for d in differences])), float(replicates.std(ddof=1))
    df = combined_df([(d.se**2, d.df) for d in differences])
    bases = {d.basis for d in differences}
    basis = PROBLEMS_ONLY if PROBLEMS_ONLY in bases else DECLARED if DECLARED in bases else CROSSED
    declared = next((d.run_variance for d in differences if d.run_variance), "")
    seeds, problems = min(d.seeds for d in differences), max(d.problems for d in differences)
    if math.isfinite(df):
        half = t_quantile((1 + confidence) / 2, df) * se
        return Difference(point, point - half, point + half, seeds, problems, se, df, replicates, basis, declared)
    low, high = _percentiles(replicates, confidence)
    return Difference(point, low, high, seeds, problems, se, df, replicates, basis, declared)


@functools.lru_cache(maxsize=1024)
def power_multiplier(critical: float, df: float, power: float = 0.8) -> float:
    """The true difference, in standard errors, that a test rejecting when mean / se > ``critical`` detects with
    ``power``: critical + z_power with a known se (infinite df), else the noncentrality at which a noncentral t with
    ``df`` degrees of freedom exceeds ``critical`` with that probability (``scipy.stats.nct``)."""
    if not math.isfinite(df) or df > 1e4:
        return critical + NormalDist().inv_cdf(power)
    from scipy import optimize, stats

    def shortfall(delta: float) -> float:
        return float(stats.nct.sf(critical, df, delta)) - power

    return float(optimize.brentq(shortfall, critical - 1.0, critical + 100.0 + 10 * critical))


def t_quantile(probability: float, df: float) -> float:
    """Student's t quantile; the normal one for infinite df."""
    if not math.isfinite(df):
        return NormalDist().inv_cdf(probability)
    from scipy import stats

    return float(stats.t.ppf(probability, df))


@dataclass(frozen=True)
class Corrected:
    """One comparison of a family of ``family_size``: its simultaneous interval ``mean -+ critical * se``, the verdict
    that interval gives (the verdict after correction) and the minimum detectable effect at the family's level.
    ``critical``: the family's max-T critical value, as a t quantile of the comparison's df."""

    difference: Difference
    critical: float
    family_size: int

    @property
    def low(self) -> float:
        return self.difference.mean - self.critical * self.difference.se

    @property
    def high(self) -> float:
        return self.difference.mean + self.critical * self.difference.se

    @property
    def verdict(self) -> str:
        return verdict_of(self.low, self.high)

    @property
    def mde(self) -> float:
        """The true difference this comparison's corrected verdict detects with 80% power (:func:`power_multiplier`)."""
        return power_multiplier(self.critical, self.difference.df, POWER) * self.difference.se

    def as_dict(self) -> dict:
        return {
            "verdict": self.verdict,
            "ci_low": self.low,
            "ci_high": self.high,
            "critical": self.critical,
            "family_size": self.family_size,
            "mde": self.mde,
        }


def max_t_critical(differences: Sequence[Difference], confidence: float) -> float:
    """The ``confidence`` quantile of max_j |replicate_j - mean_j| / se_j over the family's joint replicates.

    Comparisons without spread (se 0: identical runs) take no part. With none left, the normal quantile."""
    spread = [d for d in differences if d.se > 0 and d.replicates is not None]
    if not spread:
        return NormalDist().inv_cdf((1 + confidence) / 2)
    if len({d.replicates.shape for d in spread}) != 1:
        raise ValueError("a family's comparisons must have the same number of bootstrap replicates")
    studentized = np.abs(np.stack([(d.replicates - d.mean) / d.se for d in spread]))
    return float(np.quantile(studentized.max(axis=0), confidence))


def correct_family(differences: Sequence[Difference], confidence: float) -> list[Corrected]:
    """Each difference of the family with its simultaneous (max-T) interval, verdict and minimum detectable effect;
    the critical value is carried to each comparison's df at the same tail probability."""
    critical = max_t_critical(differences, confidence)
    tail = NormalDist().cdf(critical)
    return [
        Corrected(
            d,
            max(
                critical if not math.isfinite(d.df) else t_quantile(tail, d.df), t_quantile((1 + confidence) / 2, d.df)
            ),
            len(differences),
        )
        for d in differences
    ]


@dataclass(frozen=True)
class Interval:
    """A point estimate with its interval."""

    value: float
    low: float
    high: float

    def format(self, fmt: str = "{:.2f}") -> str:
        return f"{fmt.format(self.value)} [{fmt.format(self.low)}, {fmt.format(self.high)}]"


def _percentiles(replicates: np.ndarray, confidence: float) -> tuple[float, float]:
    alpha = (1 - confidence) / 2
    low, high = np.percentile(replicates, [100 * alpha, 100 * (1 - alpha)])
    return float(low), float(high)


def t_interval(values: Sequence[float], confidence: float) -> Interval:
    """The mean of independent units measured once each (one value per seed) with its Student-t interval
    (``scipy.stats.ttest_1samp(values).confidence_interval``): a percentile bootstrap of 2-5 values is far too narrow
    (simulated coverage of a nominal 95%: 78% with 3 values, 52% with 2). Needs 2 values or more; values all equal
    give a zero-width interval."""
    from scipy import stats

    values = np.asarray(values, dtype=np.float64)
    if len(values) < 2:
        raise ValueError("a t-interval needs 2 values or more")
    mean = float(values.mean())
    if np.ptp(values) == 0:
        return Interval(mean, mean, mean)
    ci = stats.ttest_1samp(values, 0.0).confidence_interval(confidence_level=confidence)
    return Interval(mean, float(ci.low), float(ci.high))


def block_length(n: int) -> int:
    """Block length of the step bootstrap: ceil(sqrt(n)), long enough that step costs a few steps apart (which trend
    and drift together) stay in one block; conservative for short-range dependence."""
    return max(1, math.ceil(math.sqrt(n)))


def _block_means(values: np.ndarray, rng: np.random.Generator, resamples: int) -> np.ndarray:
    """Circular block bootstrap replicates (R,) of the mean of a series (Politis & Romano 1992): ceil(n / b) blocks
    of b consecutive steps, each starting at ``rng.integers(0, n)``, wrapped around the end, cut to n values."""
    n = len(values)
    b = block_length(n)
    starts = rng.integers(0, n, (resamples, math.ceil(n / b)))
    index = (starts[:, :, None] + np.arange(b)[None, None, :]).reshape(resamples, -1)[:, :n] % n
    return values[index].mean(axis=1)


def block_bootstrap_ratio(a: Sequence[float], b: Sequence[float], settings: Bootstrap) -> Interval:
    """mean(a) / mean(b) of two runs' per-step series (e.g. per-step costs), each resampled by the circular block
    bootstrap (``rng = default_rng(seed)``, a's blocks, then b's): per-step costs are autocorrelated (they trend over
    a run and drift with the machine's load), so resampling steps one by one as if independent is too narrow."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    rng = np.random.default_rng(settings.seed)
    ratios = _block_means(a, rng, settings.resamples) / _block_means(b, rng, settings.resamples)
    return Interval(float(a.mean() / b.mean()), *_percentiles(ratios, settings.confidence))
