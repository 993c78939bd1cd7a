"""A finished smoke run's results folder, written by hand in the stage files' formats (no training, no evaluation):
what `hara report` reads, for the tests that corrupt, copy or move one. Shared by tests/results/test_stage_files.py
and tests/tracking/test_tracking.py."""

from __future__ import annotations

import json
from pathlib import Path

from hara.config import load_config
from hara.layout import eval_dir, grid_cells, run_dir
from hara.tracking import run_name, start_run
from tests.helpers import SMOKE

PROBLEMS = 8


def smoke_argv(results: Path, *more: str) -> list[str]:
    """`hara report`'s arguments for the smoke config with ``results`` as its results folder and store."""
    return [
        "report",
        "--config",
        str(SMOKE),
        "--set",
        f"results_dir={results}",
        "--set",
        f"tracking.mlflow_uri=sqlite:///{results}/mlflow.db",
        *more,
    ]


def write_finished(results: Path, mlflow: bool = False) -> dict:
    """Every smoke cell's metrics.jsonl (2 steps), scores.json (per-problem predictions) and selection.json; with
    ``mlflow`` each cell's training run in the results folder's sqlite store, as `hara train` opens it. Returns the
    config."""
    config = load_config(
        SMOKE, overrides=[f"results_dir={results}", f"tracking.mlflow_uri=sqlite:///{results}/mlflow.db"]
    )
    for offset, cell in enumerate(grid_cells(config)):
        train, evaluation = run_dir(results, cell), eval_dir(results, cell)
        train.mkdir(parents=True)
        evaluation.mkdir(parents=True)
        steps = [{"step": s, "train/accuracy": 0.1 * s + offset, "time/step_s": 1.0} for s in (1, 2)]
        (train / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in steps), encoding="utf-8")
        benchmarks = {
            name: {
                "score": 0.5,
                "metric": "pass@1",
                "predictions": [{"id": str(i), "pass@1": float((i + offset) % 2)} for i in range(PROBLEMS)],
                "eval_fingerprint": {"benchmark_sha256": f"{b:02d}" * 32, "backend": "transformers"},
            }
            for b, name in enumerate(config["data"]["benchmarks"])
        }
        (evaluation / "scores.json").write_text(json.dumps({"benchmarks": benchmarks}, indent=2), encoding="utf-8")
        candidates = [{"step": s, "checkpoint": f"c/step-{s}", "validation_pass_at_1": 0.25 * s} for s in (1, 2)]
        selection = {"selected_step": 2, "final_step": 2, "candidates": candidates}
        (evaluation / "selection.json").write_text(json.dumps(selection), encoding="utf-8")
        if mlflow:
            run, _ = start_run(
                config["tracking"]["mlflow_uri"],
                config["name"],
                run_name(cell.size, cell.rlvr, cell.method, cell.seed),
                train,
                {"stage": "train", "method": cell.method},
                {},
            )
            run.finish()
    return config
