"""benchmarks/bench_gc.py and the collector thresholds every ``hara`` process runs under (hara.cli.GC_THRESHOLDS)."""

import subprocess
import sys

from hara.cli import GC_THRESHOLDS
from tests.benchmarks.scripts import load_benchmark


def test_the_hara_thresholds_run_fewer_full_collections_over_the_same_imports():
    bench = load_benchmark("bench_gc")
    modules = ["torch"]  # the first of a job's imports: the effect, not its size, which the benchmark measures
    default, tuned = bench.run(None, modules), bench.run(GC_THRESHOLDS, modules)
    assert tuned["full_collections"] < default["full_collections"], (default, tuned)


PROBE = """
import gc, hara.cli
print(gc.get_threshold())  # importing hara changes nothing: a library user's process keeps its settings
try:
    hara.cli.main(["config", "--help"])
except SystemExit:
    pass
print(gc.get_threshold())
"""


def test_the_hara_command_sets_the_thresholds_and_importing_hara_does_not():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout
    lines = [line for line in out.splitlines() if line.startswith("(")]
    assert lines == [str((700, 10, 10)), str(GC_THRESHOLDS)]
