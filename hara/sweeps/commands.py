"""`hara sweep run|report`: the command-line edge of the sweeps (argument parsing, worker processes)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

__all__ = ["add_sweep_arguments", "sweep_command"]


def add_sweep_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["run", "report"], help="run workers on the study, or summarise it")
    parser.add_argument("--study", required=True, help="study file (sweeps/<name>.yaml)")
    parser.add_argument("--config", help="base config replacing the study's base_config (e.g. the workflow's)")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY.PATH=VALUE", help="override a value of the base config"
    )
    parser.add_argument("--workers", type=int, help="worker processes sharing the study (default: the study's)")
    parser.add_argument("--max-trials", type=int, help="stop this worker after this many trials (default: budget)")
    parser.add_argument("--base-model", help="base model folder (default: <results_dir>/base_model/<size>)")
    parser.add_argument("--no-mlflow", action="store_true", help="report: do not log the summary to MLflow")
    parser.add_argument("--out", help="also write the printed JSON here (the workflow's job marker)")


def forwarded_arguments(args: argparse.Namespace) -> list[str]:
    """The arguments a spawned worker gets (everything but --workers)."""
    forwarded = ["--study", args.study]
    options = {"--config": args.config, "--max-trials": args.max_trials, "--base-model": args.base_model}
    for flag, value in options.items():
        if value is not None:
            forwarded += [flag, str(value)]
    for override in args.set:
        forwarded += ["--set", override]
    return forwarded


def run_processes(args: argparse.Namespace, workers: int) -> dict:
    """Start ``workers`` worker processes (`hara sweep run --workers 1`) and wait for all of them."""
    command = [sys.executable, "-m", "hara.cli", "sweep", "run", "--workers", "1", *forwarded_arguments(args)]
    codes = supervise_workers(command, workers)
    if any(codes):
        from hara.errors import UserError

        raise UserError(f"sweep {args.study}: worker exit codes {codes}")
    return {"study": args.study, "workers": workers, "exit_codes": codes}


def supervise_workers(command: list[str], workers: int) -> list[int]:
    """Run ``workers`` copies of ``command`` and return their exit codes.

    A SIGTERM to this process (a scheduler's cancel, `timeout`, a supervisor stopping the job) is passed on to the
    workers, which end as it does; this process then ends by the same signal. Without that they trained on, orphaned,
    with nobody waiting for them (Ctrl-C needs nothing: the terminal signals the whole process group)."""
    processes = [subprocess.Popen(command) for _ in range(workers)]
    received: list[int] = []

    def forward(signum: int, frame) -> None:
        received.append(signum)
        for process in processes:
            if process.poll() is None:
                process.send_signal(signum)

    previous = signal.signal(signal.SIGTERM, forward)
    try:
        codes = [process.wait() for process in processes]
    finally:
        signal.signal(signal.SIGTERM, previous)
    if received:
        os.kill(os.getpid(), received[0])  # end as terminated, as without workers (the previous handler decides)
    return codes


def sweep_command(args: argparse.Namespace) -> dict:
    """Run the action; the result is printed by the CLI and, with --out, written as JSON."""
    result = run_action(args)
    if args.out:
        path = Path(args.out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8")
    return result


def run_action(args: argparse.Namespace) -> dict:
    from hara.sweeps.study import load_study

    spec = load_study(args.study, base_config=args.config, overrides=args.set)
    if args.action == "report":
        from hara.sweeps.summary import write_summary

        return write_summary(spec, mlflow=not args.no_mlflow)
    workers = args.workers or spec.fields["workers"]
    if workers < 1:
        from hara.errors import UserError

        raise UserError(f"--workers: must be at least 1 (got {workers})")
    if workers > 1:
        return run_processes(args, workers)
    from hara.sweeps.worker import run_worker

    return run_worker(spec, max_trials=args.max_trials, base_model=args.base_model)
