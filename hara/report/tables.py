"""The paper's tables over our runs, as plain data (title, note, header, rows of strings) for the renderers.

Every number is computed from the runs; a cell without data reads "n/a". Scores are pass@1 in percent (mean ±
standard error over seeds); the efficiency measures come from the training logs (metrics.jsonl).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from hara.report.collect import Cell, Run
from hara.report.stats import NA, Estimate, final_value, mean_se, step_reaching, value_at_time

__all__ = ["TABLES", "Table", "build_tables"]

BASELINE = "none"
ACCURACY = "train/accuracy"


@dataclass(frozen=True)
class Table:
    """One table of the report."""

    key: str
    title: str
    note: str
    header: list[str]
    rows: list[list[str]]


def host_rlvr(config: Mapping) -> str:
    """The RLVR preset of the main table: GRPO as in the paper when trained, else the first preset of the grid."""
    presets = config["grid"]["rlvr"]
    return "grpo" if "grpo" in presets else presets[0]


def runs_of(runs: Mapping[Cell, Run], size: str, rlvr: str, method: str) -> list[Run]:
    """The runs (one per seed) of one (size, rlvr, method)."""
    return [run for cell, run in runs.items() if (cell.size, cell.rlvr, cell.method) == (size, rlvr, method)]


def average_score(run: Run, benchmarks: list[str]) -> float | None:
    """Mean pass@1 over the benchmarks; None unless every benchmark was scored (a partial mean would mislead)."""
    if not all(name in run.scores for name in benchmarks):
        return None
    return sum(run.scores[name] for name in benchmarks) / len(benchmarks)


def score_estimate(group: list[Run], benchmark: str | None, benchmarks: list[str]) -> Estimate:
    """pass@1 over seeds on one benchmark, or on the benchmark average when ``benchmark`` is None."""
    if benchmark is None:
        return mean_se([average_score(run, benchmarks) for run in group])
    return mean_se([run.scores.get(benchmark) for run in group])


def pct(estimate: Estimate, seeds: int) -> str:
    return estimate.format(scale=100.0, digits=1, expected=seeds)


def main_table(config: Mapping, runs: Mapping[Cell, Run]) -> Table:
    """Size x method rows, one column per benchmark plus the average (host preset GRPO)."""
    benchmarks, rlvr, seeds = config["data"]["benchmarks"], host_rlvr(config), len(config["grid"]["seeds"])
    rows = []
    for size in config["models"]["sizes"]:
        for method in config["grid"]["methods"]:
            group = runs_of(runs, size, rlvr, method)
            rows.append([size, method, *(pct(score_estimate(group, b, benchmarks), seeds) for b in benchmarks),
                         pct(score_estimate(group, None, benchmarks), seeds)])
    return Table("main", f"Main results ({rlvr})",
                 f"pass@1 (%) per benchmark, mean ± standard error over {seeds} seed(s); host preset {rlvr}.",
                 ["size", "method", *benchmarks, "average"], rows)


def rlvr_table(config: Mapping, runs: Mapping[Cell, Run]) -> Table:
    """RLVR preset x method: the benchmark-average pass@1, per size."""
    benchmarks, methods, seeds = config["data"]["benchmarks"], config["grid"]["methods"], len(config["grid"]["seeds"])
    rows = [[size, rlvr, *(pct(score_estimate(runs_of(runs, size, rlvr, m), None, benchmarks), seeds)
                           for m in methods)]
            for size in config["models"]["sizes"] for rlvr in ("grpo", "dr_grpo", "dapo")]
    return Table("rlvr", "HarA across RLVR algorithms",
                 "Average pass@1 (%) over the benchmarks, mean ± standard error over seeds; presets not in the "
                 "config's grid read n/a.", ["size", "rlvr", *methods], rows)


def seq_tok_table(config: Mapping, runs: Mapping[Cell, Run]) -> Table:
    """Sequence- vs token-level HarA against the baseline, per size and preset."""
    benchmarks, seeds = config["data"]["benchmarks"], len(config["grid"]["seeds"])
    methods = [BASELINE, "hara_seq", "hara_tok"]
    rows = []
    for size in config["models"]["sizes"]:
        for rlvr in config["grid"]["rlvr"]:
            est = {m: score_estimate(runs_of(runs, size, rlvr, m), None, benchmarks) for m in methods}
            gap = (f"{(est['hara_tok'].mean - est['hara_seq'].mean) * 100:+.1f}"
                   if est["hara_tok"].mean is not None and est["hara_seq"].mean is not None else NA)
            rows.append([size, rlvr, *(pct(est[m], seeds) for m in methods), gap])
    return Table("seq_tok", "Sequence-level vs token-level HarA",
                 "Average pass@1 (%) over the benchmarks; tok − seq in percentage points (difference of means).",
                 ["size", "rlvr", *methods, "tok − seq"], rows)


def _seed_runs(runs: Mapping[Cell, Run], size: str, rlvr: str, method: str) -> dict[int, Run]:
    return {cell.seed: run for cell, run in runs.items() if (cell.size, cell.rlvr, cell.method) == (size, rlvr, method)}


def efficiency_measures(run: Run, baseline: Run | None) -> dict[str, float | None]:
    """Per-step time, its overhead vs the baseline, steps / seconds to the baseline's final training accuracy,
    and training accuracy at the baseline's total wall time (None where the logs do not give it)."""
    step_times = [row["time/step_s"] for row in run.metrics if "time/step_s" in row]
    base_times = [row["time/step_s"] for row in baseline.metrics if "time/step_s" in row] if baseline else []
    step_s = sum(step_times) / len(step_times) if step_times else None
    base_s = sum(base_times) / len(base_times) if base_times else None
    target = final_value(baseline.metrics, ACCURACY) if baseline else None
    reached = step_reaching(run.metrics, ACCURACY, target) if target is not None else None
    return {
        "step_s": step_s,
        "overhead": (step_s / base_s - 1.0) if step_s is not None and base_s else None,
        "steps_to_target": float(reached[0]) if reached else None,
        "seconds_to_target": reached[1] if reached else None,
        "acc_at_budget": value_at_time(run.metrics, ACCURACY, sum(base_times)) if base_times else None,
    }


EFFICIENCY_COLUMNS: list[tuple[str, str, Callable[[Estimate, int], str]]] = [
    ("step_s", "s / step", lambda e, n: e.format(1.0, 3, n)),
    ("overhead", "overhead vs none (%)", lambda e, n: e.format(100.0, 1, n)),
    ("steps_to_target", "steps to none's final acc.", lambda e, n: e.format(1.0, 0, n)),
    ("seconds_to_target", "seconds to none's final acc.", lambda e, n: e.format(1.0, 1, n)),
    ("acc_at_budget", "train acc. at none's wall time (%)", lambda e, n: e.format(100.0, 1, n)),
]


def efficiency_table(config: Mapping, runs: Mapping[Cell, Run]) -> Table:
    """Per (size, rlvr, method): cost per step and the steps / time / accuracy trade-off against the baseline."""
    seeds = len(config["grid"]["seeds"])
    rows = []
    for size in config["models"]["sizes"]:
        for rlvr in config["grid"]["rlvr"]:
            base = _seed_runs(runs, size, rlvr, BASELINE)
            for method in config["grid"]["methods"]:
                per_seed = [efficiency_measures(run, base.get(seed))
                            for seed, run in _seed_runs(runs, size, rlvr, method).items() if run.metrics]
                rows.append([size, rlvr, method, *(fmt(mean_se([m[key] for m in per_seed]), seeds)
                                                   for key, _, fmt in EFFICIENCY_COLUMNS)])
    return Table("efficiency", "Efficiency",
                 "From metrics.jsonl, paired with the baseline (none) of the same seed. Target = none's final "
                 "training accuracy (moving average over a tenth of the run); n/a = not reached or not logged. "
                 "Accuracy at equal wall time = the smoothed training accuracy after none's total training time.",
                 ["size", "rlvr", "method", *(title for _, title, _ in EFFICIENCY_COLUMNS)], rows)


#: The report's tables, in page order.
TABLES: list[Callable[[Mapping, Mapping[Cell, Run]], Table]] = [main_table, rlvr_table, seq_tok_table,
                                                                 efficiency_table]


def build_tables(config: Mapping, runs: Mapping[Cell, Run]) -> list[Table]:
    return [make(config, runs) for make in TABLES]
