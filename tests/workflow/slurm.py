"""Helpers for the tests on a real single-node Slurm cluster (scripts/slurm/local_cluster.sh: munged, slurmctld and
slurmd from the Debian packages, started as root for the session and stopped by PID afterwards).

Every test on the cluster lives in tests/workflow/test_rehearsal.py: one cluster per machine at a time (fixed ports,
one conf path), and pytest-xdist's `--dist loadfile` keeps one file on one worker.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections import defaultdict
from pathlib import Path

from tests.helpers import REPO
from tests.workflow.conftest import BIN

PROFILE = REPO / "profiles" / "slurm"
RETRY_SNAKEFILE = REPO / "tests" / "workflow" / "slurm_retry" / "Snakefile"
#: What the local test cluster needs beyond the profile (no slurmdbd: squeue) and what the tests read (every log).
LOCAL_CLUSTER_ARGS = (
    "--slurm-status-command",
    "squeue",
    "--slurm-init-seconds-before-status-checks",
    "1",
    "--slurm-keep-successful-logs",
)


def start_snakemake_on_slurm(workdir: Path, cluster_env: dict, snakefile: Path, *args: str) -> subprocess.Popen:
    """Start ``snakemake -s SNAKEFILE --profile profiles/slurm ARGS`` in ``workdir``, its output going to
    ``workdir/snakemake.out``; the jobs inherit PATH (the venv's `hara`).

    Three test-only settings on top of the profile: status polls with squeue (the local cluster runs no slurmdbd),
    the first status check after 1 s (the smoke jobs take seconds) and the Slurm logs of successful jobs kept, so
    that the test can read every job's log.
    """
    env = {
        **os.environ,
        **cluster_env,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "OMP_NUM_THREADS": "1",
    }
    cmd = [str(BIN / "snakemake"), "-s", str(snakefile), "--profile", str(PROFILE), *LOCAL_CLUSTER_ARGS, *args]
    with open(workdir / "snakemake.out", "w", encoding="utf-8") as out:
        return subprocess.Popen(cmd, cwd=workdir, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)


def slurm_history(output: str, cluster_env: dict) -> dict[str, list[tuple[str, str]]]:
    """The run's Slurm jobs from the cluster (squeue lists finished jobs for MinJobAge): rule -> [(job id, state)]
    in submission order. The plugin names every job after the run's id and comments it with its rule."""
    run_id = re.search(r"SLURM run ID: (\S+)", output).group(1)
    listing = subprocess.run(
        ["squeue", "--states=all", "--noheader", "--format=%i|%T|%k", "--name", run_id],
        env={**os.environ, **cluster_env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    history = defaultdict(list)
    for job_id, state, comment in sorted((line.split("|") for line in listing.split()), key=lambda j: int(j[0])):
        rule = re.fullmatch(r"rule_(.+?)(?:_wildcards_.*)?", comment).group(1)
        history[rule].append((job_id, state))
    return dict(history)


def slurm_log(workdir: Path, rule: str, job_id: str) -> Path:
    """The Slurm log of one job: .snakemake/slurm_logs/rule_<rule>/[<wildcards>/]<job id>.log."""
    (path,) = (workdir / ".snakemake" / "slurm_logs" / f"rule_{rule}").rglob(f"{job_id}.log")
    return path


def comparable_scores(scores: dict) -> dict:
    """What must not depend on where a job ran: the checkpoint's hash, and every benchmark's score and completions."""
    return {
        "fingerprint": scores["fingerprint"],
        "benchmarks": {
            name: {
                "score": result["score"],
                "stderr": result["stderr"],
                "predictions": [(p["id"], p["completions"], p["pass@1"]) for p in result["predictions"]],
            }
            for name, result in scores["benchmarks"].items()
        },
    }
