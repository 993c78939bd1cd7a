"""The test suite's own rules: every folder a package (one module name per helper: eval_helpers was imported under
two), the repository's paths from one helpers module, the global generators seeded before every test."""

from __future__ import annotations

import random
import re

import numpy
import torch

from tests.helpers import REPO

TESTS = REPO / "tests"
SCRIPTS = {"planning_peak.py", "multiprocess_train.py", "helpers.py"}  # run as scripts or the helpers themselves


def test_every_test_folder_is_a_package():
    folders = {p.parent for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts}
    assert sorted(str(f.relative_to(REPO)) for f in folders if not (f / "__init__.py").is_file()) == []


def test_no_test_module_defines_the_repository_path_itself():
    own = [
        p.name
        for p in TESTS.rglob("*.py")
        if p.name not in SCRIPTS and re.search(r"^REPO = ", p.read_text(), re.MULTILINE)
    ]
    assert own == []


def test_the_generators_were_reset_before_this_test():
    torch_draw, python_draw, numpy_draw = torch.rand(3), random.random(), numpy.random.rand()
    torch.manual_seed(0), random.seed(0), numpy.random.seed(0)
    assert (
        torch.equal(torch_draw, torch.rand(3)) and python_draw == random.random() and numpy_draw == numpy.random.rand()
    )


LEAKY_MODULE = """
import os
import pytest

@pytest.fixture(scope="module")
def engine():
    os.environ["HARA_TEST_LEAK"] = "44699"  # as TRL's colocated engine writes MASTER_PORT

def test_uses_the_engine(engine):
    assert os.environ["HARA_TEST_LEAK"] == "44699"
"""


def test_what_a_module_fixture_writes_into_the_environment_does_not_reach_later_modules(tmp_path):
    import os
    import subprocess
    import sys

    (tmp_path / "conftest.py").write_text("from tests.conftest import *  # noqa: F403\n", encoding="utf-8")
    (tmp_path / "test_a_leaky.py").write_text(LEAKY_MODULE, encoding="utf-8")
    (tmp_path / "test_b_later.py").write_text(
        "import os\n\ndef test_clean():\n    assert 'HARA_TEST_LEAK' not in os.environ\n", encoding="utf-8"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:]
