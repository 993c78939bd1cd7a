"""The package outside a checkout: its wheel, installed into a fresh venv in a temporary folder, validates a config
and a sweep study and reads the claims file from its package data (hara/schemas/, hara/analysis/paper_claims.yaml),
with no file of the repository in reach. Before the schemas were package data, `load_config` there failed with
"No such file or directory: .../site-packages/config/schema.yaml"."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

from tests.helpers import DEFAULT, REPO

# Run by the installed package, from a folder outside the checkout holding copies of a config and a study.
PROBE = """
import json
import hara
from hara.config import ConfigError, load_config
from hara.report.repro import load_claims
from hara.sweeps.study import load_study

config = load_config("config/default.yaml")
study = load_study("sweeps/epsilon.yaml")
try:
    load_config("config/bad.yaml")
    bad = None
except ConfigError as error:
    bad = str(error)
print(json.dumps({"hara": hara.__file__, "config": config["name"], "study": study.fields["name"], "bad": bad,
                  "claims": len(load_claims())}))
"""


def build_wheel(tmp_path: Path) -> Path:
    """The wheel of a copy of the package's sources (a build in place would leave build/ and *.egg-info in the
    checkout), built offline with this environment's setuptools (torch requires setuptools >= 77.0.3, the
    version pyproject's build-system needs)."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    shutil.copytree(REPO / "hara", source / "hara", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "--quiet"]
        + ["--disable-pip-version-check", "--wheel-dir", str(dist), str(source)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = dist.glob("hara-*.whl")
    return wheel


def fresh_venv(tmp_path: Path) -> Path:
    """A venv without pip whose only view of this environment is its dependencies: a .pth line naming this
    environment's site-packages, which adds that folder to sys.path after the venv's own, without running the .pth
    files there (the editable install's hook to the checkout among them)."""
    target = tmp_path / "venv"
    venv.create(target, with_pip=False)
    python = target / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    ours = {sysconfig.get_paths()[key] for key in ("purelib", "platlib")}
    (Path(site) / "hara_dependencies.pth").write_text("\n".join(sorted(ours)) + "\n", encoding="utf-8")
    return target


def run_in(folder: Path, *command) -> str:
    """A command's stdout, run in ``folder`` with no PYTHONPATH (which would put the checkout first on sys.path)."""
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONHOME")}
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_installed_wheel_validates_a_config_and_a_study_outside_the_checkout(tmp_path):
    wheel = build_wheel(tmp_path)
    target = fresh_venv(tmp_path)
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(target / "bin" / "python"), "install", "--no-deps"]
        + ["--no-index", "--quiet", "--disable-pip-version-check", str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    work = tmp_path / "work"  # a user's folder: a config and a study, no schema beside them
    (work / "config").mkdir(parents=True)
    (work / "sweeps").mkdir()
    shutil.copy2(DEFAULT, work / "config" / "default.yaml")
    shutil.copy2(REPO / "sweeps" / "epsilon.yaml", work / "sweeps" / "epsilon.yaml")
    (work / "config" / "bad.yaml").write_text("warmup: {steps: 10, stpes: 2}\n", encoding="utf-8")
    found = json.loads(run_in(work, target / "bin" / "python", "-c", PROBE).splitlines()[-1])
    assert Path(found["hara"]).is_relative_to(target) and not Path(found["hara"]).is_relative_to(REPO)
    assert (found["config"], found["study"]) == ("hara-embedded", "epsilon")
    assert found["bad"].startswith("config/bad.yaml: warmup.stpes: unknown key")  # the schema validates a config
    assert found["claims"] > 0
    assert "name: hara-embedded" in run_in(work, target / "bin" / "hara", "config", "--config", "config/default.yaml")
