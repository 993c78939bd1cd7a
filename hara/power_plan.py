"""`hara plan`'s power section: for the configured grid, the minimum detectable paired difference per benchmark and
on the benchmark average, and for each claim of the claims file with a stated effect whether the grid can detect
it and what would (hara/power.py does the maths). Variance components: stated (config ``plan.power``) or, with
``--results``, estimated from the per-problem outcomes of finished runs."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from hara.power import (
    Components,
    Design,
    components_from_config,
    estimate_components,
    mde,
    samples_needed,
    seeds_needed,
)

__all__ = ["claim_families", "design_of", "format_power", "power_section"]

AVERAGE = "average"


def design_of(config: Mapping, methods: list[str]) -> Design:
    """The grid's design for comparisons among ``methods``: the seeds they all have, each benchmark's problems
    (a hub benchmark's own count, else data.benchmark_size) and samples per problem (its evaluation n)."""
    from hara.data.catalog import get_benchmark
    from hara.evaluation.settings import benchmark_settings
    from hara.layout import method_seeds

    benchmarks = config["data"]["benchmarks"]
    seeds = min(len(method_seeds(config, m)) for m in methods) if methods else len(config["grid"]["seeds"])
    problems = {b: get_benchmark(b).size(config) for b in benchmarks}
    return Design(seeds, problems, {b: benchmark_settings(config, b).n for b in benchmarks})


def claim_families(config: Mapping) -> list[dict]:
    """The claims whose measure is a family of paired accuracy differences, each with its stated effect and the
    number of comparisons the grid makes for it."""
    from hara.analysis.claims import PAPER_EFFECTS
    from hara.report.repro import Evidence, load_claims

    evidence, cells = Evidence(config, {}), len(config["models"]["sizes"]) * len(config["grid"]["rlvr"])
    families = []
    for claim in load_claims():
        if claim.measure != "paired_gain_family":
            continue
        methods, against = evidence.methods(claim.params["methods"]), evidence.methods(claim.params["against"])
        families.append(
            {
                "claim": claim.key,
                "effect": PAPER_EFFECTS.get(claim.key),
                "methods": methods + against,
                "family": len(methods) * len(against) * cells,
            }
        )
    return families


def _pairs_from_results(config: Mapping, results: str | Path) -> list[tuple]:
    """(A per-seed outcomes, B per-seed outcomes, samples per problem) of every report comparison and benchmark."""
    from hara.report.compare import compared_pairs
    from hara.results.collect import collect_runs, seed_runs

    runs, pairs = collect_runs(config, results), []
    for size in config["models"]["sizes"]:
        for rlvr in config["grid"]["rlvr"]:
            for method, against in compared_pairs(config):
                mine, theirs = seed_runs(runs, size, rlvr, method), seed_runs(runs, size, rlvr, against)
                seeds = sorted(s for s in set(mine) & set(theirs) if mine[s].problems and theirs[s].problems)
                for bench in config["data"]["benchmarks"]:
                    if seeds and all(bench in mine[s].problems and bench in theirs[s].problems for s in seeds):
                        k = int((mine[seeds[0]].fingerprints.get(bench) or {}).get("n", 1))
                        pairs.append(
                            (
                                {s: mine[s].problems[bench] for s in seeds},
                                {s: theirs[s].problems[bench] for s in seeds},
                                k,
                            )
                        )
    return pairs


def power_section(config: Mapping, results: str | Path | None = None) -> dict:
    """MDEs per benchmark and on the average (one comparison, and each claim's family), and each claim's
    detectability with the seeds / samples per problem that would detect it."""
    components = components_from_config(config)
    if results is not None:
        components = estimate_components(_pairs_from_results(config, results), components)
    benchmarks = config["data"]["benchmarks"]
    design = design_of(config, config["grid"]["methods"])
    families = claim_families(config)
    largest = max([f["family"] for f in families] or [1])
    rows = [
        {
            "benchmark": name,
            "problems": design.problems[name],
            "samples": design.samples[name],
            "seeds": design.seeds,
            "mde": mde(components, design, [name]),
            "mde_family": mde(components, design, [name], largest),
        }
        for name in benchmarks
    ]
    rows.append(
        {
            "benchmark": AVERAGE,
            "problems": sum(design.problems.values()),
            "samples": None,
            "seeds": design.seeds,
            "mde": mde(components, design, benchmarks),
            "mde_family": mde(components, design, benchmarks, largest),
        }
    )
    claims = [_claim_power(config, components, family) for family in families]
    return {"components": vars(components), "family_of_table": largest, "benchmarks": rows, "claims": claims}


def _claim_power(config: Mapping, components: Components, family: dict) -> dict:
    benchmarks, design = config["data"]["benchmarks"], design_of(config, family["methods"])
    out = {"claim": family["claim"], "effect": family["effect"], "family": family["family"], "seeds": design.seeds}
    if not family["family"]:
        return {**out, "detectable": None, "note": "the grid makes none of its comparisons"}
    found = mde(components, design, benchmarks, family["family"])
    out["mde"] = found
    if family["effect"] is None:
        return {**out, "detectable": None, "note": "the paper states no effect size"}
    out["detectable"] = found <= family["effect"]
    out["seeds_needed"] = seeds_needed(components, design, benchmarks, family["family"], family["effect"])
    out["samples_needed"] = samples_needed(components, design, benchmarks, family["family"], family["effect"])
    return out


def _pts(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}"


def format_power(section: Mapping) -> str:
    """The section as text: a table of MDEs and one line per claim."""
    c = section["components"]
    lines = [
        "",
        (
            "Power: the minimum detectable paired difference (MDE, pass@1 points) at 80% power, two-sided "
            f"alpha 0.05, alone and corrected over a family of {section['family_of_table']} comparisons (the "
            "claims' largest)"
        ),
        "  variance components: " + Components(**c).describe(),
        f"  {'benchmark':<16}{'problems':>9}{'samples':>8}{'seeds':>6}{'MDE':>7}{'MDE fam.':>9}",
    ]
    for row in section["benchmarks"]:
        samples = "-" if row["samples"] is None else str(row["samples"])
        lines.append(
            f"  {row['benchmark']:<16}{row['problems']:>9}{samples:>8}{row['seeds']:>6}"
            f"{_pts(row['mde']):>7}{_pts(row['mde_family']):>9}"
        )
    if section["benchmarks"][0]["seeds"] == 1:
        lines.append(
            f"  one seed: every interval covers the problems only; a whole run's luck (seed sd "
            f"{_pts(c['seed_sd'])} points) is in none of them, so a 'better' may be one seed's"
        )
    for claim in section["claims"]:
        lines.append("  " + _claim_line(claim))
    return "\n".join(lines)


def _claim_line(claim: Mapping) -> str:
    head = f"{claim['claim']}: {claim['family']} comparisons, {claim['seeds']} seed(s)"
    if claim.get("detectable") is None:
        return f"{head}: {claim['note']}" + (f"; MDE {_pts(claim['mde'])}" if "mde" in claim else "")
    verdict = "detectable" if claim["detectable"] else "NOT detectable"
    line = f"{head}: paper {_pts(claim['effect'])} points, MDE {_pts(claim['mde'])} -> {verdict}"
    if not claim["detectable"]:
        options = [
            f"{claim['seeds_needed']} seeds" if claim["seeds_needed"] else None,
            f"{claim['samples_needed']} samples per problem" if claim["samples_needed"] else None,
        ]
        options = [o for o in options if o]
        line += (
            "; it would be with " + " or ".join(options)
            if options
            else "; not by seeds or samples alone (up to 64): more problems, or a larger effect"
        )
    return line
