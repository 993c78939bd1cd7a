"""The edges of `hara evaluate` and `hara fetch-data`: argument checks, files, MLflow; the work is elsewhere."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Mapping
from pathlib import Path

__all__ = ["base_sanity_command", "check_benchmarks", "check_speed_out", "evaluate_command", "fetch_command"]


def _user_error(message: str) -> Exception:
    from hara.errors import UserError

    return UserError(message)


def check_benchmarks(config: Mapping, names: list[str]) -> None:
    """Every --benchmark must be a benchmark of the config's data source."""
    from hara.config import benchmarks_of_source

    valid = benchmarks_of_source(config["data"]["source"])
    for name in names:
        if name not in valid:
            raise _user_error(
                f"--benchmark: {name!r} is not a benchmark of data.source "
                f"{config['data']['source']!r} (valid: {', '.join(valid)})"
            )
    if len(set(names)) != len(names):
        raise _user_error("--benchmark: a benchmark is given twice")


def check_checkpoint(path: str) -> None:
    """The checkpoint must be a model folder."""
    if not (Path(path) / "config.json").is_file():
        raise _user_error(f"--checkpoint: {path} is not a model folder (no config.json)")


def summary(result: Mapping, out: str, run: Mapping | None) -> dict:
    """What the command prints: scores per benchmark, where the JSON went, which MLflow run got the scores."""
    scores = {
        name: {
            "pass@1": entry["score"],
            "stderr": entry["stderr"],
            "n": entry["sampling"]["n"],
            "problems": entry["n_problems"],
        }
        for name, entry in result["benchmarks"].items()
    }
    return {
        "out": out,
        "seconds": round(result["seconds"], 2),
        "scores": scores,
        "mlflow_run": run["run_id"] if run else None,
    }


def evaluate_command(args: argparse.Namespace, config: dict) -> dict:
    """Evaluate, write the JSON, log into the training run's MLflow run (when the checkpoint has one)."""
    from hara.evaluation.runner import evaluate_checkpoint, write_result

    check_benchmarks(config, args.benchmark)
    check_checkpoint(args.checkpoint)
    check_selection_arguments(args, config)
    with _monitored(config, args), _final_engine(config, args) as engine:  # with selection: one engine for both
        result = evaluate_checkpoint(
            config,
            args.checkpoint,
            args.benchmark,
            backend=args.backend,
            cache_dir=args.cache_dir,
            data_dir=args.data,
            engine=engine,
        )
        result["mlflow_run"] = None
        write_result(result, args.out)  # first: a tracking store that refuses the scores does not lose the evaluation
        run = None if args.no_mlflow else log_evaluation(args.checkpoint, result, args.out)
        if run is not None:
            result["mlflow_run"] = run
            write_result(result, args.out)
        printed = summary(result, args.out, run)
        if args.selection_out:  # in this process: lighteval, the data and the backend are loaded already
            from hara.evaluation.selection import write_selection

            printed["selection"] = write_selection(
                config,
                Path(args.checkpoint).parent,
                args.data,
                args.out,
                args.selection_out,
                args.selected_scores_out,
                speed_out=args.speed_out,
                backend=args.backend,
                final_engine=engine,
            )
    return printed


@contextlib.contextmanager
def _monitored(config: Mapping, args: argparse.Namespace):
    """MLflow's system metrics (GPU utilisation and memory on a GPU node) into the checkpoint's training run while
    the job evaluates, continuing the run's system steps (``tracking.system_metrics``; nothing without a run)."""
    from hara.evaluation.tracking import find_run_file
    from hara.tracking import MlflowRun, read_run_file, system_metrics

    run_file = None if args.no_mlflow else find_run_file(args.checkpoint)
    if run_file is None or not config["tracking"]["system_metrics"]["enabled"]:
        yield
        return
    reference = read_run_file(run_file)
    run = MlflowRun(reference["tracking_uri"], reference["run_id"], reference.get("experiment_id", ""))
    with system_metrics(run, config["tracking"]["system_metrics"]):
        yield


@contextlib.contextmanager
def _final_engine(config: Mapping, args: argparse.Namespace):
    """final/'s engine, loaded once for its test benchmarks and its validation when the job also selects (vLLM reads
    the weights and starts once, not twice), closed at the end; None without selection (evaluate_checkpoint then
    loads and closes its own)."""
    if not args.selection_out:
        yield None
        return
    from hara.evaluation.models import checkpoint_fingerprint, evaluation_backend, load_engine
    from hara.evaluation.runner import checkpoint_model_config

    backend = evaluation_backend(config, args.backend)
    cache_dir = args.cache_dir or Path(config["results_dir"]) / "lighteval_cache"
    engine = load_engine(
        checkpoint_model_config(
            config, args.checkpoint, args.benchmark[0], backend, cache_dir, checkpoint_fingerprint(args.checkpoint)
        )
    )
    try:
        yield engine
    finally:
        engine.close()


def log_evaluation(checkpoint: str, result: Mapping, out: str) -> dict | None:
    """pass@1 and its standard error per benchmark into the checkpoint's MLflow run (None without one); a store
    that refuses them is a one-line error that also says where the scores are."""
    from hara.evaluation.tracking import log_scores
    from hara.tracking import TrackingError

    scores = {
        name: {"pass@1": entry["score"], **({"pass@1_stderr": entry["stderr"]} if entry["stderr"] is not None else {})}
        for name, entry in result["benchmarks"].items()
    }
    try:
        return log_scores(checkpoint, scores, benchmarks=result["benchmarks"])
    except TrackingError as error:
        raise TrackingError(
            f"{error}; the scores are in {out} (evaluating again reuses the cached generations)"
        ) from None


def check_selection_arguments(args: argparse.Namespace, config: Mapping) -> None:
    """--selection-out needs selection.enabled, the selected checkpoint's scores file, the data folder with the
    validation split, and the run's final/ as --checkpoint (the candidates sit beside it): checked before any work."""
    from hara.layout import FINAL_DIR

    if not args.selection_out:
        for flag, value in (("--selected-scores-out", args.selected_scores_out), ("--speed-out", args.speed_out)):
            if value:
                raise _user_error(f"{flag}: only with --selection-out")
        return
    if not config["selection"]["enabled"]:
        raise _user_error("--selection-out: selection.enabled is false (the run kept no candidates)")
    for flag, value in (("--selected-scores-out", args.selected_scores_out), ("--data", args.data)):
        if not value:
            raise _user_error(f"--selection-out needs {flag}")
    if Path(args.checkpoint).name != FINAL_DIR:
        raise _user_error(f"--selection-out: --checkpoint must be a run's final/ folder, got {args.checkpoint}")
    check_speed_out(config, args.speed_out)


def check_speed_out(config: Mapping, speed_out: str | None) -> None:
    """--speed-out exactly when report.speed names a benchmark: its scores are the selection's to write (scored and
    not written, their generation would be spent for nothing), and there is nothing to write without one."""
    named = config["report"]["speed"]["benchmark"] is not None
    if named and not speed_out:
        raise _user_error("report.speed.benchmark is set: --speed-out is needed (the candidates' speed scores)")
    if speed_out and not named:
        raise _user_error("--speed-out: report.speed.benchmark is null (no speed benchmark to score)")


def fetch_command(args: argparse.Namespace, config: dict) -> dict:
    """Plan (and unless --dry-run, perform) the downloads."""
    from dataclasses import asdict

    from hara.evaluation.fetch import fetch_datasets, fetch_plan

    out = args.out or config["data"]["local_dir"]
    plan = fetch_plan(config, out)
    if args.dry_run:
        return {"out": out, "plan": [asdict(item) for item in plan]}
    return {"out": out, "fetched": fetch_datasets(plan, out)}


def base_sanity_command(args: argparse.Namespace, config: Mapping) -> dict:
    """`hara base-sanity`: a Base model's evaluation against evaluation.base_sanity. Passing, its summary (pooled
    shares, thresholds, ours and the published MATH-500 pass@1) goes to --out; failing, one line naming the share,
    its key and the completions to read, and nothing is written."""
    import json

    from hara.evaluation.sanity import base_sanity
    from hara.results.files import read_json

    settings = config["evaluation"]["base_sanity"]
    scores = read_json(args.scores)
    stats, problems = base_sanity(scores, settings)
    if problems:
        raise _user_error(
            f"{args.size} Base model: {'; '.join(problems)}: read its completions in {args.scores} before training "
            "(does it follow prompt.template and stop at prompt.stop?)"
        )
    ours = scores["benchmarks"].get("math500", {}).get("score")
    summary = {
        "size": args.size,
        **stats,
        "thresholds": {k: settings[k] for k in ("min_boxed_rate", "min_stop_rate")},
        "math500": {"ours": ours, "published": settings["published_math500"].get(args.size)},
    }
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return summary
