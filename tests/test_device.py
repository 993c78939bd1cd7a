"""No silent CPU fallback (hara/device.py, hara.vllm_cpu.generates_with_vllm): on a node with an NVIDIA driver whose
torch sees no GPU, every command that places work on a device stops with one line before it writes anything; a GPU
without vllm is an error for training.use_vllm, not a switch to transformers' generate."""

from __future__ import annotations

import os

import pytest
import torch

from hara.cli import COMMANDS, main
from hara.errors import UserError
from tests.helpers import REPO

SMOKE = str(REPO / "config" / "smoke.yaml")
#: A Slurm job's GPU variables (hara.device.SLURM_GPU_VARIABLES) and the CUDA runtime's device list.
ALLOCATION_VARIABLES = ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "SLURM_GPUS_ON_NODE", "CUDA_VISIBLE_DEVICES")
TRAIN = ["train", "--config", SMOKE, "--size", "tiny-s", "--rlvr", "grpo", "--method", "none", "--seed", "0"]


@pytest.fixture
def gpu_node(tmp_path, monkeypatch):
    """A node whose NVIDIA driver is installed (a `nvidia-smi` on PATH) and whose torch sees no GPU (this one's); a
    process outside Slurm without a device list, so every GPU of the node is its own."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI 535.104.05   Driver Version: 535.104.05'\n", encoding="utf-8")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("HARA_ALLOW_CPU", raising=False)
    for key in (*ALLOCATION_VARIABLES, "SLURM_JOB_ID"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_every_command_that_loads_a_model_is_guarded():
    guarded = {name for name, command in COMMANDS.items() if command.places_work}
    assert guarded == {"base-model", "accuracy", "train", "select-prompts", "evaluate", "analysis", "sweep"}


@pytest.mark.parametrize(
    "cuda_build,expected",
    [
        (
            None,
            (
                "a CPU build of torch is installed (was the .venv made on a node without nvidia-smi? run `make setup` "
                "on a GPU node)"
            ),
        ),
        ("13.0", "it is a CUDA 13.0 build and needs an NVIDIA driver of the 580 series or newer (CUDA 13.0)"),
    ],
)
def test_a_gpu_node_whose_torch_sees_no_gpu_stops_training_in_one_line(
    gpu_node, tmp_path, capsys, monkeypatch, cuda_build, expected
):
    monkeypatch.setattr(torch.version, "cuda", cuda_build)
    code = main([*TRAIN, "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "this node has an NVIDIA driver (nvidia-smi) but torch" in err and expected in err
    assert not (tmp_path / "run").exists()  # nothing written, nothing loaded


def test_the_guard_also_stops_evaluation_and_lets_a_deliberate_cpu_run_through(gpu_node, monkeypatch):
    from hara.device import require_device

    with pytest.raises(UserError, match="sees no GPU"):
        require_device()
    monkeypatch.setenv("HARA_ALLOW_CPU", "1")
    require_device()


def test_vllms_cpu_build_on_a_gpu_node_is_refused(gpu_node, monkeypatch):
    import hara.vllm_cpu
    from hara.device import require_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(hara.vllm_cpu, "is_cpu_build", lambda: True)
    with pytest.raises(UserError, match=r"vLLM's CPU build \(vllm-cpu\) is installed on a GPU node"):
        require_device()


def test_use_vllm_on_a_gpu_without_vllm_is_an_error_not_transformers_generate(monkeypatch):
    import importlib.util

    import hara.vllm_cpu
    from hara.vllm_cpu import generates_with_vllm

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(hara.vllm_cpu, "is_cpu_build", lambda: False)
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real_find_spec(name, *a)
    )
    with pytest.raises(UserError, match="training.use_vllm: true, but vllm is not importable on this GPU node"):
        generates_with_vllm(True)
    assert generates_with_vllm(False) is False
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert generates_with_vllm(True) is False  # a CPU without vLLM's CPU build: the embedded default's generate


def test_the_evaluation_engine_starts_without_flashinfers_sampler_and_usage_statistics(monkeypatch):
    """vLLM 0.31 JIT-compiles FlashInfer's sampler at every engine start unless VLLM_USE_FLASHINFER_SAMPLER=0: the
    engine must see it set when it is built (a stub LLM records the environment it starts in)."""
    import sys
    import types

    from hara.evaluation.models import CheckpointModelConfig, VLLMEngine

    seen = {}

    class LLM:
        def __init__(self, **kwargs):
            seen.update({key: os.environ.get(key) for key in ("VLLM_USE_FLASHINFER_SAMPLER", "VLLM_NO_USAGE_STATS")})

        def get_tokenizer(self):
            return None

    for key in ("VLLM_USE_FLASHINFER_SAMPLER", "VLLM_NO_USAGE_STATS"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=LLM))
    monkeypatch.setattr("hara.vllm_cpu.is_cpu_build", lambda: False)
    VLLMEngine(CheckpointModelConfig(model_name="m", checkpoint="/nonexistent", fingerprint="f", backend="vllm", n=1))
    assert seen == {"VLLM_USE_FLASHINFER_SAMPLER": "0", "VLLM_NO_USAGE_STATS": "1"}


def test_slurm_jobs_keep_their_compile_caches_on_the_node(monkeypatch, tmp_path):
    from hara.device import node_local_caches, prepare_job_environment

    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert node_local_caches() == {}
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    for key in ("VLLM_CACHE_ROOT", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("TRITON_CACHE_DIR", "/mine")  # what the user set wins
    prepare_job_environment()
    assert os.environ["VLLM_CACHE_ROOT"] == str(tmp_path / f"hara-cache-{os.getuid()}" / "vllm")
    assert os.environ["TRITON_CACHE_DIR"] == "/mine"


def test_a_cpu_job_on_a_gpu_node_runs_base_model_without_a_gpu(gpu_node, tmp_path, monkeypatch):
    """The hub base_model rule is a Slurm CPU job: on a node with a driver, no GPU allocated, the guard lets it
    run (before, it stopped with the one-line refusal and every job of the DAG waited on it)."""
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    args = ["base-model", "--config", SMOKE, "--size", "tiny-s", "--skip-accuracy", "--out", str(tmp_path / "base")]
    assert main(args) == 0
    assert (tmp_path / "base" / "config.json").is_file()


@pytest.mark.parametrize(
    "allocation",
    [
        {"SLURM_JOB_ID": "7", "SLURM_GPUS_ON_NODE": "1", "SLURM_STEP_GPUS": "0", "CUDA_VISIBLE_DEVICES": "0"},
        {"CUDA_VISIBLE_DEVICES": "0"},
        {},  # outside Slurm with no device list: every GPU the driver shows is this process's
    ],
)
def test_an_allocated_gpu_that_torch_cannot_see_is_still_refused(gpu_node, tmp_path, capsys, monkeypatch, allocation):
    for key, value in allocation.items():
        monkeypatch.setenv(key, value)
    args = ["base-model", "--config", SMOKE, "--size", "tiny-s", "--skip-accuracy", "--out", str(tmp_path / "base")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "sees no GPU" in err, err
    assert not (tmp_path / "base").exists()


@pytest.mark.parametrize("visible", ["", "-1"])
def test_an_empty_device_list_outside_slurm_allocates_no_gpu(gpu_node, monkeypatch, visible):
    from hara.device import gpu_allocated, require_device

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert not gpu_allocated()
    require_device()  # nothing to refuse: no GPU was given to this process
