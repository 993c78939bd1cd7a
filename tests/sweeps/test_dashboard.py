"""docs/sweeps.md's one command, `optuna-dashboard results/sweeps/<name>/journal.log`, reads a study's journal: the
real dashboard server started on a study written by the workers' own storage code, queried over HTTP."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from hara.sweeps.study import distributions, load_study
from hara.sweeps.worker import open_study
from tests.sweeps.conftest import write_study


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get_json(url: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return json.loads(response.read())
        except (urllib.error.URLError, ConnectionError):
            assert time.monotonic() < deadline, f"optuna-dashboard did not answer {url}"
            time.sleep(0.2)


def test_optuna_dashboard_reads_a_study_journal(tmp_path):
    results = tmp_path / "results"
    spec = load_study(write_study(tmp_path), overrides=[f"results_dir={results}"])
    study = open_study(spec)
    for value in (0.25, 0.5):
        trial = study.ask(fixed_distributions=distributions(spec))
        trial.set_user_attr("seeds", [0])
        study.tell(trial, value)
    journal = spec.study_dir / "journal.log"
    assert journal.is_file()

    port = free_port()
    dashboard = Path(sys.executable).with_name("optuna-dashboard")
    server = subprocess.Popen(
        [str(dashboard), str(journal), "--host", "127.0.0.1", "--port", str(port), "--server", "wsgiref", "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        studies = get_json(f"http://127.0.0.1:{port}/api/studies")["study_summaries"]
        assert [s["study_name"] for s in studies] == ["smoke"]
        detail = get_json(f"http://127.0.0.1:{port}/api/studies/{studies[0]['study_id']}?after=0")
        assert sorted(t["values"][0] for t in detail["trials"]) == [0.25, 0.5]
    finally:
        server.terminate()
        server.wait(timeout=30)
