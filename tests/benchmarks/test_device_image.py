"""The one-command GPU check's carried wheels against the device image (benchmarks/device_packages.txt): installed
into a clean Python 3.12 venv (the image's Python) beside only the image's packages that the check loads, at the
image's documented versions, every requirement between them must hold and what the check imports must import.

One gap, stated: torch. The image's is 2.11.0 with CUDA 13; no CPU build of it for Python 3.12 is on a registry this
machine reaches (PyPI has the 530 MB CUDA wheel, which needs gigabytes of CUDA libraries to import). So torch is
checked at the metadata level (every installed requirement on torch admits the image's version) and the modules
that import torch are listed, not imported: the GPU check itself imports them as its first stage."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.benchmarks.scripts import load_benchmark


def python_312() -> str | None:
    """A Python 3.12 interpreter that runs (a pyenv shim of a version not selected does not)."""
    candidates = [shutil.which("python3.12"), *map(str, Path.home().glob(".pyenv/versions/3.12*/bin/python3.12"))]
    for candidate in filter(None, candidates):
        if subprocess.run([candidate, "-c", "pass"], capture_output=True, check=False).returncode == 0:
            return candidate
    return None


PYTHON_312 = python_312()
#: the image's CUDA build and what only it loads: not installable into a CPU venv (see the module docstring)
TORCH_STACK = {"torch", "triton"}
#: run inside the clean venv: every requirement of what is installed against the version the venv, else the image,
#: has (torch: its documented one; a declared requirement the check never imports, e.g. MLflow's server packages, is
#: on neither and is left to the imports), and each module's import
PROBE = r"""
import importlib, json, re, sys, sysconfig
from importlib import metadata
from packaging.requirements import Requirement
image, modules = json.loads(sys.argv[1]), sys.argv[2:]
norm = lambda name: re.sub(r"[-_.]+", "-", name).lower()
# what the venv installed, not what PYTHONPATH shows (the checkout's own hara.egg-info: the device runs the carried
# source tree, it installs no hara)
dists = list(metadata.distributions(path=[sysconfig.get_paths()["purelib"]]))
installed = {norm(d.metadata["Name"]): d.version for d in dists}
broken = []
for dist in dists:
    for text in dist.requires or []:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        name = norm(req.name)
        if name not in installed and image.get(name, "absent") is None:
            continue  # on the image, its version not documented: nothing to compare
        version = installed.get(name) or image.get(name)
        if version is None:
            continue  # neither carried nor on the image: what the check needs of it shows as a failed import
        if req.specifier and not req.specifier.contains(version, prereleases=True):
            broken.append(f"{dist.metadata['Name']} requires {text}: the device has {version}")
imports = {}
for module in modules:
    try:
        importlib.import_module(module)
        imports[module] = "ok"
    except ModuleNotFoundError as error:
        imports[module] = f"missing {error.name}"
print(json.dumps({"broken": broken, "imports": imports}))
"""


def image_installs(wheels, loaded: list[str]) -> list[str]:
    """``name==version`` of every image package the check loads: the image's documented version, else the one
    installed here (the version the wheels were chosen against)."""
    image = wheels.image_packages()
    chosen = [d for d in loaded if wheels.normalise(d) in image and wheels.normalise(d) not in TORCH_STACK]
    return [f"{d}=={image[wheels.normalise(d)] or wheels.installed_version(d)}" for d in chosen]


@pytest.mark.slow
@pytest.mark.skipif(PYTHON_312 is None, reason="needs python3.12, the device image's Python")
def test_the_carried_wheels_install_beside_the_image_and_import_what_the_check_runs(tmp_path):
    wheels = load_benchmark("stack_wheels")
    loaded = wheels.imported_distributions(wheels.MODULES)
    carried = wheels.missing_on_device(loaded)
    wheels.download(carried, tmp_path / "whl", "3.12")  # what the device call carries
    venv = tmp_path / "venv"
    uv = [str(shutil.which("uv", path=str(sys.executable.rsplit("/", 1)[0])) or "uv"), "pip"]
    subprocess.run([PYTHON_312, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    install = [*uv, "install", "--python", python, "--no-deps", "--quiet", "packaging"]
    subprocess.run(
        [*install, *map(str, sorted((tmp_path / "whl").glob("*.whl"))), *image_installs(wheels, loaded)], check=True
    )
    env = {"PYTHONPATH": str(wheels.HERE.parent), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    probe = subprocess.run(
        [python, "-c", PROBE, json.dumps(wheels.image_packages()), *wheels.MODULES],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    found = json.loads(probe.stdout.strip().splitlines()[-1])
    print("device image probe:", json.dumps(found["imports"]))
    assert found["broken"] == [], "\n".join(found["broken"])
    not_torch = {m: state for m, state in found["imports"].items() if state != "missing torch"}
    assert set(not_torch.values()) == {"ok"}, not_torch
    assert {"datasets", "hara.config", "hara.tracking", "mlflow.store.tracking.sqlalchemy_store"} <= set(not_torch)
