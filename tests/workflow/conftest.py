"""Running Snakemake on the repository's Snakefile from a scratch working directory (results, logs and the MLflow
store land there, never in the checkout)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.helpers import REPO

SNAKEFILE = REPO / "Snakefile"
BIN = Path(sys.executable).parent
CLUSTER_SCRIPT = REPO / "scripts" / "slurm" / "local_cluster.sh"
# The binaries the test Slurm cluster needs, by the Debian package that ships them.
SLURM_BINARIES = {"munged": "munge", "slurmctld": "slurmctld", "slurmd": "slurmd", "sbatch": "slurm-client"}


def snakemake(
    workdir: Path, *args: str, check: bool = True, timeout: float = 600, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """``snakemake -s <repo>/Snakefile --cores 2 ARGS`` in ``workdir`` with the venv's `hara` on PATH (and ``env``
    on top of this process's environment)."""
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "OMP_NUM_THREADS": "1",
        **(env or {}),
    }
    cmd = [str(BIN / "snakemake"), "-s", str(SNAKEFILE), "--cores", "2", *args]
    proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        )
    return proc


def job_counts(output: str) -> dict[str, int]:
    """The 'Job stats' table of a Snakemake run or dry run: rule -> number of jobs (without the total)."""
    table = output.split("Job stats:", 1)[1].splitlines() if "Job stats:" in output else []
    counts = {}
    for line in table[3:]:
        match = re.fullmatch(r"\s*(\S+)\s+(\d+)\s*", line)
        if not match:
            break
        counts[match.group(1)] = int(match.group(2))
    counts.pop("total", None)
    return counts


@pytest.fixture
def run_snakemake():
    return snakemake


def missing_slurm_requirement() -> str | None:
    """Why this machine cannot run the test cluster, or None."""
    if os.geteuid() != 0:
        return "the test Slurm cluster needs root (slurmd starts jobs as their user; run as root, as .ci/run does)"
    missing = sorted({package for binary, package in SLURM_BINARIES.items() if shutil.which(binary) is None})
    if missing:
        return f"Debian packages not installed: {', '.join(missing)} (.ci/run installs them)"
    return None


@pytest.fixture(scope="session")
def slurm_cluster():
    """A running single-node cluster with 8 (fake) GPUs for the session (scripts/slurm/local_cluster.sh); yields
    the environment its commands need. Every test that uses it is in test_rehearsal.py (one cluster per machine)."""
    reason = missing_slurm_requirement()
    if reason:
        pytest.skip(reason)
    state_dir = Path(tempfile.mkdtemp(prefix="hara-slurm-"))
    # 8 declared CPUs and GPUs on the 2 real cores: the rehearsal's training and evaluation jobs, which mostly import
    # and wait, run side by side instead of in waves of two (each wave costs a status-poll delay of the plugin).
    env = {**os.environ, "HARA_SLURM_CPUS": "8", "HARA_SLURM_GPUS": "8"}
    start = subprocess.run(
        [str(CLUSTER_SCRIPT), "start", str(state_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    try:
        assert start.returncode == 0, f"cluster did not start:\n{start.stdout}{start.stderr}"
        yield {"SLURM_CONF": str(state_dir / "slurm.conf")}
    finally:
        subprocess.run([str(CLUSTER_SCRIPT), "stop", str(state_dir)], capture_output=True, timeout=60, check=False)
        shutil.rmtree(state_dir, ignore_errors=True)
