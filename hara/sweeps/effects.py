"""A sensitivity study's effects: each listed value against the reference, paired seed by seed and problem by problem.

Every value and the reference are trained on the same seeds and scored on the same validation problems with the
same sampling seeds (common random numbers), so value v's effect is the mean over seeds s and problems i of
``objective[v, s, i] - objective[reference, s, i]``: its interval is the report's crossed bootstrap over seeds and
problems (:func:`hara.results.paired.bootstrap_difference`), corrected over the study's listed values with the
simultaneous max-T intervals of :func:`hara.results.paired.correct_family`, and stated with its minimum detectable
effect (80% power at the corrected level). A listed value equal to the reference is the reference's own runs: its
differences are all 0, and so are its effect and both ends of its interval. An objective without per-problem
outcomes (train/reward) pairs seeds only. Pure functions of the trials (the figure: hara.sweeps.summary).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from hara.results.paired import (
    WITHIN_NOISE,
    Bootstrap,
    Corrected,
    bootstrap_difference,
    correct_family,
    paired_matrix,
)
from hara.sweeps.design import SENSITIVITY, point_key, role_of
from hara.sweeps.study import OBJECTIVES, StudySpec, distinct_points, param_label

__all__ = ["Effect", "Sensitivity", "point_label", "sensitivity"]


@dataclass(frozen=True)
class Effect:
    """One listed value against the reference: its mean objective and its corrected paired difference."""

    point: dict
    mean: float
    corrected: Corrected

    def as_dict(self, scale: float) -> dict:
        d = self.corrected.difference
        return {
            "point": self.point,
            "label": point_label(self.point),
            "mean": self.mean * scale,
            "effect": d.mean * scale,
            "ci_low": d.low * scale,
            "ci_high": d.high * scale,
            "corrected_low": self.corrected.low * scale,
            "corrected_high": self.corrected.high * scale,
            "verdict": self.corrected.verdict,
            "mde": self.corrected.mde * scale,
            "seeds": d.seeds,
            "problems": d.problems,
        }


@dataclass(frozen=True)
class Sensitivity:
    reference: dict
    reference_mean: float
    effects: list[Effect]
    missing: list[dict]  # listed points with no seed paired with the reference yet
    scale: float
    unit: str

    def rows(self) -> list[dict]:
        return [e.as_dict(self.scale) for e in self.effects]

    def conclusion(self) -> str:
        """One line: which values differ from the reference after correction, and what the study could detect."""
        if not self.effects:
            return "No listed value has been paired with the reference yet."
        unit = f" {self.unit}" if self.unit else ""
        family = len(self.effects)
        seeds = min(e.corrected.difference.seeds for e in self.effects)
        detected = [e for e in self.effects if e.corrected.verdict != WITHIN_NOISE]
        mde = max(e.corrected.mde for e in self.effects) * self.scale
        where = f"after correction over {family} value{'s' * (family > 1)}, {seeds} seed{'s' * (seeds > 1)} each"
        if not detected:
            return (
                f"No value differs from the reference {point_label(self.reference)} {where}: the study would "
                f"have detected an effect of {mde:.2g}{unit} (the largest MDE, 80% power)."
            )
        found = "; ".join(
            f"{point_label(e.point)} is {e.corrected.verdict} by "
            f"{e.corrected.difference.mean * self.scale:+.2g}{unit} "
            f"[{e.corrected.low * self.scale:+.2g}, {e.corrected.high * self.scale:+.2g}]"
            for e in detected
        )
        return (
            f"Against the reference {point_label(self.reference)} ({where}): {found}; the other values are "
            f"within noise (MDE up to {mde:.2g}{unit})."
        )


def point_label(point: Mapping) -> str:
    return ", ".join(f"{key.rsplit('.', 1)[-1]} {param_label(value)}" for key, value in point.items())


def outcomes(spec: StudySpec, trials: Sequence) -> dict[tuple, dict[int, dict[str, float]]]:
    """Point -> seed -> per-problem outcomes (or the seed's objective as one unit) of the complete trials."""
    per_problem = OBJECTIVES[spec.fields["objective"]["metric"]].per_problem
    found: dict[tuple, dict[int, dict[str, float]]] = {}
    for trial in trials:
        if role_of(trial) != SENSITIVITY or trial.state.name != "COMPLETE":
            continue
        (seed,) = trial.user_attrs["seeds"]
        scores = trial.user_attrs["problem_scores"][str(seed)] if per_problem else {"objective": trial.value}
        found.setdefault(point_key(trial.params), {})[seed] = scores
    return found


def mean_of(runs: Mapping[int, Mapping[str, float]]) -> float:
    return float(np.mean([np.mean(list(scores.values())) for scores in runs.values()]))


def sensitivity(spec: StudySpec, trials: Sequence, settings: Bootstrap) -> Sensitivity:
    """Each listed value's corrected effect against the reference, from the study's complete trials."""
    objective = OBJECTIVES[spec.fields["objective"]["metric"]]
    runs = outcomes(spec, trials)
    reference = runs.get(point_key(spec.reference), {})
    paired, missing = [], []
    for point in distinct_points(spec.points):
        seeds = set(runs.get(point_key(point), {})) & set(reference)
        if not seeds:
            missing.append(point)
            continue
        mine = {s: runs[point_key(point)][s] for s in seeds}
        paired.append(
            (
                point,
                mean_of(mine),
                bootstrap_difference([paired_matrix(mine, {s: reference[s] for s in seeds})], settings),
            )
        )
    corrected = correct_family([d for _, _, d in paired], settings.confidence) if paired else []
    effects = [Effect(point, mean, c) for (point, mean, _), c in zip(paired, corrected)]
    return Sensitivity(
        spec.reference, mean_of(reference) if reference else math.nan, effects, missing, objective.scale, objective.unit
    )
