"""CPU seconds of every Python process of the venv, per command and per test file: where a run's CPU goes.

benchmarks/suite_cpu.py sees each test file's worker and the subprocesses it waited for; it misses what runs outside
that tree (Slurm jobs, servers, Snakemake's job processes). This hooks every Python process of the venv instead:
``install`` puts a .pth file into the venv's site-packages that, when ``HARA_PROCESS_CPU`` names a folder, writes
each process's CPU seconds, wall seconds, command line and current test (``PYTEST_CURRENT_TEST``, which test
workers pass on to what they start) into that folder when the process exits. Without the variable it does nothing.
A process killed by a signal (a server stopped with SIGTERM, a SIGKILLed job) writes nothing: compare the total
with the machine's busy time (/proc/stat) to see how much that is.

    .venv/bin/python benchmarks/process_cpu.py install
    HARA_PROCESS_CPU=/tmp/pcpu make test            # or make reproduce, a single snakemake run, ...
    .venv/bin/python benchmarks/process_cpu.py report /tmp/pcpu [--by command|file] [--top 30]
    .venv/bin/python benchmarks/process_cpu.py uninstall
"""

from __future__ import annotations

import argparse
import json
import sysconfig
from collections import defaultdict
from pathlib import Path

HOOK_MODULE = "_hara_process_cpu"

#: The hook, kept tiny: it runs at every start of the venv's Python.
HOOK_SOURCE = '''"""Written by benchmarks/process_cpu.py: with HARA_PROCESS_CPU set, each process's CPU at exit."""
import os

if os.environ.get("HARA_PROCESS_CPU"):
    import atexit
    import json
    import resource
    import sys
    import time

    _START = time.time()

    def _record(folder=os.environ["HARA_PROCESS_CPU"]):
        usage = resource.getrusage(resource.RUSAGE_SELF)
        record = {"argv": sys.argv[:6], "cpu": usage.ru_utime + usage.ru_stime, "wall": time.time() - _START,
                  "test": os.environ.get("PYTEST_CURRENT_TEST", "")}
        try:
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, f"{os.getpid()}-{int(_START * 1000)}.json"), "w") as out:
                json.dump(record, out)
        except OSError:
            pass  # a measurement must never fail the process

    atexit.register(_record)
'''


def site_packages() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def install() -> None:
    folder = site_packages()
    (folder / f"{HOOK_MODULE}.py").write_text(HOOK_SOURCE, encoding="utf-8")
    (folder / f"{HOOK_MODULE}.pth").write_text(f"import {HOOK_MODULE}\n", encoding="utf-8")
    print(f"installed into {folder}; set HARA_PROCESS_CPU=<folder> to record")


def uninstall() -> None:
    for suffix in (".py", ".pth"):
        (site_packages() / f"{HOOK_MODULE}{suffix}").unlink(missing_ok=True)


def command_of(argv: list[str]) -> str:
    """A process's command in a few words: ``hara train``, ``snakemake``, ``mlflow server``, ``-c`` ..."""
    if not argv:
        return "?"
    name = Path(argv[0]).name
    if name in ("hara", "mlflow") and len(argv) > 1:
        return f"{name} {argv[1]}"
    if name == "-m" and len(argv) > 1:
        return f"-m {argv[1]}"
    return name


def test_file_of(test: str) -> str:
    return test.split("::", 1)[0] if test else "(not in a test)"


def summarise(records: list[dict], by: str) -> dict[str, list[float]]:
    """key -> [processes, CPU seconds, wall seconds], key the command or the test file."""
    key = (lambda r: command_of(r["argv"])) if by == "command" else (lambda r: test_file_of(r["test"]))
    table: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for record in records:
        row = table[key(record)]
        row[0], row[1], row[2] = row[0] + 1, row[1] + record["cpu"], row[2] + record["wall"]
    return dict(table)


def report(folder: Path, by: str, top: int) -> None:
    records = [json.loads(path.read_text(encoding="utf-8")) for path in sorted(folder.glob("*.json"))]
    table = summarise(records, by)
    print(f"{'CPU s':>8} {'procs':>6} {'CPU/proc':>9} {'wall/proc':>10}  {by}")
    for name, (count, cpu, wall) in sorted(table.items(), key=lambda item: -item[1][1])[:top]:
        print(f"{cpu:8.1f} {count:6d} {cpu / count:9.1f} {wall / count:10.1f}  {name}")
    print(f"total: {sum(r['cpu'] for r in records):.0f} CPU seconds in {len(records)} processes")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    sub.add_parser("install")
    sub.add_parser("uninstall")
    shown = sub.add_parser("report")
    shown.add_argument("folder", type=Path)
    shown.add_argument("--by", choices=("command", "file"), default="command")
    shown.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    if args.action == "report":
        report(args.folder, args.by, args.top)
    else:
        {"install": install, "uninstall": uninstall}[args.action]()


if __name__ == "__main__":
    main()
