"""Where the test suite's CPU goes: per test file, the CPU seconds (the worker's own and its waited-for
subprocesses') and wall seconds recorded by tests/conftest.py when the suite runs with HARA_TEST_CPU=<folder>.

On 2 cores the suite cannot finish in less than (total CPU seconds) / 2, however the files are spread over workers,
so this is the table to cut from (wall seconds per test grow with whatever else runs beside it)::

    HARA_TEST_CPU=/tmp/cpu make test
    .venv/bin/python benchmarks/suite_cpu.py /tmp/cpu [--top 30]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def per_file(folder: Path) -> dict[str, list[float]]:
    """test file -> [wall seconds, CPU seconds, tests], summed over every worker's JSON in ``folder``."""
    files: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    for path in sorted(folder.glob("*.json")):
        for node, (wall, cpu) in json.loads(path.read_text(encoding="utf-8")).items():
            entry = files[node.split("::", 1)[0]]
            entry[0], entry[1], entry[2] = entry[0] + wall, entry[1] + cpu, entry[2] + 1
    return dict(files)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    files = per_file(args.folder)
    total_cpu = sum(cpu for _, cpu, _ in files.values())
    print(f"{'file':60} {'tests':>5} {'wall s':>8} {'CPU s':>8} {'CPU %':>6}")
    for name, (wall, cpu, tests) in sorted(files.items(), key=lambda kv: -kv[1][1])[: args.top]:
        print(f"{name:60} {tests:5d} {wall:8.0f} {cpu:8.0f} {100 * cpu / total_cpu:6.1f}")
    print(
        f"{'total':60} {sum(t for *_, t in files.values()):5d} {'':8} {total_cpu:8.0f}   "
        f"(at least {total_cpu / 2 / 60:.1f} min on 2 cores)"
    )


if __name__ == "__main__":
    main()
