"""The cluster's tracking store: an authenticated HTTPS MLflow server (`hara tracking-server`) refuses anonymous and
plain-HTTP clients and serves a job that trusts its certificate and reads its password file (the rehearsal's DAG logs
through one: tests/workflow/test_rehearsal.py); a server that is stopped for 30 s in the middle
of a run costs no metric point; the URI comes from the environment; sqlite on a file system without file locks is
one line naming the fix."""

from __future__ import annotations

import base64
import errno
import http.client
import json
import math
import os
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from hara.tracking import TrackingError, absolute_uri, resolve_uri
from hara.tracking.server import SHUTDOWN_GRACE_SECONDS
from tests.helpers import smoke_train_args
from tests.reliability.servers import (
    BIN,
    PASSWORD,
    free_port,
    password_file,
    server_certificate,
    ssl_context,
    stop,
    tls_client_env,
    tracking_server,
)

SEARCH = "/api/2.0/mlflow/experiments/search?max_results=1"


def status_of(uri: str, user: str | None = None, password: str | None = None, cert: Path | None = None) -> int:
    request = urllib.request.Request(uri + SEARCH)
    if user:
        request.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=10, context=ssl_context(cert)) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def train_command(out: Path, *overrides: str) -> list[str]:
    return [
        str(BIN / "hara"),
        *smoke_train_args(),
        "--out",
        str(out),
        "--base-model",
        "{base}",
        "--set",
        "tracking.mlflow_uri=env:MLFLOW_TRACKING_URI",
        *[a for o in overrides for a in ("--set", o)],
    ]


def client_env(uri: str, user: str | None = None, folder: Path | None = None) -> dict:
    """A job's environment for the server at ``uri``; ``folder``: a TLS server's folder (its certificate, and the
    password file, read by the job itself)."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "OMP_NUM_THREADS": "1", "HARA_MLFLOW_FLUSH_SECONDS": "240"}
    if folder is not None:
        env["MLFLOW_TRACKING_SERVER_CERT_PATH"] = str(server_certificate(folder))
    if user:
        env.update(
            tls_client_env(folder)
            if folder is not None
            else {"MLFLOW_TRACKING_USERNAME": user, "MLFLOW_TRACKING_PASSWORD": PASSWORD}
        )
    return env


def metric_points(uri: str, run_ids: list[str], env: dict) -> list[int]:
    """The training metric points MLflow holds for each run: distinct (metric, step) pairs of the full histories
    (a run resumed after a kill logs the steps after its checkpoint again; the evaluation's eval/* scores, the
    report's vs_<baseline>/* differences and MLflow's system/* samples, logged into the same run, are not counted),
    asked by a fresh client process with ``env``'s credentials."""
    code = (
        "import sys; from mlflow.tracking import MlflowClient; c = MlflowClient(sys.argv[1]); "
        "print(*[len({(k, m.step) for k in c.get_run(r).data.metrics "
        "if not k.startswith(('eval/', 'vs_', 'system/')) "
        "for m in c.get_metric_history(r, k)}) for r in sys.argv[2:]])"
    )
    out = subprocess.run(
        [str(BIN / "python"), "-c", code, uri, *run_ids],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    return [int(n) for n in out.split()[-len(run_ids) :]]


def stored_metric_points(store: Path, run_ids: list[str]) -> list[int]:
    """:func:`metric_points` read from the server's own SQLite backend store (``tracking_server``'s server.db) in one
    query: what the server holds, without its per-request authentication (about 0.3 s per metric and run, so
    reading the rehearsal's runs back through the API took ~100 s of the suite)."""
    import sqlite3

    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
        counts = dict(
            db.execute(
                "SELECT run_uuid, COUNT(*) FROM (SELECT DISTINCT run_uuid, key, step FROM metrics WHERE key NOT LIKE "
                "'eval/%' AND substr(key, 1, 3) != 'vs_' AND substr(key, 1, 7) != 'system/') GROUP BY run_uuid"
            ).fetchall()
        )
    return [counts.get(run_id, 0) for run_id in run_ids]


def jsonl_points(path: Path) -> int:
    """Finite metric values in metrics.jsonl (every key of every line but the step; MLflow is never sent a NaN)."""
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    return sum(math.isfinite(value) for line in lines for key, value in line.items() if key != "step")


@pytest.mark.slow
def test_authenticated_server_refuses_anonymous_clients_and_jobs(tmp_path, tiny_base):
    """`hara tracking-server` answers only with the right credentials, and a training job without them stops before
    it trains. (The rehearsal's DAG logs every job through such a server and greps every file it wrote for the
    password: tests/workflow/test_rehearsal.py.)"""
    with tracking_server(tmp_path) as (uri, server):
        cert = server_certificate(tmp_path)
        assert uri.startswith("https://")
        assert status_of(uri, cert=cert) == 401
        assert status_of(uri, "hara", "wrong-password-000", cert) == 401
        assert status_of(uri, "hara", PASSWORD, cert) == 200
        assert status_of(uri, "hara", "wrong-password-000", cert) == 401  # a cached credential admits only itself
        with pytest.raises(OSError):  # plain HTTP: refused at the TLS handshake, the password never travels in clear
            status_of(uri.replace("https://", "http://"), "hara", PASSWORD)
        with pytest.raises(OSError, match="CERTIFICATE_VERIFY_FAILED"):  # a client that does not trust it
            status_of(uri, "hara", PASSWORD, cert=Path(__import__("certifi").where()))
        out = tmp_path / "run"
        cmd = [a.replace("{base}", str(tiny_base)) for a in train_command(out)]
        anonymous = subprocess.run(
            cmd,
            env={**client_env(uri), "MLFLOW_TRACKING_SERVER_CERT_PATH": str(cert)},
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert anonymous.returncode == 2 and not (out / "final").exists() and not (out / "metrics.jsonl").exists()
        assert "MLFLOW_TRACKING_USERNAME" in anonymous.stderr.splitlines()[-1], anonymous.stderr[-2000:]
        # a job's client: the certificate trusted through MLflow's own variable, the password read from its file
        code = (
            "import mlflow; from hara.tracking import resolve_uri; "
            "print(mlflow.MlflowClient(resolve_uri('env:MLFLOW_TRACKING_URI')).create_experiment('tls-job'))"
        )
        env = {**client_env(uri, "hara", tmp_path)}
        env.pop("MLFLOW_TRACKING_PASSWORD", None)
        created = subprocess.run(
            [str(BIN / "python"), "-c", code], env=env, capture_output=True, text=True, timeout=300, check=False
        )
        assert created.returncode == 0 and created.stdout.split()[-1].isdigit(), created.stderr[-2000:]
        # a stop does not wait for a client's idle keep-alive connection (uvicorn's default waited 30 s for it)
        idle = http.client.HTTPSConnection(uri.split("://")[1], context=ssl.create_default_context(cafile=str(cert)))
        idle.request("GET", "/health")
        assert idle.getresponse().read() == b"OK"
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=SHUTDOWN_GRACE_SECONDS + 15)
        idle.close()
    assert not [
        p
        for p in tmp_path.rglob("*")
        if p.is_file() and p.name != "mlflow.password" and PASSWORD.encode() in p.read_bytes()
    ]  # the server wrote it nowhere either


@pytest.mark.slow
def test_a_server_stopped_for_30_s_mid_run_loses_no_metric_point(tmp_path, tiny_base):
    port = free_port()
    out = tmp_path / "run"
    cmd = [
        a.replace("{base}", str(tiny_base)) for a in train_command(out, "training.steps=8", "training.save_steps=100")
    ]
    with tracking_server(tmp_path, port, auth=False) as (uri, server):
        with open(tmp_path / "train.log", "w", encoding="utf-8") as log:
            train = subprocess.Popen(cmd, env=client_env(uri), stdout=log, stderr=subprocess.STDOUT)
        metrics = out / "metrics.jsonl"
        deadline = time.monotonic() + 300
        while not (metrics.is_file() and metrics.read_text().strip()):
            assert train.poll() is None and time.monotonic() < deadline, (tmp_path / "train.log").read_text()[-3000:]
            time.sleep(0.2)
        stop(server)  # mid-run: one step logged, seven to go
    outage_start = time.monotonic()
    time.sleep(30)
    with tracking_server(tmp_path, port, auth=False) as (uri, _):
        assert train.wait(timeout=600) == 0, (tmp_path / "train.log").read_text()[-3000:]
        run = json.loads((out / "mlflow_run.json").read_text())
        assert json.loads(metrics.read_text().splitlines()[-1])["step"] == 8
        assert metric_points(uri, [run["run_id"]], client_env(uri)) == [jsonl_points(metrics)]
    assert time.monotonic() - outage_start >= 30
    assert "kept for later" in (tmp_path / "train.log").read_text()  # the outage was seen, and survived


def test_the_tracking_uri_can_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("HARA_TEST_URI", "http://10.0.0.5:5000")
    assert resolve_uri("env:HARA_TEST_URI") == "http://10.0.0.5:5000"
    monkeypatch.delenv("HARA_TEST_URI")
    with pytest.raises(TrackingError, match="HARA_TEST_URI is not set"):
        absolute_uri("env:HARA_TEST_URI")


def test_credentials_in_the_uri_are_refused():
    with pytest.raises(TrackingError, match="MLFLOW_TRACKING_USERNAME"):
        resolve_uri("http://hara:secret@10.0.0.5:5000")


def test_sqlite_on_a_file_system_without_flock_is_one_line_naming_the_fix(tmp_path, monkeypatch, capsys, tiny_base):
    """Lustre without flock answers ENOSYS: before, MLflow's migration lock raised a bare OSError traceback."""
    import fcntl

    from hara.cli import main

    def no_locks(*args):
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))

    monkeypatch.setattr(fcntl, "flock", no_locks)
    code = main(
        [
            *smoke_train_args(),
            "--out",
            str(tmp_path / "run"),
            "--base-model",
            str(tiny_base),
            "--set",
            f"tracking.mlflow_uri=sqlite:///{tmp_path / 'mlflow.db'}",
        ]
    )
    err = capsys.readouterr().err.splitlines()[-1]  # after the weights' loading bar
    assert code == 2 and err.startswith("error: tracking.mlflow_uri: cannot lock"), err
    assert "no file locks" in err and "MLflow server or a database URL" in err


def test_password_file_must_be_private(tmp_path):
    from hara.cli import UserError
    from hara.tracking.server import read_password

    path = password_file(tmp_path)
    assert read_password(path) == PASSWORD
    path.chmod(0o644)
    with pytest.raises(UserError, match="chmod 600"):
        read_password(path)


def test_the_server_checks_a_credential_once_per_worker_and_window(tmp_path):
    """Without MLflow's credential cache each request ran the PBKDF2 password check: 213 ms of server CPU per request
    on the 2-core CI machine, more than the request's own work (8 ms with the cache). MLflow reads the cache's
    window from the config `hara tracking-server` writes (0, the cache off, before). Read in a process of its own:
    importing mlflow.server.auth leaves Flask's request proxies in sys.modules, and vLLM's CPU engine, which walks
    every loaded module when it starts, fails on them in any later test of this worker."""
    import hara.tracking.server
    from hara.errors import UserError

    config, _ = hara.tracking.server.auth_config(tmp_path / "auth", "hara")
    code = "from mlflow.server.auth.config import read_auth_config; print(read_auth_config().auth_cache_ttl_seconds)"
    read = subprocess.run(
        [str(BIN / "python"), "-c", code],
        env={**os.environ, "MLFLOW_AUTH_CONFIG_PATH": str(config)},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    window = int(read.stdout.split()[-1])
    assert window > 0
    assert window == hara.tracking.server.AUTH_CACHE_SECONDS
    with pytest.raises(UserError, match="--auth-cache-seconds: -1 is negative"):
        hara.tracking.server.auth_config(tmp_path / "auth", "hara", -1)


def test_a_job_reads_the_password_from_its_private_file_and_the_tls_pair_is_checked(tmp_path, monkeypatch):
    """Before: jobs took MLFLOW_TRACKING_PASSWORD from their environment, which `--export=ALL` hands to every job and
    slurmdbd may store (AccountingStoreFlags=job_env); now the environment names a mode-600 file."""
    import argparse

    from hara.errors import UserError
    from hara.tracking import password_from_file
    from hara.tracking.server import self_signed_certificate, tls_files

    monkeypatch.delenv("MLFLOW_TRACKING_PASSWORD", raising=False)
    monkeypatch.setenv("HARA_TRACKING_PASSWORD_FILE", str(password_file(tmp_path)))
    password_from_file()
    assert os.environ["MLFLOW_TRACKING_PASSWORD"] == PASSWORD
    monkeypatch.delenv("MLFLOW_TRACKING_PASSWORD")
    from hara.tracking import tracking_client  # a client reopened from mlflow_run.json (a requeued job's resume)

    tracking_client("https://127.0.0.1:9")
    assert os.environ["MLFLOW_TRACKING_PASSWORD"] == PASSWORD  # before: only resolve_uri read it, and the resume 401ed
    monkeypatch.delenv("MLFLOW_TRACKING_PASSWORD")
    (tmp_path / "mlflow.password").chmod(0o644)
    with pytest.raises(UserError, match=r"^HARA_TRACKING_PASSWORD_FILE: .* is readable by others \(chmod 600"):
        password_from_file()

    cert, key = self_signed_certificate(tmp_path / "tls", "10.1.2.3")
    assert oct(key.stat().st_mode & 0o777) == "0o600"
    assert self_signed_certificate(tmp_path / "tls", "10.1.2.3") == (cert, key)  # made once, reused
    args = argparse.Namespace(tls_cert=cert, tls_key=None, auth_dir=tmp_path, host="10.1.2.3")
    with pytest.raises(UserError, match="give both"):
        tls_files(args)
    key.chmod(0o644)
    with pytest.raises(UserError, match="--tls-key: .* is readable by others"):
        tls_files(argparse.Namespace(tls_cert=cert, tls_key=key, auth_dir=tmp_path, host="10.1.2.3"))
