"""benchmarks/process_cpu.py: the exit hook records a process only when asked, and the report sums by command and
by test file."""

import json
import os
import subprocess
import sys

from tests.benchmarks.scripts import load_benchmark


def test_the_hook_records_a_process_only_with_the_variable_set(tmp_path):
    module = load_benchmark("process_cpu")
    (tmp_path / f"{module.HOOK_MODULE}.py").write_text(module.HOOK_SOURCE, encoding="utf-8")
    code = f"import {module.HOOK_MODULE}; sum(range(3_000_000))"
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "PYTEST_CURRENT_TEST": "tests/x/test_y.py::test_z (call)"}
    env.pop("HARA_PROCESS_CPU", None)
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)
    records = tmp_path / "records"
    assert not records.exists()
    subprocess.run([sys.executable, "-c", code], env={**env, "HARA_PROCESS_CPU": str(records)}, check=True, timeout=120)
    (path,) = records.glob("*.json")
    record = json.loads(path.read_text(encoding="utf-8"))
    assert record["argv"] == ["-c"] and record["test"] == env["PYTEST_CURRENT_TEST"]
    assert record["cpu"] > 0 and record["wall"] > 0


def test_the_report_sums_by_command_and_by_test_file():
    module = load_benchmark("process_cpu")
    records = [
        {"argv": ["/v/bin/hara", "train", "--config"], "cpu": 10.0, "wall": 20.0, "test": "tests/a.py::t1"},
        {"argv": ["/v/bin/hara", "train"], "cpu": 6.0, "wall": 8.0, "test": "tests/b.py::t2 (call)"},
        {"argv": ["/v/bin/snakemake", "-s", "Snakefile"], "cpu": 2.0, "wall": 50.0, "test": "tests/a.py::t3"},
        {"argv": ["-m", "pytest"], "cpu": 1.0, "wall": 1.0, "test": ""},
    ]
    assert module.summarise(records, "command") == {
        "hara train": [2, 16.0, 28.0],
        "snakemake": [1, 2.0, 50.0],
        "-m pytest": [1, 1.0, 1.0],
    }
    assert module.summarise(records, "file") == {
        "tests/a.py": [2, 12.0, 70.0],
        "tests/b.py": [1, 6.0, 8.0],
        "(not in a test)": [1, 1.0, 1.0],
    }
