"""Which two evaluations may be compared, and their paired difference (:mod:`hara.report.paired`).

Every ``hara evaluate`` records per benchmark an evaluation fingerprint (``eval_fingerprint`` in scores.json; see
:func:`hara.evaluation.runner.evaluation_fingerprint`): what must be equal for two pass@1 values to measure the
same thing (benchmark content, prompt template, stop sequences, sampling settings and seed, backend, device kind,
the versions of the scoring and generation stack). The report compares two runs only where those are equal; else
it stops with one line naming the differing fields (:class:`ComparisonError`), unless the config's
``report.allow_fingerprint_mismatch`` (``hara report --allow-fingerprint-mismatch``) says to go on, and then the
table marks the comparison with :data:`MISMATCH_MARK`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from hara.report.collect import Cell, Run, seed_runs
from hara.report.paired import Bootstrap, Difference, bootstrap_difference, paired_matrix

__all__ = ["FINGERPRINT_KEY", "MISMATCH_MARK", "Comparison", "ComparisonError", "compare_cells",
           "fingerprint_differences", "flatten"]

FINGERPRINT_KEY = "eval_fingerprint"
MISMATCH_MARK = "†"


class ComparisonError(ValueError):
    """Two evaluations that the report was asked to compare are not comparable (one line, for the CLI)."""


def flatten(tree: Mapping, prefix: str = "") -> dict[str, object]:
    """Nested mappings -> {"a.b.c": value}."""
    out: dict[str, object] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def fingerprint_differences(a: Mapping | None, b: Mapping | None) -> list[str]:
    """``field (a vs b)`` for every fingerprint field that differs; a missing fingerprint is a difference."""
    if a is None or b is None:
        return [f"{FINGERPRINT_KEY} (missing: evaluated before fingerprints were recorded; evaluate again)"]
    flat_a, flat_b = flatten(a), flatten(b)
    return [f"{key} ({flat_a.get(key, 'absent')} vs {flat_b.get(key, 'absent')})"
            for key in sorted(flat_a.keys() | flat_b.keys()) if flat_a.get(key) != flat_b.get(key)]


@dataclass(frozen=True)
class Comparison:
    """A - B per benchmark and on the benchmark average; ``mismatched``: benchmark -> differing fields (only when
    the config allowed comparing them anyway)."""

    a: str
    b: str
    per_benchmark: dict[str, Difference]
    average: Difference
    mismatched: dict[str, list[str]] = field(default_factory=dict)

    def format(self, benchmark: str | None = None) -> str:
        """``+0.3 [-1.2, +1.8] within noise`` for one benchmark (None: the average), marked when mismatched."""
        diff = self.average if benchmark is None else self.per_benchmark[benchmark]
        mark = MISMATCH_MARK if (self.mismatched if benchmark is None else benchmark in self.mismatched) else ""
        return f"{diff.format()} {diff.verdict}{mark}"

    def as_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "average": self.average.as_dict(),
                "benchmarks": {name: d.as_dict() for name, d in self.per_benchmark.items()},
                "fingerprint_mismatch": self.mismatched}


def _seeds(runs: Mapping[Cell, Run], size: str, rlvr: str, method: str) -> dict[int, Run]:
    """{seed: run} of the cells with per-problem outcomes."""
    return {seed: run for seed, run in seed_runs(runs, size, rlvr, method).items() if run.problems}


def _checked_fingerprints(label: str, pairs: list[tuple[Run, Run]], benchmark: str, allow: bool) -> list[str]:
    """The differing fields of the pairs' fingerprints on one benchmark; raises unless ``allow``."""
    differing: list[str] = []
    for a, b in pairs:
        differing += [d for d in fingerprint_differences(a.fingerprints.get(benchmark), b.fingerprints.get(benchmark))
                      if d not in differing]
    if differing and not allow:
        raise ComparisonError(f"{label} on {benchmark}: evaluations not comparable, they differ in "
                              f"{'; '.join(differing)} (hara report --allow-fingerprint-mismatch compares them "
                              "anyway, marked)")
    return differing


def compare_cells(config: Mapping, runs: Mapping[Cell, Run], size: str, rlvr: str, method: str, against: str
                  ) -> Comparison | None:
    """``method`` - ``against`` within (size, rlvr), paired by seed and problem; None unless both have per-problem
    predictions for a common seed on every benchmark of the config."""
    benchmarks = config["data"]["benchmarks"]
    mine, theirs = _seeds(runs, size, rlvr, method), _seeds(runs, size, rlvr, against)
    seeds = [s for s in sorted(set(mine) & set(theirs))
             if all(b in mine[s].problems and b in theirs[s].problems for b in benchmarks)]
    if not seeds:
        return None
    label, allow = f"{method} vs {against} ({size}, {rlvr})", config["report"]["allow_fingerprint_mismatch"]
    settings, per_benchmark, mismatched, matrices = Bootstrap.from_config(config), {}, {}, []
    for benchmark in benchmarks:
        differing = _checked_fingerprints(label, [(mine[s], theirs[s]) for s in seeds], benchmark, allow)
        if differing:
            mismatched[benchmark] = differing
        try:
            matrix = paired_matrix({s: mine[s].problems[benchmark] for s in seeds},
                                   {s: theirs[s].problems[benchmark] for s in seeds})
        except ValueError as error:
            raise ComparisonError(f"{label} on {benchmark}: {error}") from None
        per_benchmark[benchmark] = bootstrap_difference([matrix], settings)
        matrices.append(matrix)
    return Comparison(method, against, per_benchmark, bootstrap_difference(matrices, settings), mismatched)
