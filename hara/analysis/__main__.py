"""`python -m hara.analysis NAME --config CFG [--results DIR] [--out DIR]`: run one analysis of the registry."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hara.analysis.plan import ANALYSIS_NAMES

__all__ = ["main", "run_analysis"]


def _registry() -> dict:
    """Analysis name -> function (config, results, out) -> AnalysisResult (imported on demand: torch, models)."""
    from hara.analysis.interpret import interpretability_study
    from hara.analysis.studies import STUDIES

    return {**STUDIES, "interpretability": interpretability_study}



def run_analysis(name: str, config: dict, results: str | Path, out: str | Path) -> Path:
    """Run analysis ``name`` and write its files into ``out``; returns the JSON path."""
    from hara.analysis.output import write_result

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    return write_result(_registry()[name](config, Path(results), out), out)


def main(argv: list[str] | None = None) -> int:
    from hara.config import ConfigError, load_config

    parser = argparse.ArgumentParser(prog="python -m hara.analysis", description=__doc__)
    parser.add_argument("name", choices=ANALYSIS_NAMES, help="the analysis to run")
    parser.add_argument("--config", required=True, help="YAML config (validated against config/schema.yaml)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE", help="override a value")
    parser.add_argument("--results", help="results folder of the workflow (default: results_dir)")
    parser.add_argument("--out", help="output folder (default: <results>/analysis/<name>)")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config, args.set)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    results = Path(args.results or config["results_dir"])
    path = run_analysis(args.name, config, results, args.out or results / "analysis" / args.name)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
