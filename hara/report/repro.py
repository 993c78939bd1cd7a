"""`hara repro-check`: each of the paper's claims (config/paper_claims.yaml) checked against the results present.

A claim names a measure of :data:`MEASURES`; each measure reads the runs, computes our number with an interval
(paired bootstrap over problems for accuracy, bootstrap over steps for per-step cost, over seeds for training-curve
measures; hara.report.paired) and returns a status: ``reproduced`` (the interval supports the claim), ``within
noise`` (it cannot tell), ``contradicted`` (it excludes the claim), or ``not measured`` (the results lack what the
measure needs, or it would have no interval). The report's first table is the same check.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from hara.analysis.claims import CLAIMS_PATH
from hara.config import ConfigError
from hara.report.collect import Cell, Run, collect_runs, read_run
from hara.report.compare import Comparison, compare_cells
from hara.report.stats import step_costs
from hara.report.paired import BETTER, WITHIN_NOISE, WORSE, Bootstrap, Interval, bootstrap_mean, bootstrap_ratio

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
            raise ConfigError(f"{path}: claims.{key}.measure: {entry.get('measure')!r} is not one of "
                              f"{', '.join(sorted(MEASURES))}")
        claims.append(Claim(key, str(entry["paper"]), entry["measure"], entry.get("params") or {},
                            " ".join(str(entry.get("how", "")).split())))
    return claims


def _absent(what: str) -> Outcome:
    return Outcome(NOT_MEASURED, f"n/a ({what})", {})


def _pairs(evidence: Evidence, methods: list[str], against: list[str]) -> list[tuple[Comparison, str, str]]:
    return [(found, size, rlvr) for size, rlvr in evidence.cells() for m in methods for b in against
            if (found := compare_cells(evidence.config, evidence.runs, size, rlvr, m, b)) is not None]


@measure("best_paired_gain")
def best_paired_gain(evidence: Evidence, params: Mapping) -> Outcome:
    """The largest paired average-pass@1 difference of ``methods`` over ``against``; its verdict is the status."""
    methods, against = evidence.methods(params["methods"]), evidence.methods(params["against"])
    pairs = _pairs(evidence, methods, against)
    if not pairs:
        return _absent(f"no paired evaluations of {', '.join(methods) or 'HarA'} and {', '.join(against) or '-'}")
    best, size, rlvr = max(pairs, key=lambda item: item[0].average.mean)
    counts = Counter(found.average.verdict for found, _, _ in pairs)
    ours = (f"{best.a} vs {best.b} ({size}, {rlvr}): {best.format()} points; of {len(pairs)} comparisons "
            f"{counts[BETTER]} better, {counts[WITHIN_NOISE]} within noise, {counts[WORSE]} worse")
    return Outcome(VERDICT_STATUS[best.average.verdict], ours,
                   {"best": {"size": size, "rlvr": rlvr, **best.as_dict()}, "verdicts": dict(counts)})


@measure("majority_better")
def majority_better(evidence: Evidence, params: Mapping) -> Outcome:
    """Per (size, rlvr, benchmark) verdicts of ``method`` - ``against``: better on most is the claim."""
    pairs = _pairs(evidence, evidence.methods([params["method"]]), evidence.methods([params["against"]]))
    verdicts = Counter(d.verdict for found, _, _ in pairs for d in found.per_benchmark.values())
    total = sum(verdicts.values())
    if not total:
        return _absent(f"no paired evaluations of {params['method']} and {params['against']}")
    better, worse = verdicts[BETTER], verdicts[WORSE]
    status = CONTRADICTED if worse > better else REPRODUCED if better > worse and 2 * better >= total else NOISE
    ours = (f"{params['method']} - {params['against']} over {total} (size, rlvr, benchmark): {better} better, "
            f"{verdicts[WITHIN_NOISE]} within noise, {worse} worse")
    return Outcome(status, ours, {"verdicts": dict(verdicts), "total": total})


def _bounded(intervals: list[Interval], bound: float) -> str:
    """At most ``bound``: every interval under it reproduces; any wholly above contradicts."""
    if any(i.low > bound for i in intervals):
        return CONTRADICTED
    return REPRODUCED if all(i.high <= bound for i in intervals) else NOISE


@measure("cost_overhead")
def cost_overhead(evidence: Evidence, params: Mapping) -> Outcome:
    """Per-step cost of each HarA run over its baseline's (same size, rlvr, seed) minus 1, bootstrap over steps."""
    found: list[tuple[Interval, str, str]] = []
    for cell, run in evidence.runs.items():
        base = evidence.runs.get(Cell(cell.size, cell.rlvr, params["against"], cell.seed))
        if cell.method not in evidence.methods(params["methods"]) or base is None:
            continue
        (mine, kind), (theirs, base_kind) = step_costs(run.metrics), step_costs(base.metrics)
        if mine and theirs:
            ratio = bootstrap_ratio(mine, theirs, evidence.bootstrap)
            found.append((Interval(ratio.value - 1, ratio.low - 1, ratio.high - 1),
                          f"{cell.method}, {cell.size}, {cell.rlvr}, seed {cell.seed}",
                          kind if kind == base_kind else "wall time"))
    if not found:
        return _absent("no HarA run with a trained baseline")
    worst, where, kind = max(found, key=lambda item: item[0].value)
    flag = "" if kind == "CPU time" else " (wall time: not comparable where jobs shared the machine)"
    ours = f"largest: {worst.format('{:+.1%}')} per-step {kind} ({where}){flag}"
    return Outcome(_bounded([i for i, _, _ in found], float(params["bound"])), ours,
                   {"largest": vars(worst), "where": where, "cost": kind})


#: How a training-curve measure's value reads.
CURVE_FORMATS: dict[str, Callable[[float], str]] = {"speedup": lambda v: f"{v:.2f}x",
                                                    "equal_time": lambda v: f"{100 * v:+.1f} points"}


@measure("seed_curve_measure")
def seed_curve_measure(evidence: Evidence, params: Mapping) -> Outcome:
    """A training-curve measure per seed (speed-up to the baseline's accuracy, accuracy at its time), bootstrap
    over seeds; the best HarA method's interval against ``reference`` (no effect)."""
    from hara.report.tables import seed_curve_values

    best: tuple[Interval, str] | None = None
    single: list[str] = []
    show = CURVE_FORMATS[params["measure"]]
    for size, rlvr in evidence.cells():
        for method in evidence.methods(params["methods"]):
            values = seed_curve_values(evidence.runs, size, rlvr, method, params["measure"])
            if len(values) == 1:
                single.append(f"{show(values[0])} ({method}, {size}, {rlvr})")
            elif len(values) > 1:
                interval = bootstrap_mean(values, evidence.bootstrap)
                if best is None or interval.value > best[0].value:
                    best = (interval, f"{method}, {size}, {rlvr}, {len(values)} seeds")
    if best is None:
        return _absent(f"one seed gives {'; '.join(single)}; an interval needs 2+ seeds" if single
                       else "no HarA run reached a measurable point against its baseline")
    reference = float(params["reference"])
    status = REPRODUCED if best[0].low > reference else CONTRADICTED if best[0].high < reference else NOISE
    ours = f"best: {show(best[0].value)} [{show(best[0].low)}, {show(best[0].high)}] ({best[1]})"
    return Outcome(status, ours, {"best": vars(best[0]), "where": best[1]})


def _exact_runs(evidence: Evidence, method: str) -> dict[str, dict[int, Run]] | None:
    """The exact-vs-linearized analysis' runs of ``method``: {"exact" | "linearized": {seed: Run}}."""
    from hara.analysis.plan import eval_dir, exact_counterpart, run_dir, study_runs

    analyses = evidence.config["analyses"]
    if not analyses["enabled"] or method not in analyses["exact_methods"]:
        return None
    found: dict[str, dict[int, Run]] = {"exact": {}, "linearized": {}}
    for run in study_runs(evidence.config, "exact"):
        backend = {method: "linearized", exact_counterpart(method): "exact"}.get(run.method)
        if backend:
            cell = Cell(run.size, run.rlvr, backend, run.seed)
            found[backend][run.seed] = read_run(cell, Path(run_dir(evidence.config, run)),
                                                Path(eval_dir(evidence.config, run)))
    return found


@measure("exact_speedup")
def exact_speedup(evidence: Evidence, params: Mapping) -> Outcome:
    """Per-step cost of exact FGW over the linearization (the exact analysis), bootstrap over steps."""
    runs = _exact_runs(evidence, params["method"])
    if runs is None:
        return _absent(f"the exact-vs-linearized analysis of {params['method']} is off: config/analyses.yaml")
    exact = [c for r in runs["exact"].values() for c in step_costs(r.metrics)[0]]
    linear = [c for r in runs["linearized"].values() for c in step_costs(r.metrics)[0]]
    if not exact or not linear:
        return _absent("the analysis' runs have no training metrics yet")
    ratio = bootstrap_ratio(exact, linear, evidence.bootstrap)
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
    if any(d.high < -bound or d.low > bound for d in found):
        status = CONTRADICTED
    else:
        status = REPRODUCED if all(-bound <= d.low and d.high <= bound for d in found) else NOISE
    return Outcome(status, "linearized - exact: " + "; ".join(parts), {"differences": [d.as_dict() for d in found]})


def check_claims(config: Mapping, results: str | Path, runs: Mapping[Cell, Run] | None = None,
                 claims: list[Claim] | None = None) -> list[tuple[Claim, Outcome]]:
    """Every claim's outcome on the results under ``results`` (the config's grid; ``runs``: already collected)."""
    config = {**config, "results_dir": str(results)}
    evidence = Evidence(config, runs if runs is not None else collect_runs(config, results))
    return [(claim, MEASURES[claim.measure](evidence, claim.params)) for claim in claims or load_claims()]


def claims_table(checks: list[tuple[Claim, Outcome]]):
    """The report's first table: the same check as `hara repro-check`."""
    from hara.report.tables import Table

    rows = [[claim.key, claim.paper, outcome.ours, outcome.status] for claim, outcome in checks]
    return Table("paper", "The paper's claims checked on this run",
                 "Left: the paper's own statements (its models, benchmarks and hardware; config/paper_claims.yaml, "
                 "from the public summary), never ours. Right: the same measure on this run's results with its "
                 "interval, and the status: reproduced / within noise / contradicted / not measured (see "
                 "config/paper_claims.yaml for how each is measured; `hara repro-check` prints the same).",
                 ["claim", "paper", "ours (this run)", "status"], rows)


def format_checks(checks: list[tuple[Claim, Outcome]]) -> str:
    """One block per claim: status, the paper's statement, ours, and how it is measured."""
    lines = []
    for claim, outcome in checks:
        lines += [f"[{outcome.status}] {claim.key}", f"  paper: {claim.paper}", f"  ours:  {outcome.ours}",
                  f"  how:   {claim.how}"]
    counts = Counter(outcome.status for _, outcome in checks)
    lines.append(", ".join(f"{counts[s]} {s}" for s in (REPRODUCED, NOISE, CONTRADICTED, NOT_MEASURED)))
    return "\n".join(lines)
