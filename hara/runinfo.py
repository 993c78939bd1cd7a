"""Provenance of every run: seeds, thread count, resolved config, package versions, git commit and command.

Every output folder gets ``resolved_config.yaml`` and ``run_info.json`` so that a result can always be traced back to
exactly what made it.
"""

from __future__ import annotations

import json
import os
import platform
import random
import subprocess
import sys
import time
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path

import yaml

from hara.layout import RESOLVED_CONFIG, RUN_INFO

TRACKED_PACKAGES = (
    "hara",
    "torch",
    "transformers",
    "tokenizers",
    "trl",
    "accelerate",
    "datasets",
    "pot",
    "lighteval",
    "math-verify",
    "optuna",
    "mlflow",
    "snakemake",
    "numpy",
)


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (CPU and CUDA) from one explicit seed."""
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def set_threads(threads: int) -> None:
    """Fix torch's CPU thread count: on a loaded 2-core machine 2 threads ran 14x slower than 1."""
    import torch

    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")

    torch.set_num_threads(threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))


def package_versions(names: tuple[str, ...] = TRACKED_PACKAGES) -> dict[str, str]:
    """Installed versions of the packages that shape results (absent ones are reported as such)."""
    versions = {"python": platform.python_version()}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def git_commit(repo: str | os.PathLike | None = None) -> str:
    """The commit of the working tree (suffixed -dirty when it has changes), or 'unknown' outside git."""
    repo = Path(repo or Path(__file__).resolve().parent.parent)
    try:
        run = lambda *args: subprocess.run(
            ["git", *args], cwd=repo, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        commit = run("rev-parse", "HEAD")
        dirty = run("status", "--porcelain", "--untracked-files=no")
        return commit + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def device_kind() -> str:
    """What the numbers were computed on: ``cuda:<name> x<count>`` when CUDA is visible, else ``cpu``."""
    import torch

    if torch.cuda.is_available():
        return f"cuda:{torch.cuda.get_device_name(0)} x{torch.cuda.device_count()}"
    return "cpu"


def write_run_info(out_dir: str | os.PathLike, config: Mapping, extra: Mapping | None = None) -> dict:
    """Write resolved_config.yaml and run_info.json into out_dir; return the run info."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    dump_config(config, out_dir / RESOLVED_CONFIG)
    info = {
        "command": " ".join(sys.argv),
        "seed": config.get("seed"),
        "threads": config.get("threads"),
        "git_commit": git_commit(),
        "versions": package_versions(),
        "host": platform.node(),
        "device": device_kind(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **dict(extra or {}),
    }
    (out_dir / RUN_INFO).write_text(json.dumps(info, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return info


def dump_config(config: Mapping, path: str | os.PathLike) -> None:
    """Write a resolved config as YAML (key order kept, so diffs between runs are readable)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        yaml.safe_dump(dict(config), handle, sort_keys=False)
