"""Statistical power of the grid's paired comparisons: the minimum detectable effect (MDE) of a paired pass@1
difference for a design (seeds, problems and samples per problem of each benchmark, family size), from variance
components that are either stated (config ``plan.power``) or estimated from finished results. Pure maths apart
from :func:`estimate_components`, which reads per-problem outcomes the report already collected.

The model of a paired difference d[s, i] = A[s, i] - B[s, i] (../shared/statistics.md, Miller 2024): a seed effect
a_s (a whole run's luck, sd ``seed_sd``), a persistent method x problem effect b_i (``problem_sd``), a seed x problem
interaction (``seed_problem_sd``) and the sampling noise of K completions per problem on each side (Bernoulli
variance E[p (1 - p)] = ``success_variance`` over K). The variance of the mean over S seeds, P problems is
``seed_sd^2 / S + problem_sd^2 / P + (seed_problem_sd^2 + 2 success_variance / K) / (S P)``; for the benchmark
average each benchmark's problem part is divided by B^2 and the seed part is shared. The plan uses the variance the
report's interval estimates (:func:`_terms`: the crossed bootstrap counts the last term twice, one seed sees no seed
effect), so that its MDE is the one the report prints. The MDE at 80% power is
``(q_{1 - alpha / (2 m)} + q_0.8) * SE`` for a family of m comparisons (Bonferroni: the report's max-T critical
value is at most this), with t quantiles of the Satterthwaite df of the two parts as the report's intervals use.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hara.results.paired import t_quantile

__all__ = [
    "ALPHA",
    "POWER",
    "Components",
    "Design",
    "components_from_config",
    "estimate_components",
    "mde",
    "samples_needed",
    "seeds_needed",
]

ALPHA, POWER = 0.05, 0.8
#: The largest seeds / samples per problem the plan searches when it says what would detect a claim.
SEARCH_LIMIT = 64


@dataclass(frozen=True)
class Components:
    """Standard deviations of a paired pass@1 difference's parts (fractions of 1) and where they come from."""

    seed_sd: float
    problem_sd: float
    seed_problem_sd: float
    success_variance: float
    source: str

    def describe(self) -> str:
        return (
            f"seed sd {100 * self.seed_sd:.1f}, problem sd {100 * self.problem_sd:.1f}, seed x problem sd "
            f"{100 * self.seed_problem_sd:.1f} points, E[p(1-p)] {self.success_variance:.2f} ({self.source})"
        )


@dataclass(frozen=True)
class Design:
    """What a comparison pairs: seeds, and per benchmark its problems and samples per problem."""

    seeds: int
    problems: Mapping[str, int]
    samples: Mapping[str, int]


def components_from_config(config: Mapping) -> Components:
    power = config["plan"]["power"]
    return Components(
        float(power["seed_sd"]),
        float(power["problem_sd"]),
        float(power["seed_problem_sd"]),
        float(power["success_variance"]),
        "stated defaults, config plan.power",
    )


def _terms(c: Components, design: Design, benchmarks: Sequence[str]) -> list[tuple[float, float]]:
    """(variance, df) of the parts of the report's own standard error for the mean over ``benchmarks`` (so that the
    planned MDE is the one the report will print): with several seeds the crossed bootstrap's, whose seed part is the
    variance of the seed means over S (S - 1 df) and whose problem part that of each benchmark's problem means over
    P B^2 (P - 1 df), each holding the seed x problem noise once (the pigeonhole bootstrap counts it twice: the
    conservative side); with one seed the problems only, the seed effect being outside any one-seed interval."""
    s, b = design.seeds, len(benchmarks)
    within = {name: c.seed_problem_sd**2 + 2 * c.success_variance / design.samples[name] for name in benchmarks}
    problem_terms = [
        ((c.problem_sd**2 + within[name] / s) / (design.problems[name] * b * b), max(design.problems[name] - 1, 1))
        for name in benchmarks
    ]
    if s == 1:
        return problem_terms
    seed_part = c.seed_sd**2 + sum(within[name] / design.problems[name] for name in benchmarks) / (b * b)
    return [(seed_part / s, s - 1), *problem_terms]


def mde(c: Components, design: Design, benchmarks: Sequence[str], family: int = 1) -> float:
    """The paired difference (a fraction) detected with 80% power at two-sided alpha 0.05 corrected over
    ``family`` comparisons, on the mean over ``benchmarks`` (one benchmark: its own)."""
    terms = _terms(c, design, benchmarks)
    variance = sum(v for v, _ in terms)
    spread = sum(v * v / df for v, df in terms if math.isfinite(df))
    df = variance**2 / spread if spread > 0 else math.inf
    return (t_quantile(1 - ALPHA / (2 * family), df) + t_quantile(POWER, df)) * math.sqrt(variance)


def seeds_needed(c: Components, design: Design, benchmarks: Sequence[str], family: int, effect: float) -> int | None:
    """The fewest seeds above the design's (at its samples) whose MDE is at most ``effect``; None within
    SEARCH_LIMIT. At least 2: a one-seed interval does not see a run's luck, so its small MDE is no answer."""
    for seeds in range(max(design.seeds + 1, 2), SEARCH_LIMIT + 1):
        if mde(c, Design(seeds, design.problems, design.samples), benchmarks, family) <= effect:
            return seeds
    return None


def samples_needed(c: Components, design: Design, benchmarks: Sequence[str], family: int, effect: float) -> int | None:
    """The fewest samples per problem on every benchmark (at the design's seeds) whose MDE is at most ``effect``."""
    for k in range(1, SEARCH_LIMIT + 1):
        if (
            mde(c, Design(design.seeds, design.problems, dict.fromkeys(design.samples, k)), benchmarks, family)
            <= effect
        ):
            return k
    return None


def _anova(matrix) -> tuple[float, float, float]:
    """Mean squares (seeds, problems, residual) of an (S, P) matrix, S >= 2."""

    s, p = matrix.shape
    grand, rows, cols = matrix.mean(), matrix.mean(axis=1), matrix.mean(axis=0)
    residual = matrix - rows[:, None] - cols[None, :] + grand
    return (p * rows.var(ddof=1), s * cols.var(ddof=1), float((residual**2).sum() / ((s - 1) * (p - 1))))


def estimate_components(pairs: Sequence[tuple], default: Components) -> Components:
    """Components estimated from paired per-problem outcomes: ``pairs`` of (A {seed: {problem: pass@1}}, B the same,
    samples per problem K). Within-problem variance: the unbiased K/(K-1) p(1-p), averaged. With 2+ seeds the
    method-of-moments split of a two-way crossed layout; with one seed the seed sd stays ``default``'s and all
    non-sampling per-problem variance counts as persistent (conservative: more seeds do not shrink it)."""
    import numpy as np

    from hara.results.paired import paired_matrix

    found: dict[str, list[float]] = {"seed": [], "problem": [], "interaction": [], "success": []}
    for a, b, k in pairs:
        matrix = paired_matrix(a, b)
        outcomes = np.array([list(side[s].values()) for side in (a, b) for s in sorted(set(a) & set(b))])
        success = float(np.mean(outcomes * (1 - outcomes))) * k / max(k - 1, 1)
        sampling = 2 * success / k
        found["success"].append(success)
        if matrix.shape[0] >= 2:
            ms_seed, ms_problem, ms_residual = _anova(matrix)
            found["seed"].append(max(0.0, (ms_seed - ms_residual) / matrix.shape[1]))
            found["problem"].append(max(0.0, (ms_problem - ms_residual) / matrix.shape[0]))
            found["interaction"].append(max(0.0, ms_residual - sampling))
        else:
            found["problem"].append(max(0.0, float(matrix[0].var(ddof=1)) - sampling))
    if not found["success"]:
        return default
    sd = {key: math.sqrt(float(np.mean(values))) for key, values in found.items() if values and key != "success"}
    seeds = "estimated" if found["seed"] else "seed sd from config plan.power (one seed)"
    return Components(
        sd.get("seed", default.seed_sd),
        sd["problem"],
        sd.get("interaction", 0.0),
        float(np.mean(found["success"])),
        f"estimated from {len(pairs)} paired comparisons x benchmarks; {seeds}",
    )
