"""One training job per run folder (hara/rlvr/ownership.py): a folder a live job trains is refused in one line before
anything is loaded or written; a stale claim (its process or Slurm job ended, or a requeue of this very job) is taken
over; the claim is given back when the job ends."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from hara.cli import main
from hara.errors import UserError
from hara.rlvr.ownership import OWNER_FILE, claimed
from tests.helpers import smoke_train_args

TRAIN = smoke_train_args()


@pytest.fixture
def other_process():
    """A live process of this host standing for another `hara train` job."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait()


def claim(folder: Path, **owner) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / OWNER_FILE).write_text(json.dumps({"since": "2026-12-06T07:00:00", **owner}), encoding="utf-8")


def test_a_run_folder_that_a_live_job_trains_is_refused_before_anything_is_written(tmp_path, capsys, other_process):
    """Before: a second `hara train` on the folder (a restarted driver resubmitting a running job) trained beside the
    first, mixing their metrics and checkpoints."""
    run = tmp_path / "run"
    claim(run, slurm_job_id=None, host=socket.gethostname(), pid=other_process.pid)
    code = main([*TRAIN, "--out", str(run)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert f"the run folder is being trained by process {other_process.pid} on {socket.gethostname()}" in err
    assert sorted(p.name for p in run.iterdir()) == [OWNER_FILE]  # nothing loaded, nothing written


def test_a_stale_claim_is_taken_over_and_the_claim_is_given_back(tmp_path, other_process):
    run = tmp_path / "run"
    other_process.kill()
    other_process.wait()
    claim(run, slurm_job_id=None, host=socket.gethostname(), pid=other_process.pid)  # the process has ended
    with claimed(run) as path:
        assert json.loads(path.read_text(encoding="utf-8"))["pid"] == os.getpid()
    assert not (run / OWNER_FILE).exists()
    with pytest.raises(RuntimeError), claimed(run):  # given back after a failure too
        raise RuntimeError("training failed")
    assert not (run / OWNER_FILE).exists()


@pytest.fixture
def squeue(tmp_path, monkeypatch):
    """A `squeue` on PATH that lists job 123 as RUNNING and job 456 as COMPLETED (kept for MinJobAge)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "squeue"
    script.write_text('#!/bin/sh\ncase "$*" in *123*) echo RUNNING;; *456*) echo COMPLETED;; esac\n', encoding="utf-8")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def test_a_claim_by_a_slurm_job_is_checked_with_squeue(tmp_path, monkeypatch, squeue):
    run = tmp_path / "run"
    monkeypatch.setenv("SLURM_JOB_ID", "789")
    claim(run, slurm_job_id="123", host="node-a", pid=1)
    with pytest.raises(UserError, match="being trained by Slurm job 123"), claimed(run):
        pass
    claim(run, slurm_job_id="456", host="node-a", pid=1)  # that job has completed: stale
    with claimed(run):
        pass
    monkeypatch.setenv("SLURM_JOB_ID", "123")  # this job itself, requeued: its own claim
    claim(run, slurm_job_id="123", host="node-a", pid=1)
    with claimed(run):
        pass


def test_a_claim_from_another_host_outside_slurm_names_the_file_to_remove(tmp_path):
    run = tmp_path / "run"
    claim(run, slurm_job_id=None, host="elsewhere", pid=1)
    with pytest.raises(UserError, match=f"remove {OWNER_FILE} once that job is gone"), claimed(run):
        pass
