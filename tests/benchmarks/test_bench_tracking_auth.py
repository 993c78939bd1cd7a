"""benchmarks/bench_tracking_auth.py runs: both servers start, take authenticated requests and are measured."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from hara.tracking.server import AUTH_CACHE_SECONDS

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_tracking_auth.py"


@pytest.mark.slow
def test_the_auth_benchmark_measures_both_servers(tmp_path):
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--requests", "3", "--repeats", "1"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    windows = [re.search(r"--auth-cache-seconds +(\d+)", line).group(1) for line in lines[:-1]]
    assert windows == ["0", str(AUTH_CACHE_SECONDS)]
    assert re.fullmatch(r"server CPU per request: cache off [\d.]+ ms, on [\d.]+ ms, ratio [\d.]+x", lines[-1])
