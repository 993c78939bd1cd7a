"""The paper's tables over our runs, as plain data (title, note, header, rows of strings) for the renderers; a cell
that states a verdict is a :class:`~hara.report.compare.VerdictCell`, a string that carries it.

Every number is computed from the runs; a cell without data reads "n/a". Scores are pass@1 in percent (mean ±
standard error over seeds); comparisons between two methods are paired differences in percentage points with a
bootstrap interval and a verdict (hara.report.compare); the efficiency measures come from the training logs
(metrics.jsonl).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from hara.analysis.claims import PAPER_NUMBERS
from hara.layout import candidate_steps, method_seeds
from hara.methods import EXPECTED_VERDICTS
from hara.report.compare import (
    BASELINE,
    CORRECTED_MARK,
    DECLARED_MARK,
    LOW_POWER_MARK,
    MISMATCH_MARK,
    PROBLEMS_ONLY_MARK,
    SPEED_AREA,
    GridComparisons,
    VerdictCell,
    expected_verdict,
    grid_comparisons,
    is_control,
    speed_step,
)
from hara.results.collect import Cell, Run, seed_runs
from hara.results.curves import trapezoid_weights
from hara.results.paired import Bootstrap, bootstrap_difference, correct_family, paired_matrix
from hara.results.stats import (
    NA,
    Estimate,
    efficiency_measures,
    mean_se,
)
from hara.rlvr.presets import PRESETS

__all__ = ["TABLES", "Table", "build_tables"]

BASE_ROW = "base (no RL)"
BaseScores = Mapping[str, Mapping[str, float]]  # pass@1 per benchmark of each size's Base model (read_base_scores)


@dataclass(frozen=True)
class Table:
    """One table of the report. A cell is a string; one that states a verdict is a
    :class:`~hara.report.compare.VerdictCell`, which the page colours by its verdict."""

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


def seed_count(config: Mapping, method: str) -> int:
    """How many seeds the grid trains ``method`` with (grid.seeds plus its grid.extra_seeds)."""
    return len(method_seeds(config, method))


def seeds_note(config: Mapping, methods: list[str]) -> str:
    """``3 seed(s)``, or each method's count when grid.extra_seeds gives some methods more."""
    counts = {method: seed_count(config, method) for method in methods}
    if len(set(counts.values())) == 1:
        return f"{next(iter(counts.values()))} seed(s)"
    return "each method's seeds (" + ", ".join(f"{m}: {n}" for m, n in counts.items()) + ")"


def paired_note(config: Mapping) -> str:
    """How the tables' paired differences are computed (the config's report.bootstrap)."""
    settings = Bootstrap.from_config(config)
    return (
        f"Paired differences in percentage points with their raw {settings.confidence:.0%} interval: a percentile "
        f"bootstrap over the benchmark problems (with several seeds: seeds and problems crossed), "
        f"{settings.resamples} resamples, seed {settings.seed}. The verdict (better / worse / within noise) is the "
        f"one after correction over the comparison's family (every difference against the same method in the "
        f"grid: simultaneous max-T intervals); {CORRECTED_MARK} = the raw interval excludes 0 but the corrected "
        f"one does not. MDE = the difference the corrected verdict detects with 80% power (points); "
        f"{LOW_POWER_MARK} = low power: the MDE is above the effect the paper claims for that comparison "
        f"(report.low_power_above), so 'within noise' there cannot rule that effect out. {MISMATCH_MARK} = "
        f"evaluation fingerprints differ (compared on request). {run_variance_note(settings)}"
    )


def run_variance_note(settings: Bootstrap) -> str:
    """What an interval with fewer seeds than report.min_seeds covers: the declared run variance, and from where."""
    fewer = f"fewer seeds than report.min_seeds ({settings.min_seeds})"
    if settings.run_variance is None:
        return (
            f"{PROBLEMS_ONLY_MARK} = {fewer} and no run variance declared (report.run_variance): the interval "
            "covers the problems only, not a whole run's luck, and decides no claim."
        )
    return (
        f"{DECLARED_MARK} = {fewer}: the interval adds a whole run's luck, the run variance declared in "
        f"{settings.run_variance.source} (its seed sd per benchmark, an upper confidence bound; "
        f"{settings.run_variance.provenance.get('estimator', '')})."
    )


def family_note(found: GridComparisons) -> str:
    """How many differences each family of the table's comparisons corrects over."""
    sizes = found.family_sizes()
    return (
        ("Families: " + ", ".join(f"against {against}: {size} differences" for against, size in sizes.items()) + ".")
        if sizes
        else ""
    )


def main_table(config: Mapping, runs: Mapping[Cell, Run], base_scores: BaseScores | None = None) -> Table:
    """Size x method rows, one column per benchmark plus the average (host preset GRPO); each size's Base model
    first, before RL. Every method's cell also gives its paired difference from the baseline and a verdict."""
    benchmarks, rlvr = config["data"]["benchmarks"], host_rlvr(config)
    found, rows = grid_comparisons(config, runs), []
    for size in config["models"]["sizes"]:
        base = (base_scores or {}).get(size, {})
        rows.append(
            [
                size,
                BASE_ROW,
                *(_plain_pct(base.get(b)) for b in benchmarks),
                _plain_pct(benchmark_mean(base, benchmarks)),
            ]
        )
        for method in config["grid"]["methods"]:
            group, key = runs_of(runs, size, rlvr, method), (size, rlvr, method, BASELINE)
            seeds = seed_count(config, method)
            rows.append(
                [
                    size,
                    method_label(method),
                    *(
                        _with_difference(pct(score_estimate(group, b, benchmarks), seeds), found, key, b)
                        for b in [*benchmarks, None]
                    ),
                ]
            )
    return Table(
        "main",
        f"Main results ({rlvr})",
        f"pass@1 (%) per benchmark, mean ± standard error over "
        f"{seeds_note(config, config['grid']['methods'])} (one seed: the score alone); host preset {rlvr}. "
        f"Each method's cell then gives its difference from {BASELINE} (Δ) and a verdict. "
        f"{paired_note(config)} {family_note(found)} '{BASE_ROW}' is the Base model before RL (one "
        f"evaluation). Paper (its own models and benchmarks): {PAPER_NUMBERS['gain_vs_grpo']}.",
        ["size", "method", *benchmarks, "average"],
        rows,
    )


def base_table(config: Mapping, runs: Mapping[Cell, Run], base_scores: BaseScores | None = None) -> Table | None:
    """Each Base model's MATH-500 pass@1 (evaluate_base) beside the published one and its source
    (evaluation.base_sanity.published_math500); None where the config states none or MATH-500 is not evaluated."""
    published = config["evaluation"]["base_sanity"]["published_math500"]
    if not published or "math500" not in config["data"]["benchmarks"]:
        return None
    rows = []
    for size in config["models"]["sizes"]:
        reference = published.get(size, {"pass_at_1": None, "source": "not stated in the config"})
        figure = reference["pass_at_1"]
        ours = (base_scores or {}).get(size, {}).get("math500")
        rows.append([size, _plain_pct(ours), NA if figure is None else f"{figure:.1f}", reference["source"]])
    return Table(
        "base_models",
        "Base models on MATH-500: ours and published",
        "pass@1 (%) of each Base model before RL, our evaluation (prompt, sampling and token budget of this config) "
        "beside the published figure; a gap beyond a few points means our prompt or scoring is not the publication's.",
        ["size", "ours", "published", "source"],
        rows,
    )


def method_label(method: str) -> str:
    """A method's row label: a control says which (positive or negative), it is a reference row, not a contender."""
    return f"{method} ({EXPECTED_VERDICTS[expected_verdict(method)]})" if is_control(method) else method


def _with_difference(estimate: str, found: GridComparisons, key: tuple, benchmark: str | None) -> str:
    """``25.3 ± 1.1; Δ +0.3 [-1.2, +1.8] within noise, MDE 2.9`` (its verdict's cell), or the estimate alone without
    paired data."""
    return estimate if found.get(*key) is None else found.format(key, benchmark).after(f"{estimate}; Δ ")


def _plain_pct(value: float | None) -> str:
    return NA if value is None else f"{100 * value:.1f}"


def rlvr_table(config: Mapping, runs: Mapping[Cell, Run], base_scores: BaseScores | None = None) -> Table:
    """RLVR preset x method: the benchmark-average pass@1, per size."""
    benchmarks, methods = config["data"]["benchmarks"], config["grid"]["methods"]
    rows = [
        [
            size,
            rlvr,
            *(
                pct(score_estimate(runs_of(runs, size, rlvr, m), None, benchmarks), seed_count(config, m))
                for m in methods
            ),
        ]
        for size in config["models"]["sizes"]
        for rlvr in PRESETS.names()
    ]
    return Table(
        "rlvr",
        "HarA across RLVR algorithms",
        "Average pass@1 (%) over the benchmarks, mean ± standard error over "
        f"{seeds_note(config, methods)}; presets not in the config's grid read n/a.",
        ["size", "rlvr", *methods],
        rows,
    )


def seq_tok_table(config: Mapping, runs: Mapping[Cell, Run], base_scores: BaseScores | None = None) -> Table:
    """Sequence- vs token-level HarA against the baseline, per size and preset."""
    benchmarks, found = config["data"]["benchmarks"], grid_comparisons(config, runs)
    methods = [BASELINE, "hara_seq", "hara_tok"]
    rows = []
    for size in config["models"]["sizes"]:
        for rlvr in config["grid"]["rlvr"]:
            est = {m: score_estimate(runs_of(runs, size, rlvr, m), None, benchmarks) for m in methods}
            key = (size, rlvr, "hara_tok", "hara_seq")
            rows.append(
                [
                    size,
                    rlvr,
                    *(pct(est[m], seed_count(config, m)) for m in methods),
                    NA if found.get(*key) is None else found.format(key),
                ]
            )
    return Table(
        "seq_tok",
        "Sequence-level vs token-level HarA",
        "Average pass@1 (%) over the benchmarks; tok − seq as a paired difference. "
        f"{seeds_note(config, methods)}. {paired_note(config)} {family_note(found)} "
        f"Paper: {PAPER_NUMBERS['tok_vs_seq']}.",
        ["size", "rlvr", *methods, "tok − seq"],
        rows,
    )


def control_table(config: Mapping, runs: Mapping[Cell, Run], base_scores: BaseScores | None = None) -> Table | None:
    """The controls beside every other method, each against the baseline, per size and preset: whether the grid can
    see a credit-assignment effect at all, and so what its other "within noise" verdicts are worth. None (no table)
    when the grid trains no control."""
    methods = [m for m in config["grid"]["methods"] if m != BASELINE]
    controls = [m for m in methods if is_control(m)]
    if not controls or BASELINE not in config["grid"]["methods"]:
        return None
    found, rows = grid_comparisons(config, runs), []
    for size in config["models"]["sizes"]:
        for rlvr in config["grid"]["rlvr"]:
            keys = [(size, rlvr, m, BASELINE) for m in [*controls, *(m for m in methods if m not in controls)]]
            rows.append([size, rlvr, *(NA if found.get(*key) is None else found.format(key) for key in keys)])
    order = [*controls, *(m for m in methods if m not in controls)]
    return Table(
        "control",
        "Controls: can this grid see a credit-assignment effect?",
        f"Benchmark-average pass@1 differences from {BASELINE} (points), {seeds_note(config, order)}. "
        f"{control_finding(config, found, controls)}{speed_pointer(config)} {paired_note(config)} "
        f"{family_note(found)}",
        ["size", "rlvr", *(f"{method_label(m)} − {BASELINE}" for m in order)],
        rows,
    )


def speed_pointer(config: Mapping) -> str:
    """Where the controls' speed endpoint is, when report.speed names one."""
    if config["report"]["speed"]["benchmark"] is None:
        return ""
    return (
        " The speed table gives the same controls on the curve of the candidate checkpoints and its area, "
        "corrected in this family."
    )


def control_finding(config: Mapping, found: GridComparisons, controls: list[str]) -> str:
    """One reading of the controls' cells: where each separates from the baseline after correction in the
    direction it must (a positive control better, a negative one worse), and what that says of the other methods'
    nulls."""
    keys = [key for key in found.found if key[2] in controls and key[3] == BASELINE]
    if not keys:
        return "The control has no paired results yet."
    seen = [key for key in keys if found.corrected[key][None].verdict == expected_verdict(key[2])]
    mdes = [100 * found.corrected[key][None].mde for key in keys]
    gains = [100 * found.found[key].average.mean for key in keys]
    counts = "; ".join(_seen_count(found, keys, seen, verdict) for verdict in EXPECTED_VERDICTS)
    if not seen:
        return (
            f"The controls separate from {BASELINE} in the direction they must in none of their {len(keys)} cells "
            f"({counts}; differences {min(gains):+.1f} to {max(gains):+.1f} points, MDE "
            f"{min(mdes):.1f}-{max(mdes):.1f}): credit from an oracle, helping or sabotaging, is not visible at this "
            f"budget, so the other methods' 'within noise' verdicts cannot tell a method without effect from one "
            f"the grid cannot see (docs/analyses.md)."
        )
    return (
        f"The controls separate from {BASELINE} after correction in the direction they must in {len(seen)} of "
        f"their {len(keys)} cells ({counts}; differences {min(gains):+.1f} to {max(gains):+.1f} points): the grid "
        f"can see a credit-assignment effect of that size, and a method 'within noise' there has no effect as large "
        f"as its own MDE."
    )


def _seen_count(found: GridComparisons, keys: list, seen: list, verdict: str) -> str:
    """'<role>s <verdict> in k of n' for the controls expected to read ``verdict``."""
    mine = [key for key in keys if expected_verdict(key[2]) == verdict]
    hits = sum(key in seen for key in mine)
    return f"{EXPECTED_VERDICTS[verdict]}s {verdict} in {hits} of {len(mine)}"


def speed_table(config: Mapping, runs: Mapping[Cell, Run], base_scores: BaseScores | None = None) -> Table | None:
    """The speed endpoint (config report.speed) of each control beside the baseline, per size and preset:
    pass@1 on the speed benchmark at every candidate step and the area under that curve, each control's with its
    paired difference from the baseline (corrected in the control's family with its final benchmarks). None without
    report.speed or a control."""
    benchmark, methods = config["report"]["speed"]["benchmark"], config["grid"]["methods"]
    controls = [m for m in methods if is_control(m)]
    if benchmark is None or not controls or BASELINE not in methods:
        return None
    found, steps = grid_comparisons(config, runs), candidate_steps(config)
    members = [speed_step(step) for step in steps] + ([SPEED_AREA] if len(steps) > 1 else [])
    rows = []
    for size in config["models"]["sizes"]:
        for rlvr in config["grid"]["rlvr"]:
            for method in [BASELINE, *controls]:
                levels = speed_levels(config, runs_of(runs, size, rlvr, method))
                key, seeds = (size, rlvr, method, BASELINE), seed_count(config, method)
                cells = [pct(level, seeds) for level in levels]
                if key in found.speed:
                    cells = [found.format_speed(key, m).after(f"{cell}; Δ ") for cell, m in zip(cells, members)]
                rows.append([size, rlvr, method_label(method), *cells])
    return Table(
        "speed",
        f"Speed: {benchmark} pass@1 at the candidate checkpoints",
        f"{speed_note(config, runs, benchmark)} {speed_finding(found, controls)} {paired_note(config)} "
        f"{family_note(found)}",
        ["size", "rlvr", "method", *(f"step {step}" for step in steps), *(["area"] if len(steps) > 1 else [])],
        rows,
    )


def speed_levels(config: Mapping, group: list[Run]) -> list[Estimate]:
    """pass@1 on the speed benchmark over the runs' seeds at each candidate step, then the area under the curve."""
    benchmark, steps = config["report"]["speed"]["benchmark"], candidate_steps(config)
    curves = [curve for run in group if (curve := run.speed_curve(benchmark, steps)) is not None]
    values = [[c[step]["pass_at_1"] for step in steps] for c in curves]
    areas = [float(trapezoid_weights(steps) @ v) for v in values] if len(steps) > 1 else []
    per_step = [mean_se([v[k] for v in values]) for k in range(len(steps))]
    return per_step + ([mean_se(areas)] if len(steps) > 1 else [])


def speed_note(config: Mapping, runs: Mapping[Cell, Run], benchmark: str) -> str:
    """What the speed table measures, and on how many of the benchmark's problems."""
    scored = next((run.speed for run in runs.values() if run.speed.get("benchmark") == benchmark), None)
    problems = (
        "n/a problems (no run scored yet)"
        if scored is None
        else f"{scored['problems']} of its {scored['available']} problems: {scored['sample']}"
    )
    return (
        f"Credit-assignment effects show as learning speed, which the final benchmarks on a plateau hide. pass@1 (%) "
        f"on {benchmark} ({problems}) of every candidate checkpoint a run keeps (selection.candidates; the last "
        f"is final/), mean ± standard error over {seeds_note(config, config['grid']['methods'])}, and the area "
        f"under that curve: the trapezoid over the steps divided by their span, i.e. the curve's mean height in "
        f"pass@1 (every run at the same steps on the same problems: none censored). Each control's cell then gives "
        f"its paired difference from {BASELINE} (Δ, by seed and problem)."
    )


def speed_finding(found: GridComparisons, controls: list[str]) -> str:
    """One reading of the controls' areas: where they differ from the baseline after correction."""
    keys = [key for key in found.speed if key[2] in controls and SPEED_AREA in found.corrected[key]]
    if not keys:
        return "The controls have no paired speed results yet."
    verdicts = [found.corrected[key][SPEED_AREA].verdict for key in keys]
    mdes = [100 * found.corrected[key][SPEED_AREA].mde for key in keys]
    return (
        f"On the area, after correction, the controls are better than {BASELINE} in {verdicts.count('better')} and "
        f"worse in {verdicts.count('worse')} of their {len(keys)} cells (MDE {min(mdes):.1f}-{max(mdes):.1f} points)."
    )


EFFICIENCY_COLUMNS: list[tuple[str, str, Callable[[Estimate, int], str]]] = [
    ("cpu_s", "CPU s / step", lambda e, n: e.format(1.0, 3, n)),
    ("cpu_overhead", "CPU overhead vs none (%)", lambda e, n: e.format(100.0, 1, n)),
    ("step_s", "wall s / step", lambda e, n: e.format(1.0, 3, n)),
    ("overhead", "wall overhead vs none (%)", lambda e, n: e.format(100.0, 1, n)),
    ("speedup", "speed-up to the shared target (x)", lambda e, n: e.format(1.0, 2, n)),
    ("equal_time", "train acc. at none's cost - none's final (points)", lambda e, n: e.format(100.0, 1, n)),
]


def efficiency_table(config: Mapping, runs: Mapping[Cell, Run], base_scores: BaseScores | None = None) -> Table:
    """Per (size, rlvr, method): cost per step and the steps / time / accuracy trade-off against the baseline."""
    rows = []
    for size in config["models"]["sizes"]:
        for rlvr in config["grid"]["rlvr"]:
            base = seed_runs(runs, size, rlvr, BASELINE)
            for method in config["grid"]["methods"]:
                seeds = seed_count(config, method)
                per_seed = [
                    efficiency_measures(run, base.get(seed))
                    for seed, run in seed_runs(runs, size, rlvr, method).items()
                    if run.metrics
                ]
                rows.append(
                    [
                        size,
                        rlvr,
                        method,
                        *(fmt(mean_se([m[key] for m in per_seed]), seeds) for key, _, fmt in EFFICIENCY_COLUMNS),
                    ]
                )
    return Table(
        "efficiency",
        "Efficiency",
        "From metrics.jsonl, paired with the baseline (none) of the same seed. CPU = the training process's "
        "CPU time per step, comparable between runs that shared the machine; wall = elapsed time, which "
        "grows with other jobs' load (the wall columns and the time-to-target columns are comparable only "
        "for runs made under the same load). Speed-up = none's cost over the method's to a target both are "
        "measured against: half the gain of the two runs' mean smoothed training accuracy (moving average over a "
        "tenth of the run), on CPU seconds where logged, else steps; a run that never reaches it counts its whole "
        "cost (censored, not dropped), so a method against itself reads 1.00. Accuracy at equal cost = the "
        "method's smoothed training accuracy after none's whole cost minus none's final. Paper: "
        f"{PAPER_NUMBERS['overhead']}, {PAPER_NUMBERS['speedup']}, {PAPER_NUMBERS['equal_time']}.",
        ["size", "rlvr", "method", *(title for _, title, _ in EFFICIENCY_COLUMNS)],
        rows,
    )


def selection_table(config: Mapping, runs: Mapping[Cell, Run], base_scores: BaseScores | None = None) -> Table:
    """Per run: validation pass@1 of each candidate checkpoint (against step), the step selected on validation, and
    the test average of the selected and of the final checkpoint with their paired difference (corrected over the
    table's runs)."""
    selected = [(cell, run) for cell, run in runs.items() if run.selection]
    differences = [_selected_minus_final(config, run) for _, run in selected]
    measured = [d for d in differences if d is not None]
    corrected = iter(correct_family(measured, Bootstrap.from_config(config).confidence)) if measured else iter(())
    rows = []
    for (cell, run), diff in zip(selected, differences):
        curve = " · ".join(f"{c['step']}: {100 * c['validation_pass_at_1']:.1f}" for c in run.selection["candidates"])
        rows.append(
            [
                cell.size,
                cell.rlvr,
                cell.method,
                str(cell.seed),
                curve,
                str(run.selection["selected_step"]),
                _plain_pct(_average(run.selected_problems, config)),
                _plain_pct(_average(run.problems, config)),
                NA if diff is None else _corrected_text(diff, next(corrected)),
            ]
        )
    enabled = config["selection"]["enabled"]
    return Table(
        "selection",
        "Checkpoint selection on validation",
        (
            "Validation pass@1 (%) by step on problems held out of training (selection.validation_problems); "
            "the step with the highest one is selected (ties: the later), without looking at the test "
            "benchmarks. Test: average pass@1 (%) over the benchmarks of the selected and of the final "
            f"checkpoint; selected − final as a paired difference. {paired_note(config)} The family here: "
            f"the {len(measured)} runs of this table."
        )
        if enabled
        else "Checkpoint selection is off (config selection.enabled); the other tables use final/.",
        [
            "size",
            "rlvr",
            "method",
            "seed",
            "validation by step",
            "selected",
            "test (selected)",
            "test (final)",
            "selected − final",
        ],
        rows,
    )


def _corrected_text(diff, corrected) -> VerdictCell:
    mark = CORRECTED_MARK if diff.verdict != corrected.verdict else ""
    return VerdictCell(f"{diff.format()} {corrected.verdict}{mark}, MDE {100 * corrected.mde:.1f}", corrected.verdict)


def _average(problems: Mapping[str, Mapping[str, float]], config: Mapping) -> float | None:
    benchmarks = config["data"]["benchmarks"]
    if not all(problems.get(b) for b in benchmarks):
        return None
    return sum(sum(problems[b].values()) / len(problems[b]) for b in benchmarks) / len(benchmarks)


def _selected_minus_final(config: Mapping, run: Run):
    benchmarks = config["data"]["benchmarks"]
    if not all(run.selected_problems.get(b) and run.problems.get(b) for b in benchmarks):
        return None
    matrices = [paired_matrix({0: run.selected_problems[b]}, {0: run.problems[b]}) for b in benchmarks]
    return bootstrap_difference(matrices, Bootstrap.from_config(config).within_run())  # two checkpoints of one run


#: The report's tables over the grid, in page order (after the paper's claims checked, hara.report.repro). Every
#: builder takes (config, runs, base_scores); the main table shows the Base models' scores, the others compare
#: trained runs only.
TABLES: list[Callable[[Mapping, Mapping[Cell, Run], BaseScores | None], Table | None]] = [
    main_table,
    base_table,
    control_table,
    speed_table,
    rlvr_table,
    seq_tok_table,
    efficiency_table,
    selection_table,
]


def build_tables(config: Mapping, runs: Mapping[Cell, Run], base_scores: BaseScores | None = None) -> list[Table]:
    """The tables of :data:`TABLES` that apply to the grid (a builder returns None for a table it has no rows for)."""
    return [table for make in TABLES if (table := make(config, runs, base_scores)) is not None]
