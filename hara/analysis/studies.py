"""The training-run analyses: FGW variants, exact vs linearized, rollout count G, efficiency from training curves.

Each reads what `hara train` (metrics.jsonl) and `hara evaluate` (scores.json) wrote for its runs (paths from
:mod:`hara.analysis.workflow`), aggregates over seeds and writes an :class:`~hara.analysis.output.AnalysisResult`
with a figure. Numbers that the logs do not give read n/a.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from hara.analysis.claims import STRUCTURE_NOTE
from hara.analysis.output import AnalysisResult, column, fmt, pyplot, save_figure
from hara.analysis.registry import get_analysis
from hara.analysis.workflow import AnalysisRun, exact_counterpart, host_rlvr, study_eval_dir, study_run_dir, study_runs
from hara.layout import METRICS_FILE, SCORES_FILE
from hara.metric_keys import ACCURACY, HARA_S, STEP_S
from hara.results.collect import Cell, Run, collect_runs, read_metrics, read_scores
from hara.results.stats import (
    cumulative_time,
    efficiency_measures,
    final_value,
    mean_se,
    series,
    smooth,
    window_of,
)

__all__ = ["efficiency_study", "exact_study", "group_size_study", "run_measures", "variants_study"]


def _mean_of(metrics: list[dict], key: str) -> float | None:
    values = [float(row[key]) for row in metrics if key in row]
    return sum(values) / len(values) if values else None


def run_measures(config: Mapping, run: AnalysisRun) -> dict[str, float | None]:
    """Per-step time, HarA time per step, final smoothed training accuracy, steps, benchmark-average pass@1."""
    metrics = read_metrics(Path(study_run_dir(config, run)) / METRICS_FILE)
    scores = read_scores(Path(study_eval_dir(config, run)) / SCORES_FILE)
    benchmarks = config["data"]["benchmarks"]
    average = (sum(scores[b] for b in benchmarks) / len(benchmarks)) if all(b in scores for b in benchmarks) else None
    return {
        "step_s": _mean_of(metrics, STEP_S),
        "hara_s": _mean_of(metrics, HARA_S),
        "final_acc": final_value(metrics, ACCURACY),
        "steps": float(len(metrics)) if metrics else None,
        "pass1": average,
    }


def _seed_mean(config: Mapping, runs: list[AnalysisRun]) -> tuple[dict[str, float | None], dict[str, float | None]]:
    """Mean and standard error over the runs' seeds of every measure."""
    per_seed = [run_measures(config, r) for r in runs]
    keys = per_seed[0].keys() if per_seed else []
    est = {k: mean_se([m[k] for m in per_seed]) for k in keys}
    return {k: e.mean for k, e in est.items()}, {k: e.se for k, e in est.items()}


def _grouped(config: Mapping, study: str) -> dict[tuple[str, str], list[AnalysisRun]]:
    """The study's runs grouped by (label, method), seeds together, in plan order."""
    groups: dict[tuple[str, str], list[AnalysisRun]] = {}
    for run in study_runs(config, study):
        groups.setdefault((run.label, run.method), []).append(run)
    return groups


def _pct(value: float | None) -> str:
    return fmt(None if value is None else 100.0 * value, 1)


def _bars(title: str, labels: list[str], series_: dict[str, list[float | None]], ylabel: str, path: Path) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(1.4 + 1.1 * len(labels), 3.4))
    width = 0.8 / max(len(series_), 1)
    for i, (name, values) in enumerate(series_.items()):
        xs = [j + i * width for j in range(len(labels))]
        ax.bar(xs, [v if v is not None else 0.0 for v in values], width, label=name)
    ax.set_xticks([j + width * (len(series_) - 1) / 2 for j in range(len(labels))], labels)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    return save_figure(fig, path)


#: The header of :func:`_seed_cells`.
SEED_HEADER = ["seeds", "pass@1 (%)", "± se", "final train acc. (%)", "s / step"]


def _seed_cells(runs: list[AnalysisRun], mean: dict, se: dict) -> list[str]:
    """The cells every per-run-group table shares: seeds, pass@1 and its se, final training accuracy, s / step."""
    return [str(len(runs)), _pct(mean["pass1"]), _pct(se["pass1"]), _pct(mean["final_acc"]), fmt(mean["step_s"])]


def variants_study(config: Mapping, results: Path, out: Path) -> AnalysisResult:
    """W / GW / FGW trained as HarA variants: accuracy and cost per variant."""
    rows = []
    for (label, method), runs in _grouped(config, "variants").items():
        mean, se = _seed_mean(config, runs)
        overrides = dict(runs[0].overrides)
        alpha = overrides.get("hara.hara.alpha", config["hara"]["hara"]["alpha"])
        structure = overrides.get("hara.hara.structure", config["hara"]["hara"]["structure"])
        rows.append([label, structure, f"{float(alpha):g}", method, *_seed_cells(runs, mean, se)])
    header = ["variant", "structure", "alpha", "method", *SEED_HEADER]
    figure = _bars(
        "FGW variants (benchmark average pass@1)",
        [r[0] for r in rows],
        {"pass@1 (%)": column(rows, 5), "final train acc. (%)": column(rows, 7)},
        "%",
        out / "variants.png",
    )
    scored = sorted((r for r in rows if r[5] != "n/a"), key=lambda r: float(r[5]), reverse=True)
    best = ("none (tie)" if len(scored) > 1 and scored[0][5] == scored[1][5] else scored[0][0]) if scored else None
    finding = "; ".join(f"{r[0]}: pass@1 {r[5]}%" for r in rows) + (
        f". Highest: {best}." if best else ". No variant was evaluated."
    )
    return AnalysisResult(
        "variants",
        "FGW variants: W, GW and FGW as training methods",
        get_analysis("variants").claim,
        finding,
        header,
        rows,
        [figure],
        "Each variant is the HarA method with hara.hara.alpha overridden (W = 0, GW = 1, FGW = "
        "the config's alpha); with the hidden-state structure it is the method's exact "
        "counterpart. Mean over seeds; pass@1 averaged over the config's benchmarks. " + STRUCTURE_NOTE,
    )


#: The paper's per-step times (hara/analysis/paper_claims.yaml), shown next to ours and labelled as the paper's.
PAPER_STEP_S = {
    ("hara_seq", "exact"): "154",
    ("hara_seq", "linearized"): "41.0",
    ("hara_tok", "exact"): "175",
    ("hara_tok", "linearized"): "43.6",
}


def exact_study(config: Mapping, results: Path, out: Path) -> AnalysisResult:
    """Exact (POT) vs linearized HarA trained for the same steps in the same workflow run on the same machine."""
    groups = _grouped(config, "exact")
    rows, findings = [], []
    for linear in config["analyses"]["exact_methods"]:
        measured = {}
        for backend, method in (("exact", exact_counterpart(linear)), ("linearized", linear)):
            runs = next((r for (_, m), r in groups.items() if m == method), [])
            mean, _ = _seed_mean(config, runs)
            measured[backend] = mean
            rows.append(
                [
                    linear.removeprefix("hara_"),
                    backend,
                    method,
                    fmt(mean["steps"], 0),
                    fmt(mean["step_s"]),
                    fmt(mean["hara_s"]),
                    _pct(mean["final_acc"]),
                    _pct(mean["pass1"]),
                    PAPER_STEP_S[(linear, backend)],
                ]
            )
        ex, li = measured["exact"], measured["linearized"]
        ratio = ex["step_s"] / li["step_s"] if ex["step_s"] and li["step_s"] else None
        diff = (li["pass1"] - ex["pass1"]) * 100 if ex["pass1"] is not None and li["pass1"] is not None else None
        findings.append(
            f"{linear}: {fmt(ex['step_s'])} -> {fmt(li['step_s'])} s/step ({fmt(ratio, 2)}x faster "
            f"linearized; paper {PAPER_STEP_S[(linear, 'exact')]} -> "
            f"{PAPER_STEP_S[(linear, 'linearized')]}), pass@1 linearized - exact {fmt(diff, 1)} points"
        )
    header = [
        "level",
        "backend",
        "method",
        "steps",
        "s / step",
        "HarA s / step",
        "final train acc. (%)",
        "pass@1 (%)",
        "paper: per-step time",
    ]
    figure = _bars(
        "Per-step time, exact vs linearized (same run, same machine)",
        [f"{r[0]} {r[1]}" for r in rows],
        {"s / step": column(rows, 4), "HarA s / step": column(rows, 5)},
        "seconds",
        out / "exact.png",
    )
    return AnalysisResult(
        "exact",
        "Exact FGW vs anchor-guided linearization",
        get_analysis("exact").claim,
        "; ".join(findings) + ".",
        header,
        rows,
        [figure],
        "Both backends trained by this workflow run on this machine with the same steps "
        "(analyses.exact_steps); s / step = mean time/step_s, HarA s / step = mean time/hara_s "
        "(novelty + reweighting only). The paper's column is the paper's own measurement (its "
        "units and hardware, Qwen3 models), not ours.",
    )


def fgw_score_by_rollouts(results: Path) -> dict[int, str]:
    """FGW's likelihood score per number of sampled rollouts, from the interpretability analysis' CSV ({} if none)."""
    import csv

    path = Path(results) / "analysis" / "interpretability" / "interpretability.csv"
    if not path.is_file():
        return {}
    with open(path, encoding="utf-8") as handle:
        return {
            int(row["rollouts"]): row["score - chance"] for row in csv.DictReader(handle) if row["variant"] == "fgw"
        }


def group_size_study(config: Mapping, results: Path, out: Path) -> AnalysisResult:
    """Accuracy and cost vs the number of rollouts per prompt G, with FGW's interpretability score at G rollouts."""
    rows, score = [], fgw_score_by_rollouts(results)
    for (label, method), runs in _grouped(config, "group_size").items():
        mean, se = _seed_mean(config, runs)
        g = int(label.removeprefix("G"))
        rows.append([str(g), method, *_seed_cells(runs, mean, se), score.get(g, "n/a")])
    header = ["G", "method", *SEED_HEADER, "FGW likelihood score - chance at G rollouts"]
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(8.4, 3.4))
    for method in config["analyses"]["group_size_methods"]:
        mine = [r for r in rows if r[1] == method]
        for ax, idx, label in ((axes[0], 3, "pass@1 (%)"), (axes[1], 5, "final train acc. (%)")):
            pts = [(int(r[0]), float(r[idx])) for r in mine if r[idx] != "n/a"]
            if pts:
                ax.plot(*zip(*pts), marker="o", label=method)
            ax.set_xlabel("rollouts per prompt G")
            ax.set_ylabel(label)
            ax.set_xscale("log", base=2)
            ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    figure = save_figure(fig, out / "group_size.png")
    finding = (
        "; ".join(f"G={r[0]} {r[1]}: pass@1 {r[3]}%" for r in rows) + "; FGW interpretability gain over "
        "chance at G rollouts: " + ", ".join(f"G={g}: {v}" for g, v in sorted(score.items())) + "."
    )
    return AnalysisResult(
        "group_size",
        "Rollout-count scaling: group size G",
        get_analysis("group_size").claim,
        finding,
        header,
        rows,
        [figure],
        "training.group_size overridden per run (prompts per step unchanged, so larger G means "
        "more rollouts per step). Last column: from the interpretability analysis (the probed "
        "checkpoint's rollouts, first G per problem; n/a where G is not among "
        "analyses.interpretability.rollouts or the study is off).",
    )


def _curve(run: Run) -> tuple[list[float], list[float]]:
    times = cumulative_time(run.metrics) or []
    _, values = series(run.metrics, ACCURACY)
    return times[: len(values)], smooth(values, window_of(len(values))) if values else []


def efficiency_study(config: Mapping, results: Path, out: Path) -> AnalysisResult:
    """Speed-up to the baseline's final accuracy and accuracy at equal time, from the grid's training curves."""
    runs = collect_runs(config, results)
    rows = []
    for cell, run in runs.items():
        base = runs.get(Cell(cell.size, cell.rlvr, "none", cell.seed))
        if cell.method == "none" or base is None or not run.metrics or not base.metrics:
            continue
        m = efficiency_measures(run, base)
        base_total, total = (cumulative_time(base.metrics) or [None])[-1], (cumulative_time(run.metrics) or [None])[-1]
        # the curves' shared target (hara.results.stats.curve_pair); none when their mean curve gained nothing
        speedup = m["speedup"]
        gain = m["equal_time"] * 100 if m["equal_time"] is not None else None
        overhead = (total / base_total - 1.0) * 100 if total and base_total else None
        rows.append(
            [cell.size, cell.rlvr, cell.method, str(cell.seed), fmt(overhead, 1), fmt(speedup, 2), fmt(gain, 1)]
        )
    header = [
        "size",
        "rlvr",
        "method",
        "seed",
        "total-time overhead (%)",
        "speed-up to the shared target (x)",
        "acc. gain at none's cost (points)",
    ]
    figure = _efficiency_figure(config, runs, out / "efficiency.png")
    speedups, gains = [v for v in column(rows, 5) if v is not None], [v for v in column(rows, 6) if v is not None]
    finding = (
        f"Over {len(rows)} (method, preset, seed) pairs: best speed-up "
        f"{fmt(max(speedups), 2) + 'x' if speedups else 'n/a (target not reached)'}, best accuracy gain at "
        f"equal time {fmt(max(gains), 1) if gains else 'n/a'} points (paper: up to 2.64x and +8.7)."
    )
    return AnalysisResult(
        "efficiency",
        "Efficiency from training curves (wall-clock time)",
        get_analysis("efficiency").claim,
        finding,
        header,
        rows,
        [figure] if figure else [],
        "Speed-up = none's total training time / the method's time to reach none's final "
        "(smoothed) training accuracy; gain = the method's smoothed training accuracy after "
        "none's total time minus none's final accuracy; n/a = target never reached.",
    )


def _efficiency_figure(config: Mapping, runs: Mapping[Cell, Run], path: Path) -> str | None:
    """Training accuracy vs cumulative wall time, host preset, first size and seed, every method."""
    size, rlvr, seed = config["models"]["sizes"][0], host_rlvr(config), int(config["grid"]["seeds"][0])
    curves = {
        c.method: _curve(r) for c, r in runs.items() if (c.size, c.rlvr, c.seed) == (size, rlvr, seed) and r.metrics
    }
    if not any(t for t, _ in curves.values()):
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.6, 3.6))
    for method, (times, values) in curves.items():
        ax.plot(times, values, label=method, linestyle="--" if method == "none" else "-")
    ax.set_xlabel("wall-clock training time (s)")
    ax.set_ylabel("training accuracy (moving average)")
    ax.set_title(f"{size}, {rlvr}, seed {seed}", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path)
