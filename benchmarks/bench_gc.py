"""CPU seconds of a ``hara`` job's imports under CPython's default collector thresholds and under hara.cli's.

    python benchmarks/bench_gc.py [--repeats 3] [--job train|evaluate|both]

Why: every training and evaluation job of the DAG (and of the test suite: ~150 of them per CI run) imports torch,
transformers, TRL, vLLM, MLflow and lighteval before it does any work, ~800,000 long-lived objects. The default
thresholds (700, 10, 10) make the collector traverse all of them in every full collection while they load;
``hara.cli.main`` sets :data:`hara.cli.GC_THRESHOLDS` first thing. Each measurement is a fresh process (the imports
run once per process); the two settings alternate ``--repeats`` times, and each process reports its own CPU seconds
(user + system) for the imports and the number of full collections run meanwhile. Prints each run, the ratio of the
medians (hara / default; below 1 is faster), and a machine-readable last line. The collector's settings change when
cycles are freed, never what is computed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

#: what a job imports before its first step: `hara train`'s and `hara evaluate`'s modules (the second pulls lighteval)
JOBS = {
    "train": ["hara.rlvr.train", "hara.rlvr.trainer", "trl", "vllm", "mlflow"],
    "evaluate": ["hara.evaluation.commands", "hara.evaluation.offline", "lighteval.pipeline", "vllm", "mlflow"],
}

WORKLOAD = """
import gc, importlib, json, resource, sys
thresholds, modules = json.loads(sys.argv[1]), sys.argv[2:]
if thresholds:
    gc.set_threshold(*thresholds)
full = [0]
gc.callbacks.append(lambda phase, info: full.__setitem__(0, full[0] + (phase == "start" and info["generation"] == 2)))
usage = resource.getrusage(resource.RUSAGE_SELF)
before = usage.ru_utime + usage.ru_stime
for module in modules:
    importlib.import_module(module)
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"cpu_s": usage.ru_utime + usage.ru_stime - before, "full_collections": full[0]}))
"""


def run(thresholds: tuple[int, ...] | None, modules: list[str]) -> dict:
    """CPU seconds and full collections of one fresh process importing ``modules`` (None: CPython's thresholds)."""
    out = subprocess.run(
        [sys.executable, "-c", WORKLOAD, json.dumps(list(thresholds or ())), *modules],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    from hara.cli import GC_THRESHOLDS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--job", choices=[*JOBS, "both"], default="both")
    args = parser.parse_args()
    modules = sorted({m for job, names in JOBS.items() if args.job in (job, "both") for m in names})
    cpu: dict[str, list[float]] = {"default": [], "hara": []}
    for _ in range(args.repeats):
        for label, thresholds in (("default", None), ("hara", GC_THRESHOLDS)):
            result = run(thresholds, modules)
            cpu[label].append(result["cpu_s"])
            print(f"{label:8s} {result['cpu_s']:6.2f} CPU s, {result['full_collections']:3d} full collections")
    ratio = statistics.median(cpu["hara"]) / statistics.median(cpu["default"])
    print(f"hara / default: {ratio:.2f}x")
    print(json.dumps({"job": args.job, "thresholds": list(GC_THRESHOLDS), "cpu_s": cpu, "ratio": ratio}))


if __name__ == "__main__":
    main()
