"""`hara sweep run --workers N` starts N worker processes: a SIGTERM to it (a scheduler's cancel, `timeout`, a
supervisor stopping the job) must reach them, or they train on with nobody waiting for them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

# Each worker writes its pid and newline in one write(2): print() may write them apart, and two workers sharing the
# pipe then interleave ("12345678\n", "\n": seen in a loaded CI run of 2026-12-06).
PARENT = """
import sys
from hara.sweeps.commands import supervise_workers
supervise_workers([sys.executable, "-c", "import os, time; os.write(1, b'%d\\\\n' % os.getpid()); time.sleep(120)"], 2)
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie has exited; only its parent has not collected it yet
        return stat.read().split(")")[-1].split()[0] != "Z"


def wait_until(condition, seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def test_a_terminated_sweep_takes_its_workers_with_it():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    workers = [int(parent.stdout.readline()) for _ in range(2)]
    try:
        parent.send_signal(signal.SIGTERM)
        assert parent.wait(timeout=30) == -signal.SIGTERM  # it ends as terminated, as it would without workers
        assert wait_until(lambda: not any(alive(pid) for pid in workers)), "a worker outlived the terminated sweep"
    finally:
        for pid in workers:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
