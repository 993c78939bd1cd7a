"""Staged seeds (hara/results/sequential.py, hara.power_plan.staged_design, hara.report.stages): boundaries against
the published table, and the whole staged procedure by simulation of crossed seeds and problems."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hara.planning.power import Components, Contrast, contrast_variance
from hara.power_plan import staged_design
from hara.results.sequential import (
    CONTINUE,
    EFFICACY,
    Boundaries,
    _first_crossings,
    _solve,
    decide,
    obrien_fleming_spending,
    operating_characteristics,
    spending_bounds,
)

#: A world where a fixed design needs 8 seeds per method for the effect (3 cells, five benchmarks of 200 problems).
COMPONENTS = Components(seed_sd=0.012, problem_sd=0.03, seed_problem_sd=0.15, success_variance=0.2, source="test")
PROBLEMS = {f"b{i}": 200 for i in range(5)}
CONTRAST = Contrast(
    {"hara_tok": 1.0, "none": -1.0}, 3, {"hara_tok": 2, "none": 2}, PROBLEMS, dict.fromkeys(PROBLEMS, 4), 3
)
EFFECT = 0.012
STUDIES = 20_000


def classical_obrien_fleming(stages: int, alpha: float = 0.05) -> list[float]:
    """O'Brien and Fleming's (1979) constant-shape bounds C sqrt(K / k) at equal fractions, C solved with the
    module's own crossing probabilities so that the two-sided type I error is ``alpha``."""
    fractions = [k / stages for k in range(1, stages + 1)]
    shape = [math.sqrt(stages / k) for k in range(1, stages + 1)]
    constant = _solve(
        lambda c: sum(up + down for up, down, _ in _first_crossings([c * s for s in shape], fractions)), alpha
    )
    return [constant * s for s in shape]


def test_the_crossing_probabilities_give_the_published_classical_obrien_fleming_bounds():
    """Two-sided 0.05, K = 3 equally spaced looks: 3.471, 2.454, 2.004 (Jennison and Turnbull 2000, Table 2.3)."""
    assert classical_obrien_fleming(3) == pytest.approx([3.471, 2.454, 2.004], abs=0.01)


def test_spending_bounds_spend_the_alpha_the_function_says():
    fractions = [0.3, 0.7, 1.0]
    bounds = spending_bounds(fractions)
    assert bounds[0] == pytest.approx(1.959964 / math.sqrt(0.3), abs=1e-3)  # all of stage 1's spend is one tail pair
    null = operating_characteristics(Boundaries(tuple(fractions), tuple(bounds), -math.inf), 0.0)
    assert 2 * null["better"] == pytest.approx(0.05, abs=5e-4)  # both tails, over every stage
    assert obrien_fleming_spending(1.0, 0.05) == pytest.approx(0.05)
    with pytest.raises(ValueError, match="increase to 1"):
        spending_bounds([0.5, 0.4, 1.0])


def simulate(design: dict, effect: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """STUDIES staged studies of the contrast under the variance model: each run's luck (half a paired difference's
    seed variance), a method x problem effect shared by every cell and stage, and each (cell, seed)'s seed x problem
    and sampling noise; z at each stage over the planned standard error. Returns the decision's sign (+1 better,
    -1 worse, 0 none) and the stage each study stopped at."""
    stages, cells = design["stages"], CONTRAST.cells
    bounds = Boundaries(tuple(design["fractions"]), tuple(design["bounds"]), design["futility"])
    b = len(PROBLEMS)
    problem = rng.normal(0, math.sqrt(sum(COMPONENTS.problem_sd**2 / (p * b * b) for p in PROBLEMS.values())), STUDIES)
    noise_sd = math.sqrt(
        sum(
            (COMPONENTS.seed_problem_sd**2 + 2 * COMPONENTS.success_variance / 4) / (p * b * b)
            for p in PROBLEMS.values()
        )
    )
    luck = rng.normal(0, COMPONENTS.seed_sd, (STUDIES, cells, stages[-1]))  # a run pair's: sd of a paired difference
    noise = rng.normal(0, noise_sd, (STUDIES, cells, stages[-1]))
    sign, stopped = np.zeros(STUDIES, dtype=int), np.full(STUDIES, len(stages) - 1)
    alive = np.ones(STUDIES, dtype=bool)
    for k, seeds in enumerate(stages):
        estimate = effect + problem + (luck[:, :, :seeds] + noise[:, :, :seeds]).mean(axis=(1, 2))
        planned = math.sqrt(
            contrast_variance(COMPONENTS, CONTRAST.with_seeds(dict.fromkeys(CONTRAST.weights, seeds)))[0]
        )
        z = estimate / planned
        verdicts = np.array([decide(float(v), k, bounds) if a else CONTINUE for v, a in zip(z, alive)])
        done = alive & (verdicts != CONTINUE)
        sign[done & (verdicts == EFFICACY)] = np.sign(z[done & (verdicts == EFFICACY)]).astype(int)
        stopped[done] = k
        alive &= ~done
    return sign, stopped


@pytest.fixture(scope="module")
def design():
    found = staged_design(COMPONENTS, CONTRAST, EFFECT, {"per_method": {"hara_tok": 1.0, "none": 1.0}}, {}, 2)
    assert found["fixed_seeds"] == 8 and found["stages"][0] == 2
    return found


def test_the_staged_design_keeps_its_type_one_error_under_5_5_percent(design):
    sign, _ = simulate(design, 0.0, np.random.default_rng(0))
    assert np.mean(sign != 0) <= 0.055  # either direction, over every stage
    assert np.mean(sign > 0) <= 0.03  # "reproduced" (better), with the non-binding futility stop applied


def test_the_staged_design_has_80_percent_power_and_costs_less_than_the_fixed_one(design):
    sign, stopped = simulate(design, EFFECT, np.random.default_rng(1))
    assert np.mean(sign > 0) >= 0.80
    seeds = np.asarray(design["stages"])[stopped]
    assert seeds.mean() / design["fixed_seeds"] < 0.9  # under the effect
    _, null_stopped = simulate(design, 0.0, np.random.default_rng(2))
    assert np.asarray(design["stages"])[null_stopped].mean() / design["fixed_seeds"] <= 0.70  # under no effect
    # the design's own expected costs (numerical integration) agree with the simulation
    assert design["expected_ratio"]["effect"] == pytest.approx(seeds.mean() / design["fixed_seeds"], abs=0.03)


def test_repro_check_stage_decides_a_clear_claim_and_writes_the_next_stage_for_the_others(tmp_path, capsys):
    """Two of three stages' seeds trained: a primary far beyond its bound stops as reproduced; a null one continues
    and the next stage's overlay gives only its methods their third seed."""
    from hara.report.stages import next_stage_overlay, stage_checks
    from tests.report.test_repro import grid_config, runs_of

    config = grid_config(seeds=(0, 1))
    config["plan"]["stages"] = [2, 3, 5]
    config["report"]["run_variance"] = "config/variance/paper.yaml"
    same = (10, [0.0, 0.1, 0.2, 0.3], [1.0, 1.0, 1.0, 1.0])
    better = (30, *same[1:])
    runs = runs_of(config, {"none": same, "hara_seq": better, "hara_tok": better})  # tok_vs_seq: no difference
    monkey = pytest.MonkeyPatch()
    monkey.setattr("hara.report.stages.collect_runs", lambda _config, _results: runs)
    try:
        checks = {c.claim: c for c in stage_checks(config, tmp_path)}
    finally:
        monkey.undo()
    assert checks["gain_vs_grpo"].stage == 0 and checks["gain_vs_grpo"].decision == "reproduced"
    assert checks["gain_vs_grpo"].z > checks["gain_vs_grpo"].bound
    overlay = next_stage_overlay(config, list(checks.values()))
    undecided = {m for c in checks.values() if c.decision == "continue" for m in c.methods}
    assert set(overlay["grid"]["extra_seeds"]) == undecided
    assert all(seeds == [2] for seeds in overlay["grid"]["extra_seeds"].values())  # the third seed, stage 2
    assert checks["tok_vs_seq"].decision == "continue" and set(undecided) == {"hara_tok", "hara_seq"}
