"""Multi-process training: `hara train` re-executes itself under ``accelerate launch`` when a run asks for more
than one process (``--processes`` or ``training.processes``).

The same launcher serves the cluster and the tests: with CUDA it starts one process per GPU of the job with the
accelerate config named by ``training.accelerate_config`` (FSDP by default, config/accelerate/); without CUDA it adds
``--mixed_precision no`` and the processes train on the CPU with gloo (``use_cpu``). Inside the launched processes ``RANK`` is set,
so they train instead of launching again. Note: accelerate 1.15 applies the FSDP config only on accelerators; on
the CPU the processes are plain data parallel (DistributedType.MULTI_CPU, gloo), so the CPU tests exercise the
launcher, the per-process groups, rank-0 logging and checkpoint/resume, but FSDP sharding itself only runs on GPUs. Each process generates and scores whole prompt groups and computes the
HarA novelty on its own groups (hara.rlvr.grpo_config.grpo_args); only rank 0 logs and writes files.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

__all__ = ["inside_launched_process", "launch_command", "relaunch"]

REPO = Path(__file__).resolve().parents[2]


LAUNCHED = "HARA_LAUNCHED"  # set for the launched processes: whatever the launcher does, they never launch again


def inside_launched_process() -> bool:
    """True in a process started by :func:`relaunch` (or by hand under torchrun): it trains, never launches."""
    return os.environ.get(LAUNCHED) == "1" or "RANK" in os.environ


def _free_port() -> int:
    with socket.socket() as sock:  # two runs on one node must not share a rendezvous port
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def resolve_accelerate_config(path: str) -> Path:
    """A relative path is taken from the working directory, then from the repository (config/accelerate/...)."""
    for candidate in (Path(path), REPO / path):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"training.accelerate_config: no file {path!r} (looked in . and {REPO})")


def launch_command(processes: int, accelerate_config: str, program: list[str], cuda: bool) -> list[str]:
    """The ``accelerate launch`` command line that runs ``program`` (``["-m", "hara.cli", "train", ...]`` or a script
    and its arguments) in ``processes`` processes."""
    accelerate = shutil.which("accelerate", path=str(Path(sys.executable).parent)) or "accelerate"
    command = [
        accelerate,
        "launch",
        "--config_file",
        str(resolve_accelerate_config(accelerate_config)),
        "--num_processes",
        str(processes),
        "--num_machines",
        "1",
        "--main_process_port",
        str(_free_port()),
    ]
    if not cuda:  # torchrun processes (accelerate's --cpu would start a single one); the trainer picks gloo
        command += ["--mixed_precision", "no"]
    return command + program


def relaunch(processes: int, accelerate_config: str, hara_args: list[str]) -> int:
    """Run ``hara <hara_args>`` in ``processes`` processes and return the launcher's exit status."""
    import torch

    command = launch_command(
        processes, accelerate_config, ["-m", "hara.cli", *hara_args], cuda=torch.cuda.is_available()
    )
    print("launching: " + " ".join(command), file=sys.stderr, flush=True)
    return subprocess.call(command, env={**os.environ, LAUNCHED: "1"})
