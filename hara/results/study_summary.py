"""A study's summary.json (`hara sweep report`) as types: written by hara.sweeps.summary, read by the report.

The file keeps its flat layout (the study's fields, then its kind's findings at the top level), so a study summarised
before these types reads the same. Reading checks every field: a file cut or edited by hand stops with one line
naming the file and the first missing field (hara.results.files), never a KeyError deep inside the report.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hara.results.files import bad_file, read_json

__all__ = ["EffectRow", "SearchChoice", "SearchFindings", "SensitivityFindings", "StudySummary", "read_summary"]


@dataclass(frozen=True)
class EffectRow:
    """One value of a sensitivity study against its reference, in the objective's unit (hara.sweeps.effects)."""

    point: dict[str, Any]
    label: str
    mean: float
    effect: float
    ci_low: float
    ci_high: float
    corrected_low: float
    corrected_high: float
    verdict: str
    mde: float
    seeds: int
    problems: int


@dataclass(frozen=True)
class SearchChoice:
    """The search's chosen trial (hara.sweeps.design.choose): ``value`` is its re-evaluated value where it was
    re-evaluated on fresh seeds, else its search value."""

    trial: int
    value: float
    params: dict[str, Any]
    search_value: float
    search_se: float | None
    reevaluated: float | None
    reevaluated_se: float | None
    shrinkage: float | None
    candidates: int
    reevaluation_seeds: list[int]


@dataclass(frozen=True)
class SearchFindings:
    best: SearchChoice
    importances: dict[str, float] | str  # fANOVA per parameter, or why there is none
    figures: dict[str, str]  # name -> file in the study folder


@dataclass(frozen=True)
class SensitivityFindings:
    reference: dict[str, Any]
    reference_label: str
    reference_mean: float
    unit: str
    family_size: int
    effects: list[EffectRow]
    missing: list[str]  # listed values not yet paired with the reference
    conclusion: str
    figures: dict[str, str]


FINDINGS = {"search": SearchFindings, "sensitivity": SensitivityFindings}


@dataclass(frozen=True)
class StudySummary:
    study: str
    kind: str  # a key of FINDINGS
    description: str
    metric: str
    metric_description: str
    direction: str
    method: str
    seeds: list[int]
    states: dict[str, int]  # trials per Optuna state
    findings: SearchFindings | SensitivityFindings

    @property
    def figures(self) -> dict[str, str]:
        return self.findings.figures

    def as_json(self) -> dict[str, Any]:
        """summary.json's content: the study's fields and its findings', flat."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "findings"}
        return {**fields, **dataclasses.asdict(self.findings)}

    def write(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.as_json(), indent=2) + "\n", encoding="utf-8")

    @classmethod
    def from_json(cls, data: Any, path: Path) -> StudySummary:
        """The summary in ``data`` (the content of the summary.json at ``path``); a missing field is a one-line
        :class:`~hara.errors.DataError` naming the file and the field."""
        head = _fields(cls, data, path, skip=frozenset({"findings"}))
        findings = FINDINGS.get(head["kind"])
        if findings is None:
            raise bad_file(str(path), f"no kind {head['kind']!r} (one of {', '.join(FINDINGS)})", path)
        body = _fields(findings, data, path)
        if findings is SearchFindings:
            body["best"] = SearchChoice(**_fields(SearchChoice, body["best"], path, "best."))
        else:
            body["effects"] = [
                EffectRow(**_fields(EffectRow, row, path, f"effects[{i}].")) for i, row in enumerate(body["effects"])
            ]
        return cls(**head, findings=findings(**body))


def _fields(cls: type, data: Any, path: Path, at: str = "", skip: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The values of ``cls``' fields in the mapping ``data`` (found at ``at`` in the file); the first absent one is
    a one-line error naming the file and the field."""
    if not isinstance(data, dict):
        raise bad_file(str(path), f"no object at {at or 'the top'} (found {type(data).__name__})", path)
    names = [f.name for f in dataclasses.fields(cls) if f.name not in skip]
    absent = next((name for name in names if name not in data), None)
    if absent is not None:
        raise bad_file(str(path), f"no field '{at}{absent}'", path)
    return {name: data[name] for name in names}


def read_summary(path: str | Path) -> StudySummary:
    """A study's summary.json, typed; one line naming the file and the rule that rewrites it when it is bad."""
    return StudySummary.from_json(read_json(path), Path(path))
