"""Sweeps on the smoke study (sweeps/smoke.yaml over config/smoke.yaml): a random tiny-s base model, every store
(Optuna journal, MLflow sqlite, trial folders) in a scratch folder, workers as real `hara sweep run` processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import optuna
import yaml
from mlflow.tracking import MlflowClient

from hara.report.render import page_macros
from hara.report.sweeps_section import sweep_studies
from tests.helpers import REPO

SMOKE_STUDY = REPO / "sweeps" / "smoke.yaml"


def write_study(folder: Path, **changes) -> Path:
    """The smoke study with ``changes`` (top-level keys), its base config made absolute, written into ``folder``."""
    study = yaml.safe_load(SMOKE_STUDY.read_text())
    study["base_config"] = str(REPO / "config" / "smoke.yaml")
    study.update(changes)
    path = folder / f"{study['name']}.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    return path


def sweeps_markdown(results_dir: Path, out_dir: Path) -> str:
    """The report's Markdown "Sweeps" section alone, as the report page renders it (figure links relative to
    ``out_dir``)."""
    return str(page_macros("report.md").sweeps(sweep_studies(results_dir), out_dir))


def sweeps_html(results_dir: Path) -> str:
    """The report's HTML "Sweeps" section alone (figures embedded)."""
    return str(page_macros().sweeps(sweep_studies(results_dir)))


#: the knob of the smoke sensitivity studies (it moves the smoke objective: how many completions hit the length cap)
KNOB = "training.temperature"
#: its value in config/smoke.yaml: the reference of the sensitivity studies
REFERENCE = 1.0


def write_sensitivity_study(folder: Path, values=(0.1, REFERENCE), repeats: int = 2, **changes) -> Path:
    """The smoke study as a sensitivity study of the rollout temperature over ``values`` (no sampler, budget or
    pruner)."""
    study = yaml.safe_load(SMOKE_STUDY.read_text())
    for key in ("sampler", "trials", "reevaluate", "constraints", "pruner", "workers"):
        study.pop(key, None)
    study.update(
        name="sensitivity",
        kind="sensitivity",
        base_config=str(REPO / "config" / "smoke.yaml"),
        repeats=repeats,
        space={KNOB: {"type": "categorical", "choices": list(values)}},
        objective={"metric": "train/reward", "direction": "maximize"},
    )
    study.update(changes)
    path = folder / "sensitivity.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    return path


def store_args(results: Path) -> list[str]:
    return ["--set", f"results_dir={results}", "--set", f"tracking.mlflow_uri=sqlite:///{results}/mlflow.db"]


def sweep_command(study: Path, results: Path, base: Path, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "hara.cli",
        "sweep",
        *args,
        "--study",
        str(study),
        "--base-model",
        str(base),
        *store_args(results),
    ]


def run_sweep(study: Path, results: Path, base: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        sweep_command(study, results, base, *args), capture_output=True, text=True, env=env, timeout=600, check=False
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def load_trials(results: Path, name: str = "smoke") -> list[optuna.trial.FrozenTrial]:
    """The study's trials, read from its journal by a separate reader (as any other process would)."""
    from optuna.storages.journal import JournalFileBackend

    storage = optuna.storages.JournalStorage(JournalFileBackend(str(results / "sweeps" / name / "journal.log")))
    return sorted(optuna.load_study(study_name=name, storage=storage).trials, key=lambda t: t.number)


def mlflow_runs(results: Path) -> tuple[list, list]:
    """(sweep parent runs, sweep child runs) of the scratch MLflow store."""
    client = MlflowClient(f"sqlite:///{results}/mlflow.db")
    runs = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]
    sweep = [r for r in runs if r.data.tags.get("stage") == "sweep"]
    return (
        [r for r in sweep if "mlflow.parentRunId" not in r.data.tags],
        [r for r in sweep if "mlflow.parentRunId" in r.data.tags],
    )


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
