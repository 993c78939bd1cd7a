"""Which two evaluations may be compared, and their paired difference (:mod:`hara.results.paired`).

Every ``hara evaluate`` records per benchmark an evaluation fingerprint (``eval_fingerprint`` in scores.json; see
:func:`hara.evaluation.runner.evaluation_fingerprint`): what must be equal for two pass@1 values to measure the
same thing (benchmark content, prompt template, stop sequences, sampling settings and seed, backend, device kind,
the versions of the scoring and generation stack). The report compares two runs only where those are equal; else
it stops with one line naming the differing fields (:class:`ComparisonError`), unless the config's
``report.allow_fingerprint_mismatch`` (``hara report --allow-fingerprint-mismatch``) says to go on, and then the
table marks the comparison with :data:`MISMATCH_MARK`.

The grid's comparisons (:func:`grid_comparisons`: every method against the baseline, hara_tok against hara_seq, in
every (size, rlvr)) are families by what they compare against: all differences against ``none`` (per benchmark and
on the average, every size and preset) are one family, corrected together (simultaneous max-T intervals,
:func:`hara.results.paired.correct_family`); the tables, comparisons.json and the MLflow runs read the same corrected
verdicts and minimum detectable effects.

With ``report.speed`` each control's comparison also has a speed endpoint (:func:`compare_speed`): the
difference from the baseline on the speed benchmark at every candidate checkpoint step and on the area under that
curve (:mod:`hara.results.curves`), paired by seed and problem with the same bootstrap, corrected in the control's
family beside its final benchmarks (``corrected[key]["speed:step <k>"]`` and ``corrected[key]["speed:area"]``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Self

from hara.errors import ComparisonError
from hara.layout import candidate_steps
from hara.results.collect import Cell, Run, seed_runs
from hara.results.curves import CurveDifference, curve_difference
from hara.results.paired import (
    DECLARED,
    PROBLEMS_ONLY,
    WITHIN_NOISE,
    Bootstrap,
    Corrected,
    Difference,
    bootstrap_difference,
    correct_family,
    paired_matrix,
)

__all__ = [
    "BASIS_MARKS",
    "CORRECTED_MARK",
    "DECLARED_MARK",
    "FINGERPRINT_KEY",
    "LOW_POWER_MARK",
    "MISMATCH_MARK",
    "PROBLEMS_ONLY_MARK",
    "SPEED_AREA",
    "Comparison",
    "ComparisonError",
    "GridComparisons",
    "SpeedComparison",
    "VerdictCell",
    "compare_cells",
    "compare_speed",
    "compared_pairs",
    "expected_verdict",
    "family_of",
    "fingerprint_differences",
    "flatten",
    "grid_comparisons",
    "is_control",
    "low_power_threshold",
    "speed_step",
]

LOGGER = logging.getLogger(__name__)
FINGERPRINT_KEY = "eval_fingerprint"
MISMATCH_MARK = "†"
#: The raw interval excludes 0 but the family's simultaneous interval does not (a verdict the correction removed).
CORRECTED_MARK = "°"
#: The minimum detectable effect exceeds the effect the comparison should be able to see (config report.low_power_above).
LOW_POWER_MARK = "‡"
#: Fewer seeds than report.min_seeds: the interval adds the declared run variance (report.run_variance) ...
DECLARED_MARK = "§"
#: ... or, with nothing declared, covers the problems only and decides no claim.
PROBLEMS_ONLY_MARK = "¶"
BASIS_MARKS = {DECLARED: DECLARED_MARK, PROBLEMS_ONLY: PROBLEMS_ONLY_MARK}
#: The method every other is compared with (the report's tables, figures and MLflow summaries).
BASELINE = "none"


class VerdictCell(str):
    """A table cell that states a verdict: its text (the string itself, what the pages and tables.json show) with
    the verdict it states (better / worse / within noise, :mod:`hara.results.paired`; after correction where the
    table corrects) and whether that comparison has low power (its MDE above the effect it should see,
    :data:`LOW_POWER_MARK` in the text). The page colours a cell from these fields (hara.report.render), never from
    its text."""

    verdict: str
    low_power: bool

    def __new__(cls, text: str = "", verdict: str = WITHIN_NOISE, low_power: bool = False) -> Self:
        cell = super().__new__(cls, text)
        cell.verdict, cell.low_power = verdict, low_power
        return cell

    def __repr__(self) -> str:
        return f"VerdictCell({str(self)!r}, {self.verdict!r}, low_power={self.low_power})"

    def after(self, prefix: str) -> VerdictCell:
        """The cell with ``prefix`` before its text (a score before its paired difference), same verdict."""
        return VerdictCell(prefix + self, self.verdict, self.low_power)


def flatten(tree: Mapping, prefix: str = "") -> dict[str, object]:
    """Nested mappings -> {"a.b.c": value}."""
    out: dict[str, object] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


#: Fingerprint fields recorded for the reader but not part of comparability: the GPU model. A site's GPU pool may
#: mix cards (A100 and H100 under one constraint); with the same weights, prompts, sampling settings and seeds the
#: scores are the same experiment, up to kernel-level numerics, and refusing them stopped the report, the last job
#: of the whole grid. Such comparisons carry a note (:attr:`Comparison.notes`) instead.
DESCRIPTIVE_FIELDS = ("device",)


def fingerprint_differences(a: Mapping | None, b: Mapping | None, descriptive: bool = False) -> list[str]:
    """``field (a vs b)`` for every fingerprint field that differs (a missing fingerprint is a difference): the
    fields that decide comparability, or with ``descriptive`` those of :data:`DESCRIPTIVE_FIELDS`."""
    if a is None or b is None:
        return (
            []
            if descriptive
            else [(f"{FINGERPRINT_KEY} (missing: evaluated before fingerprints were recorded; evaluate again)")]
        )
    flat_a, flat_b = flatten(a), flatten(b)
    return [
        f"{key} ({flat_a.get(key, 'absent')} vs {flat_b.get(key, 'absent')})"
        for key in sorted(flat_a.keys() | flat_b.keys())
        if flat_a.get(key) != flat_b.get(key) and (key in DESCRIPTIVE_FIELDS) == descriptive
    ]


@dataclass(frozen=True)
class Comparison:
    """A - B per benchmark and on the benchmark average; ``mismatched``: benchmark -> differing fields (only when
    the config allowed comparing them anyway)."""

    a: str
    b: str
    per_benchmark: dict[str, Difference]
    average: Difference
    mismatched: dict[str, list[str]] = field(default_factory=dict)
    notes: dict[str, list[str]] = field(default_factory=dict)  # benchmark -> differing descriptive fields

    def format(self, benchmark: str | None = None) -> VerdictCell:
        """``+0.3 [-1.2, +1.8] within noise`` for one benchmark (None: the average), marked when mismatched."""
        diff = self.average if benchmark is None else self.per_benchmark[benchmark]
        mark = MISMATCH_MARK if (self.mismatched if benchmark is None else benchmark in self.mismatched) else ""
        return VerdictCell(f"{diff.format()} {diff.verdict}{mark}", diff.verdict)

    def as_dict(self) -> dict:
        return {
            "a": self.a,
            "b": self.b,
            "average": self.average.as_dict(),
            "benchmarks": {name: d.as_dict() for name, d in self.per_benchmark.items()},
            "fingerprint_mismatch": self.mismatched,
            "fingerprint_notes": self.notes,
        }


def _seeds(runs: Mapping[Cell, Run], size: str, rlvr: str, method: str) -> dict[int, Run]:
    """{seed: run} of the cells with per-problem outcomes."""
    return {seed: run for seed, run in seed_runs(runs, size, rlvr, method).items() if run.problems}


FingerprintPair = tuple[Mapping | None, Mapping | None]


def _differences(pairs: list[FingerprintPair], descriptive: bool = False) -> list[str]:
    """The distinct :func:`fingerprint_differences` of the paired evaluations' fingerprints."""
    differing: list[str] = []
    for a, b in pairs:
        differing += [d for d in fingerprint_differences(a, b, descriptive) if d not in differing]
    return differing


def _comparable(label: str, where: str, pairs: list[FingerprintPair], allow: bool) -> tuple[list[str], list[str]]:
    """The fields in which the paired evaluations of ``where`` (a benchmark) differ, raising unless ``allow``, and
    the descriptive ones (the GPU model), logged."""
    differing = _differences(pairs)
    if differing and not allow:
        raise ComparisonError(
            f"{label} on {where}: evaluations not comparable, they differ in "
            f"{'; '.join(differing)} (hara report --allow-fingerprint-mismatch compares them "
            "anyway, marked)"
        )
    described = _differences(pairs, descriptive=True)
    if described:
        LOGGER.warning(
            "%s on %s: evaluated on different hardware, %s (compared: the device is not part of comparability)",
            label,
            where,
            "; ".join(described),
        )
    return differing, described


def compare_cells(
    config: Mapping, runs: Mapping[Cell, Run], size: str, rlvr: str, method: str, against: str
) -> Comparison | None:
    """``method`` - ``against`` within (size, rlvr), paired by seed and problem; None unless both have per-problem
    predictions for a common seed on every benchmark of the config."""
    benchmarks = config["data"]["benchmarks"]
    mine, theirs = _seeds(runs, size, rlvr, method), _seeds(runs, size, rlvr, against)
    seeds = [
        s
        for s in sorted(set(mine) & set(theirs))
        if all(b in mine[s].problems and b in theirs[s].problems for b in benchmarks)
    ]
    if not seeds:
        return None
    label, allow = f"{method} vs {against} ({size}, {rlvr})", config["report"]["allow_fingerprint_mismatch"]
    # the runs' names for their luck's draws (a declared run variance): comparisons sharing a run share its luck
    paired_runs = tuple(tuple((size, rlvr, m, s) for s in seeds) for m in (method, against))
    settings, per_benchmark, mismatched, notes, matrices = Bootstrap.from_config(config), {}, {}, {}, []
    for benchmark in benchmarks:
        pairs = [(mine[s].fingerprints.get(benchmark), theirs[s].fingerprints.get(benchmark)) for s in seeds]
        differing, described = _comparable(label, benchmark, pairs, allow)
        if differing:
            mismatched[benchmark] = differing
        if described:
            notes[benchmark] = described
        try:
            matrix = paired_matrix(
                {s: mine[s].problems[benchmark] for s in seeds}, {s: theirs[s].problems[benchmark] for s in seeds}
            )
        except ValueError as error:
            raise ComparisonError(f"{label} on {benchmark}: {error}") from None
        per_benchmark[benchmark] = bootstrap_difference([matrix], settings, [benchmark], paired_runs)
        matrices.append(matrix)
    # one benchmark: its average is itself (the same draws give the same replicates), computed once
    average = (
        per_benchmark[benchmarks[0]]
        if len(matrices) == 1
        else bootstrap_difference(matrices, settings, benchmarks, paired_runs)
    )
    return Comparison(method, against, per_benchmark, average, mismatched, notes)


#: The speed endpoint's members of a comparison's family, beside its benchmarks (no benchmark name has a colon).
SPEED_AREA = "speed:area"


def speed_step(step: int) -> str:
    """The family member of the speed endpoint at one candidate step."""
    return f"speed:step {step}"


@dataclass(frozen=True)
class SpeedComparison:
    """A - B on the speed benchmark (config report.speed) at every candidate step and on the area under that curve;
    ``mismatched``: where -> differing fingerprint fields (only when the config allowed comparing them anyway)."""

    benchmark: str
    curve: CurveDifference
    mismatched: dict[str, list[str]] = field(default_factory=dict)

    def members(self) -> dict[str, Difference]:
        """The endpoint's differences by family member (:func:`speed_step`, :data:`SPEED_AREA`)."""
        steps = {speed_step(step): d for step, d in self.curve.per_step.items()}
        return steps | ({SPEED_AREA: self.curve.area} if self.curve.area is not None else {})

    def as_dict(self) -> dict:
        return {
            "benchmark": self.benchmark,
            "steps": {str(step): d.as_dict() for step, d in self.curve.per_step.items()},
            "area": None if self.curve.area is None else self.curve.area.as_dict(),
            "fingerprint_mismatch": self.mismatched,
        }


def _speed_seeds(config: Mapping, runs: Mapping[Cell, Run], cell: tuple[str, str, str]) -> dict[int, dict]:
    """{seed: {step: candidate entry}} of one (size, rlvr, method)'s runs scored on the speed benchmark at every
    candidate step."""
    benchmark, steps = config["report"]["speed"]["benchmark"], candidate_steps(config)
    curves = {seed: run.speed_curve(benchmark, steps) for seed, run in seed_runs(runs, *cell).items()}
    return {seed: curve for seed, curve in curves.items() if curve is not None}


def compare_speed(
    config: Mapping, runs: Mapping[Cell, Run], size: str, rlvr: str, method: str, against: str
) -> SpeedComparison | None:
    """``method`` - ``against`` on the speed endpoint within (size, rlvr), paired by seed and problem at each
    candidate step and on the area (:func:`hara.results.curves.curve_difference`); None without report.speed or
    without a seed both have scored at every step."""
    benchmark = config["report"]["speed"]["benchmark"]
    if benchmark is None:
        return None
    mine, theirs = _speed_seeds(config, runs, (size, rlvr, method)), _speed_seeds(config, runs, (size, rlvr, against))
    seeds = sorted(set(mine) & set(theirs))
    if not seeds:
        return None
    label, allow, mismatched = (
        f"{method} vs {against} ({size}, {rlvr})",
        config["report"]["allow_fingerprint_mismatch"],
        {},
    )
    for step in candidate_steps(config):
        where = f"{benchmark} at step {step}"
        pairs = [(mine[s][step]["eval_fingerprint"], theirs[s][step]["eval_fingerprint"]) for s in seeds]
        differing, _ = _comparable(label, where, pairs, allow)
        if differing:
            mismatched[where] = differing
    per_problem = [{s: {k: c["problems"] for k, c in side[s].items()} for s in seeds} for side in (mine, theirs)]
    paired_runs = tuple(tuple((size, rlvr, m, s) for s in seeds) for m in (method, against))
    try:
        curve = curve_difference(
            *per_problem, candidate_steps(config), Bootstrap.from_config(config), benchmark, paired_runs
        )
    except ValueError as error:
        raise ComparisonError(f"{label} on {benchmark}: {error}") from None
    return SpeedComparison(benchmark, curve, mismatched)


def compared_pairs(config: Mapping) -> list[tuple[str, str]]:
    """(method, against) of the report's comparisons: each method against the baseline, hara_tok against hara_seq."""
    methods = config["grid"]["methods"]
    pairs = [(m, BASELINE) for m in methods if m != BASELINE and BASELINE in methods]
    return pairs + ([("hara_tok", "hara_seq")] if {"hara_tok", "hara_seq"} <= set(methods) else [])


def is_control(method: str) -> bool:
    """A control (kind ``oracle`` of the method registry): it shows whether the grid can see a credit-assignment
    effect at all, and competes with nothing."""
    from hara.methods import methods

    spec = methods().get(method)
    return spec is not None and spec.kind == "oracle"


def expected_verdict(method: str) -> str:
    """A control's verdict against the baseline when the grid sees its effect: better (a positive control) or
    worse (a negative control, a sabotage); hara.methods declares it."""
    from hara.methods import methods

    return methods()[method].expect


def family_of(method: str, against: str) -> str:
    """The family a comparison is corrected in: every difference against the same method, the controls' apart
    (joining the others' family would widen their intervals for a comparison nobody is testing)."""
    return f"{against}, controls" if is_control(method) else against


def low_power_threshold(config: Mapping, against: str) -> float | None:
    """Above which minimum detectable effect a comparison against ``against`` is marked low power: the config's
    ``report.low_power_above`` when set, else the effect the paper claims over that kind of method (the claims file's
    ``effect``: over none, over a credit-assignment baseline), else None (no mark)."""
    if config["report"]["low_power_above"] is not None:
        return float(config["report"]["low_power_above"])
    from hara.analysis.claims import PAPER_EFFECTS
    from hara.methods import methods

    spec = methods().get(against)
    return PAPER_EFFECTS.get({"none": "gain_vs_grpo", "baseline": "gain_vs_credit"}.get(spec.kind if spec else ""))


Key = tuple[str, str, str, str]  # (size, rlvr, method, against)


@dataclass(frozen=True)
class GridComparisons:
    """The grid's comparisons, and each difference's correction over its family (comparisons with the same
    ``against``): ``corrected[(size, rlvr, method, against)][member]``, a member being a benchmark, None for the
    average, or a speed endpoint's step or area (:func:`speed_step`, :data:`SPEED_AREA`; ``speed[key]``)."""

    found: dict[Key, Comparison]
    corrected: dict[Key, dict[str | None, Corrected]]
    thresholds: dict[str, float | None]
    speed: dict[Key, SpeedComparison] = field(default_factory=dict)

    def get(self, size: str, rlvr: str, method: str, against: str) -> Comparison | None:
        return self.found.get((size, rlvr, method, against))

    def format(self, key: Key, benchmark: str | None = None) -> VerdictCell:
        """``+2.1 [+0.4, +3.8] within noise°, MDE 3.1‡``: the raw interval (percentage points), the verdict after
        correction over the family, marks (:data:`CORRECTED_MARK`, :data:`LOW_POWER_MARK`, :data:`MISMATCH_MARK`)
        and the minimum detectable effect."""
        comparison = self.found[key]
        raw = comparison.average if benchmark is None else comparison.per_benchmark[benchmark]
        mismatched = comparison.mismatched if benchmark is None else benchmark in comparison.mismatched
        return self._format(key, benchmark, raw, bool(mismatched))

    def format_speed(self, key: Key, member: str) -> VerdictCell:
        """:meth:`format` for a member of the speed endpoint (:func:`speed_step`, :data:`SPEED_AREA`)."""
        speed = self.speed[key]
        return self._format(key, member, speed.members()[member], bool(speed.mismatched))

    def _format(self, key: Key, member: str | None, raw: Difference, mismatched: bool) -> VerdictCell:
        corrected, threshold = self.corrected[key][member], self.thresholds[key[3]]
        marks = (CORRECTED_MARK if raw.verdict != corrected.verdict else "") + (MISMATCH_MARK if mismatched else "")
        marks += BASIS_MARKS.get(raw.basis, "")
        low_power = threshold is not None and corrected.mde > threshold
        power = LOW_POWER_MARK if low_power else ""
        text = f"{raw.format()} {corrected.verdict}{marks}, MDE {100 * corrected.mde:.1f}{power}"
        return VerdictCell(text, corrected.verdict, low_power)

    def family_sizes(self) -> dict[str, int]:
        """Family (:func:`family_of`) -> how many differences it corrects over (per benchmark and averages)."""
        return {
            family_of(key[2], key[3]): next(iter(group.values())).family_size for key, group in self.corrected.items()
        }

    def records(self) -> list[dict]:
        """comparisons.json: every comparison's raw numbers, its corrected verdicts, MDEs and low-power flags (and its
        speed endpoint's, under ``speed``)."""
        out = []
        for key, comparison in self.found.items():
            record = {"size": key[0], "rlvr": key[1], **comparison.as_dict()}
            entries = [(None, record["average"]), *record["benchmarks"].items()]
            if key in self.speed:
                record["speed"] = self.speed[key].as_dict()
                steps = record["speed"]["steps"].items()
                entries += [(speed_step(int(step)), entry) for step, entry in steps]
                entries += [(SPEED_AREA, record["speed"]["area"])] if record["speed"]["area"] else []
            for member, entry in entries:
                entry["corrected"] = self._corrected_record(key, member)
            out.append(record)
        return out

    def _corrected_record(self, key: Key, member: str | None) -> dict:
        corrected, threshold = self.corrected[key][member], self.thresholds[key[3]]
        return {
            **corrected.as_dict(),
            "low_power_above": threshold,
            "low_power": threshold is not None and corrected.mde > threshold,
        }


def _members(comparison: Comparison, speed: SpeedComparison | None) -> list[tuple[str | None, Difference]]:
    """A comparison's differences in its family: the benchmark average, each benchmark, its speed endpoint's."""
    speed_members = list(speed.members().items()) if speed is not None else []
    return [(None, comparison.average), *comparison.per_benchmark.items(), *speed_members]


def grid_comparisons(config: Mapping, runs: Mapping[Cell, Run]) -> GridComparisons:
    """Every comparison of :func:`compared_pairs` in every (size, rlvr) where both have per-problem predictions,
    corrected over their families (:func:`family_of`); a control's speed endpoint (report.speed) is
    corrected in its family too."""
    found: dict[Key, Comparison] = {}
    for size in config["models"]["sizes"]:
        for rlvr in config["grid"]["rlvr"]:
            for method, against in compared_pairs(config):
                comparison = compare_cells(config, runs, size, rlvr, method, against)
                if comparison is not None:
                    found[(size, rlvr, method, against)] = comparison
    speed = {
        key: curve for key in found if is_control(key[2]) and (curve := compare_speed(config, runs, *key)) is not None
    }
    confidence, corrected = Bootstrap.from_config(config).confidence, {key: {} for key in found}
    for family in {family_of(key[2], key[3]) for key in found}:
        members = [
            (key, member, diff)
            for key, comparison in found.items()
            if family_of(key[2], key[3]) == family
            for member, diff in _members(comparison, speed.get(key))
        ]
        for (key, member, _), fixed in zip(members, correct_family([d for _, _, d in members], confidence)):
            corrected[key][member] = fixed
    thresholds = {against: low_power_threshold(config, against) for _, against in compared_pairs(config)}
    return GridComparisons(found, corrected, thresholds, speed)
