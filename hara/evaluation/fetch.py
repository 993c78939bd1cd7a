"""`hara fetch-data`: download the paper's five benchmarks and the training set into local folders, once.

Run on a machine with hub access; training and evaluation then read the folders offline. Each dataset ``owner/name``
goes to ``<out>/owner/name/<split>.parquet`` (the layout :func:`hara.data.pipeline.hub_folder` reads), keeping the
dataset's own columns: the mapping to canonical records is :mod:`hara.data.hub`'s job, at read time. Only the split
(and, for OlympiadBench, the configuration) that the paper uses is downloaded. Parquet rather than JSON Lines:
OlympiadBench's list and image columns round-trip without conversion.

Never called by tests or the embedded default; its plan and writing are tested with the download mocked out.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from hara.data.catalog import benchmarks, hub_schemas
from hara.hashing import file_sha256

__all__ = ["FetchItem", "fetch_datasets", "fetch_plan"]


@dataclass(frozen=True)
class FetchItem:
    """One download: hub dataset, its configuration (subset) and split, and the file it is written to."""

    hub_id: str
    config: str | None
    split: str
    path: str


def fetch_plan(config: Mapping, out_dir: str | Path) -> list[FetchItem]:
    """The hub benchmarks and the config's training set (``data.train_dataset``), in that order."""
    names, schemas = [*(b.hub_id for b in benchmarks("hub").values()), config["data"]["train_dataset"]], hub_schemas()
    plan = []
    for hub_id in names:
        schema = schemas[hub_id]
        path = Path(out_dir) / hub_id / f"{schema.split}.parquet"
        plan.append(FetchItem(hub_id, schema.config, schema.split, str(path)))
    return plan


def _default_loader(hub_id: str, config: str | None, split: str):
    """``datasets.load_dataset`` of one split (imported here: only this command touches the hub)."""
    from datasets import load_dataset

    return load_dataset(hub_id, name=config, split=split)


def fetch_datasets(plan: list[FetchItem], out_dir: str | Path, loader: Callable | None = None) -> dict:
    """Download every item of ``plan`` and write it; returns the manifest, also written to
    ``<out_dir>/fetch_manifest.json`` (outside the dataset folders: hara.data.hub reads every .json inside them).

    An existing file is replaced only after the new one is complete (written to ``.tmp``, then renamed).
    """
    loader = loader or _default_loader
    manifest = {}
    for item in plan:
        dataset = loader(item.hub_id, item.config, item.split)
        path = Path(item.path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        dataset.to_parquet(str(tmp))
        tmp.replace(path)
        manifest[item.hub_id] = {**asdict(item), "rows": len(dataset), "sha256": file_sha256(path)}
    Path(out_dir, "fetch_manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest
