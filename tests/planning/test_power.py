"""The plan's power section (hara/planning/power.py, hara/power_plan.py): its minimum detectable effect is the effect the
report's own interval detects with 80% power (seeded simulation), its variance components are recovered from
per-problem outcomes, and `hara plan` prints and writes it."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from hara.cli import main
from hara.planning.power import Components, Design, mde
from hara.results.paired import BETTER, Bootstrap, bootstrap_difference, paired_matrix
from hara.results.variance import estimate_run_variance
from tests.helpers import REPO

COMPONENTS = Components(seed_sd=0.02, problem_sd=0.08, seed_problem_sd=0.1, success_variance=0.2, source="test")


def simulated(rng: np.random.Generator, c: Components, design: Design, effect: float) -> np.ndarray:
    """d[s, i] = effect + a_s + b_i + e_si with the components' variances (sampling noise folded into e)."""
    s, (p,), (k,) = design.seeds, design.problems.values(), design.samples.values()
    noise = math.sqrt(c.seed_problem_sd**2 + 2 * c.success_variance / k)
    return (
        effect + rng.normal(0, c.seed_sd, (s, 1)) + rng.normal(0, c.problem_sd, (1, p)) + rng.normal(0, noise, (s, p))
    )


@pytest.mark.parametrize("seeds, seed_sd", [(1, 0.0), (3, 0.02), (5, 0.04)])
def test_a_true_difference_equal_to_the_planned_mde_is_detected_about_80_percent_of_the_time(seeds, seed_sd):
    """The plan's MDE against the report's own interval (hara.results.paired.bootstrap_difference) on simulated
    crossed data: detected in 70-90% of 300 replications. (One seed: no seed effect in the data, since a one-seed
    interval cannot see it.)"""
    components = Components(seed_sd, 0.08, 0.1, 0.2, "test")
    design = Design(seeds, {"bench": 300}, {"bench": 4})
    effect = mde(components, design, ["bench"])
    detected = sum(
        bootstrap_difference(
            [simulated(np.random.default_rng(rep), components, design, effect)], Bootstrap(500, rep, 0.95)
        ).verdict
        == BETTER
        for rep in range(300)
    )
    assert 0.70 <= detected / 300 <= 0.90


def test_more_seeds_shrink_the_mde_down_to_the_per_problem_floor():
    design = Design(3, {"bench": 300}, {"bench": 4})
    sizes = [mde(COMPONENTS, Design(s, design.problems, design.samples), ["bench"]) for s in (2, 3, 10, 60)]
    assert sizes == sorted(sizes, reverse=True)
    floor = 2.8 * COMPONENTS.problem_sd / math.sqrt(300)  # the persistent per-problem part never shrinks with seeds
    assert sizes[-1] > floor
    assert mde(COMPONENTS, design, ["bench"], family=18) > sizes[1]  # a family's corrected level costs power


def test_components_are_recovered_from_per_problem_outcomes_over_seeds():
    """The declared file's estimator: problem and seed x problem sds recovered; the seed sd an upper confidence bound
    (at or above the truth, not far above it with 90 degrees of freedom)."""
    rng = np.random.default_rng(5)
    true = Components(seed_sd=0.03, problem_sd=0.1, seed_problem_sd=0.08, success_variance=0.2, source="truth")
    found = []
    for _ in range(30):  # 30 comparisons of 4 seeds x 200 problems, binary outcomes over K = 8
        base = rng.uniform(0.2, 0.8, 200)
        per_problem = rng.normal(0, true.problem_sd, 200)
        sides = []
        for shift in (per_problem, 0 * per_problem):
            seeds = {}
            for s in range(4):
                p = np.clip(
                    base
                    + shift
                    + rng.normal(0, true.seed_sd / math.sqrt(2), 1)
                    + rng.normal(0, true.seed_problem_sd / math.sqrt(2), 200),
                    0,
                    1,
                )
                seeds[s] = {f"p{i}": v for i, v in enumerate(rng.binomial(8, p) / 8)}
            sides.append(seeds)
        outcomes = np.array([list(side[s].values()) for side in sides for s in range(4)])
        found.append((paired_matrix(*sides), float(np.mean(outcomes * (1 - outcomes))) * 8 / 7, 8))
    declared = estimate_run_variance({"bench": found}, [m for m, _, _ in found], {"folder": "simulated"})
    parts = declared.benchmarks["bench"]
    assert parts["problem_sd"] == pytest.approx(true.problem_sd, abs=0.02)
    assert parts["seed_problem_sd"] == pytest.approx(true.seed_problem_sd, abs=0.03)
    assert true.seed_sd <= parts["seed_sd"] <= 1.5 * true.seed_sd
    assert declared.seed_sd_of(["bench"]) == (parts["seed_sd"], "bench")
    assert "upper confidence bound" in declared.provenance["estimator"]


def test_hara_plan_prints_the_power_section_and_writes_it(tmp_path, capsys):
    out = tmp_path / "plan.json"
    assert main(["plan", "--config", str(REPO / "config" / "paper.yaml"), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "Power: the minimum detectable paired difference" in printed
    assert "declared in config/variance/paper.yaml" in printed
    assert "gain_vs_grpo: primary hara_tok - none, pooled, seeds 3: paper 4.8 points, MDE" in printed
    assert "secondary: 18 comparisons" in printed and "secondary: 72 comparisons" in printed
    power = json.loads(out.read_text())["power"]
    assert [row["benchmark"] for row in power["benchmarks"]][-1] == "average"
    assert {claim["claim"] for claim in power["claims"]} == {"gain_vs_grpo", "gain_vs_credit", "tok_vs_seq"}
    assert main(["plan", "--config", str(REPO / "config" / "paper.yaml"), "--results", str(tmp_path / "none")]) == 2
    assert "--results" in capsys.readouterr().err
