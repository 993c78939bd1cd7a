"""One training job per run folder: ``hara train`` claims its folder in ``owner.json`` and refuses a folder that a
live job owns.

A Snakemake driver restarted while its Slurm jobs still run resubmits them (``--rerun-incomplete``); without a claim
the second job trains the same folder beside the first, and their metrics, checkpoints and rotation mix silently.
The claim names the owner: its Slurm job id (checked against ``squeue``: the job is alive while Slurm lists it in an
active state) or, outside Slurm, its host and process id (alive while that process exists, on this host). A claim
whose owner has ended (a SIGKILL, a preemption, a failed attempt) is stale and taken over, as is one made by this
very Slurm job (a requeued job keeps its id). A claim made on another host outside Slurm cannot be checked: the
refusal names the file to remove once that run is known to be gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from hara.errors import UserError

__all__ = ["ACTIVE_STATES", "OWNER_FILE", "claimed", "owner_alive"]

OWNER_FILE = "owner.json"
#: squeue states of a job that holds or will hold an allocation (finished jobs stay listed for MinJobAge).
ACTIVE_STATES = {
    "PENDING",
    "CONFIGURING",
    "RUNNING",
    "COMPLETING",
    "SUSPENDED",
    "REQUEUED",
    "REQUEUE_HOLD",
    "REQUEUE_FED",
    "RESIZING",
    "SIGNALING",
    "STAGE_OUT",
    "STOPPED",
}


def _me() -> dict:
    return {
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "since": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }


def _slurm_job_active(job: str) -> bool:
    squeue = shutil.which("squeue")
    if squeue is None:
        raise UserError(
            f"{OWNER_FILE}: the run folder is claimed by Slurm job {job}, and squeue is not on PATH to "
            "check it; run where squeue works"
        )
    listed = subprocess.run(
        [squeue, "--noheader", "--states=all", "--jobs", job, "--format=%T"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    ).stdout.split()
    return any(state in ACTIVE_STATES for state in listed)


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def owner_alive(owner: dict) -> bool:
    """Whether the job or process named in a claim still runs (module docstring); this job's own claim is not."""
    job = owner.get("slurm_job_id")
    if job:
        return job != os.environ.get("SLURM_JOB_ID") and _slurm_job_active(str(job))
    if owner.get("host") != socket.gethostname():
        return True  # cannot be checked from here: refused, with the file to remove
    return int(owner.get("pid", -1)) != os.getpid() and _process_alive(int(owner.get("pid", -1)))


def _describe(owner: dict) -> str:
    where = (
        f"Slurm job {owner['slurm_job_id']}"
        if owner.get("slurm_job_id")
        else (f"process {owner.get('pid')} on {owner.get('host')}")
    )
    return f"{where} (since {owner.get('since')})"


@contextlib.contextmanager
def claimed(out: str | Path) -> Iterator[Path]:
    """Hold ``out`` for this job while the block runs: refuse it (one line) if a live job owns it, take a stale
    claim over, and give the folder back afterwards, whatever happened in the block."""
    folder = Path(out)
    path = folder / OWNER_FILE
    if path.is_file():
        try:
            owner = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError):
            owner = {}  # a torn write of a killed job: nobody holds it
        if owner and owner_alive(owner):
            raise UserError(
                f"{path}: the run folder is being trained by {_describe(owner)}; two jobs would mix "
                f"their checkpoints and metrics (remove {OWNER_FILE} once that job is gone)"
            )
    folder.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".tmp")
    partial.write_text(json.dumps(_me()) + "\n", encoding="utf-8")
    partial.replace(path)
    try:
        yield path
    finally:
        with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
            if json.loads(path.read_text(encoding="utf-8")).get("pid") == os.getpid():
                path.unlink()
