"""Settings and fixtures shared by the whole suite."""

from pathlib import Path

import pytest
import torch

from hara.models.tiny import build_tiny_model
from hara.models.tokenizer import build_tokenizer


@pytest.fixture(autouse=True, scope="session")
def one_torch_thread():
    """Tiny shapes run fastest and most stably on one thread: on a loaded 2-core CI box two threads were 10-100x
    slower. Code under test that needs another count sets it explicitly (and the config's `threads` key does)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny_base(tmp_path_factory) -> Path:
    """A random tiny-s model + char tokenizer saved like `hara base-model` does (no warm-up: seconds); its answers
    are never right, so tests that need both outcomes use a stand-in reward."""
    folder = tmp_path_factory.mktemp("base")
    tokenizer = build_tokenizer("char")
    build_tiny_model("tiny-s", tokenizer, seed=0).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


#: Test files that share the session's Slurm test cluster (fixed ports): one pytest-xdist worker runs them all.
CLUSTER_FILES = {"tests/workflow/test_slurm.py", "tests/workflow/test_rehearsal.py"}


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (`-n 2 --dist loadgroup`, the Makefile's default) each test file is one unit of work, so
    module and session fixtures are built once per file, and the cluster files are one unit that is scheduled first
    (it is the longest, and mostly waits on Slurm, which the other worker's tests fill)."""
    root = Path(str(config.rootpath))
    for item in items:
        path = Path(str(item.path)).relative_to(root).as_posix()
        item.add_marker(pytest.mark.xdist_group("cluster" if path in CLUSTER_FILES else path))
    items.sort(key=lambda item: Path(str(item.path)).relative_to(root).as_posix() not in CLUSTER_FILES)
