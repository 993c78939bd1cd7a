"""The workflow on a real single-node Slurm cluster (scripts/slurm/local_cluster.sh: munged, slurmctld and slurmd from
the Debian packages, started as root for the session and stopped by PID afterwards).

The paper DAG's run through profiles/slurm is the rehearsal's (tests/workflow/test_rehearsal.py: every job that is
not a declared local rule is a Slurm job, GPU jobs hold a GPU, scores and completions equal the local run's). Here:
a job that fails once is resubmitted and succeeds; a job that always fails is submitted 1 + `retries` times (the
profile's value) and then reported with its rule and its Slurm log. (The rehearsal also preempts one training job
with `scontrol requeue` and checks it resumes to the weights of the uninterrupted local run.)
"""

from __future__ import annotations

import os
import re
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

from tests.workflow.conftest import BIN, REPO

PROFILE = REPO / "profiles" / "slurm"
RETRY_SNAKEFILE = REPO / "tests" / "workflow" / "slurm_retry" / "Snakefile"
pytestmark = pytest.mark.slow


def start_snakemake_on_slurm(workdir: Path, cluster_env: dict, snakefile: Path, *args: str) -> subprocess.Popen:
    """Start ``snakemake -s SNAKEFILE --profile profiles/slurm ARGS`` in ``workdir``, its output going to
    ``workdir/snakemake.out``; the jobs inherit PATH (the venv's `hara`).

    Two test-only settings on top of the profile: the first status check after 1 s (the smoke jobs take seconds) and
    the Slurm logs of successful jobs kept, so that the test can read every job's log.
    """
    env = {**os.environ, **cluster_env, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
           "OMP_NUM_THREADS": "1"}
    cmd = [str(BIN / "snakemake"), "-s", str(snakefile), "--profile", str(PROFILE),
           "--slurm-init-seconds-before-status-checks", "1", "--slurm-keep-successful-logs", *args]
    with open(workdir / "snakemake.out", "w", encoding="utf-8") as out:
        return subprocess.Popen(cmd, cwd=workdir, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)


def slurm_history(output: str, cluster_env: dict) -> dict[str, list[tuple[str, str]]]:
    """The run's Slurm jobs from the cluster (squeue lists finished jobs for MinJobAge): rule -> [(job id, state)]
    in submission order. The plugin names every job after the run's id and comments it with its rule."""
    run_id = re.search(r"SLURM run ID: (\S+)", output).group(1)
    listing = subprocess.run(["squeue", "--states=all", "--noheader", "--format=%i|%T|%k", "--name", run_id],
                             env={**os.environ, **cluster_env}, capture_output=True, text=True, timeout=60,
                             check=True).stdout
    history = defaultdict(list)
    for job_id, state, comment in sorted((line.split("|") for line in listing.split()), key=lambda j: int(j[0])):
        rule = re.fullmatch(r"rule_(.+?)(?:_wildcards_.*)?", comment).group(1)
        history[rule].append((job_id, state))
    return dict(history)


def slurm_log(workdir: Path, rule: str, job_id: str) -> Path:
    """The Slurm log of one job: .snakemake/slurm_logs/rule_<rule>/[<wildcards>/]<job id>.log."""
    (path,) = (workdir / ".snakemake" / "slurm_logs" / f"rule_{rule}").rglob(f"{job_id}.log")
    return path


@pytest.fixture(scope="module")
def slurm_runs(slurm_cluster, tmp_path_factory):
    """The failing-jobs workflow on the cluster: name -> (workdir, exit code, output)."""
    workdir = tmp_path_factory.mktemp("retry_slurm")
    proc = start_snakemake_on_slurm(workdir, slurm_cluster, RETRY_SNAKEFILE, "--keep-going")
    try:
        proc.wait(timeout=900)
    finally:
        proc.kill()  # no-op once it has exited; never leave a Snakemake behind on a timeout
    return {"retry": (workdir, proc.returncode, (workdir / "snakemake.out").read_text(encoding="utf-8"))}


def comparable_scores(scores: dict) -> dict:
    """What must not depend on where a job ran: the checkpoint's hash, and every benchmark's score and completions."""
    return {"fingerprint": scores["fingerprint"],
            "benchmarks": {name: {"score": result["score"], "stderr": result["stderr"],
                                  "predictions": [(p["id"], p["completions"], p["pass@1"])
                                                  for p in result["predictions"]]}
                           for name, result in scores["benchmarks"].items()}}


def test_failing_slurm_job_is_resubmitted_per_retries_and_reported(slurm_runs, slurm_cluster):
    retries = yaml.safe_load((PROFILE / "config.yaml").read_text(encoding="utf-8"))["retries"]
    assert retries >= 1
    workdir, returncode, output = slurm_runs["retry"]
    assert returncode != 0, output[-4000:]
    history = slurm_history(output, slurm_cluster)
    assert [state for _, state in history["flaky"]] == ["FAILED", "COMPLETED"]
    assert (workdir / "flaky.txt").is_file()
    assert [state for _, state in history["broken"]] == ["FAILED"] * (1 + retries)
    assert not (workdir / "broken.txt").exists()
    for job_id, _ in history["broken"]:
        log = slurm_log(workdir, "broken", job_id)
        report = output.split(f"external_jobid: {job_id}\n")[0].rsplit("Error in rule ", 1)[1]
        assert report.startswith("broken:") and str(log) in report, report  # names the rule and its Slurm log
        assert "broken: failing on every attempt" in log.read_text(encoding="utf-8")
