"""`hara plan`'s power section and `hara plan --design`.

The power section: for the configured grid, the minimum detectable paired difference per benchmark and on the
benchmark average, and for each claim with a stated effect whether its primary endpoint (the claims file's
``primary``: one comparison pooled over the cells) detects it, beside its secondary family's MDE. The design: for
each such primary the cheapest seeds per method and samples per problem that detect the paper's effect with 80%
power, the grid's device-hours against the configured grid's, an overlay config the DAG runs as is, and a staged
(group-sequential) alternative with its expected cost. Variance components: the declared file
(``report.run_variance``) or, with ``--results``, estimated from the per-problem outcomes of a multi-seed run (which
``--write-variance`` writes as a declared file). hara/planning/power.py does the maths.
"""

from __future__ import annotations

import copy
import datetime
import itertools
import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import yaml

from hara.errors import ConfigError
from hara.planning.power import (
    ALPHA,
    SEARCH_LIMIT,
    Contrast,
    components_from_config,
    contrast_mde,
    contrast_variance,
    design_of,
    mde,
    primary_contrast,
)
from hara.results.paired import t_quantile
from hara.results.variance import RunVariance, estimate_run_variance, write_run_variance

__all__ = [
    "design_section",
    "format_design",
    "format_power",
    "power_section",
    "primary_claims",
    "variance_from_results",
    "write_variance_file",
]

AVERAGE = "average"
#: Multipliers of every benchmark's samples per problem the design search tries (evaluation is a few percent of the
#: grid's device-hours: more samples are cheap variance against the sampling part, never against a run's luck).
SAMPLE_MULTIPLIERS = (1, 2, 4, 8)


def primary_claims(config: Mapping) -> list[dict]:
    """The claims whose primary endpoint is a pooled paired comparison of the grid's methods, each with its stated
    effect, its contrast's weights, and its secondary family's size."""
    from hara.analysis.claims import PAPER_EFFECTS
    from hara.report.repro import Evidence, load_claims, primary_weights

    evidence, cells = Evidence(config, {}), len(config["models"]["sizes"]) * len(config["grid"]["rlvr"])
    found = []
    for claim in load_claims():
        weights = primary_weights(evidence, claim)
        if weights is None:
            continue
        family = (
            len(evidence.methods(claim.params["methods"])) * len(evidence.methods(claim.params["against"])) * cells
            if claim.measure == "paired_gain_family"
            else cells * len(config["data"]["benchmarks"])
        )
        found.append(
            {
                "claim": claim.key,
                "effect": PAPER_EFFECTS.get(claim.key),
                "weights": weights,
                "family": family,
            }
        )
    return found


def power_of(components, contrast: Contrast, effect: float) -> float:
    """The probability that the primary, tested alone at two-sided alpha, reads "better" at a true ``effect``."""
    from scipy import stats

    variance, df = contrast_variance(components, contrast)
    critical, shift = t_quantile(1 - ALPHA / 2, df), effect / math.sqrt(variance)
    if not math.isfinite(df):
        return float(stats.norm.sf(critical - shift))
    return float(stats.nct.sf(critical, df, shift))


def variance_from_results(config: Mapping, results: str | Path, path: str = "") -> RunVariance:
    """Declared components estimated from the per-problem outcomes of a finished multi-seed run: every report
    comparison (each method against the baseline, tok against seq) with two seeds or more, per benchmark."""
    from hara.report.compare import compared_pairs
    from hara.results.collect import collect_runs, seed_runs

    runs, benchmarks = collect_runs(config, results), config["data"]["benchmarks"]
    per_benchmark: dict[str, list] = {b: [] for b in benchmarks}
    averages, used, seeds_seen = [], [], set()
    for size in config["models"]["sizes"]:
        for rlvr in config["grid"]["rlvr"]:
            for method, against in compared_pairs(config):
                mine, theirs = seed_runs(runs, size, rlvr, method), seed_runs(runs, size, rlvr, against)
                seeds = sorted(
                    s
                    for s in set(mine) & set(theirs)
                    if all(b in mine[s].problems and b in theirs[s].problems for b in benchmarks)
                )
                if len(seeds) < 2:
                    continue
                used.append(f"{size}/{rlvr}/{method}-{against}")
                seeds_seen |= set(seeds)
                averages.append(_add_pair(per_benchmark, mine, theirs, seeds, benchmarks))
    if not used:
        raise ConfigError(
            f"--results {results}: no comparison has two seeds or more (a declared run variance is measured from a "
            'multi-seed run: e.g. `make reproduce CONFIG="config/default.yaml config/seeds.yaml"`)'
        )
    provenance = {"folder": str(results), "runs": used, "seeds": sorted(seeds_seen), "config": config.get("name")}
    return estimate_run_variance(per_benchmark, averages, provenance, path)


def _add_pair(per_benchmark: dict, mine, theirs, seeds: list[int], benchmarks: list[str]) -> np.ndarray:
    """Append one comparison's (matrix, E[p(1-p)], K) per benchmark; return its benchmark-average matrix (the
    benchmarks' columns side by side, each scaled so that a row's mean is the seed's benchmark average)."""
    from hara.results.paired import paired_matrix

    columns = []
    for bench in benchmarks:
        a, b = {s: mine[s].problems[bench] for s in seeds}, {s: theirs[s].problems[bench] for s in seeds}
        matrix = paired_matrix(a, b)
        outcomes = np.array([list(side[s].values()) for side in (a, b) for s in seeds])
        k = int((mine[seeds[0]].fingerprints.get(bench) or {}).get("n", 1))
        success = float(np.mean(outcomes * (1 - outcomes))) * k / max(k - 1, 1)
        per_benchmark[bench].append((matrix, success, k))
        columns.append(matrix)
    total = sum(m.shape[1] for m in columns)
    return np.hstack([m * total / (len(columns) * m.shape[1]) for m in columns])


def write_variance_file(config: Mapping, results: str | Path, path: str | Path) -> RunVariance:
    variance = variance_from_results(config, results, str(path))
    write_run_variance(variance, path)
    return variance


def _components(config: Mapping, results: str | Path | None):
    if results is not None:
        return variance_from_results(config, results)
    declared = components_from_config(config)
    if declared is None:
        raise ConfigError(
            "report.run_variance: null: `hara plan` plans power from a declared run variance (a file, e.g. "
            "config/variance/paper.yaml) or from a multi-seed results folder (--results DIR)"
        )
    return declared


def power_section(config: Mapping, results: str | Path | None = None) -> dict:
    """MDEs per benchmark and on the average (one comparison, and the largest secondary family), and each claim's
    primary endpoint: its MDE at the grid's design against the paper's effect."""
    if results is None and components_from_config(config) is None:
        return {"note": "no declared run variance (report.run_variance: null): nothing to plan power with"}
    components = _components(config, results)
    benchmarks, min_seeds = config["data"]["benchmarks"], int(config["report"]["min_seeds"])
    design = design_of(config, config["grid"]["methods"])
    claims = primary_claims(config)
    largest = max([c["family"] for c in claims] or [1])
    rows = [
        {
            "benchmark": name,
            "problems": design.problems[name],
            "samples": design.samples[name],
            "seeds": design.seeds,
            "mde": mde(components, design, [name], 1, min_seeds),
            "mde_family": mde(components, design, [name], largest, min_seeds),
        }
        for name in benchmarks
    ]
    rows.append(
        {
            "benchmark": AVERAGE,
            "problems": sum(design.problems.values()),
            "samples": None,
            "seeds": design.seeds,
            "mde": mde(components, design, benchmarks, 1, min_seeds),
            "mde_family": mde(components, design, benchmarks, largest, min_seeds),
        }
    )
    primaries = []
    for claim in claims:
        contrast = primary_contrast(config, claim["weights"])
        found = {**claim, "seeds": dict(contrast.seeds), "mde": contrast_mde(components, contrast)}
        found["secondary_mde"] = mde(components, design_of(config, list(claim["weights"])), benchmarks, claim["family"])
        if claim["effect"] is not None:
            found["power"] = power_of(components, contrast, claim["effect"])
            found["detectable"] = found["mde"] <= claim["effect"]
        primaries.append(found)
    return {
        "components": _describe(components),
        "min_seeds": min_seeds,
        "family_of_table": largest,
        "benchmarks": rows,
        "claims": primaries,
    }


def _describe(components) -> str:
    if isinstance(components, RunVariance):
        sds = ", ".join(
            f"{name} {100 * c['seed_sd']:.1f}/{100 * c['problem_sd']:.1f}/{100 * c['seed_problem_sd']:.1f}"
            for name, c in components.benchmarks.items()
        )
        return f"seed/problem/seed x problem sd per benchmark (points): {sds}; declared in {components.source}"
    return components.describe()


def _pts(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}"


def format_power(section: Mapping) -> str:
    """The section as text: a table of MDEs and one line per claim's primary endpoint."""
    if "note" in section:
        return f"\nPower: {section['note']}; declare one (docs/comparisons.md, 'One seed, honestly')"
    lines = [
        "",
        (
            "Power: the minimum detectable paired difference (MDE, pass@1 points) at 80% power, two-sided "
            f"alpha 0.05, alone and corrected over a family of {section['family_of_table']} comparisons (the "
            "claims' largest secondary family)"
        ),
        "  variance components: " + section["components"],
        f"  {'benchmark':<16}{'problems':>9}{'samples':>8}{'seeds':>6}{'MDE':>7}{'MDE fam.':>9}",
    ]
    for row in section["benchmarks"]:
        samples = "-" if row["samples"] is None else str(row["samples"])
        lines.append(
            f"  {row['benchmark']:<16}{row['problems']:>9}{samples:>8}{row['seeds']:>6}"
            f"{_pts(row['mde']):>7}{_pts(row['mde_family']):>9}"
        )
    if section["benchmarks"][0]["seeds"] < section["min_seeds"]:
        lines.append(
            f"  fewer than report.min_seeds ({section['min_seeds']}) seeds: every interval adds the declared run "
            "variance (report.run_variance), so a 'better' is not one run's luck"
        )
    for claim in section["claims"]:
        lines.append("  " + _claim_line(claim))
    return "\n".join(lines)


def _claim_line(claim: Mapping) -> str:
    (method,) = [m for m, w in claim["weights"].items() if w > 0]
    against = [m for m, w in claim["weights"].items() if w < 0]
    head = (
        f"{claim['claim']}: primary {method} - {'mean of ' if len(against) > 1 else ''}{'/'.join(against)}, pooled, "
        f"seeds {min(claim['seeds'].values())}"
    )
    secondary = f"secondary: {claim['family']} comparisons, MDE {_pts(claim['secondary_mde'])} each"
    if claim["effect"] is None:
        return f"{head}: MDE {_pts(claim['mde'])} (the paper states no effect); {secondary}"
    verdict = "detectable" if claim["detectable"] else "NOT detectable"
    return (
        f"{head}: paper {_pts(claim['effect'])} points, MDE {_pts(claim['mde'])}, power {claim['power']:.0%} "
        f"-> {verdict}; {secondary}"
    )


# --- the design ------------------------------------------------------------------------------------------------------


def _with_samples(config: Mapping, multiplier: int) -> dict:
    """The config with every benchmark's samples per problem multiplied."""
    from hara.evaluation.settings import benchmark_settings

    scaled = copy.deepcopy(dict(config))
    overrides = scaled["evaluation"].setdefault("benchmarks", {}) or {}
    scaled["evaluation"]["benchmarks"] = overrides
    for bench in config["data"]["benchmarks"]:
        overrides[bench] = {**(overrides.get(bench) or {}), "n": benchmark_settings(config, bench).n * multiplier}
    return scaled


def _costs(config: Mapping) -> dict:
    """Device-hours of one seed of each method over the grid's cells (training and its evaluation job), and the
    Base models' evaluations, from hara.planning."""
    from hara.planning import plan_grid

    grid = plan_grid(config)
    per_method = dict.fromkeys(config["grid"]["methods"], 0.0)
    for cell in grid.cells:
        per_method[cell.method] += cell.device_hours["total"] + grid.jobs[cell.size].evaluate["device_hours"]
    base = sum(job.evaluate["base_device_hours"] for job in grid.jobs.values())
    return {"per_method": per_method, "base": base, "configured": grid.totals["device_hours"]}


def _total(costs: Mapping, seeds: Mapping[str, int]) -> float:
    return costs["base"] + sum(costs["per_method"][m] * seeds[m] for m in costs["per_method"])


def _fewest_seeds(components, contrast: Contrast, effect: float, floor: int) -> int | None:
    for seeds in range(floor, SEARCH_LIMIT + 1):
        if contrast_mde(components, contrast.with_seeds(dict.fromkeys(contrast.weights, seeds))) <= effect:
            return seeds
    return None


def design_section(config: Mapping, results: str | Path | None = None) -> dict:
    """The cheapest design with 80% power for every claim's primary endpoint at the paper's effect: per samples
    multiplier, each primary's fewest common seeds (at least plan.design_min_seeds), each method the most any of
    its primaries needs (a method in none keeps the minimum); the multiplier with the fewest device-hours wins.
    Within plan.budget_device_hours, else each primary's best power within the budget."""
    components = _components(config, results)
    plan = config["plan"]
    floor = int(plan.get("design_min_seeds") or 2)
    claims = [c for c in primary_claims(config) if c["effect"] is not None]
    base_costs = _costs(config)
    budget = plan.get("budget_device_hours") or base_costs["configured"]
    best = None
    for multiplier in SAMPLE_MULTIPLIERS:
        scaled = _with_samples(config, multiplier)
        costs = _costs(scaled) if multiplier != 1 else base_costs  # the configured samples: planned once
        rows, seeds = [], dict.fromkeys(config["grid"]["methods"], floor)
        for claim in claims:
            contrast = primary_contrast(scaled, claim["weights"])
            needed = _fewest_seeds(components, contrast, claim["effect"], floor)
            rows.append({"claim": claim, "seeds": needed, "samples": dict(contrast.samples)})
            for method in claim["weights"]:
                seeds[method] = max(seeds[method], needed or SEARCH_LIMIT)
        total = _total(costs, seeds)
        feasible = all(r["seeds"] for r in rows) and total <= budget
        candidate = {"multiplier": multiplier, "rows": rows, "seeds": seeds, "total": total, "feasible": feasible}
        if best is None or (feasible, -total) > (best["feasible"], -best["total"]):
            best = {**candidate, "config": scaled, "costs": costs}
    for row in best["rows"]:
        contrast = primary_contrast(
            best["config"], row["claim"]["weights"], {m: best["seeds"][m] for m in row["claim"]["weights"]}
        )
        row["mde"] = contrast_mde(components, contrast)
        row["power"] = power_of(components, contrast, row["claim"]["effect"])
        row["device_hours"] = sum(best["costs"]["per_method"][m] * best["seeds"][m] for m in row["claim"]["weights"])
        row["stages"] = staged_design(components, contrast, row["claim"]["effect"], best["costs"], plan, floor)
    if not best["feasible"]:
        best["within_budget"] = _best_within_budget(components, config, claims, budget, floor)
    return {
        "budget": budget,
        "configured": base_costs["configured"],
        "total": best["total"],
        "seeds": best["seeds"],
        "multiplier": best["multiplier"],
        "samples": {b: best["config"]["evaluation"]["benchmarks"][b]["n"] for b in config["data"]["benchmarks"]},
        "rows": best["rows"],
        "feasible": best["feasible"],
        "within_budget": best.get("within_budget"),
    }


def _best_within_budget(components, config: Mapping, claims: list[dict], budget: float, floor: int) -> list[dict]:
    """Per claim, the power at the most seeds its methods can have while the grid (others at the minimum) stays
    within the budget."""
    costs, out = _costs(config), []
    for claim in claims:
        seeds, best = dict.fromkeys(config["grid"]["methods"], floor), None
        for count in range(floor, SEARCH_LIMIT + 1):
            trial = {**seeds, **dict.fromkeys(claim["weights"], count)}
            if _total(costs, trial) > budget:
                break
            best = count
        power = None
        if best is not None:
            power = power_of(
                components,
                primary_contrast(config, claim["weights"], dict.fromkeys(claim["weights"], best)),
                claim["effect"],
            )
        out.append({"claim": claim["claim"], "seeds": best, "power": power})
    return out


def staged_design(components, contrast: Contrast, effect: float, costs: Mapping, plan: Mapping, floor: int) -> dict:
    """A group-sequential alternative to the fixed design of a primary: its stages (plan.stages, or proposed: the
    minimum, then halfway, then the fewest final seeds with 80% power under O'Brien-Fleming-type spending), the
    information fractions from the variance components, the bounds, and its expected device-hours under no effect
    and under the paper's, against the fixed design's."""
    from hara.results.sequential import Boundaries, operating_characteristics

    fixed = _fewest_seeds(components, contrast, effect, floor)
    if fixed is None:
        return {"note": f"no design up to {SEARCH_LIMIT} seeds has the power"}
    per_seed = sum(costs["per_method"][m] for m in contrast.weights)
    stages = list(plan.get("stages") or [])
    if fixed <= floor and not stages:
        return {"note": f"the fixed design's {fixed} seeds are the first stage's: nothing to stage"}
    candidates = [stages] if stages else _proposed_stages(floor, fixed)
    for schedule in candidates:
        variances = [
            contrast_variance(components, contrast.with_seeds(dict.fromkeys(contrast.weights, s)), estimated=False)[0]
            for s in schedule
        ]
        fractions = [variances[-1] / v for v in variances]
        if len(schedule) < 2 or any(b <= a for a, b in itertools.pairwise(fractions)):
            continue
        bounds = Boundaries.of(fractions, ALPHA, float(plan.get("futility_z", 0.0)))
        # z at the end is the estimate over the report's own standard error (the estimated variance, not the model's)
        final = contrast.with_seeds(dict.fromkeys(contrast.weights, schedule[-1]))
        drift = effect / math.sqrt(contrast_variance(components, final)[0])
        under = {name: operating_characteristics(bounds, d) for name, d in (("null", 0.0), ("effect", drift))}
        if under["effect"]["better"] < 0.8 and not stages:
            continue
        expected = {
            name: sum(stop * per_seed * s for stop, s in zip(found["stop_after"], schedule))
            for name, found in under.items()
        }
        return {
            "stages": schedule,
            "fractions": fractions,
            "bounds": list(bounds.efficacy),
            "futility": bounds.futility,
            "power": under["effect"]["better"],
            "type_one": under["null"]["better"],
            "fixed_seeds": fixed,
            "expected_ratio": {name: value / (per_seed * fixed) for name, value in expected.items()},
        }
    return {"note": f"the fixed design needs {fixed} seeds, the first stage's {floor}: nothing to stage"}


def _proposed_stages(floor: int, fixed: int) -> list[list[int]]:
    """Three stages from the minimum: halfway, then a final count from the fixed design's up (the sequential test
    needs a little more information at the end than the fixed one)."""
    out = []
    for final in range(max(fixed, floor + 2), SEARCH_LIMIT + 1):
        out.append([floor, (floor + final + 1) // 2, final])
    return out


def design_overlay(config: Mapping, section: Mapping) -> dict:
    """A config overlay the DAG runs as is after the full config: grid.seeds the minimum, grid.extra_seeds the
    methods that need more, every benchmark's samples per problem."""
    seeds = section["seeds"]
    common = min(seeds.values())
    first = [int(s) for s in config["grid"]["seeds"]][:1] or [0]
    base = list(range(first[0], first[0] + common))
    extra = {m: list(range(base[-1] + 1, base[-1] + 1 + n - common)) for m, n in seeds.items() if n > common}
    overlay = {"grid": {"seeds": base, "extra_seeds": extra}}
    if section["multiplier"] != 1:
        overlay["evaluation"] = {"benchmarks": {b: {"n": n} for b, n in section["samples"].items()}}
    return overlay


def write_overlay(config: Mapping, section: Mapping, path: str | Path) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    header = (
        f"# The cheapest design with 80% power for every primary endpoint (`hara plan --design`, "
        f"{datetime.date.today().isoformat()}): give it after the full config,\n"
        f"#   snakemake --configfile <config> {out}\n"
        f"# {section['total']:.0f} device-hours against the configured grid's {section['configured']:.0f}.\n"
    )
    out.write_text(header + yaml.safe_dump(design_overlay(config, section), sort_keys=False), encoding="utf-8")
    return out


def format_design(section: Mapping) -> str:
    lines = [
        "",
        "Design: the cheapest grid whose primary endpoints detect the paper's effects with 80% power "
        f"(samples per problem x{section['multiplier']}: "
        + ", ".join(f"{b} {n}" for b, n in section["samples"].items())
        + ")",
        f"  {'claim':<16}{'endpoint':<34}{'seeds':>6}{'MDE':>7}{'paper':>7}{'power':>7}{'device-h':>10}",
    ]
    for row in section["rows"]:
        claim = row["claim"]
        (method,) = [m for m, w in claim["weights"].items() if w > 0]
        against = [m for m, w in claim["weights"].items() if w < 0]
        endpoint = f"{method} - {'mean ' if len(against) > 1 else ''}{'/'.join(against)}"[:33]
        seeds = "-" if row["seeds"] is None else str(max(section["seeds"][m] for m in claim["weights"]))
        lines.append(
            f"  {claim['claim']:<16}{endpoint:<34}{seeds:>6}{_pts(row['mde']):>7}{_pts(claim['effect']):>7}"
            f"{row['power']:>7.0%}{row['device_hours']:>10.0f}"
        )
    seeds = ", ".join(f"{m} {n}" for m, n in section["seeds"].items())
    lines.append(f"  seeds per method: {seeds}")
    lines.append(
        f"  grid: {section['total']:.0f} device-hours against the configured grid's {section['configured']:.0f} "
        f"({section['total'] / section['configured']:.0%}); budget {section['budget']:.0f}"
    )
    if not section["feasible"]:
        for entry in section["within_budget"] or []:
            power = "n/a" if entry["power"] is None else f"{entry['power']:.0%}"
            lines.append(
                f"  no design within the budget reaches 80%: {entry['claim']} at most {entry['seeds']} seeds, "
                f"power {power}"
            )
    for row in section["rows"]:
        staged = row["stages"]
        if "note" in staged:
            lines.append(f"  staged {row['claim']['claim']}: {staged['note']}")
            continue
        lines.append(
            f"  staged {row['claim']['claim']}: seeds {staged['stages']}, information "
            + ", ".join(f"{f:.2f}" for f in staged["fractions"])
            + ", bounds "
            + ", ".join(f"{b:.3f}" for b in staged["bounds"])
            + f" (futility z < {staged['futility']:g}); power {staged['power']:.0%}; expected device-hours "
            f"{staged['expected_ratio']['null']:.0%} (no effect) / {staged['expected_ratio']['effect']:.0%} (the "
            f"paper's) of the fixed {staged['fixed_seeds']}-seed design"
        )
    return "\n".join(lines)
