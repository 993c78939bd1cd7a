"""What workflows/sweeps.smk needs to know about the config's studies (config key ``sweeps``), computed once at DAG
build: each study validated against the workflow's own resolved config, its worker count, model size and the
digest that reruns it when the study file changes."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from hara.errors import ConfigError
from hara.hashing import file_sha256

__all__ = ["SweepPlan", "resolve_study_file", "sweep_plans"]


@dataclass(frozen=True)
class SweepPlan:
    file: str  # the study file, as found
    workers: int  # worker jobs of the study
    size: str  # the model size its trials train (their base model is that size's base_model output)
    trials_per_worker: int  # for the worker jobs' runtime: a worker trains about this many runs (seeds of trials)
    digest: str  # sha256 of the study file: a changed study reruns its jobs


def resolve_study_file(path: str, basedir: str | Path) -> Path:
    """A study path of the config: relative to the working directory, else to the workflow's folder."""
    for candidate in (Path(path), Path(basedir) / path):
        if candidate.is_file():
            return candidate
    raise ConfigError(f"sweeps: study file {path} not found (in the working directory or {basedir})")


def sweep_plans(study_files: list[str], config_file: str | Path, basedir: str | Path) -> dict[str, SweepPlan]:
    """Study name -> plan, for every study file of the config (names must be unique)."""
    from hara.sweeps.study import load_study

    plans: dict[str, SweepPlan] = {}
    for index, path in enumerate(study_files):
        found = resolve_study_file(path, basedir)
        spec = load_study(found, base_config=config_file)
        name = spec.fields["name"]
        if name in plans:
            raise ConfigError(f"sweeps[{index}]: study name {name!r} is used twice ({plans[name].file}, {found})")
        plans[name] = SweepPlan(
            file=str(found),
            workers=spec.fields["workers"],
            size=spec.fields["size"],
            trials_per_worker=math.ceil(spec.trainings / spec.fields["workers"]),
            digest=file_sha256(found)[:16],
        )
    return plans
