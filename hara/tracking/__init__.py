"""MLflow tracking: one MLflow run per training run, shared with the evaluation stage through ``mlflow_run.json``.

The training stage opens (or, on resume, reopens) the run and writes ``<run dir>/mlflow_run.json`` =
``{"tracking_uri", "run_id", "experiment_id"}``, plus ``store``, the sqlite file relative to the run folder, when the
store lies in a folder above it (the results folder); later stages call :func:`open_run` on the same folder and log
into the same run (e.g. ``eval/<benchmark>/pass_at_1``). Every reader goes through :func:`read_run_file`, which finds
the store from where the file is now: a copied or moved results folder logs into its own store, never the source's
(:func:`relocated_store`). Everything goes through an explicit ``MlflowClient`` with the
config's tracking URI (never MLflow's global default, which writes ``sqlite:///mlflow.db`` wherever it runs).
Experiments are marked as model training (:data:`EXPERIMENT_KIND`); links into the UI open its training mode
(:func:`ui_path`).

MLflow metric names may only contain alphanumerics, ``_ - . : /`` and spaces: ``pass@1`` is rejected, so
:func:`metric_name` spells ``@`` as ``_at_`` (``eval/math500/pass@1`` -> ``eval/math500/pass_at_1``).

The tracking URI may be ``env:NAME`` (config/paper.yaml: ``env:MLFLOW_TRACKING_URI``): the value of that environment
variable, read when a store is opened, so the cluster's server address lives in the environment of the DAG run
(Slurm passes it to the jobs) and not in a config file. Credentials never go into a URI (refused): an authenticated
server reads them from MLflow's own ``MLFLOW_TRACKING_USERNAME`` / ``MLFLOW_TRACKING_PASSWORD`` (or a token), which
nothing here writes anywhere; the password may instead come from the private file ``HARA_TRACKING_PASSWORD_FILE``
names, read by the job itself (:func:`password_from_file`). An HTTPS server's certificate is trusted through MLflow's
own ``MLFLOW_TRACKING_SERVER_CERT_PATH``.

A tracking server that goes away for a while (a restart, a network blip) costs no metric point and no training step:
:meth:`MlflowRun.log_metrics` keeps the batches it could not send and sends them, in order, with the next one;
:meth:`MlflowRun.finish` waits for the server (``HARA_MLFLOW_FLUSH_SECONDS``, default 600) before it gives up and
says so; metrics.jsonl holds every point either way.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import stat
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hara.errors import DataError, TrackingError
from hara.layout import METRICS_FILE, RUN_FILE
from hara.results.files import read_json

__all__ = [
    "EXPERIMENT_KIND",
    "PASSWORD_FILE_ENV",
    "RUN_FILE",
    "TRAINING_UI_QUERY",
    "MlflowRun",
    "StoreMissing",
    "absolute_uri",
    "metric_name",
    "open_run",
    "password_from_file",
    "read_password",
    "read_run_file",
    "relocated_store",
    "results_store",
    "run_name",
    "start_run",
    "system_metrics",
    "tracking_client",
    "ui_path",
]

RUN_KEYS = ("tracking_uri", "run_id")


class StoreMissing(TrackingError):
    """An mlflow_run.json whose store was not copied with it (a run folder copied alone)."""


#: The columns of MLflow's SQL store that hold artifact locations: absolute file URIs below a sqlite store's folder
#: (:func:`_experiment_id`), rewritten when the store is copied (:func:`relocated_store`).
ARTIFACT_COLUMNS = (
    ("experiments", "artifact_location"),
    ("runs", "artifact_uri"),
    ("logged_models", "artifact_location"),
)

#: The experiment tag that MLflow 3's UI reads as the experiment's kind; ``custom_model_development`` is its
#: "Machine learning" kind, whose experiment page opens on the runs table. MLflow 3.17's UI build, though, turns on
#: its GenAI / Model training switch, which then decides the kind in place of the tag (default GenAI: the overview,
#: "Traces 0"), so links also carry :data:`TRAINING_UI_QUERY` (:func:`ui_path`).
EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")

#: The URL query that opens MLflow 3.17's UI in its "Model training" mode (its default is GenAI, whatever the
#: experiment's kind tag says): the experiment page then lands on the runs table.
TRAINING_UI_QUERY = "workflowType=machine_learning"


def ui_path(experiment_id: str, page: str = "runs", query: str = "") -> str:
    """The MLflow UI's in-app link (``#/experiments/<id>/<page>?...``) to a page of an experiment, in training
    mode; relative, so it works on whichever address the server is reached at."""
    suffix = f"/{page}" if page else ""
    return f"#/experiments/{experiment_id}{suffix}?{'&'.join(filter(None, [query, TRAINING_UI_QUERY]))}"


def metric_name(name: str) -> str:
    """A valid MLflow metric or param name for ``name`` ('@' -> '_at_', other invalid characters -> '_')."""
    return re.sub(r"[^A-Za-z0-9_\-.:/ ]", "_", name.replace("@", "_at_"))


def run_name(size: str, rlvr: str, method: str, seed: int) -> str:
    """The run name, built from the same fields as the run's folder (results/train/<size>/<rlvr>/<method>/seed<k>)."""
    return f"{size}-{rlvr}-{method}-seed{seed}"


def resolve_uri(uri: str) -> str:
    """``env:NAME`` -> the environment variable's value; a URI with credentials in it is refused."""
    from urllib.parse import urlsplit

    if uri.startswith("env:"):
        name = uri[len("env:") :]
        value = os.environ.get(name, "")
        if not value:
            raise TrackingError(
                f"tracking.mlflow_uri: {uri}: the environment variable {name} is not set (start the "
                "tracking server and export its URL, docs/cluster.md)"
            )
        uri = value
    if "@" in urlsplit(uri).netloc and not uri.startswith(("sqlite:", "file:")):
        raise TrackingError(
            "tracking.mlflow_uri: credentials in the URI would be written into every run folder; "
            "set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD instead"
        )
    password_from_file()
    return uri


@contextlib.contextmanager
def system_metrics(run: MlflowRun | None, settings: Mapping):
    """MLflow's system metrics monitor logging into ``run`` while the block runs (``tracking.system_metrics``):
    system/... metrics, one step per sample, continuing after the run's last system step on a resume. Nothing
    without a run (not the main process) or when switched off."""
    if run is None or not settings["enabled"]:
        yield None
        return
    from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

    monitor = SystemMetricsMonitor(
        run.run_id, sampling_interval=settings["interval_s"], resume_logging=True, tracking_uri=run.tracking_uri
    )
    monitor.start()
    try:
        yield monitor
    finally:
        monitor.finish()


#: The clients' password file (mode 0600), read by each job itself instead of a password in its environment.
PASSWORD_FILE_ENV = "HARA_TRACKING_PASSWORD_FILE"


def read_password(path: Path, what: str = "--password-file") -> str:
    """The password in ``path``; a missing, empty or group/world-readable file is an error naming it (and ``what``
    gave it)."""
    from hara.errors import UserError

    if not path.is_file():
        raise UserError(f"{what}: {path} does not exist (write the password into it, then chmod 600)")
    if stat.S_IMODE(path.stat().st_mode) & 0o077:
        raise UserError(f"{what}: {path} is readable by others (chmod 600 {path})")
    password = path.read_text(encoding="utf-8").strip()
    if len(password) < 12:
        raise UserError(f"{what}: {path}: the password must have at least 12 characters")
    return password


def password_from_file() -> None:
    """The password of ``HARA_TRACKING_PASSWORD_FILE`` (mode 0600) into this process's MLFLOW_TRACKING_PASSWORD,
    unless that is set: a job reads it itself, so the password is not in the environment Slurm exports and stores."""
    path = os.environ.get(PASSWORD_FILE_ENV)
    if path and not os.environ.get("MLFLOW_TRACKING_PASSWORD"):
        os.environ["MLFLOW_TRACKING_PASSWORD"] = read_password(Path(path), PASSWORD_FILE_ENV)


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI (None for any other store)."""
    return Path(uri[len("sqlite:///") :]) if uri.startswith("sqlite:///") else None


def absolute_uri(uri: str) -> str:
    """``sqlite:///relative.db`` made absolute (relative to the cwd now), so that a later stage started from another
    folder finds the same database; ``env:NAME`` resolved (:func:`resolve_uri`); other URIs are returned unchanged."""
    uri = resolve_uri(uri)
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return "sqlite:///" + str(sqlite_path(uri).resolve())
    return uri


def _ensure_sqlite_folder(uri: str) -> None:
    """sqlite:///relative/path.db needs its folder to exist before MLflow opens it."""
    if database := sqlite_path(uri):
        database.parent.mkdir(parents=True, exist_ok=True)


@contextlib.contextmanager
def _store_lock(database: Path):
    """The exclusive file lock ``<db>.lock`` beside a sqlite store, held while the block creates, migrates or
    relocates it."""
    import fcntl

    with open(database.with_name(database.name + ".lock"), "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
        except OSError as error:  # ENOSYS / ENOLCK / EOPNOTSUPP: Lustre without flock, some NFS mounts
            raise TrackingError(
                f"tracking.mlflow_uri: cannot lock {lock.name} ({error.strerror}): this file system "
                "has no file locks, and sqlite is unsafe on it; use an MLflow server or a database "
                "URL (docs/cluster.md)"
            ) from None
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _migrate_sqlite_store_once(uri: str) -> None:
    """Create and migrate a sqlite store under its lock (:func:`_store_lock`).

    MLflow creates and migrates a new sqlite store on first use; two processes doing that at the same moment fail
    with "table _alembic_tmp_experiments already exists". The lock makes the first opener migrate while the others
    wait; afterwards it costs one uncontended lock and one query.
    """
    from mlflow.tracking import MlflowClient

    with _store_lock(sqlite_path(uri)):
        MlflowClient(tracking_uri=uri).search_experiments(max_results=1)


def relocated_store(recorded: str, database: Path) -> str:
    """The URI of the sqlite store ``database``, which may be a copy (or a move) of the store ``recorded`` names.

    A copy keeps the source's artifact locations (absolute file URIs below the source's folder): logging artifacts
    or models into it would write into the source folder. They are rewritten, under the store's lock, to the same
    places below the copy's folder; once done, nothing matches any more. The source is never opened.
    """
    import sqlite3

    source, database = sqlite_path(recorded).resolve(), database.resolve()
    if source == database:
        return recorded
    if not database.is_file():  # no copy of the store: a new one is made there
        return "sqlite:///" + str(database)
    old, new = source.parent.as_uri() + "/", database.parent.as_uri() + "/"
    with _store_lock(database), contextlib.closing(sqlite3.connect(database)) as store, store:
        for table, column in ARTIFACT_COLUMNS:
            store.execute(
                f"UPDATE {table} SET {column} = ? || substr({column}, ?) WHERE substr({column}, 1, ?) = ?",
                (new, len(old) + 1, len(old), old),
            )
    return "sqlite:///" + str(database)


def results_store(config: Mapping, results: str | Path) -> str:
    """The tracking URI for the results folder ``results``: the config's, except that a sqlite store inside the
    config's ``results_dir`` is the same file inside ``results`` (:func:`relocated_store`), so that `hara report
    --results <a copy>` logs into the copy's store."""
    uri, own = absolute_uri(config["tracking"]["mlflow_uri"]), Path(config["results_dir"]).resolve()
    database = sqlite_path(uri)
    if database is None or not database.resolve().is_relative_to(own):
        return uri
    return relocated_store(uri, Path(results) / database.resolve().relative_to(own))


def read_run_file(path: Path) -> dict:
    """The run reference of an ``mlflow_run.json``, its store found from the folder the file is in now: its
    ``store`` (relative to that folder) when it has one, relocated (:func:`relocated_store`), else the recorded
    ``tracking_uri`` (a server, a database URL, or a file written before ``store`` existed). A file without
    tracking_uri / run_id, or whose store is gone, is an error naming it."""
    run = read_json(path)
    missing = [key for key in RUN_KEYS if not (isinstance(run, dict) and run.get(key))]
    if missing:
        raise DataError(f"{path}: missing {', '.join(missing)}")
    if run.get("store"):
        database = (Path(path).parent / run["store"]).resolve()
        if not database.is_file():
            raise StoreMissing(f"{path}: its MLflow store {database} is missing (copy it with the results folder)")
        run["tracking_uri"] = relocated_store(run["tracking_uri"], database)
    return run


#: MLflow's HTTP client retries a refused request 7 times with exponential back-off (minutes); a training step
#: should not wait that long on a metric batch it can keep and send later. The user's own settings win.
HTTP_RETRY_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1"}


def tracking_client(uri: str):
    """The MlflowClient every part of hara logs through: HTTP retries bounded (HTTP_RETRY_DEFAULTS), an sqlite
    store's folder created and its schema migrated once."""
    from mlflow.tracking import MlflowClient

    if uri.startswith(("http://", "https://")):
        for key, value in HTTP_RETRY_DEFAULTS.items():
            os.environ.setdefault(key, value)
        password_from_file()  # every client, also one reopened from mlflow_run.json (a resumed or evaluate job)
    _ensure_sqlite_folder(uri)
    if sqlite_path(uri):
        _migrate_sqlite_store_once(uri)
    return MlflowClient(tracking_uri=uri)


@dataclass
class MlflowRun:
    """A handle on one MLflow run: log metrics per step, params, tags, and close it."""

    tracking_uri: str
    run_id: str
    experiment_id: str

    def __post_init__(self) -> None:
        self.client = tracking_client(self.tracking_uri)
        self.pending: list[list] = []  # metric batches not yet accepted by the store, oldest first

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """Log finite numeric metrics at ``step`` in one batch (non-finite values are skipped, not sent). A batch the
        store does not take now (server down) is kept and sent before the next one: training never waits on it."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [
            Metric(metric_name(k), float(v), now, step)
            for k, v in metrics.items()
            if isinstance(v, (int, float)) and math.isfinite(float(v))
        ]
        if batch:
            self.pending.append(batch)
        self._send_pending()

    def _send_pending(self) -> bool:
        """Send the kept batches in order; True when none is left. A failure leaves the rest for later."""
        while self.pending:
            try:
                self.client.log_batch(self.run_id, metrics=self.pending[0])
            except Exception as error:  # noqa: BLE001 - MLflow raises MlflowException or requests' errors
                print(
                    f"warning: MLflow store unreachable, {len(self.pending)} metric batch(es) kept for later "
                    f"({type(error).__name__})",
                    file=sys.stderr,
                )
                return False
            self.pending.pop(0)
        return True

    def flush(self, seconds: float | None = None, interval: float = 5.0) -> bool:
        """Keep sending the kept batches for up to ``seconds`` (HARA_MLFLOW_FLUSH_SECONDS, default 600)."""
        seconds = float(os.environ.get("HARA_MLFLOW_FLUSH_SECONDS", "600")) if seconds is None else seconds
        deadline = time.monotonic() + seconds
        while not self._send_pending():
            if time.monotonic() >= deadline:
                print(
                    f"warning: {sum(map(len, self.pending))} metric values never reached MLflow; they are in "
                    f"{METRICS_FILE}",
                    file=sys.stderr,
                )
                return False
            time.sleep(interval)
        return True

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Log params once (a param already logged with the same value is skipped; MLflow forbids changing one)."""
        from mlflow.entities import Param

        logged = self.client.get_run(self.run_id).data.params
        new = [Param(metric_name(k), str(v)[:6000]) for k, v in params.items() if metric_name(k) not in logged]
        if new:
            self.client.log_batch(self.run_id, params=new)

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        for key, value in tags.items():
            self.client.set_tag(self.run_id, metric_name(key), str(value))

    def finish(self, status: str = "FINISHED") -> None:
        """Send what is still kept (waiting for a server that is away), then close the run."""
        if self.flush():
            self.client.set_terminated(self.run_id, status=status)

    def save(self, out_dir: str | Path) -> Path:
        """Write ``mlflow_run.json`` into ``out_dir``; with ``store`` when the sqlite store is in a folder above it."""
        path = Path(out_dir) / RUN_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        run = {"tracking_uri": self.tracking_uri, "run_id": self.run_id, "experiment_id": self.experiment_id}
        database, folder = sqlite_path(self.tracking_uri), path.parent.resolve()
        if database and folder.is_relative_to(database.resolve().parent):
            run["store"] = os.path.relpath(database.resolve(), folder)
        path.write_text(json.dumps(run, indent=2) + "\n", encoding="utf-8")
        return path


def open_run(out_dir: str | Path) -> MlflowRun | None:
    """The run recorded in ``out_dir/mlflow_run.json`` (None if there is none), marked RUNNING again."""
    path = Path(out_dir) / RUN_FILE
    if not path.is_file():
        return None
    info = read_run_file(path)
    run = MlflowRun(info["tracking_uri"], info["run_id"], info["experiment_id"])
    run.client.update_run(run.run_id, status="RUNNING")
    return run


def _experiment_id(client: Any, name: str, uri: str) -> str:
    """Id of experiment ``name``, created with its artifacts next to a sqlite database (not in the cwd) and marked
    as model training (:data:`EXPERIMENT_KIND`; an experiment made before that was marked gets the tag now)."""
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        if EXPERIMENT_KIND[0] not in experiment.tags:  # the user's own choice of kind is left alone
            client.set_experiment_tag(experiment.experiment_id, *EXPERIMENT_KIND)
        return experiment.experiment_id
    location = None
    if database := sqlite_path(uri):
        location = (database.resolve().parent / "mlartifacts" / name).as_uri()
    from mlflow.exceptions import MlflowException

    try:
        return client.create_experiment(name, artifact_location=location, tags=dict([EXPERIMENT_KIND]))
    except MlflowException as error:  # another job created it between our lookup and our create
        if error.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
        return client.get_experiment_by_name(name).experiment_id


@contextlib.contextmanager
def _credentials_explained(uri: str):
    """A server that refuses the request for its credentials (401 / 403) is one line saying where they come from."""
    from mlflow.exceptions import MlflowException

    try:
        yield
    except MlflowException as error:
        if "401" not in str(error) and "403" not in str(error):
            raise
        raise TrackingError(
            f"tracking.mlflow_uri: {uri} refused the request ({' '.join(str(error).split())[:120]}); "
            "set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD"
        ) from None


def start_run(
    tracking_uri: str,
    experiment: str,
    name: str,
    out_dir: str | Path,
    tags: Mapping[str, Any],
    params: Mapping[str, Any],
) -> tuple[MlflowRun, bool]:
    """Reopen the run recorded in ``out_dir`` or create a new one; returns (run, resumed).

    The run id is written to ``out_dir/mlflow_run.json`` before anything else is logged, so a crash at any later
    point resumes into the same run.
    """
    try:
        existing = open_run(out_dir)
    except StoreMissing as missing:  # a run folder copied without its store: never write into the one it names
        print(f"warning: {missing}; the run goes on as a new MLflow run in {tracking_uri}", file=sys.stderr)
        existing = None
    if existing is not None:
        return existing, True
    tracking_uri = absolute_uri(tracking_uri)
    client = tracking_client(tracking_uri)
    with _credentials_explained(tracking_uri):
        experiment_id = _experiment_id(client, experiment, tracking_uri)
    created = client.create_run(experiment_id, run_name=name, tags={metric_name(k): str(v) for k, v in tags.items()})
    run = MlflowRun(tracking_uri, created.info.run_id, experiment_id)
    run.save(out_dir)
    run.log_params(params)
    return run, False
