"""Simulated grids for the claims check (hara.report.repro.check_claims): null worlds where every method is the
same, each training run with its own luck (a logit shift of all its problems), scored on the embedded default's five
benchmarks; and their declared run variance. Seeded; shared by the simulation tests of tests/report/."""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping

import numpy as np
import yaml

from hara.config import load_config
from hara.report.repro import check_claims, load_claims
from hara.results.collect import Cell, Run
from tests.helpers import DEFAULT

SIZES, PRESETS, METHODS = ["tiny-s", "tiny-m", "tiny-l"], ["grpo", "dr_grpo", "dapo"], ["none", "hara_seq", "hara_tok"]
PROBLEMS, SAMPLES = 200, 4


@functools.cache
def _base_config() -> dict:
    return load_config(DEFAULT)


def grid_config(run_variance: str | None, seeds: int = 1, resamples: int = 400) -> dict:
    """The default's five benchmarks of 200 problems, 3 sizes x 3 presets x none/hara_seq/hara_tok."""
    config = copy.deepcopy(_base_config())
    config["models"]["sizes"], config["grid"]["rlvr"], config["grid"]["methods"] = SIZES, PRESETS, METHODS
    config["grid"]["seeds"], config["grid"]["extra_seeds"] = list(range(seeds)), {}
    config["report"]["bootstrap"] = {"resamples": resamples, "seed": 0, "confidence": 0.95}
    config["report"]["run_variance"] = run_variance
    return config


@functools.cache
def world(benchmark_count: int = 5, seed: int = 11) -> np.ndarray:
    """Each benchmark's problems' logits (benchmarks, problems): a spread of easy and hard problems."""
    return np.random.default_rng(seed).normal(-0.4, 1.2, (benchmark_count, PROBLEMS))


def expit(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def simulated_runs(
    config: Mapping,
    rng: np.random.Generator,
    run_sd: float,
    planted: float = 0.0,
) -> dict[Cell, Run]:
    """Every run of the config's grid: each problem's success probability expit(logit + the run's shift), the shift
    ~ N(0, run_sd) per run (its luck, logit scale); ``planted`` adds to hara_tok's probabilities everywhere.
    pass@1 = avg@SAMPLES."""
    benchmarks, logits = config["data"]["benchmarks"], world(len(config["data"]["benchmarks"]))
    runs = {}
    fingerprint = {"benchmark_sha256": "ab", "n": SAMPLES}
    for size in config["models"]["sizes"]:
        for rlvr in config["grid"]["rlvr"]:
            for method in config["grid"]["methods"]:
                for seed in config["grid"]["seeds"]:
                    p = expit(logits + rng.normal(0.0, run_sd)) + (planted if method == "hara_tok" else 0.0)
                    passed = rng.binomial(SAMPLES, np.clip(p, 0, 1)) / SAMPLES
                    problems = {
                        b: {f"p{i:03d}": float(v) for i, v in enumerate(row)} for b, row in zip(benchmarks, passed)
                    }
                    cell = Cell(size, rlvr, method, seed)
                    runs[cell] = Run(
                        cell,
                        [],
                        {b: float(np.mean(list(v.values()))) for b, v in problems.items()},
                        problems,
                        dict.fromkeys(benchmarks, fingerprint),
                    )
    return runs


def paired_seed_sd(run_sd: float, draws: int = 4000, seed: int = 3) -> tuple[dict[int, float], float]:
    """The sd of a paired difference's run part that a logit shift of sd ``run_sd`` per run makes, per benchmark
    and on their average (Monte Carlo over pairs of shifts, no sampling noise)."""
    logits = world()
    rng = np.random.default_rng(seed)
    shifts = rng.normal(0.0, run_sd, (draws, 2))
    means = np.stack([expit(logits + s[0]).mean(axis=1) - expit(logits + s[1]).mean(axis=1) for s in shifts])
    return {i: float(means[:, i].std()) for i in range(logits.shape[0])}, float(means.mean(axis=1).std())


def write_declared(path, benchmarks: list[str], run_sd: float) -> str:
    """A declared run variance holding the truth of a run shift of sd ``run_sd``."""
    per_benchmark, average = paired_seed_sd(run_sd)
    raw = {
        "benchmarks": {
            b: {"seed_sd": per_benchmark[i], "problem_sd": 0.0, "seed_problem_sd": 0.0, "success_variance": 0.2}
            for i, b in enumerate(benchmarks)
        },
        "average": {"seed_sd": average, "benchmarks": benchmarks},
        "provenance": {"folder": "simulation", "seeds": [0, 1, 2]},
    }
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return str(path)


@functools.cache
def claim(key: str):
    return next(c for c in load_claims() if c.key == key)


def outcome(config: Mapping, runs: Mapping[Cell, Run], key: str = "gain_vs_grpo"):
    ((_, found),) = check_claims(config, "/nonexistent", runs, [claim(key)])
    return found
