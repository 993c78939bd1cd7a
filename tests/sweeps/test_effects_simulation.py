"""A sensitivity study's verdicts and conclusion (hara.sweeps.effects), measured on seeded simulations of its data: two
listed values against the reference, 3 shared seeds, 200 validation problems scored avg@4, with the crossed structure of
docs/comparisons.md, "Paired differences" (a run's luck per (value, seed), a persistent value x problem effect). With no
effect anywhere, the conclusion names a value in at most 8% of studies (nominal 5%, family-wise; measured 0.5%); an
effect equal to the MDE the study reports is detected in 66.5% of them, not the nominal 80%: with 3 seeds the crossed
interval (hara.results.paired) is conservative, so the stated MDE is optimistic by that much (measured 65-68% for a run
luck of 0.5-3 points)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from hara.results.paired import Bootstrap
from hara.sweeps.effects import sensitivity
from hara.sweeps.study import load_study
from tests.sweeps.conftest import KNOB, REFERENCE, write_sensitivity_study

PROBLEMS, SAMPLES, STUDIES = 200, 4, 200
RUN_SD, PROBLEM_SD = 0.015, 0.05
SETTINGS = Bootstrap(resamples=500, seed=0, confidence=0.95)


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    path = write_sensitivity_study(
        tmp_path_factory.mktemp("simulated"),
        values=(0.1, 0.5),
        repeats=3,
        objective={"metric": "validation/pass@1", "direction": "maximize"},
    )
    return load_study(path)


def simulated_trials(spec, rng: np.random.Generator, planted: dict[float, float]) -> list:
    """COMPLETE sensitivity trials (value, seed) as the workers store them, per-problem outcomes included."""
    difficulty = rng.beta(2, 3, PROBLEMS)
    trials = []
    for value in (REFERENCE, 0.1, 0.5):
        persistent = rng.normal(0, PROBLEM_SD, PROBLEMS)  # this value's lasting effect on each problem
        for seed in spec.seeds:
            p = np.clip(difficulty + planted.get(value, 0.0) + persistent + rng.normal(0, RUN_SD), 0, 1)
            scores = rng.binomial(SAMPLES, p) / SAMPLES
            trials.append(
                SimpleNamespace(
                    params={KNOB: value},
                    state=SimpleNamespace(name="COMPLETE"),
                    value=float(scores.mean()),
                    user_attrs={
                        "role": "sensitivity",
                        "seeds": [seed],
                        "problem_scores": {str(seed): {f"p{i:03d}": float(s) for i, s in enumerate(scores)}},
                    },
                )
            )
    return trials


def test_no_effect_is_rarely_reported_and_an_effect_at_the_mde_is_usually_found(spec):
    named, mdes = 0, []
    for index in range(STUDIES):
        result = sensitivity(spec, simulated_trials(spec, np.random.default_rng(index), {}), SETTINGS)
        named += not result.conclusion().startswith("No value differs")
        mdes.append(next(e.corrected.mde for e in result.effects if e.point[KNOB] == 0.1))
    mde = float(np.median(mdes))
    found = 0
    for index in range(STUDIES):
        result = sensitivity(spec, simulated_trials(spec, np.random.default_rng(10_000 + index), {0.1: mde}), SETTINGS)
        found += next(e.corrected.verdict for e in result.effects if e.point[KNOB] == 0.1) == "better"
    print(
        f"\nno effect: a value named in {named / STUDIES:.1%} of studies; planted effect = median MDE "
        f"({100 * mde:.2f} points): found in {found / STUDIES:.1%}"
    )
    assert named / STUDIES <= 0.08
    assert 0.6 <= found / STUDIES <= 0.95


def test_a_per_seed_objective_with_no_effect_is_rarely_reported(tmp_path):
    """train/reward (one value per run, the smoke studies' objective): the seeds are the only units. Measured 7.0%
    (nominal 5%); before the corrected interval was held to at least the raw one (hara.results.paired.correct_family),
    the max-T critical value from three seeds' handful of replicates named a value in 9.0% of such studies."""
    spec = load_study(write_sensitivity_study(tmp_path, values=(0.1, 0.5), repeats=3))
    named = 0
    for index in range(STUDIES):
        rng = np.random.default_rng(index)
        trials = [
            SimpleNamespace(
                params={KNOB: value},
                state=SimpleNamespace(name="COMPLETE"),
                value=float(rng.normal(0.5, 0.02)),
                user_attrs={"role": "sensitivity", "seeds": [seed]},
            )
            for value in (REFERENCE, 0.1, 0.5)
            for seed in spec.seeds
        ]
        named += not sensitivity(spec, trials, SETTINGS).conclusion().startswith("No value differs")
    print(f"\nper-seed objective, no effect: a value named in {named / STUDIES:.1%} of studies")
    assert named / STUDIES <= 0.08
