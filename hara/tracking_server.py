"""`hara tracking-server`: the MLflow tracking server of a cluster run, bound to a cluster address behind
MLflow's basic-auth app.

Compute nodes must reach the server, so it cannot listen on 127.0.0.1 of the login node; on a cluster address it
must not be open to everyone on that network. So:

- the server runs MLflow's ``basic-auth`` app: every request without valid credentials is refused (401);
- the admin password is read from a file that only its owner may read (``--password-file``, mode 0600), handed to
  MLflow through its own variable ``MLFLOW_AUTH_ADMIN_PASSWORD`` in the server's environment, and written nowhere;
- the auth app's user database, its config and the Flask secret (CSRF) live in ``--auth-dir`` (mode 0700);
- clients (the DAG's jobs) read the same credentials from ``MLFLOW_TRACKING_USERNAME`` /
  ``MLFLOW_TRACKING_PASSWORD`` in their environment; configs, logs, run_info.json and MLflow params never hold them
  (hara.tracking refuses a URI with credentials in it).

The command replaces itself with ``mlflow server`` (exec), so a job scheduler or ``kill`` stops the server directly.
"""

from __future__ import annotations

import argparse
import os
import secrets
import stat
from pathlib import Path

__all__ = ["add_arguments", "auth_config", "server_command", "read_password", "serve"]

AUTH_FUNCTION = "mlflow.server.auth:authenticate_request_basic_auth"
#: MLflow's own cache of verified credentials (``auth_cache_ttl_seconds``, off by default): without it every request
#: runs the PBKDF2 password check, 213 ms of server CPU on the 2-core CI machine, so a training job's metric flushes and
#: evaluation uploads cost the server more than they cost the job. With it the check runs once per credential and
#: worker in this window; a password changed through the API is dropped at once by the worker that changed it, the
#: other worker keeps accepting the old one for at most this long (MLflow's basic_auth.ini documents the trade-off).
AUTH_CACHE_SECONDS = 300


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", required=True, help="address to listen on (a cluster address the compute nodes reach)")
    parser.add_argument("--port", type=int, default=5000, help="port (default 5000)")
    parser.add_argument("--password-file", required=True, type=Path,
                        help="file holding the admin password, readable by its owner only (chmod 600)")
    parser.add_argument("--user", default="hara", help="admin user name (default hara)")
    parser.add_argument("--backend-store-uri", default="sqlite:///results/mlflow-server.db",
                        help="MLflow backend store (a database URL, or sqlite on a disk local to this node)")
    parser.add_argument("--artifacts-destination", default="results/mlartifacts", help="where artifacts are stored")
    parser.add_argument("--auth-dir", type=Path, default=Path.home() / ".hara" / "mlflow-auth",
                        help="folder of the auth app's user database, config and secret (created with mode 0700)")
    parser.add_argument("--workers", type=int, default=2, help="server worker processes (default 2)")
    parser.add_argument("--auth-cache-seconds", type=int, default=AUTH_CACHE_SECONDS,
                        help=f"how long a worker trusts a verified password (default {AUTH_CACHE_SECONDS}; 0: check "
                             "the password hash on every request)")


def read_password(path: Path) -> str:
    """The password in ``path``; a missing, empty or group/world-readable file is an error naming it."""
    from hara.errors import UserError

    if not path.is_file():
        raise UserError(f"--password-file: {path} does not exist (write the password into it, then chmod 600)")
    if stat.S_IMODE(path.stat().st_mode) & 0o077:
        raise UserError(f"--password-file: {path} is readable by others (chmod 600 {path})")
    password = path.read_text(encoding="utf-8").strip()
    if len(password) < 12:
        raise UserError(f"--password-file: {path}: the password must have at least 12 characters")
    return password


def _private_file(path: Path, text: str) -> None:
    """Write ``text`` into ``path`` readable by its owner only (created so, never world-readable in between)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


def auth_config(auth_dir: Path, user: str, cache_seconds: int = AUTH_CACHE_SECONDS) -> tuple[Path, str]:
    """Write the auth app's config into ``auth_dir`` (credentials verified once per ``cache_seconds`` and worker);
    returns (config path, Flask secret, kept across restarts)."""
    if cache_seconds < 0:
        from hara.errors import UserError

        raise UserError(f"--auth-cache-seconds: {cache_seconds} is negative (0 turns the cache off)")
    auth_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(auth_dir, 0o700)
    secret_file = auth_dir / "flask_secret"
    if not secret_file.is_file():
        _private_file(secret_file, secrets.token_hex(32))
    config = auth_dir / "basic_auth.ini"
    _private_file(config, "[mlflow]\n"
                          "default_permission = READ\n"
                          f"database_uri = sqlite:///{(auth_dir / 'users.db').resolve()}\n"
                          f"admin_username = {user}\n"
                          f"authorization_function = {AUTH_FUNCTION}\n"
                          f"auth_cache_ttl_seconds = {cache_seconds}\n")
    return config, secret_file.read_text(encoding="utf-8").strip()


def server_command(args: argparse.Namespace) -> list[str]:
    """``mlflow server`` with the basic-auth app on ``args.host``:``args.port``."""
    from hara.tracking import _ensure_sqlite_folder

    _ensure_sqlite_folder(args.backend_store_uri)
    return ["mlflow", "server", "--app-name", "basic-auth", "--host", args.host, "--port", str(args.port),
            "--workers", str(args.workers), "--backend-store-uri", args.backend_store_uri,
            "--artifacts-destination", args.artifacts_destination]


def serve(args: argparse.Namespace) -> int:
    """Replace this process by the authenticated server (returns only if the exec fails)."""
    import shutil
    import sys

    password = read_password(args.password_file)
    config, secret = auth_config(args.auth_dir, args.user, args.auth_cache_seconds)
    env = {**os.environ, "MLFLOW_AUTH_CONFIG_PATH": str(config), "MLFLOW_AUTH_ADMIN_PASSWORD": password,
           "MLFLOW_FLASK_SERVER_SECRET_KEY": secret}
    # The harness submits no MLflow server jobs (GenAI judges and scorers); with job execution on, the server starts
    # Huey consumers (7 worker threads in 2 more processes) beside itself. The environment may still turn it on.
    env.setdefault("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")
    command = server_command(args)
    executable = shutil.which("mlflow", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    print(f"MLflow server with basic auth on http://{args.host}:{args.port} (user {args.user}); clients: "
          f"export MLFLOW_TRACKING_URI=http://{args.host}:{args.port} MLFLOW_TRACKING_USERNAME={args.user} "
          f"MLFLOW_TRACKING_PASSWORD=\"$(cat {args.password_file})\"", flush=True)
    os.execve(executable, command, env)
    return 1
