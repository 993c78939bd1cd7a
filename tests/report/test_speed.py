"""The speed endpoint (config report.speed): the in-distribution curve at the candidate checkpoints, paired by seed
and problem at each step and on the area under it (hara/results/curves.py), corrected in the control's family and
rendered as the report's speed table (hara/report/compare.py, hara/report/tables.py).

The simulations draw learning curves of two methods over a population of problems: each problem's logit is its
difficulty plus the method's own effect on it, the run's luck and the run x problem part (all persistent over the
checkpoints) plus the learning curve 2.5 (1 - exp(-step / tau)); a faster method has a smaller tau. pass@1 = avg@4.
The truth is the population's expected difference (0 for identical methods), so coverage is that of the estimand
the crossed interval targets. Seeded; seconds."""

from __future__ import annotations

import functools
import json
import math
import os

import numpy as np
import pytest

from hara.config import load_config
from hara.report import build_report
from hara.report.compare import SPEED_AREA, grid_comparisons, speed_step
from hara.report.tables import speed_table
from hara.results.collect import collect_runs
from hara.results.curves import area_matrix, curve_difference, trapezoid_weights
from hara.results.paired import DECLARED, Bootstrap, bootstrap_difference, paired_matrix
from hara.results.variance import RunVariance
from tests.helpers import SMOKE

STEPS = (50, 100, 150)
#: sds (logit) of a method's own effect on a problem, a run's luck and a run x problem part
METHOD_PROBLEM_SD, RUN_SD, RUN_PROBLEM_SD = 0.3, 0.15, 0.3
PROBLEMS, SAMPLES = 150, 4
#: Simulated grids per rate; HARA_SIMULATION_SCALE=5 gives the 1,000 of the figures quoted below.
REPLICATES = max(50, round(200 * float(os.environ.get("HARA_SIMULATION_SCALE", "1"))))


def test_the_trapezoid_weights_give_the_curve_s_mean_height_over_its_span():
    assert trapezoid_weights(STEPS) == pytest.approx([0.25, 0.5, 0.25])
    assert trapezoid_weights([1, 3, 4]) == pytest.approx([1 / 3, 1 / 2, 1 / 6])  # gaps 2 and 1, span 3
    assert trapezoid_weights([1, 3, 4]) @ np.array([0.2, 0.2, 0.2]) == pytest.approx(0.2)  # a flat curve: its height
    with pytest.raises(ValueError, match="two or more increasing steps"):
        trapezoid_weights([50])


def curves(values: dict[int, list[list[float]]]) -> dict[int, dict[int, dict[str, float]]]:
    """{seed: {step: {problem id: pass@1}}} from {step: rows of seeds}."""
    seeds = range(len(next(iter(values.values()))))
    return {s: {step: {f"q{i}": v for i, v in enumerate(rows[s])} for step, rows in values.items()} for s in seeds}


def test_the_curve_difference_pairs_seeds_and_problems_at_each_step_and_on_the_area():
    """Two seeds, three problems: A learns sooner, both end at the same place."""
    a = curves({50: [[0.5, 1.0, 0.0], [0.5, 0.5, 0.0]], 100: [[1.0, 1.0, 0.0], [1.0, 0.5, 0.5]], 150: [[1.0] * 3] * 2})
    b = curves({50: [[0.0, 0.5, 0.0], [0.0, 0.5, 0.0]], 100: [[0.5, 1.0, 0.0], [1.0, 0.5, 0.0]], 150: [[1.0] * 3] * 2})
    settings = Bootstrap(500, 0, 0.95)
    found = curve_difference(a, b, STEPS, settings, "mini_math500")
    # per step: the mean of A - B over (seed, problem); the area: (50 (d50 + d100) / 2 + 50 (d100 + d150) / 2) / 100
    means = {50: 1.5 / 6, 100: 1.0 / 6, 150: 0.0}
    assert {step: d.mean for step, d in found.per_step.items()} == pytest.approx(means)
    assert found.area.mean == pytest.approx(0.25 * means[50] + 0.5 * means[100] + 0.25 * means[150])
    assert (found.area.seeds, found.area.problems) == (2, 3)
    # the area's interval is the report's own bootstrap over each (seed, problem) cell's area difference
    matrices = [paired_matrix({s: a[s][k] for s in a}, {s: b[s][k] for s in b}) for k in STEPS]
    assert found.area == bootstrap_difference([area_matrix(STEPS, matrices)], settings, ["mini_math500"])
    assert curve_difference(a, b, (150,), settings, "mini_math500").area is None  # one checkpoint: no area
    b[1][100] = {"q0": 1.0, "q1": 0.5, "q9": 0.0}
    with pytest.raises(ValueError, match="different problems"):
        curve_difference(a, b, STEPS, settings, "mini_math500")


def expit(x):
    return 1 / (1 + np.exp(-x))


def learned(tau: float) -> np.ndarray:
    return np.array([2.5 * (1 - math.exp(-step / tau)) for step in STEPS])


def method_curves(rng: np.random.Generator, difficulty: np.ndarray, seeds: int, tau: float) -> dict:
    """One method's runs on the drawn problems: {seed: {step: {problem id: pass@1}}}."""
    logit = difficulty + rng.normal(0, METHOD_PROBLEM_SD, difficulty.size)
    logit = logit + rng.normal(0, RUN_SD, (seeds, 1, 1)) + rng.normal(0, RUN_PROBLEM_SD, (seeds, 1, difficulty.size))
    passed = rng.binomial(SAMPLES, expit(logit + learned(tau)[None, :, None])) / SAMPLES
    return {
        s: {step: {f"p{i}": float(v) for i, v in enumerate(passed[s, k])} for k, step in enumerate(STEPS)}
        for s in range(seeds)
    }


@functools.cache
def truth(tau_a: float, tau_b: float, draws: int = 400_000) -> tuple[float, float]:
    """(area, final step) of the population's expected difference A - B (common random numbers for both sides)."""
    rng = np.random.default_rng(99)
    logit = rng.normal(-2.0, 1.2, draws)
    for sd in (METHOD_PROBLEM_SD, RUN_SD, RUN_PROBLEM_SD):
        logit = logit + rng.normal(0, sd, draws)
    diff = np.array(
        [expit(logit + ga).mean() - expit(logit + gb).mean() for ga, gb in zip(learned(tau_a), learned(tau_b))]
    )
    return float(trapezoid_weights(STEPS) @ diff), float(diff[-1])


def rates(settings: Bootstrap, seeds: int, tau_a: float, tau_b: float, seed: int) -> dict[str, float]:
    """Over simulated grids: how often the area's and the final step's intervals cover their truth and exclude 0."""
    rng, (area, final) = np.random.default_rng(seed), truth(tau_a, tau_b) if tau_a != tau_b else (0.0, 0.0)
    counts = dict.fromkeys(("area_covers", "final_covers", "area_rejects", "final_rejects"), 0)
    for _ in range(REPLICATES):
        difficulty = rng.normal(-2.0, 1.2, PROBLEMS)
        a, b = (method_curves(rng, difficulty, seeds, tau) for tau in (tau_a, tau_b))
        found = curve_difference(a, b, STEPS, settings, "in_distribution")
        for name, diff, true in (("area", found.area, area), ("final", found.per_step[STEPS[-1]], final)):
            counts[f"{name}_covers"] += diff.low <= true <= diff.high
            counts[f"{name}_rejects"] += diff.verdict != "within noise"
    return {key: count / REPLICATES for key, count in counts.items()}


def test_three_seeds_crossed_the_area_s_interval_covers_and_sees_a_speed_up_the_final_step_misses():
    """Measured over 1,000 grids each (HARA_SIMULATION_SCALE=5; the default 200 in brackets): identical methods,
    the area's 95% interval excludes 0 in 4.6% (7.0%); a method 2.5x faster (tau 40 against 100: area +12.7 points,
    final +9.4), the area covers its truth in 96.3% (97.0%) and excludes 0 in 80.2% (79.5%), the final step in 53.0%
    (50.0%)."""
    settings = Bootstrap(400, 0, 0.95, 3)
    null = rates(settings, 3, 100, 100, seed=1)
    assert null["area_rejects"] <= 0.08 and null["final_rejects"] <= 0.08
    faster = rates(settings, 3, 40, 100, seed=2)
    assert faster["area_covers"] >= 0.9 and faster["area_rejects"] >= 0.65
    assert faster["area_rejects"] >= faster["final_rejects"] + 0.15


def declared(sd: float) -> RunVariance:
    components = {"seed_sd": sd, "problem_sd": 0.0, "seed_problem_sd": 0.0, "success_variance": 0.2}
    return RunVariance({"in_distribution": components}, provenance={"folder": "simulation"})


def final_seed_sd(tau: float, draws: int = 3000) -> float:
    """The sd of a paired difference's run part at the last checkpoint: what a declared file measures from the final
    benchmark (Monte Carlo over pairs of run shifts, no sampling noise)."""
    rng = np.random.default_rng(3)
    logit = rng.normal(-2.0, 1.2, 2000) + learned(tau)[-1]
    shifts = rng.normal(0, RUN_SD, (draws, 2))
    return float(np.std([expit(logit + s[0]).mean() - expit(logit + s[1]).mean() for s in shifts]))


def test_one_seed_with_a_declared_run_variance_the_area_keeps_its_error_rate():
    """One seed: the area's interval adds the run variance declared for the benchmark at the final checkpoint (the
    run's luck is one draw for all of its checkpoints). Measured over 1,000 grids each (200 in brackets): identical
    methods, the area excludes 0 in 3.9% (5.5%); tau 40 against 100, it covers its truth in 95.6% (95.0%) and excludes
    0 in 81.8% (87.0%), the final step in 49.7% (52.0%). Without the declared variance (problems only) the null's area
    excludes 0 in 42.3% (46.0%)."""
    settings = Bootstrap(400, 0, 0.95, 3, declared(final_seed_sd(100)))
    null = rates(settings, 1, 100, 100, seed=3)
    assert null["area_rejects"] <= 0.08
    faster = rates(settings, 1, 40, 100, seed=4)
    assert faster["area_covers"] >= 0.9 and faster["area_rejects"] >= 0.65
    rng = np.random.default_rng(5)
    a, b = (method_curves(rng, np.zeros(20), 1, 100) for _ in "ab")
    assert curve_difference(a, b, STEPS, settings, "in_distribution").area.basis == DECLARED
    problems_only = rates(Bootstrap(400, 0, 0.95, 3), 1, 100, 100, seed=3)
    assert problems_only["area_rejects"] >= 0.15  # what the declared variance is there for


FINGERPRINT = {"benchmark_sha256": "ab", "n": SAMPLES}
#: Success probabilities at the candidate steps 1, 3 and 4 (final/): the control learns sooner, both end alike.
SPEED_P = {"none": (0.2, 0.4, 0.6), "oracle_steps": (0.55, 0.65, 0.6)}


def speed_config(tmp_path, methods=("none", "oracle_steps"), speed="mini_aime24") -> dict:
    """The smoke config with three seeds, one final benchmark and the speed endpoint on another benchmark."""
    overrides = [
        f"grid.methods=[{', '.join(methods)}]",
        "grid.seeds=[0, 1, 2]",
        "data.benchmarks=[mini_math500]",
        "training.steps=4",
        "selection.candidates=3",
        f"report.speed.benchmark={speed}",
        "report.bootstrap.resamples=400",
        f"results_dir={tmp_path}",
    ]
    return load_config(SMOKE, overrides)


def passed(rng: np.random.Generator, p: float, problems: int = 40) -> dict[str, float]:
    return {f"q{i:02d}": float(v) for i, v in enumerate(rng.binomial(SAMPLES, p, problems) / SAMPLES)}


def write_stage_files(config: dict, results) -> None:
    """Each run's scores.json (per-problem predictions on the final benchmark) and speed.json (the candidates' per
    problem pass@1 on the speed benchmark), as the evaluate job writes them."""
    rng, steps = np.random.default_rng(7), (1, 3, 4)
    for method in config["grid"]["methods"]:
        for seed in config["grid"]["seeds"]:
            folder = results / "eval" / "tiny-s" / "grpo" / method / f"seed{seed}"
            folder.mkdir(parents=True)
            final = passed(rng, 0.5)
            rows = [{"id": i, "pass@1": v} for i, v in final.items()]
            entry = {"score": float(np.mean(list(final.values()))), "metric": "pass@1", "predictions": rows}
            scores = {"benchmarks": {"mini_math500": {**entry, "eval_fingerprint": FINGERPRINT}}}
            (folder / "scores.json").write_text(json.dumps(scores), encoding="utf-8")
            candidates = [
                {
                    "step": step,
                    "pass_at_1": float(np.mean(list(v.values()))),
                    "eval_fingerprint": FINGERPRINT,
                    "problems": v,
                }
                for step, p in zip(steps, SPEED_P[method])
                for v in [passed(rng, p)]
            ]
            speed = {
                "benchmark": "mini_aime24",
                "problems": 40,
                "available": 40,
                "sample": "all",
                "candidates": candidates,
            }
            (folder / "speed.json").write_text(json.dumps(speed), encoding="utf-8")


def test_the_report_renders_the_controls_speed_table_from_the_stage_files(tmp_path):
    config = speed_config(tmp_path)
    write_stage_files(config, tmp_path)
    summary = build_report(config, tmp_path, tmp_path / "report", mlflow=False)
    assert "speed" in summary["tables"]
    markdown = (tmp_path / "report" / "report.md").read_text(encoding="utf-8")
    assert "Speed: mini_aime24 pass@1 at the candidate checkpoints" in markdown
    assert "| size | rlvr | method | step 1 | step 3 | step 4 | area |" in markdown
    control = next(line for line in markdown.splitlines() if line.startswith("| tiny-s | grpo | oracle_steps"))
    step1, step3, step4, area = control.split(" | ")[3:7]
    assert all("Δ +" in cell and "better" in cell for cell in (step1, area)) and "Δ +" in step3
    assert (
        "within noise" in step4 and "MDE" in step4
    )  # the same place at the end: the final step cannot tell them apart
    baseline = next(line for line in markdown.splitlines() if line.startswith("| tiny-s | grpo | none |"))
    assert "Δ" not in baseline and "(40 of its 40 problems: all)" in markdown
    assert "The speed table gives the same controls" in markdown  # the control table points to it
    (record,) = json.loads((tmp_path / "report" / "comparisons.json").read_text(encoding="utf-8"))
    assert record["speed"]["area"]["corrected"]["verdict"] == "better"
    assert record["speed"]["area"]["corrected"]["family_size"] == 6  # average, mini_math500, 3 steps, the area
    found = grid_comparisons(config, collect_runs(config, tmp_path))
    key = ("tiny-s", "grpo", "oracle_steps", "none")
    assert set(found.corrected[key]) == {None, "mini_math500", speed_step(1), speed_step(3), speed_step(4), SPEED_AREA}


def test_no_speed_table_without_report_speed_or_a_control(tmp_path):
    config = speed_config(tmp_path)
    write_stage_files(config, tmp_path)
    runs = collect_runs(config, tmp_path)
    assert (
        speed_table({**config, "report": {**config["report"], "speed": {"benchmark": None, "problems": None}}}, runs)
        is None
    )
    no_control = speed_config(tmp_path / "other", methods=("none", "hara_tok"))
    assert speed_table(no_control, {}) is None
    found = grid_comparisons(config, runs)  # hara_tok's family is untouched by a control's speed endpoint
    assert not [key for key in found.speed if key[2] != "oracle_steps"]
