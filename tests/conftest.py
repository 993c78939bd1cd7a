"""Settings and fixtures shared by the whole suite."""

# first, before torch loads libgomp: hara sets OpenMP's wait policy (hara/__init__.py)
import hara  # noqa: F401, I001
import json
import os
import random
import resource
from pathlib import Path

import numpy
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


@pytest.fixture(autouse=True)
def seeded_global_generators():
    """Every test starts from the same state of the global generators (torch, random, numpy), whatever ran before it
    in its worker: a test that draws from them (torch.randn without a generator) gives the same numbers alone, in
    the suite and under any split of the files over workers."""
    torch.manual_seed(0)
    random.seed(0)
    numpy.random.seed(0)


def _restore_environment(before: dict[str, str]) -> None:
    for key in [k for k in os.environ if k not in before]:
        del os.environ[key]
    os.environ.update(before)


@pytest.fixture(autouse=True)
def environment_restored():
    """os.environ as it was before each test. An in-process vLLM engine (TRL's colocated one, hara.vllm_cpu) writes
    its rendezvous (RANK, WORLD_SIZE, MASTER_PORT, ...), VLLM_* settings and LD_PRELOAD (torch's libgomp) into
    os.environ: in a training process that is where they belong; in a test worker they leaked into every later
    test's subprocesses (a `hara train` that sees RANK believes it was launched and joins a rendezvous)."""
    before = dict(os.environ)
    yield
    _restore_environment(before)


@pytest.fixture(autouse=True, scope="module")
def module_environment_restored():
    """os.environ as it was before each test module, for what a module-scoped fixture writes (the per-test fixture
    above starts after it and keeps it): tests/rlvr/test_vllm_colocate.py's module trainer set MASTER_PORT, and the
    rehearsal, run later in the same worker, gave it to every training job of both its DAGs, which then all bound
    that one port (EADDRINUSE)."""
    before = dict(os.environ)
    yield
    _restore_environment(before)


@pytest.fixture(scope="session")
def tiny_base(tmp_path_factory) -> Path:
    """A random tiny-s model + char tokenizer saved like `hara base-model` does (no warm-up: seconds); its answers
    are never right, so tests that need both outcomes use a stand-in reward."""
    folder = tmp_path_factory.mktemp("base")
    tokenizer = build_tokenizer("char")
    build_tiny_model("tiny-s", tokenizer, seed=0).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


#: The test file on the session's Slurm test cluster: the longest, and mostly waiting on Slurm.
CLUSTER_FILE = "tests/workflow/test_rehearsal.py"


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (`-n 4 --dist loadfile --no-loadscope-reorder`, the Makefile's default) a test file is one
    unit of work, so module and session fixtures are built once per file, and files start in this order (without
    the flag xdist starts the files with the most tests first). The cluster file goes first: the other workers'
    tests fill its waits. (`--dist loadgroup` cannot group here: pytest 9.2 derives node ids from `Node._id`, so the suffix
    pytest-xdist 3.8 writes to `_nodeid` has no effect.)"""
    items.sort(key=lambda item: repo_path(item) != CLUSTER_FILE)


def repo_path(item) -> str:
    """The item's file relative to the repository root, e.g. tests/workflow/test_rehearsal.py."""
    return Path(str(item.path)).relative_to(Path(str(item.config.rootpath))).as_posix()


#: Niceness of the pytest-xdist workers whose first test is not in the cluster file. The cluster file's rehearsal DAG
#: runs for most of the session and is its critical path: with every worker at the same priority its jobs got about a
#: third of 2 cores and the suite lasted as long as they did (17 min, 12.5 of them CPU). Niced, the other workers'
#: tests use what the rehearsal leaves. Inherited by their subprocesses; a worker that ran the cluster file keeps 0.
OTHER_WORKERS_NICE = 5
_priority_set = False


def pytest_runtest_setup(item):
    global _priority_set
    if _priority_set or not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    _priority_set = True
    if repo_path(item) != CLUSTER_FILE:
        os.nice(OTHER_WORKERS_NICE)


#: HARA_TEST_CPU=<folder>: each worker writes <folder>/<worker>.json, {test id: [wall s, CPU s]}, the CPU being the
#: worker's own plus that of every subprocess it waited for (jobs a Slurm daemon runs are not counted). On a
#: 2-core machine the suite's length is set by its CPU seconds, not by its wall seconds (which grow with load):
#: `python benchmarks/suite_cpu.py <folder>` sums them per file.
CPU_REPORT = os.environ.get("HARA_TEST_CPU")
_cpu_seconds: dict[str, list[float]] = {}


def _cpu_now() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if not CPU_REPORT:
        yield
        return
    import time

    wall, cpu = time.perf_counter(), _cpu_now()
    yield
    _cpu_seconds[item.nodeid] = [round(time.perf_counter() - wall, 2), round(_cpu_now() - cpu, 2)]


def pytest_sessionfinish(session):
    if CPU_REPORT and _cpu_seconds:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        Path(CPU_REPORT).mkdir(parents=True, exist_ok=True)
        (Path(CPU_REPORT) / f"{worker}.json").write_text(json.dumps(_cpu_seconds, indent=1), encoding="utf-8")
