"""The ``hara`` command line: a registry of subcommands, each a thin edge around library functions.

Every subcommand takes ``--config`` (validated by hara.config) and optional ``--set KEY.PATH=VALUE`` overrides.
User errors (bad config, corrupt data, unknown names) print one line and exit with status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hara import layout
from hara.config import ConfigError, load_config
from hara.errors import HaraError, UserError


@dataclass(frozen=True)
class Command:
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, dict], int]
    skip_checks: tuple[str, ...] = ()  # config checks that do not apply (fetch-data creates data.local_dir)
    own_config: bool = False  # the command reads its config itself (sweep: the study file names it)
    places_work: bool = False  # it loads models onto a device: hara.device.require_device runs first


COMMANDS: dict[str, Command] = {}

#: CPython's collector thresholds (young, middle, old) in a ``hara`` process: full collections ten times rarer than
#: CPython's (700, 10, 10). A training or evaluation job first imports torch, transformers, TRL, vLLM, MLflow and
#: lighteval, ~800,000 long-lived objects, and each full collection traverses all of them: 10 of them took 1.6 of
#: 9 CPU s of those imports, against 0.2 s here (`python benchmarks/bench_gc.py`, docs/profile.md). The young
#: generations, where a step's short-lived cycles are freed, keep CPython's thresholds.
GC_THRESHOLDS = (700, 10, 100)


def register_command(
    name: str,
    help: str,
    add_arguments: Callable[[argparse.ArgumentParser], None],
    skip_checks: tuple[str, ...] = (),
    own_config: bool = False,
    places_work: bool = False,
):
    """Decorator adding a subcommand; a second registration under the same name is a bug."""

    def decorate(run: Callable[[argparse.Namespace, dict], int]):
        if name in COMMANDS:
            raise ValueError(f"command {name!r} registered twice")
        COMMANDS[name] = Command(
            help=help,
            add_arguments=add_arguments,
            run=run,
            skip_checks=skip_checks,
            own_config=own_config,
            places_work=places_work,
        )
        return run

    return decorate


def user_error_types() -> tuple[type[BaseException], ...]:
    """Exceptions that describe bad input rather than a bug in hara."""
    return (HaraError, FileNotFoundError)


def no_arguments(parser: argparse.ArgumentParser) -> None:
    """For commands that need only --config."""


def output_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="output folder")


def size_and_output_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--size", required=True, help="model size (tiny-s, tiny-m, tiny-l or a key of models.hub_ids)")
    parser.add_argument("--data", help="folder written by `hara data` (default: generate in memory from the config)")
    parser.add_argument("--out", required=True, help="output folder of the base model")
    parser.add_argument("--skip-accuracy", action="store_true", help="do not measure accuracy after the warm-up")


def accuracy_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="folder of a saved model (e.g. written by `hara base-model`)")
    parser.add_argument("--data", help="folder written by `hara data` (default: generate in memory from the config)")
    parser.add_argument("--out", help="write the accuracy JSON here")


@register_command("config", "validate a config and print it resolved (defaults filled)", no_arguments)
def run_config(args: argparse.Namespace, config: dict) -> int:
    import yaml

    print(yaml.safe_dump(config, sort_keys=False), end="")
    return 0


@register_command("data", "write the training set and benchmarks as local JSONL files", output_argument)
def run_data(args: argparse.Namespace, config: dict) -> int:
    from hara.data.pipeline import write_config_datasets

    manifest = write_config_datasets(config, args.out)
    counts = ", ".join(f"{name}={entry['count']}" for name, entry in manifest["files"].items())
    print(f"wrote {args.out}: {counts}")
    return 0


@register_command(
    "base-model",
    "build the base model of one size (tiny: build + SFT warm-up)",
    size_and_output_arguments,
    places_work=True,
)
def run_base_model(args: argparse.Namespace, config: dict) -> int:
    from hara.models.base import make_base_model

    summary = make_base_model(config, args.size, args.out, data_dir=args.data, measure=not args.skip_accuracy)
    print(json.dumps(summary, indent=2))
    return 0


@register_command(
    "accuracy",
    "greedy and sampled accuracy of a model on the config's benchmarks",
    accuracy_arguments,
    places_work=True,
)
def run_accuracy(args: argparse.Namespace, config: dict) -> int:
    from hara.models.base import accuracy_report, format_accuracy_table

    report = accuracy_report(config, args.model, data_dir=args.data)
    print(format_accuracy_table(report))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


def train_arguments(parser: argparse.ArgumentParser) -> None:
    from hara.rlvr.presets import PRESETS  # light import: the parser must not pull in torch / transformers

    parser.add_argument("--size", required=True, help="model size (tiny-s, tiny-m, tiny-l or a key of models.hub_ids)")
    parser.add_argument("--rlvr", required=True, choices=PRESETS.names(), help="host RLVR preset")
    parser.add_argument("--method", required=True, help="advantage transform (a name of hara/methods.py's registry)")
    parser.add_argument("--seed", required=True, type=int, help="training seed (sampling, data order, init RNGs)")
    parser.add_argument("--out", required=True, help="run folder (rerunning the same command resumes it)")
    parser.add_argument("--base-model", help="folder of the base model (default: <results_dir>/base_model/<size>)")
    parser.add_argument("--data", help="folder written by `hara data` (default: generate in memory from the config)")
    parser.add_argument("--prompts", help="folder written by `hara select-prompts` (default: all training problems)")
    parser.add_argument(
        "--processes",
        type=int,
        help="training processes (default: training.processes; >1 runs "
        "under accelerate launch, one per GPU, or gloo processes on CPU)",
    )


@register_command(
    "train",
    "RL-train one size x rlvr x method x seed (resumes from the last checkpoint)",
    train_arguments,
    places_work=True,
)
def run_train(args: argparse.Namespace, config: dict) -> int:
    from hara.rlvr.launch import inside_launched_process, relaunch
    from hara.rlvr.ownership import claimed

    processes = config["training"]["processes"] if args.processes is None else args.processes
    if processes < 1:
        raise UserError(f"--processes: must be at least 1, got {processes}")
    if inside_launched_process():  # the launching process holds the run folder
        return _train(args, config)
    with claimed(args.out):  # one job per run folder (hara/rlvr/ownership.py)
        if processes > 1:
            return relaunch(
                processes,
                config["training"]["accelerate_config"],
                [*args.argv, "--set", f"training.processes={processes}"],
            )
        return _train(args, config)


def _train(args: argparse.Namespace, config: dict) -> int:
    from hara.rlvr.train import train

    summary = train(
        config,
        args.size,
        args.rlvr,
        args.method,
        args.seed,
        args.out,
        base_model=args.base_model,
        data_dir=args.data,
        prompts_dir=args.prompts,
    )
    print(json.dumps(summary, indent=2))
    return 0


def select_prompts_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="base model folder whose pass rates decide")
    parser.add_argument("--data", help="folder written by `hara data` (default: generate in memory from the config)")
    parser.add_argument("--out", required=True, help="output folder (prompts.jsonl, selection.json)")


@register_command(
    "select-prompts",
    "keep the training problems the base model solves sometimes (pass-rate selection of the RL prompts)",
    select_prompts_arguments,
    places_work=True,
)
def run_select_prompts(args: argparse.Namespace, config: dict) -> int:
    from hara.models.base import config_datasets
    from hara.rlvr.prompts import select_prompts

    summary = select_prompts(config, args.model, config_datasets(config, args.data)["train"], args.out)
    print(json.dumps(summary, indent=2))
    return 0


def evaluate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", required=True, help="model folder (config.json + weights + tokenizer)")
    parser.add_argument(
        "--benchmark",
        required=True,
        action="append",
        help="benchmark name (repeat to evaluate several with one model load and one import)",
    )
    parser.add_argument("--out", required=True, help="result JSON file")
    parser.add_argument(
        "--backend", choices=["auto", "transformers", "vllm"], help="generation backend (default: evaluation.backend)"
    )
    parser.add_argument("--data", help="`hara data` folder (mini) or fetched hub folder (default: from the config)")
    parser.add_argument("--cache-dir", help="lighteval prediction cache (default: <results_dir>/lighteval_cache)")
    parser.add_argument("--no-mlflow", action="store_true", help="do not log into the checkpoint's MLflow run")
    parser.add_argument(
        "--selection-out",
        help="also select the run's checkpoint (as `hara select-checkpoint`; "
        "--checkpoint is the run's final/, --data holds validation.jsonl): the selection JSON",
    )
    parser.add_argument(
        "--selected-scores-out", help="with --selection-out: test result JSON of the selected checkpoint"
    )
    parser.add_argument(
        "--speed-out", help="with --selection-out and report.speed: every candidate's speed scores (speed.json)"
    )


@register_command(
    "evaluate",
    "pass@1 (avg@n) of a checkpoint on benchmarks with lighteval; JSON + MLflow",
    evaluate_arguments,
    places_work=True,
)
def run_evaluate(args: argparse.Namespace, config: dict) -> int:
    from hara.evaluation.commands import evaluate_command

    print(json.dumps(evaluate_command(args, config), indent=2))
    return 0


def selection_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", required=True, help="training run folder (final/ and candidates/)")
    parser.add_argument("--data", required=True, help="`hara data` folder holding validation.jsonl and the benchmarks")
    parser.add_argument("--final-scores", required=True, help="`hara evaluate` result of the run's final/ checkpoint")
    parser.add_argument("--out", required=True, help="selection JSON (validation pass@1 per candidate, the choice)")
    parser.add_argument("--scores-out", required=True, help="test result JSON of the selected checkpoint")
    parser.add_argument(
        "--backend", choices=["auto", "transformers", "vllm"], help="generation backend (default: evaluation.backend)"
    )
    parser.add_argument("--cache-dir", help="validation score cache (default: <results_dir>/selection_cache)")
    parser.add_argument("--speed-out", help="with report.speed: every candidate's speed scores (speed.json)")


@register_command(
    "select-checkpoint",
    "pick a run's checkpoint on the validation split (never the test benchmarks) and give its test scores",
    selection_arguments,
)
def run_select_checkpoint(args: argparse.Namespace, config: dict) -> int:
    from hara.evaluation.commands import check_speed_out
    from hara.evaluation.selection import write_selection

    if not config["selection"]["enabled"]:
        raise UserError("selection.enabled is false: the run kept no candidates and the data no validation split")
    check_speed_out(config, args.speed_out)
    print(
        json.dumps(
            write_selection(
                config,
                args.run,
                args.data,
                args.final_scores,
                args.out,
                args.scores_out,
                speed_out=args.speed_out,
                backend=args.backend,
                cache_dir=args.cache_dir,
            ),
            indent=2,
        )
    )
    return 0


def fetch_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", help="root folder of the datasets (default: data.local_dir)")
    parser.add_argument("--dry-run", action="store_true", help="print the plan, download nothing")


@register_command(
    "fetch-data",
    "download the five benchmarks and the training set into local folders (hub access)",
    fetch_arguments,
    skip_checks=("check_local_folders",),
)
def run_fetch_data(args: argparse.Namespace, config: dict) -> int:
    from hara.evaluation.commands import fetch_command

    print(json.dumps(fetch_command(args, config), indent=2))
    return 0


def report_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--results", help="results folder of the workflow (default: results_dir)")
    parser.add_argument("--out", help="report folder (default: <results>/report)")
    parser.add_argument("--no-mlflow", action="store_true", help="do not log the report to MLflow")
    parser.add_argument(
        "--allow-fingerprint-mismatch",
        action="store_true",
        help="compare evaluations whose fingerprints differ, marked (report.allow_fingerprint_mismatch)",
    )


@register_command(
    "report",
    "tables and figures of the paper over the grid's results (HTML + Markdown + MLflow)",
    report_arguments,
    skip_checks=("check_local_folders",),
)
def run_report(args: argparse.Namespace, config: dict) -> int:
    from hara.report import build_report

    results = args.results or config["results_dir"]
    if args.allow_fingerprint_mismatch:
        config["report"]["allow_fingerprint_mismatch"] = True
    print(
        json.dumps(
            build_report(config, results, args.out or Path(results) / layout.REPORT, mlflow=not args.no_mlflow),
            indent=2,
        )
    )
    return 0


def analysis_arguments(parser: argparse.ArgumentParser) -> None:
    from hara.analysis.workflow import analysis_names

    parser.add_argument("name", choices=analysis_names(), help="the analysis to run")
    parser.add_argument("--results", help="results folder of the workflow (default: results_dir)")
    parser.add_argument("--out", help="output folder (default: <results>/analysis/<name>)")


@register_command(
    "analysis",
    "one of the paper's analyses (workflows/analyses.smk): its CSV, JSON and figures from "
    "the results (docs/analyses.md)",
    analysis_arguments,
    skip_checks=("check_local_folders",),
    places_work=True,
)
def run_analysis_command(args: argparse.Namespace, config: dict) -> int:
    from hara.analysis.run import run_analysis

    results = Path(args.results or config["results_dir"])
    print(run_analysis(args.name, config, results, args.out or layout.analysis_dir(str(results), args.name)))
    return 0


def repro_check_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--results", help="results folder of the workflow (default: results_dir)")
    parser.add_argument("--claims", help="claims file (default: hara/analysis/paper_claims.yaml)")
    parser.add_argument("--json", dest="json_out", help="also write the checks as JSON to this file")
    parser.add_argument(
        "--stage",
        action="store_true",
        help="staged seeds (plan.stages): test each primary endpoint against its group-sequential boundary at the "
        "stage its seeds reached, and write the next stage's overlay for the undecided claims",
    )
    parser.add_argument(
        "--overlay", help="where --stage writes the next stage's overlay (default: <results>/stage.yaml)"
    )


@register_command(
    "repro-check",
    "each of the paper's claims (hara/analysis/paper_claims.yaml) checked on the results: "
    "reproduced / within noise / contradicted / not measured",
    repro_check_arguments,
    skip_checks=("check_local_folders",),
)
def run_repro_check(args: argparse.Namespace, config: dict) -> int:
    from hara.report.repro import check_claims, format_checks, load_claims

    if args.stage:
        from hara.report.stages import format_stages, stage_checks, write_next_stage

        results = Path(args.results or config["results_dir"])
        checks = stage_checks(config, results)
        print(format_stages(checks))
        written = write_next_stage(config, checks, args.overlay or results / "stage.yaml")
        print(f"next stage: {written}" if written else "every primary endpoint is decided: no next stage")
        return 0
    claims = load_claims(args.claims) if args.claims else None
    checks = check_claims(config, args.results or config["results_dir"], claims=claims)
    print(format_checks(checks))
    if args.json_out:
        rows = [
            {"claim": c.key, "paper": c.paper, "status": o.status, "ours": o.ours, "numbers": o.numbers, "how": c.how}
            for c, o in checks
        ]
        Path(args.json_out).write_text(json.dumps(rows, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


def sweep_arguments(parser: argparse.ArgumentParser) -> None:
    from hara.sweeps.commands import add_sweep_arguments

    add_sweep_arguments(parser)


@register_command(
    "sweep",
    "Optuna sweeps: `run` workers on a study file (sweeps/*.yaml), or `report` its figures",
    sweep_arguments,
    own_config=True,
    places_work=True,
)
def run_sweep(args: argparse.Namespace, config: dict) -> int:
    from hara.sweeps.commands import sweep_command

    print(json.dumps(sweep_command(args), indent=2, default=str))
    return 0


def plan_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", help="write the plan as JSON here")
    parser.add_argument(
        "--results",
        help="estimate the power section's variance components from the per-problem outcomes of a finished "
        "multi-seed run under this results folder (default: the declared file, report.run_variance)",
    )
    parser.add_argument(
        "--write-variance",
        metavar="FILE",
        help="with --results: write the estimated components as a declared run variance (report.run_variance)",
    )
    parser.add_argument(
        "--design",
        action="store_true",
        help="the cheapest design with 80%% power for each claim's primary endpoint, and its overlay config",
    )
    parser.add_argument(
        "--overlay",
        default=None,
        help="where --design or --calibrate writes its overlay config (default: <results_dir>/design.yaml, "
        "<results_dir>/calibrated.yaml)",
    )
    parser.add_argument(
        "--calibrate",
        metavar="SUMMARY",
        help="plan with the generation tokens/s and MFU a pilot measured (`hara pilot --out SUMMARY`): each beside "
        "the stated one, the runtimes both give, and the overlay config that sets them",
    )


@register_command(
    "plan",
    "resources per grid cell: GPU memory per rank, host memory, checkpoint disk, tokens and "
    "device-hours, and the power of the grid's comparisons (docs/plan.md)",
    plan_arguments,
    skip_checks=("check_local_folders",),
)
def run_plan(args: argparse.Namespace, config: dict) -> int:
    from hara.planning import format_plan_table, plan_grid, write_plan
    from hara.power_plan import (
        design_section,
        format_design,
        format_power,
        power_section,
        write_overlay,
        write_variance_file,
    )

    if args.calibrate and args.design:
        raise ConfigError("--calibrate and --design: one at a time (each writes its own --overlay)")
    if args.calibrate:
        from hara.pilot import calibrate

        overlay = Path(args.overlay or Path(config["results_dir"]) / "calibrated.yaml")
        config = calibrate(config, args.calibrate, overlay)
    if args.results and not Path(args.results).is_dir():
        raise ConfigError(f"--results {args.results}: not a folder (the results folder of a finished run)")
    if args.write_variance:
        if not args.results:
            raise ConfigError("--write-variance needs --results DIR (a finished multi-seed run to measure)")
        variance = write_variance_file(config, args.results, args.write_variance)
        print(f"wrote {args.write_variance}: run variance from {len(variance.provenance['runs'])} comparisons")
        return 0
    grid, power = plan_grid(config), power_section(config, args.results)
    print(format_plan_table(grid))
    print(format_power(power))
    if args.design:
        design = design_section(config, args.results)
        print(format_design(design))
        overlay = write_overlay(config, design, args.overlay or Path(config["results_dir"]) / "design.yaml")
        print(f"  overlay: {overlay}")
        power["design"] = {
            **{key: value for key, value in design.items() if key != "rows"},
            "primaries": [
                {"claim": r["claim"]["claim"], **{k: r[k] for k in ("seeds", "mde", "power", "device_hours", "stages")}}
                for r in design["rows"]
            ],
        }
    if args.out:
        write_plan(grid, args.out, power)
    if grid.site_problems:  # the plan is printed (and written) first: it is what the fix is judged on
        raise ConfigError("the site cannot schedule this grid: " + "; ".join(grid.site_problems))
    return 0


def base_sanity_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--size", required=True, help="model size of the Base model")
    parser.add_argument("--scores", required=True, help="its scores.json (evaluate_base)")
    parser.add_argument("--out", help="write the summary here when it passes")


@register_command(
    "base-sanity",
    "a Base model's evaluation against evaluation.base_sanity: boxed answers and stops (one line when short)",
    base_sanity_arguments,
    skip_checks=("check_local_folders",),
)
def run_base_sanity(args: argparse.Namespace, config: dict) -> int:
    from hara.evaluation.commands import base_sanity_command

    print(json.dumps(base_sanity_command(args, config)))
    return 0


def preflight_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", help="write the check lines here when every check passes (the DAG's first rule)")
    parser.add_argument("--account", help="Slurm account of the jobs (default: $SBATCH_ACCOUNT)")
    parser.add_argument("--partition", help="partition of the GPU jobs (default: the site's default partition)")
    parser.add_argument("--jobs", type=int, help="training runs in flight at once (Snakemake's jobs; default: all)")
    parser.add_argument("--node-checks", action="store_true", help="only the compute node's checks, here")


@register_command(
    "preflight",
    "check the site before a cluster run: compiler and Python headers, GPUs per node, MaxTime, the tracking "
    "server from a compute node, disk against the plan's peak, the Slurm account (one line each)",
    preflight_arguments,
    skip_checks=("check_local_folders",),
)
def run_preflight(args: argparse.Namespace, config: dict) -> int:
    from hara import preflight

    if args.node_checks:
        checks = preflight.run_node_checks(config)
    else:
        account = args.account or os.environ.get("SBATCH_ACCOUNT")
        site = preflight.Site(preflight.slurm_answers(), account, args.partition, args.jobs)
        checks = preflight.run_preflight(config, site, preflight.node_command(args.argv))
    lines = [check.line() for check in checks]
    print("\n".join(lines))
    passed = all(check.ok for check in checks)
    if passed and args.out and not args.node_checks:  # the node job reports to the command that submitted it
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 0 if passed else 1


def pilot_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--configfile",
        nargs="+",
        required=True,
        help="the DAG's config files in order, as Snakemake merges them (config/paper.yaml config/pilot.yaml)",
    )
    parser.add_argument("--out", required=True, help="the pilot summary JSON (what `hara plan --calibrate` reads)")
    parser.add_argument("--profile", default="slurm", help="Snakemake profile (default: slurm)")
    parser.add_argument("--snakefile", default="Snakefile", help="the workflow (default: ./Snakefile)")
    parser.add_argument("--workdir", default=".", help="where the DAG runs (results/, logs/; default: here)")
    parser.add_argument(
        "--evaluate-base", nargs="+", metavar="SIZE", help="sizes whose Base model is evaluated (default: the first)"
    )
    parser.add_argument(
        "--interrupt", metavar="SIZE", help="scancel this size's first run after its first checkpoint (default: last)"
    )
    parser.add_argument("--snakemake-args", default="", help="more Snakemake arguments, one shell-quoted string")


@register_command(
    "pilot",
    "the one-node pilot: Base evaluation, a few steps of each size through Slurm with a scancel and its resume, "
    "then one summary of memory and time for `hara plan --calibrate` (docs/cluster.md)",
    pilot_arguments,
    own_config=True,
)
def run_pilot(args: argparse.Namespace, config: dict) -> int:
    from hara.pilot import run_pilot as pilot

    return pilot(args, os.environ)


def ui_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine)")
    parser.add_argument("--port", type=int, default=5000, help="port (default 5000)")
    parser.add_argument("--print-link", action="store_true", help="print the link only, serve nothing")


@register_command(
    "ui",
    "the MLflow UI on the config's tracking store: prints the link that opens the runs table "
    "with scores, verdicts and MDEs, then serves it (docs/mlflow.md)",
    ui_arguments,
    skip_checks=("check_local_folders",),
)
def run_ui(args: argparse.Namespace, config: dict) -> int:
    from hara.tracking.ui import serve_ui

    return serve_ui(config, args.host, args.port, serve=not args.print_link)


def tracking_server_arguments(parser: argparse.ArgumentParser) -> None:
    from hara.tracking.server import add_arguments

    add_arguments(parser)


@register_command(
    "tracking-server",
    "the MLflow tracking server of a cluster run: a cluster address, basic auth, password from a private file",
    tracking_server_arguments,
    own_config=True,
)
def run_tracking_server(args: argparse.Namespace, config: dict) -> int:
    from hara.tracking.server import serve

    return serve(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hara", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, command in COMMANDS.items():
        sub = subparsers.add_parser(name, help=command.help, description=command.help)
        if not command.own_config:
            sub.add_argument("--config", required=True, help="YAML config (validated against hara/schemas/config.yaml)")
            sub.add_argument(
                "--set", action="append", default=[], metavar="KEY.PATH=VALUE", help="override a config value"
            )
        command.add_arguments(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    gc.set_threshold(*GC_THRESHOLDS)
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # what a relaunch under accelerate repeats
    try:
        command = COMMANDS[args.command]
        if command.places_work:
            from hara.device import prepare_job_environment, require_device

            require_device()
            prepare_job_environment()
        config = (
            {} if command.own_config else load_config(args.config, overrides=args.set, skip_checks=command.skip_checks)
        )
        return COMMANDS[args.command].run(args, config)
    except user_error_types() as error:
        message = " ".join(str(error).split())
        print(f"error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
