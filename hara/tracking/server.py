"""`hara tracking-server`: the MLflow tracking server of a cluster run, bound to a cluster address behind
MLflow's basic-auth app.

Compute nodes must reach the server, so it cannot listen on 127.0.0.1 of the login node; on a cluster address it
must not be open to everyone on that network. So:

- the server runs MLflow's ``basic-auth`` app: every request without valid credentials is refused (401);
- the admin password is read from a file that only its owner may read (``--password-file``, mode 0600), handed to
  MLflow through its own variable ``MLFLOW_AUTH_ADMIN_PASSWORD`` in the server's environment, and written nowhere;
- the auth app's user database, its config and the Flask secret (CSRF) live in ``--auth-dir`` (mode 0700);
- clients (the DAG's jobs) read the same credentials from ``MLFLOW_TRACKING_USERNAME`` and from the password file
  named by ``HARA_TRACKING_PASSWORD_FILE`` (mode 0600, read by each job itself: Slurm exports the submitting
  environment to every job, and slurmdbd stores it where ``AccountingStoreFlags=job_env`` is set, so the password
  itself must not be in it; ``MLFLOW_TRACKING_PASSWORD`` still works); configs, logs, run_info.json and MLflow
  params never hold them (hara.tracking refuses a URI with credentials in it);
- the server speaks HTTPS only (uvicorn's TLS): basic auth in clear text over the cluster network would give the
  password to anyone on it. The certificate is ``--tls-cert`` / ``--tls-key`` when given (the site's), else a
  self-signed one generated once into ``--auth-dir``/tls for ``--host``; clients trust it through MLflow's own
  ``MLFLOW_TRACKING_SERVER_CERT_PATH``. A plain-HTTP request is refused at the TLS handshake.

The command replaces itself with ``mlflow server`` (exec), so a job scheduler or ``kill`` stops the server directly.
"""

from __future__ import annotations

import argparse
import os
import secrets
import stat
from pathlib import Path

from hara.tracking import PASSWORD_FILE_ENV, read_password

__all__ = [
    "PASSWORD_FILE_ENV",
    "add_arguments",
    "auth_config",
    "read_password",
    "self_signed_certificate",
    "serve",
    "server_command",
    "tls_files",
]

CERTIFICATE_DAYS = 365

AUTH_FUNCTION = "mlflow.server.auth:authenticate_request_basic_auth"
#: MLflow's own cache of verified credentials (``auth_cache_ttl_seconds``, off by default): without it every request
#: runs the PBKDF2 password check, 213 ms of server CPU on the 2-core CI machine, so a training job's metric flushes and
#: evaluation uploads cost the server more than they cost the job. With it the check runs once per credential and
#: worker in this window; a password changed through the API is dropped at once by the worker that changed it, the
#: other worker keeps accepting the old one for at most this long (MLflow's basic_auth.ini documents the trade-off).
AUTH_CACHE_SECONDS = 300
#: At a stop (scancel, kill) uvicorn otherwise waits until every client's idle keep-alive connection closes: 30 s after
#: an MLflow client's last request. Requests in flight still get this long to finish.
SHUTDOWN_GRACE_SECONDS = 5


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--host", required=True, help="address to listen on (a cluster address the compute nodes reach)"
    )
    parser.add_argument("--port", type=int, default=5000, help="port (default 5000)")
    parser.add_argument(
        "--password-file",
        required=True,
        type=Path,
        help="file holding the admin password, readable by its owner only (chmod 600)",
    )
    parser.add_argument("--user", default="hara", help="admin user name (default hara)")
    parser.add_argument(
        "--backend-store-uri",
        default="sqlite:///results/mlflow-server.db",
        help="MLflow backend store (a database URL, or sqlite on a disk local to this node)",
    )
    parser.add_argument("--artifacts-destination", default="results/mlartifacts", help="where artifacts are stored")
    parser.add_argument(
        "--auth-dir",
        type=Path,
        default=Path.home() / ".hara" / "mlflow-auth",
        help="folder of the auth app's user database, config and secret (created with mode 0700)",
    )
    parser.add_argument("--workers", type=int, default=2, help="server worker processes (default 2)")
    parser.add_argument(
        "--tls-cert",
        type=Path,
        help="the server's certificate (PEM); default: a self-signed one "
        "for --host, generated once into --auth-dir/tls",
    )
    parser.add_argument("--tls-key", type=Path, help="its private key (PEM, chmod 600); with --tls-cert")
    parser.add_argument(
        "--auth-cache-seconds",
        type=int,
        default=AUTH_CACHE_SECONDS,
        help=f"how long a worker trusts a verified password (default {AUTH_CACHE_SECONDS}; 0: check "
        "the password hash on every request)",
    )


def self_signed_certificate(folder: Path, host: str) -> tuple[Path, Path]:
    """A self-signed certificate for ``host`` (and localhost) in ``folder`` (cert.pem, key.pem mode 0600), made
    once and made again only when it does not name ``host`` or expires within a day."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    now = datetime.datetime.now(datetime.UTC)
    if cert_path.is_file() and key_path.is_file():
        existing = x509.load_pem_x509_certificate(cert_path.read_bytes())
        names = existing.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        named = {str(n) for n in names.get_values_for_type(x509.DNSName)} | {
            str(n) for n in names.get_values_for_type(x509.IPAddress)
        }
        if host in named and existing.not_valid_after_utc > now + datetime.timedelta(days=1):
            return cert_path, key_path
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = ec.generate_private_key(ec.SECP256R1())
    alternatives: list[x509.GeneralName] = [
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    ]
    try:
        alternatives.append(x509.IPAddress(ipaddress.ip_address(host)))
    except ValueError:
        alternatives.append(x509.DNSName(host))
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=CERTIFICATE_DAYS))
        .add_extension(x509.SubjectAlternativeName(alternatives), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    _private_file(
        key_path,
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode("ascii"),
    )
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return cert_path, key_path


def tls_files(args: argparse.Namespace) -> tuple[Path, Path]:
    """(certificate, key): the given pair, checked, or the generated self-signed one
    (:func:`self_signed_certificate`)."""
    from hara.errors import UserError

    if (args.tls_cert is None) != (args.tls_key is None):
        raise UserError("--tls-cert and --tls-key: give both (the site's certificate) or neither (a self-signed one)")
    if args.tls_cert is None:
        return self_signed_certificate(args.auth_dir / "tls", args.host)
    for flag, path in (("--tls-cert", args.tls_cert), ("--tls-key", args.tls_key)):
        if not path.is_file():
            raise UserError(f"{flag}: {path} does not exist")
    if stat.S_IMODE(args.tls_key.stat().st_mode) & 0o077:
        raise UserError(f"--tls-key: {args.tls_key} is readable by others (chmod 600 {args.tls_key})")
    return args.tls_cert, args.tls_key


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
    _private_file(
        config,
        "[mlflow]\n"
        "default_permission = READ\n"
        f"database_uri = sqlite:///{(auth_dir / 'users.db').resolve()}\n"
        f"admin_username = {user}\n"
        f"authorization_function = {AUTH_FUNCTION}\n"
        f"auth_cache_ttl_seconds = {cache_seconds}\n",
    )
    return config, secret_file.read_text(encoding="utf-8").strip()


def server_command(args: argparse.Namespace, cert: Path, key: Path) -> list[str]:
    """``mlflow server`` with the basic-auth app on ``args.host``:``args.port``, HTTPS with ``cert`` and ``key``."""
    import shlex

    from hara.tracking import _ensure_sqlite_folder

    _ensure_sqlite_folder(args.backend_store_uri)
    uvicorn = (
        f"--ssl-certfile {shlex.quote(str(cert.resolve()))} --ssl-keyfile {shlex.quote(str(key.resolve()))}"
        f" --timeout-graceful-shutdown {SHUTDOWN_GRACE_SECONDS}"
    )
    return [
        "mlflow",
        "server",
        "--app-name",
        "basic-auth",
        "--host",
        args.host,
        "--port",
        str(args.port),
        "--workers",
        str(args.workers),
        "--backend-store-uri",
        args.backend_store_uri,
        "--artifacts-destination",
        args.artifacts_destination,
        "--uvicorn-opts",
        uvicorn,
    ]


def serve(args: argparse.Namespace) -> int:
    """Replace this process by the authenticated server (returns only if the exec fails)."""
    import shutil
    import sys

    password = read_password(args.password_file)
    config, secret = auth_config(args.auth_dir, args.user, args.auth_cache_seconds)
    cert, key = tls_files(args)
    env = {
        **os.environ,
        "MLFLOW_AUTH_CONFIG_PATH": str(config),
        "MLFLOW_AUTH_ADMIN_PASSWORD": password,
        "MLFLOW_FLASK_SERVER_SECRET_KEY": secret,
    }
    # The harness submits no MLflow server jobs (GenAI judges and scorers); with job execution on, the server starts
    # Huey consumers (7 worker threads in 2 more processes) beside itself. The environment may still turn it on.
    env.setdefault("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")
    command = server_command(args, cert, key)
    executable = shutil.which("mlflow", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    print(
        f"MLflow server with basic auth on https://{args.host}:{args.port} (user {args.user}); clients: "
        f"export MLFLOW_TRACKING_URI=https://{args.host}:{args.port} MLFLOW_TRACKING_USERNAME={args.user} "
        f"{PASSWORD_FILE_ENV}={args.password_file.resolve()} MLFLOW_TRACKING_SERVER_CERT_PATH={cert.resolve()}",
        flush=True,
    )
    os.execve(executable, command, env)
    return 1
