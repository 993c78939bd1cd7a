"""Statistical power of the grid's paired comparisons and of the claims' primary endpoints: the minimum detectable
effect (MDE) of a paired pass@1 difference for a design (seeds, problems and samples per problem of each benchmark,
family size, cells pooled), from declared variance components (``report.run_variance``: a file written by
``hara plan --results DIR --write-variance``, hara/results/variance.py). Pure maths.

The model of a paired difference d[s, i] = A[s, i] - B[s, i] (docs/plan.md, "Power of the grid's comparisons"; Miller
2024): a seed effect a_s (a whole run's luck, ``seed_sd``), a persistent method x problem effect b_i (``problem_sd``), a
seed x problem interaction (``seed_problem_sd``) and the sampling noise of K completions per problem on each side
(Bernoulli variance E[p (1 - p)] = ``success_variance`` over K). The plan uses the variance the report's interval
estimates (:func:`_terms`), so that its MDE is the one the report prints: with ``report.min_seeds`` seeds or more the
crossed bootstrap's (it counts the last term twice: the conservative side); with fewer and a declared run variance the
problems with the seeds held plus the declared seed variance over S; with one seed and nothing declared the problems
only, which decides no claim. The MDE at 80% power is ``m(q, df) * SE`` with q the two-sided critical value of a
family of ``family`` comparisons (Bonferroni: the report's max-T critical value is at most this) and m the power
multiplier of hara.results.paired (a noncentral t for finite df: the Satterthwaite df of the parts).

A claim's **primary endpoint** (:class:`Contrast`) pools one comparison over the grid's cells: A minus a weighted
mean of B methods (hara_tok - none; hara_tok - the mean of the credit baselines), benchmark average, seeds and
problems crossed within each cell, tested alone. Its variance: each run's luck (half the seed variance of a paired
difference) times the squared weights over each method's seeds, over the cells (runs of different cells are
independent); the seed x problem and sampling parts likewise over the problems; the method x problem part does not
shrink with cells (the same problems in every cell: the conservative reading).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from hara.results.paired import power_multiplier, t_quantile

__all__ = [
    "ALPHA",
    "POWER",
    "Components",
    "Contrast",
    "Design",
    "VarianceModel",
    "components_from_config",
    "contrast_mde",
    "contrast_variance",
    "design_of",
    "mde",
    "primary_contrast",
]

ALPHA, POWER = 0.05, 0.8
#: The largest seeds / samples per problem the plan searches when it says what would detect a claim.
SEARCH_LIMIT = 64


class VarianceModel(Protocol):
    """What the planner reads of declared components (hara.results.variance.RunVariance, :class:`Components`)."""

    def components(self, benchmark: str) -> Mapping[str, float]: ...

    def seed_sd_of(self, benchmarks: Sequence[str] | None) -> tuple[float, str]: ...


@dataclass(frozen=True)
class Components:
    """One set of standard deviations of a paired pass@1 difference's parts (fractions of 1) for every benchmark."""

    seed_sd: float
    problem_sd: float
    seed_problem_sd: float
    success_variance: float
    source: str

    def components(self, benchmark: str) -> Mapping[str, float]:
        return {k: getattr(self, k) for k in ("seed_sd", "problem_sd", "seed_problem_sd", "success_variance")}

    def seed_sd_of(self, benchmarks: Sequence[str] | None) -> tuple[float, str]:
        return self.seed_sd, "stated"

    def describe(self) -> str:
        return (
            f"seed sd {100 * self.seed_sd:.1f}, problem sd {100 * self.problem_sd:.1f}, seed x problem sd "
            f"{100 * self.seed_problem_sd:.1f} points, E[p(1-p)] {self.success_variance:.2f} ({self.source})"
        )


def _seed_sd(c: VarianceModel, benchmarks: Sequence[str]) -> float:
    return c.seed_sd_of(benchmarks)[0]


@dataclass(frozen=True)
class Design:
    """What a comparison pairs: seeds, and per benchmark its problems and samples per problem."""

    seeds: int
    problems: Mapping[str, int]
    samples: Mapping[str, int]


def design_of(config: Mapping, methods: list[str]) -> Design:
    """The grid's design for comparisons among ``methods``: the seeds they all have, each benchmark's problems
    (a hub benchmark's own count, else data.benchmark_size) and samples per problem (its evaluation n)."""
    from hara.data.catalog import get_benchmark
    from hara.evaluation.settings import benchmark_settings
    from hara.layout import method_seeds

    benchmarks = config["data"]["benchmarks"]
    seeds = min(len(method_seeds(config, m)) for m in methods) if methods else len(config["grid"]["seeds"])
    problems = {b: get_benchmark(b).size(config) for b in benchmarks}
    return Design(seeds, problems, {b: benchmark_settings(config, b).n for b in benchmarks})


def primary_contrast(config: Mapping, weights: Mapping[str, float], seeds: Mapping[str, int] | None = None) -> Contrast:
    """A primary endpoint's contrast over the config's grid: every (size, rlvr) cell, each method with its seeds
    (the grid's unless given), the benchmarks' problems and samples per problem."""
    from hara.layout import method_seeds

    grid = design_of(config, list(weights))
    return Contrast(
        dict(weights),
        len(config["models"]["sizes"]) * len(config["grid"]["rlvr"]),
        dict(seeds) if seeds else {m: len(method_seeds(config, m)) for m in weights},
        grid.problems,
        grid.samples,
        int(config["report"]["min_seeds"]),
    )


def components_from_config(config: Mapping):
    """The declared run variance the config names (``report.run_variance``), or None."""
    from hara.results.variance import load_run_variance

    declared = config["report"].get("run_variance")
    return load_run_variance(declared) if declared else None


def _within(part: Mapping[str, float], samples: int) -> float:
    """Seed x problem and both sides' sampling variance of one paired cell (a seed's difference on a problem)."""
    return part["seed_problem_sd"] ** 2 + 2 * part["success_variance"] / samples


def _terms(c, design: Design, benchmarks: Sequence[str], min_seeds: int = 1) -> list[tuple[float, float]]:
    """(variance, df) of the parts of the report's own standard error for the mean over ``benchmarks`` (so that the
    planned MDE is the one the report will print): with ``min_seeds`` seeds or more the crossed bootstrap's, whose
    seed part is the variance of the seed means over S (S - 1 df) and whose problem part that of each benchmark's
    problem means over P B^2 (P - 1 df), each holding the seed x problem noise once (the pigeonhole bootstrap counts
    it twice: the conservative side); with fewer seeds the problems with the seeds held plus the declared seed
    variance over S (known: infinite df); one seed where min_seeds is 1, the problems only."""
    s, b = design.seeds, len(benchmarks)
    parts = {name: c.components(name) for name in benchmarks}
    within = {name: _within(parts[name], design.samples[name]) for name in benchmarks}
    problem_terms = [
        (
            (parts[name]["problem_sd"] ** 2 + within[name] / s) / (design.problems[name] * b * b),
            max(design.problems[name] - 1, 1),
        )
        for name in benchmarks
    ]
    if s < min_seeds:
        return [*problem_terms, (_seed_sd(c, benchmarks) ** 2 / s, math.inf)]
    if s == 1:
        return problem_terms
    seed_part = _seed_sd(c, benchmarks) ** 2 + sum(within[name] / design.problems[name] for name in benchmarks) / (
        b * b
    )
    return [(seed_part / s, s - 1), *problem_terms]


def _mde_of(terms: Sequence[tuple[float, float]], family: int) -> float:
    variance = sum(v for v, _ in terms)
    spread = sum(v * v / df for v, df in terms if math.isfinite(df))
    df = variance**2 / spread if spread > 0 else math.inf
    return power_multiplier(t_quantile(1 - ALPHA / (2 * family), df), df, POWER) * math.sqrt(variance)


def mde(c, design: Design, benchmarks: Sequence[str], family: int = 1, min_seeds: int = 1) -> float:
    """The paired difference (a fraction) detected with 80% power at two-sided alpha 0.05 corrected over
    ``family`` comparisons, on the mean over ``benchmarks`` (one benchmark: its own)."""
    return _mde_of(_terms(c, design, benchmarks, min_seeds), family)


@dataclass(frozen=True)
class Contrast:
    """A primary endpoint's comparison: ``weights`` per method (A +1, each of the B methods -1 / their number),
    pooled over ``cells`` independent (size, rlvr) cells, each method with its seeds; the benchmarks' problems and
    samples per problem."""

    weights: Mapping[str, float]
    cells: int
    seeds: Mapping[str, int]
    problems: Mapping[str, int]
    samples: Mapping[str, int]
    min_seeds: int = 1
    declared: bool = True  # a run variance is declared (used below min_seeds)

    def with_seeds(self, seeds: Mapping[str, int]) -> Contrast:
        return dataclasses.replace(self, seeds=dict(seeds))

    def with_samples(self, samples: Mapping[str, int]) -> Contrast:
        return dataclasses.replace(self, samples=dict(samples))


def contrast_variance(c, contrast: Contrast, estimated: bool = True) -> tuple[float, float]:
    """(variance, Satterthwaite df) of a primary endpoint's pooled estimate (the module's docstring): as the report
    estimates it (``estimated``: the pigeonhole bootstrap counts the seed x problem noise twice), or the model's own
    (what a staged design's information fractions need: one consistent model across the stages, whether a stage
    has fewer seeds than report.min_seeds or not)."""
    benchmarks, b, cells = list(contrast.problems), len(contrast.problems), contrast.cells
    run_variance = _seed_sd(c, benchmarks) ** 2 / 2  # one run's luck: half the paired difference's
    weight_over_seeds = sum(w * w / contrast.seeds[m] for m, w in contrast.weights.items())
    fewest = min(contrast.seeds[m] for m in contrast.weights)
    crossed = fewest >= contrast.min_seeds or (fewest > 1 and not contrast.declared)
    terms = [(run_variance * weight_over_seeds / cells, cells * (fewest - 1) if crossed else math.inf)]
    for name in benchmarks:
        part = c.components(name)
        per_run = part["seed_problem_sd"] ** 2 / 2 + part["success_variance"] / contrast.samples[name]
        noise = per_run * weight_over_seeds / cells * (2 if crossed and estimated else 1)  # the pigeonhole: twice
        terms.append(
            ((part["problem_sd"] ** 2 + noise) / (contrast.problems[name] * b * b), contrast.problems[name] - 1)
        )
    variance = sum(v for v, _ in terms)
    spread = sum(v * v / df for v, df in terms if math.isfinite(df) and df > 0)
    return variance, variance**2 / spread if spread > 0 else math.inf


def contrast_mde(c, contrast: Contrast, alpha: float = ALPHA) -> float:
    """The pooled difference a primary endpoint detects with 80% power, tested alone at two-sided ``alpha``."""
    variance, df = contrast_variance(c, contrast)
    return power_multiplier(t_quantile(1 - alpha / 2, df), df, POWER) * math.sqrt(variance)
