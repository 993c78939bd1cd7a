"""The paper's tables over our runs, as plain data (title, note, header, rows of strings) for the renderers.

Every number is computed from the runs; a cell without data reads "n/a". Scores are pass@1 in percent (mean ±
standard error over seeds); comparisons between two methods are paired differences in percentage points with a
bootstrap interval and a verdict (hara.report.compare); the efficiency measures come from the training logs
(metrics.jsonl).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from hara.analysis.claims import PAPER_NUMBERS
from hara.report.collect import Cell, Run
from hara.report.compare import MISMATCH_MARK, compare_cells
from hara.report.paired import Bootstrap
from hara.report.stats import NA, Estimate, final_value, mean_se, step_reaching, value_at_time

__all__ = ["TABLES", "Table", "build_tables"]

BASELINE = "none"
BASE_ROW = "base (no RL)"
BaseScores = Mapping[str, Mapping[str, float]]  # pass@1 per benchmark of each size's Base model (read_base_scores)
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
    """Mean pass@1 of a run over the benchmarks (see :func:`benchmark_mean`)."""
    return benchmark_mean(run.scores, benchmarks)


def benchmark_mean(scores: Mapping[str, float], benchmarks: list[str]) -> float | None:
    """Mean pass@1 over the benchmarks; None unless every benchmark was scored (a partial mean would mislead)."""
    if not all(name in scores for name in benchmarks):
        return None
    return sum(scores[name] for name in benchmarks) / len(benchmarks)


def score_estimate(group: list[Run], benchmark: str | None, benchmarks: list[str]) -> Estimate:
    """pass@1 over seeds on one benchmark, or on the benchmark average when ``benchmark`` is None."""
    if benchmark is None:
        return mean_se([average_score(run, benchmarks) for run in group])
    return mean_se([run.scores.get(benchmark) for run in group])


def pct(estimate: Estimate, seeds: int) -> str:
    return estimate.format(scale=100.0, digits=1, expected=seeds)


def paired_note(config: Mapping) -> str:
    """How the tables' paired differences are computed (the config's report.bootstrap)."""
    settings = Bootstrap.from_config(config)
    return (f"Paired differences in percentage points with their {settings.confidence:.0%} interval: a percentile "
            f"bootstrap over the benchmark problems (with several seeds: over seeds, then problems), "
            f"{settings.resamples} resamples, seed {settings.seed}; verdict better / worse when the interval "
            f"excludes 0, else within noise. {MISMATCH_MARK} = evaluation fingerprints differ (compared on request).")


def main_table(config: Mapping, runs: Mapping[Cell, Run], base_scores: BaseScores | None = None) -> Table:
    """Size x method rows, one column per benchmark plus the average (host preset GRPO); each size's Base model
    first, before RL. Every method's cell also gives its paired difference from the baseline and a verdict."""
    benchmarks, rlvr, seeds = config["data"]["benchmarks"], host_rlvr(config), len(config["grid"]["seeds"])
    rows = []
    for size in config["models"]["sizes"]:
        base = (base_scores or {}).get(size, {})
        rows.append([size, BASE_ROW, *(_plain_pct(base.get(b)) for b in benchmarks),
                     _plain_pct(benchmark_mean(base, benchmarks))])
        for method in config["grid"]["methods"]:
            group = runs_of(runs, size, rlvr, method)
            versus = compare_cells(config, runs, size, rlvr, method, BASELINE) if method != BASELINE else None
            rows.append([size, method, *(_with_difference(pct(score_estimate(group, b, benchmarks), seeds), versus, b)
                                         for b in [*benchmarks, None])])
    return Table("main", f"Main results ({rlvr})",
                 f"pass@1 (%) per benchmark, mean ± standard error over {seeds} seed(s); host preset {rlvr}. "
                 f"Each method's cell then gives its difference from {BASELINE} (Δ) and a verdict. "
                 f"{paired_note(config)} '{BASE_ROW}' is the Base model before RL (one evaluation). "
                 f"Paper (its own models and benchmarks): {PAPER_NUMBERS['gain_vs_grpo']}.",
                 ["size", "method", *benchmarks, "average"], rows)


def _with_difference(estimate: str, versus, benchmark: str | None) -> str:
    """``25.3 ± 1.1; Δ +0.3 [-1.2, +1.8] within noise``, or the estimate alone without paired data."""
    return estimate if versus is None else f"{estimate}; Δ {versus.format(benchmark)}"


def _plain_pct(value: float | None) -> str:
    return NA if value is None else f"{100 * value:.1f}"


def rlvr_table(config: Mapping, runs: Mapping[Cell, Run], base_scores: BaseScores | None = None) -> Table:
    """RLVR preset x method: the benchmark-average pass@1, per size."""
    benchmarks, methods, seeds = config["data"]["benchmarks"], config["grid"]["methods"], len(config["grid"]["seeds"])
    rows = [[size, rlvr, *(pct(score_estimate(runs_of(runs, size, rlvr, m), None, benchmarks), seeds)
                           for m in methods)]
            for size in config["models"]["sizes"] for rlvr in ("grpo", "dr_grpo", "dapo")]
    return Table("rlvr", "HarA across RLVR algorithms",
                 "Average pass@1 (%) over the benchmarks, mean ± standard error over seeds; presets not in the "
                 "config's grid read n/a.", ["size", "rlvr", *methods], rows)


def seq_tok_table(config: Mapping, runs: Mapping[Cell, Run], base_scores: BaseScores | None = None) -> Table:
    """Sequence- vs token-level HarA against the baseline, per size and preset."""
    benchmarks, seeds = config["data"]["benchmarks"], len(config["grid"]["seeds"])
    methods = [BASELINE, "hara_seq", "hara_tok"]
    rows = []
    for size in config["models"]["sizes"]:
        for rlvr in config["grid"]["rlvr"]:
            est = {m: score_estimate(runs_of(runs, size, rlvr, m), None, benchmarks) for m in methods}
            rows.append([size, rlvr, *(pct(est[m], seeds) for m in methods), _tok_minus_seq(config, runs, size, rlvr)])
    return Table("seq_tok", "Sequence-level vs token-level HarA",
                 "Average pass@1 (%) over the benchmarks; tok − seq as a paired difference. "
                 f"{paired_note(config)} Paper: {PAPER_NUMBERS['tok_vs_seq']}.",
                 ["size", "rlvr", *methods, "tok − seq"], rows)


def _tok_minus_seq(config: Mapping, runs: Mapping[Cell, Run], size: str, rlvr: str) -> str:
    methods = config["grid"]["methods"]
    versus = compare_cells(config, runs, size, rlvr, "hara_tok", "hara_seq") \
        if {"hara_tok", "hara_seq"} <= set(methods) else None
    return NA if versus is None else versus.format()


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


def efficiency_table(config: Mapping, runs: Mapping[Cell, Run], base_scores: BaseScores | None = None) -> Table:
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
                 "Accuracy at equal wall time = the smoothed training accuracy after none's total training time. Paper: "
                 f"{PAPER_NUMBERS['overhead']}, {PAPER_NUMBERS['speedup']}, {PAPER_NUMBERS['equal_time']}.",
                 ["size", "rlvr", "method", *(title for _, title, _ in EFFICIENCY_COLUMNS)], rows)


CREDIT_BASELINES = ("forking_tokens", "gtpo", "grpo_s", "position", "shear")


def _method_gains(config: Mapping, runs: Mapping[Cell, Run], methods: list[str], against: list[str]
                  ) -> list[tuple[float, str]]:
    """(best average pass@1 of ``methods`` - best of ``against``, where) per (size, rlvr), in points."""
    benchmarks, out = config["data"]["benchmarks"], []

    def best(size: str, rlvr: str, names: list[str]) -> tuple[float, str] | None:
        est = [(score_estimate(runs_of(runs, size, rlvr, m), None, benchmarks).mean, m) for m in names]
        return max(((v, m) for v, m in est if v is not None), default=None)

    for size in config["models"]["sizes"]:
        for rlvr in config["grid"]["rlvr"]:
            mine, theirs = best(size, rlvr, methods), best(size, rlvr, against)
            if mine and theirs:
                out.append(((mine[0] - theirs[0]) * 100, f"{mine[1]} vs {theirs[1]}, {size}, {rlvr}"))
    return out


def _best(values: list[tuple[float, str]], unit: str, sign: bool = True) -> str:
    if not values:
        return NA
    value, where = max(values)
    return f"{value:+.1f}{unit} ({where})" if sign else f"{value:.2f}{unit} ({where})"


def _efficiency_extremes(config: Mapping, runs: Mapping[Cell, Run]) -> dict[str, list[tuple[float, str]]]:
    """Per HarA run paired with its baseline: total-time overhead (%), speed-up (x), gain at equal time (points)."""
    from hara.report.stats import cumulative_time

    out: dict[str, list[tuple[float, str]]] = {"overhead": [], "speedup": [], "equal_time": []}
    for cell, run in runs.items():
        base = runs.get(Cell(cell.size, cell.rlvr, BASELINE, cell.seed))
        if not cell.method.startswith("hara") or base is None or not run.metrics or not base.metrics:
            continue
        where = f"{cell.method}, {cell.size}, {cell.rlvr}, seed {cell.seed}"
        m, total, base_total = efficiency_measures(run, base), cumulative_time(run.metrics), \
            cumulative_time(base.metrics)
        base_final = final_value(base.metrics, ACCURACY)
        if total and base_total:
            out["overhead"].append(((total[-1] / base_total[-1] - 1) * 100, where))
            if m["seconds_to_target"] and base_final:  # a baseline at 0 accuracy sets no target
                out["speedup"].append((base_total[-1] / m["seconds_to_target"], where))
        if m["acc_at_budget"] is not None and base_final is not None:
            out["equal_time"].append(((m["acc_at_budget"] - base_final) * 100, where))
    return out


def paper_table(config: Mapping, runs: Mapping[Cell, Run], base_scores: BaseScores | None = None) -> Table:
    """The paper's headline numbers (hara.analysis.claims, from method.md) next to the same measure on our runs."""
    methods = config["grid"]["methods"]
    hara = [m for m in methods if m.startswith("hara")]
    credit = [m for m in methods if m in CREDIT_BASELINES]
    tok_seq = _method_gains(config, runs, ["hara_tok"], ["hara_seq"]) if {"hara_tok", "hara_seq"} <= set(methods) \
        else []
    eff = _efficiency_extremes(config, runs)
    best_overhead = max(eff["overhead"], default=None)
    rows = [
        ["HarA vs GRPO-family baseline (avg pass@1)", PAPER_NUMBERS["gain_vs_grpo"],
         _best(_method_gains(config, runs, hara, [BASELINE]), " points")],
        ["HarA vs credit-assignment baselines", PAPER_NUMBERS["gain_vs_credit"],
         _best(_method_gains(config, runs, hara, credit), " points") if credit else "n/a (none in the grid)"],
        ["token- vs sequence-level HarA", PAPER_NUMBERS["tok_vs_seq"],
         f"tok > seq in {sum(v > 0 for v, _ in tok_seq)} of {len(tok_seq)} (size, preset) cells" if tok_seq
         else NA],
        ["total training-time overhead", PAPER_NUMBERS["overhead"],
         f"largest: {best_overhead[0]:+.1f}% ({best_overhead[1]})" if best_overhead else NA],
        ["speed-up to the baseline's final accuracy", PAPER_NUMBERS["speedup"], _best(eff["speedup"], "x", False)],
        ["accuracy at equal training time", PAPER_NUMBERS["equal_time"], _best(eff["equal_time"], " points")],
        ["exact FGW vs linearized per-step time", f"{PAPER_NUMBERS['exact_seq']}; {PAPER_NUMBERS['exact_tok']}",
         "see the exact-vs-linearized analysis section" if config["analyses"]["enabled"]
         and config["analyses"]["exact_methods"] else "n/a (analyses off: config/analyses.yaml)"],
    ]
    return Table("paper", "The paper's numbers next to ours",
                 "Left: the paper's own numbers (Qwen3-1.7B/4B/8B-Base, MATH; from the public summary, "
                 "../shared/method.md), never ours. Right: the same measure on this run's grid (best case, "
                 "as the paper's 'up to' numbers are); pass@1 in percentage points, training accuracy for "
                 "the time measures.", ["claim", "paper", "ours (this run)"], rows)


#: The report's tables, in page order. Every builder takes (config, runs, base_scores); the main table shows the
#: Base models' scores, the others compare trained runs only.
TABLES: list[Callable[[Mapping, Mapping[Cell, Run], BaseScores | None], Table]] = [
    paper_table, main_table, rlvr_table, seq_tok_table, efficiency_table]


def build_tables(config: Mapping, runs: Mapping[Cell, Run], base_scores: BaseScores | None = None) -> list[Table]:
    return [make(config, runs, base_scores) for make in TABLES]
