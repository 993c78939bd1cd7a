"""Real servers, browsers and process crowds for the reliability tests: an `mlflow server` on 127.0.0.1, headless
Chromium and readers of the MLflow UI pages it dumps, and N worker processes released at the same moment."""

from __future__ import annotations

import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from html.parser import HTMLParser
from pathlib import Path

from hara.tracking.server import SHUTDOWN_GRACE_SECONDS

BIN = Path(sys.executable).parent
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Headless and quiet: no sandbox (CI runs as root), no GPU, and nothing that phones home.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
    "--disable-default-apps",
    "--disable-extensions",
    "--mute-audio",
)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


PASSWORD = "rehearsal-Secret-4711"  # the test servers' admin password (never a real one)


def password_file(folder: Path) -> Path:
    path = folder / "mlflow.password"
    path.write_text(PASSWORD + "\n", encoding="utf-8")
    path.chmod(0o600)
    return path


def server_certificate(folder: Path) -> Path:
    """The self-signed certificate `hara tracking-server` generated for a server of :func:`tracking_server`."""
    return folder / "auth" / "tls" / "cert.pem"


def tls_client_env(folder: Path) -> dict:
    """What a client of :func:`tracking_server`'s HTTPS server needs: MLflow's own trust setting for its certificate
    and the password file a job reads itself (hara.tracking.password_from_file)."""
    return {
        "MLFLOW_TRACKING_SERVER_CERT_PATH": str(server_certificate(folder)),
        "MLFLOW_TRACKING_USERNAME": "hara",
        "HARA_TRACKING_PASSWORD_FILE": str(folder / "mlflow.password"),
    }


@contextmanager
def tracking_server(
    folder: Path, port: int | None = None, auth: bool = True, timeout: float = 180.0, store: str | None = None
):
    """`hara tracking-server` (HTTPS with a self-signed certificate, basic auth, PASSWORD) or a plain `mlflow server`
    on 127.0.0.1, started in its own process group and stopped with it (the server forks uvicorn workers); yields
    (uri, process). ``store``: its backend store (default: a new sqlite database, ``folder``/server.db)."""
    folder.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    store = store or f"sqlite:///{folder / 'server.db'}"
    if auth:
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
            str(password_file(folder)),
            "--auth-dir",
            str(folder / "auth"),
            "--backend-store-uri",
            store,
            "--artifacts-destination",
            str(folder / "artifacts"),
        ]
    else:
        cmd = [
            str(BIN / "mlflow"),
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
            "--backend-store-uri",
            store,
            "--artifacts-destination",
            str(folder / "artifacts"),
            # as `hara tracking-server` does: a stop does not wait 30 s for the clients' idle connections
            "--uvicorn-opts",
            f"--timeout-graceful-shutdown {SHUTDOWN_GRACE_SECONDS}",
        ]
    uri = f"{'https' if auth else 'http'}://127.0.0.1:{port}"
    log = folder / f"server-{port}-{time.monotonic_ns()}.log"
    with open(log, "w", encoding="utf-8") as out:
        proc = subprocess.Popen(
            cmd,
            cwd=folder,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={
                **os.environ,
                "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
                "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
            },
        )  # no jobs: no Huey consumers
    try:
        wait_until_healthy(uri, proc, timeout, log, server_certificate(folder) if auth else None)
        yield uri, proc
    finally:
        stop(proc)


def stop(proc: subprocess.Popen) -> None:
    """Stop a server started in its own process group (TERM, then KILL after 30 s)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@contextmanager
def mlflow_server(folder: Path, timeout: float = 180.0, store: str | None = None):
    """A real `mlflow server` on 127.0.0.1 without authentication (sqlite backend: a new one in ``folder``, or
    ``store``; artifacts on disk under ``folder``); yields its URI."""
    with tracking_server(folder, auth=False, timeout=timeout, store=store) as (uri, _):
        yield uri


def ssl_context(cert: Path | None):
    """A client context trusting ``cert`` only (None: the default context, for plain HTTP)."""
    import ssl

    return None if cert is None else ssl.create_default_context(cafile=str(cert))


def wait_until_healthy(uri: str, proc: subprocess.Popen, timeout: float, log: Path, cert: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"mlflow server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            context = ssl_context(cert) if cert is None or cert.is_file() else None
            if cert is not None and context is None:
                raise OSError("certificate not written yet")
            with urllib.request.urlopen(f"{uri}/health", timeout=2, context=context) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"mlflow server at {uri} not healthy after {timeout:.0f} s:\n{log.read_text()[-3000:]}")


def chromium(url: str, *mode: str, budget_ms: int = 30000, window: str = "1400,2800") -> subprocess.CompletedProcess:
    """Run headless Chromium once on ``url`` with a fresh profile; ``mode`` is --dump-dom or --screenshot=PATH.

    --virtual-time-budget lets the single-page app finish its API calls before the DOM is dumped or drawn."""
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        cmd = [
            CHROMIUM,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={profile}",
            f"--window-size={window}",
            f"--virtual-time-budget={budget_ms}",
            *mode,
            url,
        ]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=True)


def visible_text(dom: str) -> str:
    """The visible text of a dumped DOM (tags, scripts and styles stripped, spaces collapsed)."""
    import html
    import re

    dom = re.sub(r"<(script|style)\b.*?</\1>", " ", dom, flags=re.DOTALL)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", dom)).split())


def compared_metrics(dom: str) -> dict[str, list[str]]:
    """metric name -> the cells shown for it (one per compared run, in the URL's order) in the Metrics table of
    MLflow's run-comparison page. The table is a virtualized grid: names and value cells are absolutely positioned
    divs matched by their ``top``; only the rows drawn in its viewport are in the DOM."""
    import html
    import re

    section = dom[dom.index('aria-label="Metrics - Show diff only"') :]
    section = section[: section.index(">Artifacts<")] if ">Artifacts<" in section else section
    names = {
        int(top): html.unescape(name)
        for top, name in re.findall(r'top: (\d+)px;[^"]*"><a title="Plot chart"[^>]*>([^<]+)<i', section)
    }
    rows: dict[str, dict[int, str]] = {}
    for left, top, text in re.findall(
        r'left: (\d+)px; position: absolute; top: (\d+)px; width: \d+px;"><span[^>]*>([^<]*)</span>', section
    ):
        if int(top) in names:
            rows.setdefault(names[int(top)], {})[int(left)] = html.unescape(text)
    return {name: [cells[left] for left in sorted(cells)] for name, cells in rows.items()}


def drawn_as(cell: str, value: float) -> bool:
    """The UI's cell is ``value`` at the precision it draws (MLflow rounds to a few decimals: 0.0071928 -> 0.007)."""
    decimals = len(cell.partition(".")[2]) if "e" not in cell.lower() else None
    half_step = 0.5 * 10.0**-decimals if decimals is not None else 0.0
    return math.isclose(float(cell), value, rel_tol=1e-3, abs_tol=1e-12) or abs(float(cell) - value) <= half_step


class RunsTable(HTMLParser):
    """The cells of the MLflow runs table (an ag-grid) in a dumped DOM: ``rows[row id][column id]`` = the cell's
    text. Row ids end with the run id (``<run id>``, or ``tag.method.<value>.<run id>`` when grouped); column ids
    are MLflow's (``metrics.`eval/avg_pass_at_1```). Only the rows and columns drawn in the viewport are there."""

    def __init__(self, dom: str):
        super().__init__()
        self.rows: dict[str, dict[str, str]] = {}
        self.row = self.column = None
        self.depth = 0  # open divs inside the current cell
        self.feed(dom)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "row-id" in attrs:
            self.row = attrs["row-id"]
        elif attrs.get("role") == "gridcell" and self.row and "col-id" in attrs:
            self.column, self.depth = attrs["col-id"], 0
            self.rows.setdefault(self.row, {})[self.column] = ""
        if self.column and tag == "div":
            self.depth += 1

    def handle_endtag(self, tag):
        if self.column and tag == "div":
            self.depth -= 1
            if self.depth == 0:
                self.column = None

    def handle_data(self, data):
        if self.column:
            cells = self.rows[self.row]
            cells[self.column] = " ".join(f"{cells[self.column]} {data}".split())

    def of_run(self, run_id: str) -> dict[str, str]:
        """The run's cells, merged over the grid's containers (pinned and scrolled columns are separate rows)."""
        merged: dict[str, str] = {}
        for row, cells in self.rows.items():
            if row.rsplit(".", 1)[-1] == run_id:
                merged.update({column: text for column, text in cells.items() if text})
        return merged


def run_together(commands: list[list[str]], root: Path, timeout: float = 300.0) -> None:
    """Start every command, wait until each touched ``root/ready<i>`` (i = its index; imports done), then create
    ``root/go`` so that they all hit the shared store at once; every command must exit 0."""
    logs = [root / f"worker{i}.log" for i in range(len(commands))]  # files, not pipes: a chatty worker never blocks
    procs = [subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT) for cmd, log in zip(commands, logs)]
    problem = ""
    try:
        deadline = time.monotonic() + timeout
        while sum((root / f"ready{i}").exists() for i in range(len(procs))) < len(procs):
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                problem = "a worker exited (or hung) before all were ready"
                return
            time.sleep(0.05)
        (root / "go").touch()
        for proc in procs:
            proc.wait(timeout=timeout)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        failed = [(i, p.returncode, logs[i].read_text()[-2000:]) for i, p in enumerate(procs) if p.wait() != 0]
        assert not problem and failed == [], (problem, failed)
