"""The workflow on a real single-node Slurm cluster (scripts/slurm/local_cluster.sh: munged, slurmctld and slurmd from
the Debian packages, started as root for the session and stopped by PID afterwards).

The paper DAG's run through profiles/slurm is the rehearsal's (tests/workflow/test_rehearsal.py: every job that is
not a declared local rule is a Slurm job, GPU jobs hold a GPU, scores and completions equal the local run's). Here:
a job that fails once is resubmitted and succeeds; a job that always fails is submitted 1 + `retries` times (the
profile's value) and then reported with its rule and its Slurm log; a requeued (preempted) training job resumes.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

from tests.workflow.conftest import BIN, REPO, SMOKE, SNAKEFILE

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


def test_a_requeued_training_job_resumes_to_the_weights_of_an_uninterrupted_run(slurm_cluster, tmp_path):
    """Preemption: `scontrol requeue` of a running train job (the profile submits with --requeue) kills it mid-run;
    Slurm starts it again under the same job id, `hara train` resumes from its last valid checkpoint, and the final
    weights equal those of the same run trained without interruption."""
    import hashlib
    import time

    config = yaml.safe_load(SMOKE.read_text(encoding="utf-8"))
    config["training"].update(steps=12, save_steps=1, save_total_limit=2)
    config["grid"].update(methods=["none"])
    path = tmp_path / "preempt.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    results = tmp_path / config["results_dir"]
    run_dir = results / "train" / "tiny-s" / "grpo" / "none" / "seed0"
    target = str((run_dir / "final").relative_to(tmp_path))
    proc = start_snakemake_on_slurm(tmp_path, slurm_cluster, SNAKEFILE, target, "--configfile", str(path))
    env = {**os.environ, **slurm_cluster}
    job_id, deadline = None, time.monotonic() + 600
    try:
        while job_id is None:  # the train job, once it has written its third checkpoint
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "snakemake.out").read_text()[-4000:]
            checkpoints = list((run_dir / "checkpoints").glob("checkpoint-*")) if run_dir.is_dir() else []
            if any(c.name == "checkpoint-3" for c in checkpoints):
                listing = subprocess.run(["squeue", "--noheader", "--states=RUNNING", "--format=%i|%k"], env=env,
                                         capture_output=True, text=True, timeout=60, check=True).stdout
                job_id = next((line.split("|")[0] for line in listing.split() if "rule_train" in line), None)
            time.sleep(0.1)
        subprocess.run(["scontrol", "requeue", job_id], env=env, check=True, timeout=60)
        # Slurm holds a requeued batch job back for a while before it may start again (about 2 min here); a
        # preempted job waits for its resources anyway. Starting it now keeps the test short and changes nothing else.
        for _ in range(50):
            if subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], env=env, timeout=60,
                              capture_output=True, check=False).returncode == 0:
                break
            time.sleep(0.2)
        assert proc.wait(timeout=900) == 0, (tmp_path / "snakemake.out").read_text()[-4000:]
    finally:
        proc.kill()
    shown = subprocess.run(["scontrol", "show", "job", job_id], env=env, capture_output=True, text=True, timeout=60,
                           check=True).stdout
    assert re.search(r"\bRestarts=1\b", shown) and "JobState=COMPLETED" in shown, shown
    info = json.loads((run_dir / "run_info.json").read_text(encoding="utf-8"))
    assert int(info["resumed_from"].rsplit("-", 1)[1]) >= 3, info["resumed_from"]  # resumed, not restarted
    reference = tmp_path / "uninterrupted"
    subprocess.run([str(BIN / "hara"), "train", "--config", str(path), "--size", "tiny-s", "--rlvr", "grpo",
                    "--method", "none", "--seed", "0", "--base-model", str(results / "base_model" / "tiny-s"),
                    "--data", str(results / "data"), "--out", str(reference), "--set",
                    f"tracking.mlflow_uri=sqlite:///{tmp_path / 'reference.db'}"],
                   cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, check=True,
                   timeout=900)
    weights = [hashlib.sha256((folder / "final" / "model.safetensors").read_bytes()).hexdigest()
               for folder in (run_dir, reference)]
    assert weights[0] == weights[1]
