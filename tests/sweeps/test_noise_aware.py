"""Issue 38, must-show 2: a search whose objective noise exceeds the knob's effect. Over 200 seeded studies driven by
the workers' own claim logic (hara.sweeps.design.next_claim: ask while the budget lasts, then re-evaluate the top
trials on fresh seeds) and choice (design.choose), with a synthetic objective whose true optimum is known, the
re-evaluated choice is on average at least as good as the plain best trial, and the value it reports is inflated
far less over its true value."""

from __future__ import annotations

import math

import numpy as np
import optuna
import pytest

from hara.sweeps.design import REEVALUATION, choose, next_claim, reevaluation_candidates, role_of
from hara.sweeps.study import distributions, load_study, make_sampler
from tests.sweeps.conftest import write_study

STUDIES = 200
NOISE_SD = 1.0  # per (point, seed): larger than the whole range of the true objective (0.49)
SEED_SD = 0.5  # a seed's luck shared by every point (what common random numbers pair away)
TRIALS, TOP, FRESH = 16, 2, 4


def true_objective(alpha: float) -> float:
    """The knob's real effect: an optimum at alpha = 0.3, 0.49 below it at alpha = 1."""
    return -((alpha - 0.3) ** 2)


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    path = write_study(
        tmp_path_factory.mktemp("noisy"),
        name="noisy",
        trials=TRIALS,
        pruner={"name": "none"},
        space={"hara.hara.alpha": {"type": "float", "low": 0.0, "high": 1.0}},
        sampler={"name": "tpe", "seed": 0, "options": {"n_startup_trials": 6}},
        reevaluate={},
    )  # the schema's defaults, as shipped
    spec = load_study(path)
    assert spec.fields["reevaluate"] == {"top": TOP, "repeats": FRESH}
    return spec


def observed(alpha: float, seeds: list[int], study_seed: int) -> list[float]:
    """One noisy value per training seed: the seed's luck, shared by every alpha (as a training seed's data order and
    initialisation are), plus a draw of its own per (alpha, seed), deterministic in both."""
    bits = int(np.float64(alpha).view(np.uint64))
    return [
        true_objective(alpha)
        + SEED_SD * np.random.default_rng([study_seed, seed]).normal()
        + NOISE_SD * np.random.default_rng([study_seed, seed, bits]).normal()
        for seed in seeds
    ]


def run_study(spec, study_seed: int) -> optuna.Study:
    """One study through the workers' claim loop, with the synthetic objective in place of training."""
    study = optuna.create_study(direction="maximize", sampler=make_sampler(spec, 0))
    while True:
        claim = next_claim(spec, study.get_trials(deepcopy=False))
        if claim.action == "stop":
            return study
        assert claim.action in ("ask", "run"), claim  # one process: nothing ever waits
        study.sampler = make_sampler(spec, len(study.trials) + 1000 * study_seed)
        if claim.action == "run":
            study.enqueue_trial(claim.params, user_attrs=claim.user_attrs)
        trial = study.ask(fixed_distributions=distributions(spec))
        for key, value in claim.user_attrs.items():
            trial.set_user_attr(key, value)
        values = observed(trial.params["hara.hara.alpha"], claim.user_attrs["seeds"], study_seed)
        study.tell(trial, float(np.mean(values)))


def test_reevaluated_choice_beats_the_plain_best_trial_and_is_not_inflated(spec):
    plain_true, plain_inflation, chosen_true, chosen_inflation, shrinkage = [], [], [], [], []
    for study_seed in range(STUDIES):
        trials = run_study(spec, study_seed).get_trials(deepcopy=False)
        assert sum(role_of(t) == REEVALUATION for t in trials) == TOP
        assert len(trials) == TRIALS + TOP
        plain = reevaluation_candidates(trials, 1, maximize=True)[0]  # what best_params.yaml was before
        choice = choose(trials, maximize=True)
        assert choice.reevaluated is not None and choice.candidates == TOP
        plain_true.append(true_objective(plain.params["hara.hara.alpha"]))
        plain_inflation.append(plain.value - plain_true[-1])
        chosen_true.append(true_objective(choice.trial.params["hara.hara.alpha"]))
        chosen_inflation.append(choice.reported - chosen_true[-1])
        shrinkage.append(choice.shrinkage)
    gain = np.subtract(chosen_true, plain_true)
    print(
        f"\nover {STUDIES} studies: true objective of the choice {np.mean(chosen_true):+.3f} (plain best trial "
        f"{np.mean(plain_true):+.3f}, optimum 0); reported value's inflation {np.mean(chosen_inflation):+.3f} "
        f"(plain best trial {np.mean(plain_inflation):+.3f}); mean shrinkage {np.mean(shrinkage):+.3f}; noise sd "
        f"{NOISE_SD} per (point, seed); paired gain {gain.mean():+.3f} "
        f"+- {gain.std(ddof=1) / math.sqrt(STUDIES):.3f} (Monte Carlo se)"
    )
    assert np.mean(chosen_true) >= np.mean(plain_true)
    assert np.mean(chosen_inflation) < np.mean(plain_inflation)
    # the plain best of 16 one-seed trials is inflated by about the expected maximum of 16 normals (1.77 sd; the
    # seed's shared luck adds its own draw, with no expectation)
    assert np.mean(plain_inflation) > 1.2 * NOISE_SD
    # the re-evaluated value is the better of 2 means of 4 fresh seeds: a small part of that
    assert abs(np.mean(chosen_inflation)) < 0.6 * NOISE_SD


def test_reevaluation_waits_for_running_search_trials_and_uses_the_same_fresh_seeds(spec):
    study = optuna.create_study(direction="maximize", sampler=make_sampler(spec, 0))
    for number in range(TRIALS):
        trial = study.ask(fixed_distributions=distributions(spec))
        trial.set_user_attr("seeds", spec.seeds)
        if number < TRIALS - 1:
            study.tell(trial, -float(number))
    assert next_claim(spec, study.get_trials()).action == "wait"
    study.tell(trial, 1.0)  # the last search trial becomes the best
    claims = []
    for _ in range(TOP):
        claim = next_claim(spec, study.get_trials())
        assert claim.action == "run"
        study.enqueue_trial(claim.params, user_attrs=claim.user_attrs)
        running = study.ask(fixed_distributions=distributions(spec))  # left RUNNING: claimed by a worker
        claims.append(claim)
    assert [c.user_attrs["reevaluates"] for c in claims] == [TRIALS - 1, 0]
    assert {tuple(c.user_attrs["seeds"]) for c in claims} == {(1, 2, 3, 4)}  # fresh: the search trained seed 0
    assert next_claim(spec, study.get_trials()).action == "stop"
    assert running.user_attrs["role"] == REEVALUATION and not math.isnan(running.params["hara.hara.alpha"])


PROBLEMS = 200


def pruned_share(
    pruner, delta_of, seed_sd: float, per_problem: bool, studies: int = 20, trials: int = 12
) -> tuple[float, float]:
    """(share of trials pruned, share of the worse-by-design trials pruned) over seeded studies of per-problem
    pass@1 outcomes (4 samples each; a seed shifts every problem of its run by a draw of sd ``seed_sd``), every trial
    reporting its first seed before its second, as the workers do: per problem (hara.sweeps.objective.instances) or
    its mean as one value."""
    from hara.sweeps.objective import Measurement, instances

    pruned = worse_pruned = worse = 0
    for study_seed in range(studies):
        rng = np.random.default_rng(study_seed)
        difficulty = rng.beta(2, 3, PROBLEMS)
        study = optuna.create_study(direction="maximize", pruner=pruner)
        for number in range(trials):
            trial, delta = study.ask(), delta_of(number)
            scores = [rng.binomial(4, np.clip(difficulty + delta + rng.normal(0, seed_sd), 0, 1)) / 4 for _ in "01"]
            first = Measurement(float(scores[0].mean()), {f"p{i:03d}": float(v) for i, v in enumerate(scores[0])})
            for step, value in (instances(0, first) if per_problem else {0: first.value}).items():
                trial.report(value, step)
            worse += delta < 0
            if trial.should_prune():
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
                pruned += 1
                worse_pruned += delta < 0
            else:
                study.tell(trial, float(np.mean(scores)))
    return pruned / (studies * trials), worse_pruned / max(worse, 1)


def test_wilcoxon_prunes_on_evidence_where_the_median_pruner_prunes_at_random():
    """Seed luck of 2 points (the embedded default's seed noise). No setting differs: the median pruner (on the first
    seed's pass@1, the one value it can compare) stops about half the trials anyway; the Wilcoxon pruner (paired over
    the first seed's problems, p 0.01 as sweeps/joint.yaml) far fewer, yet most of the settings 5 points worse. At
    p 0.1 it stops 40% of equal trials: a paired test within one seed cannot see the seed's shift of every problem,
    so its threshold must be strict."""
    from optuna.pruners import MedianPruner, WilcoxonPruner

    worse_third = lambda n: -0.05 if n % 3 == 2 else 0.0
    median_null, _ = pruned_share(MedianPruner(n_startup_trials=2, n_warmup_steps=0), lambda n: 0.0, 0.02, False)
    wilcoxon_null, _ = pruned_share(WilcoxonPruner(p_threshold=0.01), lambda n: 0.0, 0.02, True)
    _, wilcoxon_worse = pruned_share(WilcoxonPruner(p_threshold=0.01), worse_third, 0.02, True)
    print(
        f"\nno effect: median pruner stops {median_null:.0%} of trials, Wilcoxon (p 0.01) {wilcoxon_null:.0%}; "
        f"5 points worse: Wilcoxon stops {wilcoxon_worse:.0%}"
    )
    assert median_null > 0.45 and wilcoxon_null < 0.2 and wilcoxon_worse > 0.5


def test_the_gp_sampler_takes_the_stored_constraints_and_the_choice_keeps_to_feasible_trials(tmp_path):
    """sweeps/joint.yaml's sampler: GPSampler with hara.sweeps.study.stored_constraints. Trials above alpha 0.6 are
    infeasible (as unconverged Sinkhorn plans would be) though their objective is the best: the choice never takes
    one, and the sampler, told so, searches at the feasible optimum (the boundary, 0.6), never at the infeasible one
    (1)."""
    path = write_study(
        tmp_path,
        name="constrained",
        trials=14,
        pruner={"name": "none"},
        reevaluate={"top": 0},
        space={"hara.hara.alpha": {"type": "float", "low": 0.0, "high": 1.0}},
        sampler={"name": "gp", "seed": 0, "options": {"n_startup_trials": 5}},
        constraints={"hara/sinkhorn_unconverged": 0.0},
    )
    spec = load_study(path)
    study = optuna.create_study(direction="maximize", sampler=make_sampler(spec, 0))
    while next_claim(spec, study.get_trials(deepcopy=False)).action == "ask":
        study.sampler = make_sampler(spec, len(study.trials))
        trial = study.ask(fixed_distributions=distributions(spec))
        alpha = trial.params["hara.hara.alpha"]
        trial.set_user_attr("constraints", [alpha - 0.6])  # what the worker stores: mean metric - its limit
        study.tell(trial, alpha)  # the objective alone would pick alpha = 1
    trials = study.get_trials()
    choice = choose(trials, maximize=True)
    assert choice.trial.params["hara.hara.alpha"] <= 0.6
    assert choice.trial.params["hara.hara.alpha"] == max(
        t.params["hara.hara.alpha"] for t in trials if t.params["hara.hara.alpha"] <= 0.6
    )
    guided = [t.params["hara.hara.alpha"] for t in trials[5:]]
    assert max(guided) < 0.7 and min(guided) > 0.45, guided
