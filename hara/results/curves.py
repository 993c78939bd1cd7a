"""A training curve sampled at checkpoints as a paired endpoint (the speed endpoint, config ``report.speed``): method
A minus method B at each checkpoint step and on the area under the curve, paired by seed and problem. Pure numpy, no
I/O.

Credit-assignment effects show mostly as learning speed (docs/analyses.md, "Speed as an endpoint"): a method that gets
to the same plateau sooner has a larger area under its curve and the same final value. The area is the trapezoid rule
over the checkpoint steps divided by their span, so it reads in pass@1 (the curve's mean height between the first and
the last checkpoint). It is linear in the per-step values, so the area of the difference is the difference of the areas,
and each (seed, problem) cell's area difference is one number: the area's interval is the same crossed bootstrap
(:func:`hara.results.paired.bootstrap_difference`) as any benchmark's, over one (seeds, problems) matrix. Every run is
measured at the same steps on the same problems (like with like), so no run has to reach a target and none is censored,
unlike a first-passage time (:func:`hara.results.stats.first_passage`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from hara.results.paired import Bootstrap, Difference, RunKey, bootstrap_difference, paired_matrix

__all__ = ["CurveDifference", "area_matrix", "curve_difference", "trapezoid_weights"]

#: One side of a curve comparison: {seed: {step: {problem id: pass@1}}}.
Curves = Mapping[int, Mapping[int, Mapping[str, float]]]


def trapezoid_weights(steps: Sequence[float]) -> np.ndarray:
    """Weights w (one per step) with sum_k w_k y_k = the trapezoid area under y over [steps[0], steps[-1]] divided by
    that span: each step weighs half the gaps on either side of it, over the span. Needs two increasing steps."""
    x = np.asarray(steps, dtype=np.float64)
    if len(x) < 2 or np.any(np.diff(x) <= 0):
        raise ValueError(f"an area needs two or more increasing steps, got {list(steps)}")
    gaps = np.diff(x)
    weights = np.zeros_like(x)
    weights[:-1] += gaps / 2
    weights[1:] += gaps / 2
    return weights / (x[-1] - x[0])


def area_matrix(steps: Sequence[float], matrices: Sequence[np.ndarray]) -> np.ndarray:
    """The (seeds, problems) matrix of areas from one (seeds, problems) matrix per step (:func:`trapezoid_weights`)."""
    return np.tensordot(trapezoid_weights(steps), np.stack(matrices), axes=1)


@dataclass(frozen=True)
class CurveDifference:
    """A - B at each step and on the area under the curve (None with a single step), each a paired difference with
    its interval; the seeds and problems paired are the same at every step."""

    steps: tuple[int, ...]
    per_step: dict[int, Difference]
    area: Difference | None


def curve_difference(
    a: Curves,
    b: Curves,
    steps: Sequence[int],
    settings: Bootstrap,
    benchmark: str,
    runs: tuple[Sequence[RunKey], Sequence[RunKey]] | None = None,
) -> CurveDifference:
    """A - B over the seeds both have, at every one of ``steps`` and on the area. ``benchmark`` names the curve's
    benchmark for a declared run variance, ``runs`` the paired runs (as :func:`bootstrap_difference`): the same run
    keys at every step, since a run's luck is one draw for all of its checkpoints. Raises ValueError when a paired
    seed's two runs were not scored on the same problems at a step."""
    seeds = sorted(set(a) & set(b))
    matrices = [paired_matrix({s: a[s][step] for s in seeds}, {s: b[s][step] for s in seeds}) for step in steps]
    if len({frozenset(a[seeds[0]][step]) for step in steps}) != 1:  # an area adds up the same problems' steps
        raise ValueError(f"seed {seeds[0]}: the steps were scored on different problems")
    per_step = {
        step: bootstrap_difference([matrix], settings, [benchmark], runs) for step, matrix in zip(steps, matrices)
    }
    area = bootstrap_difference([area_matrix(steps, matrices)], settings, [benchmark], runs) if len(steps) > 1 else None
    return CurveDifference(tuple(steps), per_step, area)
