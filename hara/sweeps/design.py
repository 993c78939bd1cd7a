"""Which trial a study runs next, and which trial a search study finally chooses: pure functions of its trials.

Every trial carries its ``role`` and ``seeds`` (user attributes):

- ``search``: a point the sampler chose, trained on the study's seeds (``repeats`` of them);
- ``reevaluation``: a search trial's point (``reevaluates``: its number) trained again on fresh seeds, the same for
  every candidate, once the search budget is spent. Its values were not used to select it, so they do not carry the
  winner's curse (docs/sweeps.md, "search"): the best of m equal trials is inflated by the expected maximum of m
  draws, about 1.8 standard deviations for m = 16;
- ``sensitivity``: one (value, seed) of a sensitivity study, the reference included; a listed value equal to the
  reference is the reference (its runs are the reference's, so its effect is exactly 0).

A planned trial is claimed when no trial of its kind is COMPLETE or RUNNING: a failed one (a raising trial, a killed
worker) is run again, so an interrupted study ends with every planned trial done once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hara.sweeps.study import StudySpec, distinct_points

__all__ = [
    "REEVALUATION",
    "SEARCH",
    "SENSITIVITY",
    "Choice",
    "Claim",
    "choose",
    "next_claim",
    "point_key",
    "reevaluation_candidates",
    "role_of",
    "seeds_of",
]

SEARCH, REEVALUATION, SENSITIVITY = "search", "reevaluation", "sensitivity"
ACTIVE = ("COMPLETE", "RUNNING")


@dataclass(frozen=True)
class Claim:
    """What a worker does next: ``ask`` the sampler (params None), run a planned trial, ``wait`` for running trials
    whose results decide the next one, or ``stop``."""

    action: str  # ask | run | wait | stop
    params: dict | None = None
    user_attrs: dict = field(default_factory=dict)
    reason: str = ""


def role_of(trial) -> str:
    return trial.user_attrs.get("role", SEARCH)


def seeds_of(trial, spec: StudySpec) -> list[int]:
    return list(trial.user_attrs.get("seeds", spec.seeds))


def point_key(params: Mapping) -> tuple:
    """A point's identity (values compared as Python compares them: a listed 16.0 is the reference's 16)."""
    return tuple(sorted(params.items()))


def _key(params: Mapping, seeds: Sequence[int]) -> tuple:
    return point_key(params), tuple(seeds)


def _active_keys(trials: Iterable, role: str) -> set[tuple]:
    return {
        _key(t.params, t.user_attrs.get("seeds", ())) for t in trials if role_of(t) == role and t.state.name in ACTIVE
    }


def sensitivity_claim(spec: StudySpec, trials: Sequence) -> Claim:
    """The first (point, seed) of the plan, reference first, with no complete or running trial."""
    active = _active_keys(trials, SENSITIVITY)
    for point in distinct_points([spec.reference, *spec.points]):
        for seed in spec.seeds:
            if _key(point, [seed]) not in active:
                return Claim("run", point, {"role": SENSITIVITY, "seeds": [seed]})
    return Claim("stop", reason="every (value, seed) trial is complete or running")


def feasible(trial) -> bool:
    return all(value <= 0 for value in trial.user_attrs.get("constraints", []))


def reevaluation_candidates(trials: Sequence, top: int, maximize: bool) -> list:
    """The ``top`` complete, feasible search trials by their search objective (the best first)."""
    complete = [t for t in trials if role_of(t) == SEARCH and t.state.name == "COMPLETE" and feasible(t)]
    return sorted(complete, key=lambda t: (-t.value if maximize else t.value, t.number))[:top]


def search_claim(spec: StudySpec, trials: Sequence) -> Claim:
    """Ask while the search budget lasts; then wait for running search trials; then re-evaluate the candidates."""
    search = [t for t in trials if role_of(t) == SEARCH]
    if sum(t.state.name in ("COMPLETE", "PRUNED", "RUNNING") for t in search) < spec.fields["trials"]:
        return Claim("ask", user_attrs={"role": SEARCH, "seeds": spec.seeds})
    top = spec.fields["reevaluate"]["top"]
    if top == 0:
        return Claim("stop", reason="trial budget reached")
    if any(t.state.name == "RUNNING" for t in search):
        return Claim("wait", reason="the re-evaluation waits for the running search trials")
    maximize = spec.fields["objective"]["direction"] == "maximize"
    active = _active_keys(trials, REEVALUATION)
    for candidate in reevaluation_candidates(trials, top, maximize):
        if _key(candidate.params, spec.reevaluation_seeds) not in active:
            return Claim(
                "run",
                dict(candidate.params),
                {"role": REEVALUATION, "reevaluates": candidate.number, "seeds": spec.reevaluation_seeds},
            )
    return Claim("stop", reason="trial budget reached and the best trials re-evaluated")


CLAIMS = {"search": search_claim, "sensitivity": sensitivity_claim}


def next_claim(spec: StudySpec, trials: Sequence) -> Claim:
    return CLAIMS[spec.kind](spec, trials)


@dataclass(frozen=True)
class Choice:
    """The chosen search trial: its search value (and standard error over its seeds) and, when re-evaluated, the
    mean of its fresh seeds, on which the choice was made; ``shrinkage`` = search value - re-evaluated value."""

    trial: Any
    value: float
    se: float | None
    reevaluated: float | None = None
    reevaluated_se: float | None = None
    candidates: int = 0

    @property
    def shrinkage(self) -> float | None:
        return None if self.reevaluated is None else self.value - self.reevaluated

    @property
    def reported(self) -> float:
        """The value to report: the fresh one when there is one."""
        return self.value if self.reevaluated is None else self.reevaluated


def choose(trials: Sequence, maximize: bool) -> Choice | None:
    """The best re-evaluated candidate by its fresh mean; without re-evaluations, the plain best feasible trial."""
    reevaluations = {
        t.user_attrs["reevaluates"]: t for t in trials if role_of(t) == REEVALUATION and t.state.name == "COMPLETE"
    }
    by_number = {t.number: t for t in trials}
    better = max if maximize else min
    if reevaluations:
        number = better(reevaluations, key=lambda n: (reevaluations[n].value, -n))
        fresh, trial = reevaluations[number], by_number[number]
        return Choice(
            trial, trial.value, trial.user_attrs.get("se"), fresh.value, fresh.user_attrs.get("se"), len(reevaluations)
        )
    candidates = reevaluation_candidates(trials, 1, maximize)
    if not candidates:
        return None
    return Choice(candidates[0], candidates[0].value, candidates[0].user_attrs.get("se"))
