"""Staged seeds: `hara repro-check --stage` tests each claim's primary endpoint at the stage its seeds have reached
(config ``plan.stages``: seeds per method at the end of each stage) against a group-sequential boundary
(hara.results.sequential: O'Brien-Fleming-type alpha spending at information fractions from the declared variance
components, and a non-binding futility bound), and writes the next stage's overlay for the undecided claims
(``grid.extra_seeds`` for only the methods their primaries compare).

A decided claim stops: "reproduced" or "contradicted" when its z statistic crosses the efficacy bound (by its sign),
"within noise" when it stops for futility or at the last stage without crossing; the others continue.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from hara.errors import ConfigError
from hara.layout import method_seeds
from hara.planning.power import components_from_config, contrast_variance, primary_contrast
from hara.report.repro import (
    CONTRADICTED,
    NOISE,
    REPRODUCED,
    Evidence,
    load_claims,
    primary_difference,
    primary_weights,
)
from hara.results.collect import collect_runs, seed_runs
from hara.results.sequential import CONTINUE, EFFICACY, Boundaries, decide

__all__ = ["StageCheck", "format_stages", "next_stage_overlay", "stage_checks"]

ALPHA = 0.05


@dataclass(frozen=True)
class StageCheck:
    """One claim's primary at its stage: the stage reached (0-based; None before the first), the seeds it has, the
    boundary, z, and the decision (a claims status, or ``continue``)."""

    claim: str
    methods: tuple[str, ...]
    stage: int | None
    seeds: int
    z: float | None
    bound: float | None
    decision: str
    note: str = ""


def _seeds_present(evidence: Evidence, methods: list[str]) -> int:
    """The fewest evaluated seeds any of ``methods`` has in any cell: what the pooled primary pairs."""
    counts = [
        sum(1 for run in seed_runs(evidence.runs, size, rlvr, m).values() if run.problems)
        for size, rlvr in evidence.cells()
        for m in methods
    ]
    return min(counts) if counts else 0


def _stages(config: Mapping) -> list[int]:
    stages = [int(s) for s in (config["plan"].get("stages") or [])]
    if len(stages) < 2:
        raise ConfigError(
            "plan.stages: a staged design needs the seeds of each stage, e.g. [2, 3, 5] (`hara plan --design` "
            "proposes them)"
        )
    return stages


def stage_checks(config: Mapping, results: str | Path) -> list[StageCheck]:
    """Every claim with a pooled primary endpoint, checked at the stage its seeds reached."""
    stages, components = _stages(config), components_from_config(config)
    if components is None:
        raise ConfigError("report.run_variance: a staged design takes its information fractions from a declared file")
    config = {**config, "results_dir": str(results)}
    evidence = Evidence(config, collect_runs(config, results))
    checks = []
    for claim in load_claims():
        weights = primary_weights(evidence, claim)
        if weights is not None:
            checks.append(_check(evidence, components, claim.key, claim.primary, weights, stages))
    return checks


def _check(evidence: Evidence, components, key: str, primary: Mapping, weights: dict, stages: list[int]) -> StageCheck:
    methods = tuple(weights)
    seeds = _seeds_present(evidence, list(methods))
    reached = [k for k, s in enumerate(stages) if s <= seeds]
    if not reached:
        return StageCheck(key, methods, None, seeds, None, None, CONTINUE, f"first stage needs {stages[0]} seeds")
    stage = reached[-1]
    variances = [
        contrast_variance(
            components, primary_contrast(evidence.config, weights, dict.fromkeys(methods, s)), estimated=False
        )[0]
        for s in stages
    ]
    bounds = Boundaries.of(
        [variances[-1] / v for v in variances], ALPHA, float(evidence.config["plan"].get("futility_z", 0.0))
    )
    found, _ = primary_difference(evidence, primary)
    if found is None or found.se <= 0:
        return StageCheck(key, methods, stage, seeds, None, bounds.efficacy[stage], CONTINUE, "no pooled estimate yet")
    z = found.mean / found.se
    verdict = decide(z, stage, bounds)
    decision = (REPRODUCED if z > 0 else CONTRADICTED) if verdict == EFFICACY else verdict
    decision = NOISE if decision not in (REPRODUCED, CONTRADICTED, CONTINUE) else decision
    note = f"{found.format()} points ({found.describe_basis()})"
    return StageCheck(key, methods, stage, seeds, z, bounds.efficacy[stage], decision, note)


def next_stage_overlay(config: Mapping, checks: list[StageCheck]) -> dict | None:
    """``grid.extra_seeds`` giving the continuing claims' methods the next stage's seeds (None: all decided)."""
    stages, extra = _stages(config), {}
    base = [int(s) for s in config["grid"]["seeds"]]
    for check in checks:
        if check.decision != CONTINUE:
            continue
        target = stages[0 if check.stage is None else min(check.stage + 1, len(stages) - 1)]
        for method in check.methods:
            have = method_seeds(config, method)
            more = [s for s in range(max(have) + 1, max(have) + 1 + max(0, target - len(have)))]
            extra[method] = sorted(set(extra.get(method, [])) | {s for s in have if s not in base} | set(more))
    return {"grid": {"extra_seeds": extra}} if extra else None


def write_next_stage(config: Mapping, checks: list[StageCheck], path: str | Path) -> Path | None:
    overlay = next_stage_overlay(config, checks)
    if overlay is None:
        return None
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        "# The next stage's seeds for the undecided claims (`hara repro-check --stage`): give it after the configs\n"
        + yaml.safe_dump(overlay, sort_keys=False),
        encoding="utf-8",
    )
    return out


def format_stages(checks: list[StageCheck]) -> str:
    lines = []
    for c in checks:
        where = "before stage 1" if c.stage is None else f"stage {c.stage + 1}"
        z = "n/a" if c.z is None or not math.isfinite(c.z) else f"{c.z:+.2f}"
        bound = "" if c.bound is None else f" against +-{c.bound:.3f}"
        lines.append(f"[{c.decision}] {c.claim}: {where} ({c.seeds} seeds), z {z}{bound}; {c.note}")
    return "\n".join(lines)
