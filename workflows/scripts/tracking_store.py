"""Create the MLflow tracking store once, before the training jobs start.

MLflow creates and migrates a new sqlite store on first use; two training jobs doing that at the same moment fail
with "table _alembic_tmp_experiments already exists". Done once here, the jobs only ever open a migrated store.
"""

import contextlib
import json
from pathlib import Path

from hara.tracking import absolute_uri

snakemake = globals()["snakemake"]  # injected by Snakemake's script directive


def create_store(uri: str, marker: str) -> None:
    """Open (and so create and migrate) the store, then write the marker file the training jobs depend on."""
    from mlflow.tracking import MlflowClient

    uri = absolute_uri(uri)
    if uri.startswith("sqlite:///"):
        Path(uri[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
    experiments = MlflowClient(tracking_uri=uri).search_experiments(max_results=1)
    Path(marker).write_text(json.dumps({"tracking_uri": uri}, indent=2) + "\n", encoding="utf-8")
    print(f"tracking store ready: {uri} ({len(experiments)} experiment(s) listed)")


with (
    open(snakemake.log[0], "w", encoding="utf-8") as log,
    contextlib.redirect_stdout(log),
    contextlib.redirect_stderr(log),
):
    create_store(snakemake.params.uri, snakemake.output.store)
