"""`hara repro-check`: each of the paper's claims (config/paper_claims.yaml) checked against the results present.

A claim names a measure of :data:`MEASURES`; each measure reads the runs, computes our numbers with intervals
(hara.results.paired: paired bootstrap over seeds and problems, crossed, for accuracy; t-intervals over seeds for
quantities measured once per seed; a block bootstrap over steps for one run's per-step cost) and returns a status:
``reproduced`` (the intervals support the claim), ``within noise`` (they cannot tell), ``contradicted`` (they exclude
it), or ``not measured`` (the results lack what the measure needs, or too few seeds for an interval). A claim tested
by many comparisons ("up to +4.8 over GRPO": every HarA method in every size and preset) is a family: its status
comes from verdicts corrected over the family (simultaneous intervals), never from the largest one's own interval,
which with no effect anywhere lies above 0 in 37% of 18-comparison grids. The report's first table is the same
check.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from hara.analysis.claims import CLAIMS_PATH
from hara.errors import ConfigError
from hara.report.compare import Comparison, compare_cells
from hara.results.collect import Cell, Run, collect_runs, read_run
from hara.results.paired import (
    BETTER,
    WITHIN_NOISE,
    WORSE,
    Bootstrap,
    Interval,
    block_bootstrap_ratio,
    correct_family,
    t_interval,
)
from hara.results.stats import step_costs

__all__ = ["MEASURES", "Claim", "Outcome", "check_claims", "claims_table", "format_checks", "load_claims"]

REPRODUCED, NOISE, CONTRADICTED, NOT_MEASURED = "reproduced", "within noise", "contradicted", "not measured"
VERDICT_STATUS = {BETTER: REPRODUCED, WITHIN_NOISE: NOISE, WORSE: CONTRADICTED}
BASELINE = "none"


@dataclass(frozen=True)
class Claim:
    key: str
    paper: str
    measure: str
    params: Mapping
    how: str


@dataclass(frozen=True)
class Outcome:
    """A claim's status, our number in words, and the numbers behind it."""

    status: str
    ours: str
    numbers: Mapping


@dataclass(frozen=True)
class Evidence:
    """What the measures read: the resolved config (results_dir = the results checked) and the grid's runs."""

    config: Mapping
    runs: Mapping[Cell, Run]

    @property
    def bootstrap(self) -> Bootstrap:
        return Bootstrap.from_config(self.config)

    @property
    def min_seeds(self) -> int:
        return int(self.config["report"]["min_seeds"])

    def cells(self) -> list[tuple[str, str]]:
        return [(size, rlvr) for size in self.config["models"]["sizes"] for rlvr in self.config["grid"]["rlvr"]]

    def methods(self, names: str | list[str]) -> list[str]:
        """A kind of the method registry (``hara``: every HarA method, ``baseline``: every credit-assignment
        baseline; hara/methods.py; in grid order) or a list of names (those the grid trains, in list order)."""
        from hara.methods import KINDS, methods

        grid = self.config["grid"]["methods"]
        if isinstance(names, str) and names in KINDS:
            return [m for m in grid if m in methods() and methods()[m].kind == names]
        return [m for m in ([names] if isinstance(names, str) else names) if m in grid]


Measure = Callable[[Evidence, Mapping], Outcome]
MEASURES: dict[str, Measure] = {}


def measure(name: str) -> Callable[[Measure], Measure]:
    def register(function: Measure) -> Measure:
        MEASURES[name] = function
        return function

    return register


def load_claims(path: str | Path = CLAIMS_PATH) -> list[Claim]:
    """The claims file; a claim naming an unknown measure is refused with its key."""
    raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    claims = []
    for key, entry in (raw or {}).get("claims", {}).items():
        if entry.get("measure") not in MEASURES:
            raise ConfigError(
                f"{path}: claims.{key}.measure: {entry.get('measure')!r} is not one of {', '.join(sorted(MEASURES))}"
            )
        claims.append(
            Claim(
                key,
                str(entry["paper"]),
                entry["measure"],
                entry.get("params") or {},
                " ".join(str(entry.get("how", "")).split()),
            )
        )
    return claims


def _absent(what: str) -> Outcome:
    return Outcome(NOT_MEASURED, f"n/a ({what})", {})


def _pairs(evidence: Evidence, methods: list[str], against: list[str]) -> list[tuple[Comparison, str, str]]:
    return [
        (found, size, rlvr)
        for size, rlvr in evidence.cells()
        for m in methods
        for b in against
        if (found := compare_cells(evidence.config, evidence.runs, size, rlvr, m, b)) is not None
    ]


def _family_status(verdicts: Counter, size: int) -> str:
    """Reproduced when a corrected verdict is better; contradicted when every one is worse."""
    if verdicts[BETTER]:
        return REPRODUCED
    return CONTRADICTED if verdicts[WORSE] == size else NOISE


def _points(value: float) -> str:
    return f"{100 * value:.1f}"


@measure("paired_gain_family")
def paired_gain_family(evidence: Evidence, params: Mapping) -> Outcome:
    """Paired average-pass@1 differences of ``methods`` over ``against`` in every (size, rlvr): one family, corrected
    with simultaneous intervals; the status counts the corrected verdicts, the largest difference is described."""
    methods, against = evidence.methods(params["methods"]), evidence.methods(params["against"])
    pairs = _pairs(evidence, methods, against)
    if not pairs:
        return _absent(f"no paired evaluations of {', '.join(methods) or 'HarA'} and {', '.join(against) or '-'}")
    corrected = correct_family([found.average for found, _, _ in pairs], evidence.bootstrap.confidence)
    verdicts = Counter(c.verdict for c in corrected)
    largest = max(range(len(pairs)), key=lambda i: pairs[i][0].average.mean)
    (best, size, rlvr), best_fixed = pairs[largest], corrected[largest]
    ours = (
        f"{verdicts[BETTER]} of {len(pairs)} better after correction, {verdicts[WORSE]} worse; largest: {best.a} "
        f"vs {best.b} ({size}, {rlvr}) {best.average.format()} points (raw interval), corrected "
        f"{best_fixed.verdict}, MDE {_points(best_fixed.mde)}"
    )
    comparisons = [
        {
            "size": size,
            "rlvr": rlvr,
            **found.average.as_dict(),
            "a": found.a,
            "b": found.b,
            "corrected": fixed.as_dict(),
        }
        for (found, size, rlvr), fixed in zip(pairs, corrected)
    ]
    return Outcome(
        _family_status(verdicts, len(pairs)),
        ours,
        {
            "family_size": len(pairs),
            "critical": best_fixed.critical,
            "verdicts": dict(verdicts),
            "largest": comparisons[largest],
            "comparisons": comparisons,
        },
    )


@measure("majority_better")
def majority_better(evidence: Evidence, params: Mapping) -> Outcome:
    """Per (size, rlvr, benchmark) differences of ``method`` - ``against``, corrected over that family: better on most
    is the claim."""
    pairs = _pairs(evidence, evidence.methods([params["method"]]), evidence.methods([params["against"]]))
    differences = [d for found, _, _ in pairs for d in found.per_benchmark.values()]
    if not differences:
        return _absent(f"no paired evaluations of {params['method']} and {params['against']}")
    verdicts = Counter(c.verdict for c in correct_family(differences, evidence.bootstrap.confidence))
    total, better, worse = len(differences), verdicts[BETTER], verdicts[WORSE]
    status = CONTRADICTED if worse > better else REPRODUCED if better > worse and 2 * better >= total else NOISE
    ours = (
        f"{params['method']} - {params['against']} over {total} (size, rlvr, benchmark), after correction: "
        f"{better} better, {verdicts[WITHIN_NOISE]} within noise, {worse} worse"
    )
    return Outcome(status, ours, {"verdicts": dict(verdicts), "total": total})


def _bounded(intervals: list[Interval], bound: float) -> str:
    """At most ``bound``: every interval under it reproduces; any wholly above contradicts."""
    if any(i.low > bound for i in intervals):
        return CONTRADICTED
    return REPRODUCED if all(i.high <= bound for i in intervals) else NOISE


def cost_ratio(pairs: list[tuple[list[float], list[float]]], evidence: Evidence) -> Interval:
    """mean(A's costs) / mean(B's) from (A, B) per-step series paired by seed: with ``min_seeds`` pairs or more a
    t-interval over the seeds' log ratios (its value the geometric mean ratio): runs are the independent units;
    with fewer, a block bootstrap over the pooled steps (hara.results.paired.block_bootstrap_ratio)."""
    if len(pairs) >= evidence.min_seeds:
        logs = [math.log(statistics.fmean(a) / statistics.fmean(b)) for a, b in pairs]
        found = t_interval(logs, evidence.bootstrap.confidence)
        return Interval(math.exp(found.value), math.exp(found.low), math.exp(found.high))
    return block_bootstrap_ratio([c for a, _ in pairs for c in a], [c for _, b in pairs for c in b], evidence.bootstrap)


@measure("cost_overhead")
def cost_overhead(evidence: Evidence, params: Mapping) -> Outcome:
    """Per-step cost of each HarA (size, rlvr, method) over its baseline's (paired by seed) minus 1
    (:func:`cost_ratio`)."""
    grouped: dict[tuple[str, str, str], list] = {}
    kinds: dict[tuple[str, str, str], set[str]] = {}
    for cell, run in sorted(evidence.runs.items(), key=lambda item: item[0].seed):
        base = evidence.runs.get(Cell(cell.size, cell.rlvr, params["against"], cell.seed))
        if cell.method not in evidence.methods(params["methods"]) or base is None:
            continue
        (mine, kind), (theirs, base_kind) = step_costs(run.metrics), step_costs(base.metrics)
        if mine and theirs:
            key = (cell.method, cell.size, cell.rlvr)
            grouped.setdefault(key, []).append((mine, theirs))
            kinds.setdefault(key, set()).update({kind, base_kind})
    if not grouped:
        return _absent("no HarA run with a trained baseline")
    found = []
    for key, pairs in grouped.items():
        ratio = cost_ratio(pairs, evidence)
        kind = "CPU time" if kinds[key] == {"CPU time"} else "wall time"
        found.append(
            (Interval(ratio.value - 1, ratio.low - 1, ratio.high - 1), f"{', '.join(key)}, {len(pairs)} seed(s)", kind)
        )
    worst, where, kind = max(found, key=lambda item: item[0].value)
    flag = "" if kind == "CPU time" else " (wall time: not comparable where jobs shared the machine)"
    ours = f"largest: {worst.format('{:+.1%}')} per-step {kind} ({where}){flag}"
    return Outcome(
        _bounded([i for i, _, _ in found], float(params["bound"])),
        ours,
        {"largest": vars(worst), "where": where, "cost": kind},
    )


#: How a training-curve measure's value reads.
CURVE_FORMATS: dict[str, Callable[[float], str]] = {
    "speedup": lambda v: f"{v:.2f}x",
    "equal_time": lambda v: f"{100 * v:+.1f} points",
}


@measure("seed_curve_measure")
def seed_curve_measure(evidence: Evidence, params: Mapping) -> Outcome:
    """A training-curve measure per seed (speed-up to the baseline's accuracy, accuracy at its time) in each HarA
    (size, rlvr, method) with ``min_seeds`` seeds or more: a t-interval over the seeds, Bonferroni-corrected over the
    cells measured (a family); the largest is described."""
    from hara.report.tables import seed_curve_values

    show, reference = CURVE_FORMATS[params["measure"]], float(params["reference"])
    measured: list[tuple[list[float], str]] = []
    fewer: list[str] = []
    for size, rlvr in evidence.cells():
        for method in evidence.methods(params["methods"]):
            values = seed_curve_values(evidence.runs, size, rlvr, method, params["measure"])
            where = f"{method}, {size}, {rlvr}, {len(values)} seed{'s' if len(values) != 1 else ''}"
            if len(values) >= evidence.min_seeds:
                measured.append((values, where))
            elif values:
                fewer.append(f"{', '.join(map(show, values))} ({where})")
    if not measured:
        have = f"; has {'; '.join(fewer)}" if fewer else "; no HarA run reached a measurable point against its baseline"
        return _absent(f"needs >= {evidence.min_seeds} seeds per cell, report.min_seeds{have}")
    level = 1 - (1 - evidence.bootstrap.confidence) / len(measured)  # Bonferroni over the cells
    intervals = [(t_interval(values, level), where) for values, where in measured]
    above = sum(i.low > reference for i, _ in intervals)
    status = REPRODUCED if above else CONTRADICTED if all(i.high < reference for i, _ in intervals) else NOISE
    best, where = max(intervals, key=lambda item: item[0].value)
    ours = (
        f"{above} of {len(intervals)} cells above {show(reference)} after correction; largest: "
        f"{show(best.value)} [{show(best.low)}, {show(best.high)}] ({where}; t-interval at {level:.1%})"
    )
    return Outcome(
        status, ours, {"largest": vars(best), "where": where, "cells": len(intervals), "above": above, "level": level}
    )


def _exact_runs(evidence: Evidence, method: str) -> dict[str, dict[int, Run]] | None:
    """The exact-vs-linearized analysis' runs of ``method``: {"exact" | "linearized": {seed: Run}}."""
    from hara.analysis.workflow import eval_dir, exact_counterpart, run_dir, study_runs

    analyses = evidence.config["analyses"]
    if not analyses["enabled"] or method not in analyses["exact_methods"]:
        return None
    found: dict[str, dict[int, Run]] = {"exact": {}, "linearized": {}}
    for run in study_runs(evidence.config, "exact"):
        backend = {method: "linearized", exact_counterpart(method): "exact"}.get(run.method)
        if backend:
            cell = Cell(run.size, run.rlvr, backend, run.seed)
            found[backend][run.seed] = read_run(
                cell, Path(run_dir(evidence.config, run)), Path(eval_dir(evidence.config, run))
            )
    return found


@measure("exact_speedup")
def exact_speedup(evidence: Evidence, params: Mapping) -> Outcome:
    """Per-step cost of exact FGW over the linearization (the exact analysis), paired by seed (:func:`cost_ratio`)."""
    runs = _exact_runs(evidence, params["method"])
    if runs is None:
        return _absent(f"the exact-vs-linearized analysis of {params['method']} is off: config/analyses.yaml")
    pairs = [
        (step_costs(runs["exact"][seed].metrics)[0], step_costs(runs["linearized"][seed].metrics)[0])
        for seed in sorted(set(runs["exact"]) & set(runs["linearized"]))
    ]
    pairs = [(exact, linear) for exact, linear in pairs if exact and linear]
    if not pairs:
        return _absent("the analysis' runs have no training metrics yet")
    ratio = cost_ratio(pairs, evidence)
    status = REPRODUCED if ratio.low > 1 else CONTRADICTED if ratio.high < 1 else NOISE
    return Outcome(status, f"exact / linearized per-step cost {ratio.format('{:.2f}x')}", {"ratio": vars(ratio)})


@measure("exact_accuracy")
def exact_accuracy(evidence: Evidence, params: Mapping) -> Outcome:
    """Paired average-pass@1 difference linearized - exact; inside +-bound reproduces the claim."""
    bound, found, parts = float(params["bound"]), [], []
    for method in params["methods"]:
        runs = _exact_runs(evidence, method)
        if runs is None:
            continue
        table = {run.cell: run for backend in runs.values() for run in backend.values()}
        first = next(iter(table), None)
        comparison = first and compare_cells(evidence.config, table, first.size, first.rlvr, "linearized", "exact")
        if comparison:
            found.append(comparison.average)
            parts.append(f"{method}: {comparison.format()} points")
    if not found:
        return _absent("the exact-vs-linearized analysis is off or not evaluated: config/analyses.yaml")
    # all raw intervals inside the bound supports the claim (an intersection-union test needs no correction); one
    # outside it contradicts only when its interval corrected over the methods is outside too
    if any(c.high < -bound or c.low > bound for c in correct_family(found, evidence.bootstrap.confidence)):
        status = CONTRADICTED
    else:
        status = REPRODUCED if all(-bound <= d.low and d.high <= bound for d in found) else NOISE
    return Outcome(status, "linearized - exact: " + "; ".join(parts), {"differences": [d.as_dict() for d in found]})


def _problem_scores(evidence: Evidence) -> list[dict] | None:
    """The interpretability analysis' per-problem held-out scores (hara.analysis.output.PROBLEM_SCORES), or None
    while the analysis is off or has not run."""
    import json

    from hara.analysis.output import PROBLEM_SCORES
    from hara.analysis.workflow import analysis_outputs, enabled_analyses

    if "interpretability" not in enabled_analyses(evidence.config):
        return None
    folder = Path(analysis_outputs(evidence.config, "interpretability")["json"]).parent
    path = folder / PROBLEM_SCORES
    return json.loads(path.read_text(encoding="utf-8"))["rows"] if path.is_file() else None


def _problem_difference(a: Mapping[str, float], b: Mapping[str, float], evidence: Evidence):
    """A - B over the problems both were scored on, paired bootstrap over problems (hara.results.paired)."""
    from hara.results.paired import bootstrap_difference, paired_matrix

    shared = sorted(set(a) & set(b))
    return bootstrap_difference(
        [paired_matrix({0: {p: a[p] for p in shared}}, {0: {p: b[p] for p in shared}})], evidence.bootstrap
    )


def _scores_of(rows: list[dict], variant: str, structure: str, rollouts: int) -> dict[str, float] | None:
    return next(
        (
            r["per_problem"]
            for r in rows
            if (r["variant"], r["structure"], r["rollouts"]) == (variant, structure, rollouts)
        ),
        None,
    )


def _every_one_better(differences: list, evidence: Evidence) -> tuple[list, Counter, str]:
    """A family that claims every difference is positive: corrected together; reproduced when every one is better
    after correction, contradicted when one is worse."""
    corrected = correct_family(differences, evidence.bootstrap.confidence)
    verdicts = Counter(c.verdict for c in corrected)
    status = REPRODUCED if verdicts[BETTER] == len(corrected) else CONTRADICTED if verdicts[WORSE] else NOISE
    return corrected, verdicts, status


INTERPRETABILITY_ABSENT = "the interpretability analysis is off or has not run: config/analyses.yaml"


@measure("interpretability_order")
def interpretability_order(evidence: Evidence, params: Mapping) -> Outcome:
    """``variant``'s held-out likelihood score minus each of ``over``'s at the largest number of rollouts, per
    structure: paired over problems, one family corrected together; reproduced when every one is better."""
    rows = _problem_scores(evidence)
    if not rows:
        return _absent(INTERPRETABILITY_ABSENT)
    top, found = max(r["rollouts"] for r in rows), []
    for structure in dict.fromkeys(r["structure"] for r in rows):
        mine = _scores_of(rows, params["variant"], structure, top)
        for other in params["over"]:
            theirs = _scores_of(rows, other, structure, top)
            if mine and theirs:
                found.append(
                    (f"{params['variant']} - {other} ({structure})", _problem_difference(mine, theirs, evidence))
                )
    if not found:
        return _absent("the analysis scored none of the variants compared")
    corrected, verdicts, status = _every_one_better([d for _, d in found], evidence)
    parts = [f"{label} {d.format(1.0, 3)} nats/token {c.verdict}" for (label, d), c in zip(found, corrected)]
    return Outcome(
        status,
        f"at {top} rollouts, over {found[0][1].problems} problems, after correction: " + "; ".join(parts),
        {"verdicts": dict(verdicts), "rollouts": top},
    )


@measure("interpretability_rollouts")
def interpretability_rollouts(evidence: Evidence, params: Mapping) -> Outcome:
    """``variant``'s held-out score at the largest number of rollouts minus at the smallest, per structure, paired
    over problems and corrected over the structures; reproduced when every one is better (it rises)."""
    rows = _problem_scores(evidence)
    if not rows:
        return _absent(INTERPRETABILITY_ABSENT)
    counts = sorted({r["rollouts"] for r in rows})
    if len(counts) < 2:
        return _absent("the analysis scored one number of rollouts (analyses.interpretability.rollouts)")
    found = [
        (structure, _problem_difference(high, low, evidence))
        for structure in dict.fromkeys(r["structure"] for r in rows)
        if (high := _scores_of(rows, params["variant"], structure, counts[-1]))
        and (low := _scores_of(rows, params["variant"], structure, counts[0]))
    ]
    if not found:
        return _absent(f"the analysis did not score {params['variant']}")
    corrected, verdicts, status = _every_one_better([d for _, d in found], evidence)
    parts = [f"{structure} {d.format(1.0, 3)} nats/token {c.verdict}" for (structure, d), c in zip(found, corrected)]
    return Outcome(
        status,
        f"{params['variant']} at {counts[-1]} minus at {counts[0]} rollouts, after correction: " + "; ".join(parts),
        {"verdicts": dict(verdicts), "rollouts": [counts[0], counts[-1]]},
    )


def check_claims(
    config: Mapping, results: str | Path, runs: Mapping[Cell, Run] | None = None, claims: list[Claim] | None = None
) -> list[tuple[Claim, Outcome]]:
    """Every claim's outcome on the results under ``results`` (the config's grid; ``runs``: already collected)."""
    config = {**config, "results_dir": str(results)}
    evidence = Evidence(config, runs if runs is not None else collect_runs(config, results))
    return [(claim, MEASURES[claim.measure](evidence, claim.params)) for claim in claims or load_claims()]


def claims_table(checks: list[tuple[Claim, Outcome]]):
    """The report's first table: the same check as `hara repro-check`."""
    from hara.report.tables import Table

    rows = [[claim.key, claim.paper, outcome.ours, outcome.status] for claim, outcome in checks]
    return Table(
        "paper",
        "The paper's claims checked on this run",
        "Left: the paper's own statements (its models, benchmarks and hardware; config/paper_claims.yaml, "
        "from the public summary), never ours. Right: the same measure on this run's results with its "
        "interval, and the status: reproduced / within noise / contradicted / not measured (see "
        "config/paper_claims.yaml for how each is measured; `hara repro-check` prints the same).",
        ["claim", "paper", "ours (this run)", "status"],
        rows,
    )


def format_checks(checks: list[tuple[Claim, Outcome]]) -> str:
    """One block per claim: status, the paper's statement, ours, and how it is measured."""
    lines = []
    for claim, outcome in checks:
        lines += [
            f"[{outcome.status}] {claim.key}",
            f"  paper: {claim.paper}",
            f"  ours:  {outcome.ours}",
            f"  how:   {claim.how}",
        ]
    counts = Counter(outcome.status for _, outcome in checks)
    lines.append(", ".join(f"{counts[s]} {s}" for s in (REPRODUCED, NOISE, CONTRADICTED, NOT_MEASURED)))
    return "\n".join(lines)
