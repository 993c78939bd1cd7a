"""`hara repro-check`: each of the paper's claims (hara/analysis/paper_claims.yaml) checked against the results
present.

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
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from hara.analysis.claims import CLAIMS_PATH
from hara.errors import ConfigError
from hara.report.compare import Comparison, compare_cells
from hara.results.collect import Cell, Run, collect_runs, read_run, seed_runs
from hara.results.files import read_json
from hara.results.paired import (
    BETTER,
    WITHIN_NOISE,
    WORSE,
    Bootstrap,
    Difference,
    Interval,
    block_bootstrap_ratio,
    correct_family,
    pool_differences,
    power_multiplier,
    t_interval,
    t_quantile,
)
from hara.results.stats import TARGET_FRACTION, CurvePair, curve_pair, step_costs

__all__ = ["MEASURES", "Claim", "Outcome", "check_claims", "claims_table", "format_checks", "load_claims"]

REPRODUCED, NOISE, CONTRADICTED, NOT_MEASURED = "reproduced", "within noise", "contradicted", "not measured"
VERDICT_STATUS = {BETTER: REPRODUCED, WITHIN_NOISE: NOISE, WORSE: CONTRADICTED}
BASELINE = "none"


@dataclass(frozen=True)
class Claim:
    """A claim of the claims file; ``primary``: its pre-registered primary comparison ({method, against}: a pooled
    paired comparison; ``why``: why the claim's own measure is one test), tested alone at the report's level."""

    key: str
    paper: str
    measure: str
    params: Mapping
    how: str
    primary: Mapping = field(default_factory=dict)


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
    compared: dict = field(default_factory=dict, compare=False, repr=False)  # compare()'s answers, by its arguments

    @property
    def bootstrap(self) -> Bootstrap:
        return Bootstrap.from_config(self.config)

    def compare(self, size: str, rlvr: str, method: str, against: str) -> Comparison | None:
        """The grid's paired comparison (hara.report.compare.compare_cells), computed once per check: a claim's
        primary and its secondary family read the same ones."""
        key = (size, rlvr, method, against)
        if key not in self.compared:
            self.compared[key] = compare_cells(self.config, self.runs, size, rlvr, method, against)
        return self.compared[key]

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


def load_claims(path: str | Path | None = None) -> list[Claim]:
    """The claims file (the shipped hara/analysis/paper_claims.yaml by default); a claim naming an unknown measure is
    refused with its key."""
    path = CLAIMS_PATH if path is None else Path(path)
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
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
                entry.get("primary") or {},
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
        if (found := evidence.compare(size, rlvr, m, b)) is not None
    ]


def _family_status(verdicts: Counter, size: int) -> str:
    """Reproduced when a corrected verdict is better; contradicted when every one is worse."""
    if verdicts[BETTER]:
        return REPRODUCED
    return CONTRADICTED if verdicts[WORSE] == size else NOISE


def _points(value: float) -> str:
    return f"{100 * value:.1f}"


def primary_weights(evidence: Evidence, claim: Claim) -> dict[str, float] | None:
    """A claim's pooled paired primary as contrast weights over the grid's methods (the method +1, each method it
    is compared with -1 / their number); None for a claim whose primary is not one (a curve measure, a ``why``)
    or whose methods the grid does not train."""
    primary = claim.primary
    if "method" not in primary or claim.measure == "curve_measure":
        return None
    against = evidence.methods(primary["against"])
    if primary["method"] not in evidence.config["grid"]["methods"] or not against:
        return None
    return {primary["method"]: 1.0, **{b: -1.0 / len(against) for b in against}}


def primary_difference(evidence: Evidence, primary: Mapping) -> tuple[Difference | None, list[str]]:
    """A primary endpoint: ``method`` minus the mean of ``against`` (names or a registry kind), benchmark-average
    pass@1, in each (size, rlvr) cell where all were evaluated, pooled over those cells (hara.results.paired:
    the comparisons' joint replicates); with the cells that lacked one."""
    method, against = primary["method"], evidence.methods(primary["against"])
    cells, missing = [], []
    for size, rlvr in evidence.cells():
        found = [evidence.compare(size, rlvr, method, b) for b in against]
        if against and all(found):
            cells.append(pool_differences([f.average for f in found], evidence.bootstrap.confidence))
        else:
            missing.append(f"{size}, {rlvr}")
    if not cells:
        return None, missing
    return pool_differences(cells, evidence.bootstrap.confidence), missing


def _primary_outcome(evidence: Evidence, primary: Mapping) -> tuple[str, str, dict] | None:
    """(status, our words, numbers) of a claim's pooled primary endpoint; None when the claim names none. Better
    reproduces, worse contradicts; an interval of the problems only (one seed, no declared run variance) decides
    nothing: not measured."""
    if "method" not in primary:
        return None
    found, missing = primary_difference(evidence, primary)
    label = f"{primary['method']} - {' / '.join(evidence.methods(primary['against'])) or primary['against']}"
    if found is None:
        return NOT_MEASURED, f"primary {label}: n/a (no cell has every run evaluated)", {}
    mde = power_multiplier(t_quantile((1 + evidence.bootstrap.confidence) / 2, found.df), found.df) * found.se
    cells = len(evidence.cells()) - len(missing)
    status = VERDICT_STATUS[found.verdict] if found.decides else NOT_MEASURED
    words = (
        f"primary {label}, pooled over {cells} cell{'s' if cells != 1 else ''}: {found.format()} points, "
        f"{found.verdict}, MDE {_points(mde)} ({found.describe_basis()})"
    )
    if not found.decides:
        words += "; decides nothing: declare a run variance or train report.min_seeds seeds"
    if missing:
        words += f"; cells without every run: {'; '.join(missing)}"
    return status, words, {"primary": {**found.as_dict(), "mde": mde, "cells": cells, "missing_cells": missing}}


def _with_primary(evidence: Evidence, params: Mapping, secondary: Outcome) -> Outcome:
    """The claim's status from its primary endpoint; the family (or other measure) described as secondary."""
    primary = _primary_outcome(evidence, params.get("primary") or {})
    if primary is None:
        return secondary
    status, words, numbers = primary
    return Outcome(
        status,
        f"{words}. Secondary: {secondary.ours} [{secondary.status}]",
        {**numbers, "secondary": {"status": secondary.status, **secondary.numbers}},
    )


@measure("paired_gain_family")
def paired_gain_family(evidence: Evidence, params: Mapping) -> Outcome:
    """Paired average-pass@1 differences of ``methods`` over ``against`` in every (size, rlvr): one family, corrected
    with simultaneous intervals; the status counts the corrected verdicts, the largest difference is described.
    With a primary endpoint (the claims file) that family is the secondary."""
    return _with_primary(evidence, params, _gain_family(evidence, params))


def _gain_family(evidence: Evidence, params: Mapping) -> Outcome:
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
    decides = all(found.average.decides for found, _, _ in pairs)
    return Outcome(
        _family_status(verdicts, len(pairs)) if decides else NOT_MEASURED,
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
    is the claim. With a primary endpoint (the claims file) that family is the secondary."""
    return _with_primary(evidence, params, _majority(evidence, params))


def _majority(evidence: Evidence, params: Mapping) -> Outcome:
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
    decides = all(d.decides for d in differences)
    return Outcome(status if decides else NOT_MEASURED, ours, {"verdicts": dict(verdicts), "total": total})


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


#: Training-curve measures per (run, baseline) pair of the same seed (hara.results.stats.curve_pair): the value the
#: t-intervals average (the speed-up on a log scale, so that 2x and 0.5x are symmetric) and how it reads back.
CURVE_MEASURES: dict[str, tuple[Callable[[CurvePair], float | None], Callable[[float], str], float]] = {
    "speedup": (lambda p: math.log(p.speedup) if p.speedup else None, lambda v: f"{math.exp(v):.2f}x", 0.0),
    "equal_time": (lambda p: p.equal_time, lambda v: f"{100 * v:+.1f} points", 0.0),
}


def _curve_values(evidence: Evidence, method: str, measure: str, fraction: float) -> dict[tuple[str, str], list]:
    """Per (size, rlvr) the measure's value of each seed of ``method`` paired with the baseline's run of that seed;
    a pair whose mean curve gained nothing has no target and no value (it favours neither run)."""
    value_of = CURVE_MEASURES[measure][0]
    found: dict[tuple[str, str], list] = {}
    for size, rlvr in evidence.cells():
        base = seed_runs(evidence.runs, size, rlvr, BASELINE)
        for seed, run in seed_runs(evidence.runs, size, rlvr, method).items():
            if seed in base and run.metrics and base[seed].metrics:
                pair = curve_pair(run.metrics, base[seed].metrics, fraction)
                found.setdefault((size, rlvr), []).append((value_of(pair), pair))
    return found


def _t_over(values: list[float], level: float) -> Interval | None:
    return t_interval(values, level) if len(values) >= 2 else None


@measure("curve_measure")
def curve_measure(evidence: Evidence, params: Mapping) -> Outcome:
    """A training-curve measure (``speedup``: the baseline's cost over the method's to a target both share, both
    censored at their end when not reached; ``equal_time``: the method's accuracy at the baseline's whole cost minus
    the baseline's final). Primary: every (cell, seed) pair of the primary method, a t-interval over those
    independent run pairs; secondary: per (size, rlvr, method) a t-interval over the seeds, Bonferroni over every
    cell the claim covers (a cell below report.min_seeds seeds counts in the family and decides nothing)."""
    measure, fraction = params["measure"], float(params.get("target_fraction", TARGET_FRACTION))
    _, show, reference = CURVE_MEASURES[measure]
    methods = evidence.methods(params["methods"])
    family = len(methods) * len(evidence.cells())
    level = 1 - (1 - evidence.bootstrap.confidence) / max(family, 1)
    measured, cells_above, axis = [], 0, set()
    for method in methods:
        for (size, rlvr), pairs in _curve_values(evidence, method, measure, fraction).items():
            values = [v for v, _ in pairs if v is not None]
            axis |= {p.axis for _, p in pairs}
            found = _t_over(values, level) if len(values) >= evidence.min_seeds else None
            cells_above += bool(found and found.low > reference)
            measured.append((method, size, rlvr, values, sum(not all(p.reached) for _, p in pairs if p.target)))
    secondary = f"{cells_above} of {family} cells above {show(reference)} (t-intervals at {level:.1%})"
    primary = (params.get("primary") or {}).get("method")
    values = [v for method, _, _, vs, _ in measured if method == primary for v in vs]
    censored = sum(c for method, _, _, _, c in measured if method == primary)
    found = _t_over(values, evidence.bootstrap.confidence) if len(values) >= evidence.min_seeds else None
    if found is None:
        return _absent(
            f"primary {primary} - {BASELINE} needs >= {evidence.min_seeds} run pairs with a target "
            f"(report.min_seeds), has {len(values)}; secondary: {secondary}"
        )
    status = REPRODUCED if found.low > reference else CONTRADICTED if found.high < reference else NOISE
    ours = (
        f"primary {primary} - {BASELINE} over {len(values)} run pairs ({'/'.join(sorted(axis))}, target "
        f"{fraction:.0%} of the shared gain, {censored} pair(s) censored): {show(found.value)} "
        f"[{show(found.low)}, {show(found.high)}]. Secondary: {secondary}"
    )
    return Outcome(
        status,
        ours,
        {
            "primary": vars(found),
            "pairs": len(values),
            "censored": censored,
            "cells_above": cells_above,
            "family": family,
        },
    )


def _exact_runs(evidence: Evidence, method: str) -> dict[str, dict[int, Run]] | None:
    """The exact-vs-linearized analysis' runs of ``method``: {"exact" | "linearized": {seed: Run}}."""
    from hara.analysis.workflow import exact_counterpart, study_eval_dir, study_run_dir, study_runs

    analyses = evidence.config["analyses"]
    if not analyses["enabled"] or method not in analyses["exact_methods"]:
        return None
    found: dict[str, dict[int, Run]] = {"exact": {}, "linearized": {}}
    for run in study_runs(evidence.config, "exact"):
        backend = {method: "linearized", exact_counterpart(method): "exact"}.get(run.method)
        if backend:
            cell = Cell(run.size, run.rlvr, backend, run.seed)
            found[backend][run.seed] = read_run(
                cell, Path(study_run_dir(evidence.config, run)), Path(study_eval_dir(evidence.config, run))
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

    from hara.analysis.output import PROBLEM_SCORES
    from hara.analysis.workflow import analysis_outputs, enabled_analyses

    if "interpretability" not in enabled_analyses(evidence.config):
        return None
    folder = Path(analysis_outputs(evidence.config, "interpretability")["json"]).parent
    path = folder / PROBLEM_SCORES
    return read_json(path, "rule analysis (hara analysis interpretability)")["rows"] if path.is_file() else None


def _problem_difference(a: Mapping[str, float], b: Mapping[str, float], evidence: Evidence):
    """A - B over the problems both were scored on, paired bootstrap over problems (hara.results.paired)."""
    from hara.results.paired import bootstrap_difference, paired_matrix

    shared = sorted(set(a) & set(b))
    return bootstrap_difference(  # two analyses of the same rollouts: no run's luck between them
        [paired_matrix({0: {p: a[p] for p in shared}}, {0: {p: b[p] for p in shared}})], evidence.bootstrap.within_run()
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
    return [
        (claim, MEASURES[claim.measure](evidence, {**claim.params, "primary": claim.primary}))
        for claim in claims or load_claims()
    ]


def claims_table(checks: list[tuple[Claim, Outcome]], stages: Mapping[str, str] | None = None):
    """The report's first table: the same check as `hara repro-check`; with staged seeds, each claim's stage and
    decision beside its status."""
    from hara.report.tables import Table

    stages = stages or {}
    rows = [
        [
            claim.key,
            claim.paper,
            outcome.ours,
            outcome.status + (f" ({stages[claim.key]})" if claim.key in stages else ""),
        ]
        for claim, outcome in checks
    ]
    return Table(
        "paper",
        "The paper's claims checked on this run",
        "Left: the paper's own statements (its models, benchmarks and hardware; hara/analysis/paper_claims.yaml, "
        "from the public summary), never ours. Right: the same measure on this run's results with its "
        "interval, and the status: reproduced / within noise / contradicted / not measured, which is the claim's "
        "pre-registered primary endpoint's (one comparison pooled over the grid, tested alone); the family of "
        "per-cell comparisons follows as 'Secondary', described, never the status (see "
        "hara/analysis/paper_claims.yaml for how each is measured; `hara repro-check` prints the same; with staged "
        "seeds, the stage and its decision).",
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
