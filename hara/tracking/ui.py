"""`hara ui`: the MLflow UI on the config's tracking store, opened where a user wants to land: the runs table in
the saved view of the scores (VIEW_PER_RUN: average pass@1, the difference from none with its
interval, the verdict after correction and the minimum detectable effect), in MLflow 3.17's "Model training" mode.

A user who runs ``mlflow ui`` and clicks the experiment lands on MLflow 3.17's GenAI overview ("Traces 0"): its
GenAI / Model training switch defaults to GenAI whatever the experiment's kind tag says, and only links that carry
``workflowType=machine_learning`` open the runs table (hara.tracking.ui_path). This command prints such a link, then
serves the store (a local database) or, for a tracking server, only prints the link on that server.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

from hara.errors import UserError

__all__ = ["VIEW_BY_METHOD", "VIEW_PER_RUN", "runs_table_link", "serve_ui", "ui_command"]

#: The saved views of the scores that the report writes into each experiment (hara.report.mlflow_runs) and the UI
#: opens on: (key in the URL and the tag, name in the Views menu).
VIEW_PER_RUN = ("hara-scores", "HarA: scores per run")
VIEW_BY_METHOD = ("hara-scores-by-method", "HarA: scores by method")


def runs_table_link(base_url: str, experiment_id: str) -> str:
    """The absolute link to an experiment's runs table in the scores' saved view, in training mode."""
    from hara.tracking import ui_path

    return f"{base_url.rstrip('/')}/{ui_path(experiment_id, 'runs', f'viewStateShareKey={VIEW_PER_RUN[0]}')}"


def _experiment_id(uri: str, name: str) -> str:
    """The id of the config's experiment (named after config ``name``) in the store; one line naming the fix."""
    from hara.tracking import tracking_client

    if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///") :]).is_file():
        raise UserError(f"tracking.mlflow_uri: {uri}: no such database; run the workflow first (make reproduce)")
    experiment = tracking_client(uri).get_experiment_by_name(name)
    if experiment is None:
        raise UserError(
            f"tracking.mlflow_uri: {uri} holds no experiment named {name!r} (config name); run the "
            "workflow first, or pass the config it ran with"
        )
    return experiment.experiment_id


def ui_command(uri: str, host: str, port: int) -> list[str]:
    """``mlflow server`` on the store, one worker, listening on ``host``:``port``."""
    return ["mlflow", "server", "--backend-store-uri", uri, "--host", host, "--port", str(port), "--workers", "1"]


def serve_ui(config: Mapping, host: str, port: int, serve: bool = True) -> int:
    """Print the runs-table link of the config's experiment; serve a local store unless ``serve`` is False (returns
    only then, or when the store is a tracking server, or if the exec fails)."""
    from hara.tracking import absolute_uri

    uri = absolute_uri(config["tracking"]["mlflow_uri"])
    remote = uri.startswith(("http://", "https://"))
    base = uri if remote else f"http://{host}:{port}"
    print(
        f"Runs of {config['name']} (scores, differences from none, verdicts and MDEs): "
        f"{runs_table_link(base, _experiment_id(uri, config['name']))}",
        flush=True,
    )
    if remote or not serve:
        return 0
    env = {
        **os.environ,
        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": os.environ.get("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false"),
    }
    executable = shutil.which("mlflow", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if executable is None:
        raise UserError("the mlflow command is not installed in this environment (make setup)")
    os.execve(executable, ui_command(uri, host, port), env)
    return 1
