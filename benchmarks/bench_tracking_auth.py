"""Server CPU per authenticated request of `hara tracking-server`: MLflow's credential cache on (the default window)
against off (``--auth-cache-seconds 0``: the PBKDF2 password check on every request), in this process.

    python benchmarks/bench_tracking_auth.py [--requests 40] [--repeats 2]

Each round starts one server per setting on 127.0.0.1 (one worker, its own store and auth folder under a temporary
folder), logs ``--requests`` metric points one request each, and reads the CPU seconds of the server's process group
from /proc (Linux) before and after. Prints each round and the ratio of the medians; the last line is
machine-readable. Compare ratios, not milliseconds across machines.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def group_cpu_seconds(group: int) -> float:
    """User + system CPU seconds of the live processes in process group ``group``."""
    ticks = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        if int(fields[2]) == group:
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def start_server(folder: Path, password: Path, cache_seconds: int) -> tuple[subprocess.Popen, str]:
    port = free_port()
    cmd = [
        str(BIN / "hara"),
        "tracking-server",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
        "--password-file",
        str(password),
        "--auth-dir",
        str(folder / "auth"),
        "--backend-store-uri",
        f"sqlite:///{folder / 'server.db'}",
        "--artifacts-destination",
        str(folder / "artifacts"),
        "--auth-cache-seconds",
        str(cache_seconds),
    ]
    log = open(folder / "server.log", "w", encoding="utf-8")  # noqa: SIM115 (closed with the process)
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    uri, deadline = f"https://127.0.0.1:{port}", time.monotonic() + 180
    cert = folder / "auth" / "tls" / "cert.pem"  # the server's self-signed certificate, trusted by the client
    while time.monotonic() < deadline:
        try:
            if not cert.is_file():
                raise OSError("certificate not written yet")
            os.environ["MLFLOW_TRACKING_SERVER_CERT_PATH"] = str(cert)
            context = ssl.create_default_context(cafile=str(cert))
            with urllib.request.urlopen(f"{uri}/health", timeout=2, context=context):
                return proc, uri
        except OSError:
            if proc.poll() is not None:
                raise SystemExit((folder / "server.log").read_text()[-3000:])
            time.sleep(0.5)
    raise SystemExit(f"the server on {uri} did not answer within 180 s")


def server_cpu_per_request(folder: Path, password: Path, cache_seconds: int, requests: int) -> float:
    """Seconds of server CPU per authenticated log_metric request."""
    from mlflow import MlflowClient

    proc, uri = start_server(folder, password, cache_seconds)
    try:
        client = MlflowClient(uri)
        run_id = client.create_run(client.create_experiment(f"bench-{cache_seconds}")).info.run_id
        client.log_metric(run_id, "warm", 0.0)  # the worker's first request (imports, first check) is not counted
        before = group_cpu_seconds(proc.pid)
        for step in range(requests):
            client.log_metric(run_id, "loss", float(step), step=step)
        return (group_cpu_seconds(proc.pid) - before) / requests
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)


def main() -> None:
    from hara.tracking.server import AUTH_CACHE_SECONDS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        password = root / "password"
        password.write_text(secrets.token_urlsafe(24), encoding="utf-8")
        password.chmod(0o600)
        os.environ.update(MLFLOW_TRACKING_USERNAME="hara", MLFLOW_TRACKING_PASSWORD=password.read_text())
        seconds: dict[int, list[float]] = {0: [], AUTH_CACHE_SECONDS: []}
        for round_ in range(args.repeats):
            for cache, spent in seconds.items():
                folder = root / f"round{round_}-cache{cache}"
                folder.mkdir()
                spent.append(server_cpu_per_request(folder, password, cache, args.requests))
                print(
                    f"round {round_}: --auth-cache-seconds {cache:>3}: {spent[-1] * 1000:7.1f} ms of "
                    f"server CPU per request",
                    flush=True,
                )
    off, on = (statistics.median(seconds[c]) for c in (0, AUTH_CACHE_SECONDS))
    print(
        f"server CPU per request: cache off {off * 1000:.1f} ms, on {on * 1000:.1f} ms, "
        f"ratio {off / max(on, 1e-9):.1f}x"
    )


if __name__ == "__main__":
    main()
