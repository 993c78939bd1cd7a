"""Group-sequential boundaries for staged seeds (docs/plan.md, "Staged seeds"). Pure maths (scipy).

A primary endpoint tested after each stage of seeds gives z statistics Z_1..Z_K whose joint law, under the
canonical model, is normal with corr(Z_j, Z_k) = sqrt(t_j / t_k) (j < k), t_k the information fraction at stage k
(Jennison and Turnbull 2000, ch. 3). With seeds and problems crossed the cumulative estimates keep that law
(cov(D_j, D_k) = var(D_k)), but the information is not the seed fraction: the problems' part of the variance does
not shrink with seeds, so t_k = var(D_K) / var(D_k) from the variance components (hara.planning.power.contrast_variance).

Efficacy bounds: Lan-DeMets alpha spending with the O'Brien-Fleming-type function alpha(t) = 2 - 2 Phi(z_{1-a/2} /
sqrt(t)) (two-sided), each bound solved so that the probability of first crossing at stage k is the alpha spent
there (scipy's multivariate normal, Genz's algorithm). No maintained Python package for group-sequential designs was
found in the package index (gsDesign and rpact are R; the PyPI entries are unmaintained one-offs), so this module
holds the few lines it needs and is checked against the published classical O'Brien-Fleming constants. A futility
bound is non-binding: the efficacy bounds ignore it, so stopping for futility can only lower the type I error.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

__all__ = [
    "Boundaries",
    "correlation",
    "decide",
    "obrien_fleming_spending",
    "operating_characteristics",
    "spending_bounds",
]

EFFICACY, FUTILITY, CONTINUE = "efficacy", "futility", "continue"
#: Points of the integration grid per stage (odd, for Simpson's rule): 301 reproduce the published classical
#: O'Brien-Fleming constants to 1e-4 (tests/results/test_sequential.py).
GRID_POINTS = 301
_NORMAL = NormalDist()


def correlation(fractions: Sequence[float]) -> np.ndarray:
    """The canonical correlation of Z_1..Z_K: sqrt(t_min / t_max)."""
    t = np.asarray(fractions, dtype=np.float64)
    return np.sqrt(np.minimum.outer(t, t) / np.maximum.outer(t, t))


def obrien_fleming_spending(t: float, alpha: float) -> float:
    """Two-sided alpha spent by information fraction t (Lan and DeMets 1983, O'Brien-Fleming type)."""
    if t <= 0:
        return 0.0
    return min(alpha, 2 - 2 * _NORMAL.cdf(_NORMAL.inv_cdf(1 - alpha / 2) / math.sqrt(t)))


def _simpson(n: int, width: float) -> np.ndarray:
    weights = np.ones(n)
    weights[1:-1:2], weights[2:-1:2] = 4, 2
    return weights * width / (3 * (n - 1))


def _first_crossings(
    bounds: Sequence[float], fractions: Sequence[float], drift: float = 0.0, futility: float | None = None
) -> list[tuple[float, float, float]]:
    """(P(first Z_k >= bounds_k), P(first Z_k <= -bounds_k), P(still running after stage k)) at each stage k, with
    the interim continuation region
    cut below at ``futility`` when given, by the recursive numerical integration of Armitage, McPherson and Rowe
    (1969) over the Brownian motion B(t) = sqrt(t) Z with ``drift`` per unit information (E[Z_k] = drift
    sqrt(t_k)): deterministic, Simpson's rule on GRID_POINTS points per stage."""
    from scipy import stats

    crossings, grid, density, previous = [], np.zeros(1), np.ones(1), 0.0
    for k, (bound, now) in enumerate(zip(bounds, fractions)):
        high, sd = bound * math.sqrt(now), math.sqrt(now - previous)
        mean = grid + drift * (now - previous)
        up = float(np.sum(density * stats.norm.sf(high, mean, sd)))
        down = float(np.sum(density * stats.norm.cdf(-high, mean, sd)))
        low = -high if futility is None or k == len(fractions) - 1 else max(-high, futility * math.sqrt(now))
        new_grid = np.linspace(low, high, GRID_POINTS)
        kernel = stats.norm.pdf(new_grid[:, None], mean[None, :], sd)
        grid, density, previous = new_grid, (kernel @ density) * _simpson(len(new_grid), high - low), now
        crossings.append((up, down, float(density.sum())))  # the mass still inside: the runs that go on
    return crossings


def _solve(crossed: callable, target: float) -> float:
    from scipy import optimize

    return float(optimize.brentq(lambda c: crossed(c) - target, 0.5, 12.0, xtol=1e-6))


@functools.lru_cache(maxsize=256)
def _spending_bounds(fractions: tuple[float, ...], alpha: float) -> tuple[float, ...]:
    bounds: list[float] = []
    for k in range(len(fractions)):
        spent = obrien_fleming_spending(fractions[k], alpha) if k < len(fractions) - 1 else alpha
        # the bound at which the chance of a first crossing by stage k is the alpha spent by then
        bounds.append(
            _solve(
                lambda c, k=k: sum(up + down for up, down, _ in _first_crossings([*bounds, c], fractions[: k + 1])),
                spent,
            )
        )
    return tuple(bounds)


def spending_bounds(fractions: Sequence[float], alpha: float = 0.05) -> list[float]:
    """Two-sided efficacy bounds at increasing information fractions (the last is 1: the whole alpha is spent)."""
    t = tuple(float(f) for f in fractions)
    if any(b <= a for a, b in itertools.pairwise(t)) or not 0 < t[0] or abs(t[-1] - 1) > 1e-9:
        raise ValueError(f"information fractions must increase to 1, got {list(t)}")
    return list(_spending_bounds(t, float(alpha)))


@dataclass(frozen=True)
class Boundaries:
    """A staged design's information fractions, efficacy bounds (two-sided) and non-binding futility bound on z."""

    fractions: tuple[float, ...]
    efficacy: tuple[float, ...]
    futility: float

    @classmethod
    def of(cls, fractions: Sequence[float], alpha: float, futility: float) -> Boundaries:
        return cls(tuple(fractions), tuple(spending_bounds(fractions, alpha)), futility)


def decide(z: float, stage: int, bounds: Boundaries) -> str:
    """After ``stage`` (0-based): efficacy when |z| reaches its bound (the sign says better or worse), futility
    when an interim z lies below the futility bound, else continue (the last stage decides: within noise)."""
    if abs(z) >= bounds.efficacy[stage]:
        return EFFICACY
    if stage == len(bounds.efficacy) - 1 or z < bounds.futility:
        return FUTILITY
    return CONTINUE


def operating_characteristics(bounds: Boundaries, drift: float) -> dict:
    """Under a true effect of ``drift`` standard errors at full information (E[Z_k] = drift sqrt(t_k)): the
    probability that the design declares "better" (an upper crossing), and of stopping after each stage (either
    crossing, or an interim z under the futility bound), by numerical integration."""
    crossings = _first_crossings(bounds.efficacy, bounds.fractions, drift, bounds.futility)
    running = [1.0] + [left for _, _, left in crossings[:-1]]
    stops = [before - after for before, after in zip(running, [*running[1:], 0.0])]
    return {"better": float(sum(up for up, _, _ in crossings)), "stop_after": stops}
