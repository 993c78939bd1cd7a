"""The data stage: config -> the training set and benchmarks as canonical records, in memory or as local files.

Sources are a registry (``DATA_SOURCES``): ``synthetic`` (seeded generator, offline), ``champ`` (real competition
problems shipped on PyPI as the training set, evaluated on the embedded mini benchmarks) and ``hub`` (the paper's
datasets, read from folders that `hara fetch-data` wrote; a hub dataset ``owner/name`` lives in
``<data.local_dir>/owner/name``). Nothing here touches the network.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Callable, Mapping

from hara.data.catalog import HUB_BENCHMARKS
from hara.data.embedded import TRAIN, build_embedded_datasets, write_datasets
from hara.data.io import DataError, read_jsonl

REQUIRED_KEYS = ("id", "problem", "answer")


def synthetic_datasets(config: Mapping) -> dict[str, list[dict]]:
    """The embedded world: seeded synthetic train set and mini benchmarks, disjoint by problem text."""
    data = config["data"]
    return build_embedded_datasets(config["seed"], train_size=data["train_size"],
                                   benchmark_size=data["benchmark_size"], benchmarks=data["benchmarks"],
                                   skills=data["skills"])


def champ_datasets(config: Mapping) -> dict[str, list[dict]]:
    """CHAMP's real problems as the training set (seeded subsample), the embedded mini benchmarks for evaluation."""
    from hara.data.champ import load_champ

    train = load_champ()
    random.Random(f"champ:{config['seed']}").shuffle(train)
    benchmarks = synthetic_datasets(config)
    benchmarks.pop(TRAIN)
    return {TRAIN: train[: config["data"]["train_size"]], **benchmarks}


def hub_folder(config: Mapping, hub_id: str) -> Path:
    """Where `hara fetch-data` keeps one hub dataset."""
    return Path(config["data"]["local_dir"]) / hub_id


def hub_datasets(config: Mapping) -> dict[str, list[dict]]:
    """The paper's datasets from local folders, mapped from each dataset's own schema to canonical records."""
    from hara.data.hub import load_local_dataset

    data = config["data"]
    train = load_local_dataset(data["train_dataset"], hub_folder(config, data["train_dataset"]), split="train")
    datasets = {TRAIN: train[: data["train_size"]]}
    for name in data["benchmarks"]:
        datasets[name] = load_local_dataset(HUB_BENCHMARKS[name], hub_folder(config, HUB_BENCHMARKS[name]))
    return datasets


DATA_SOURCES: dict[str, Callable[[Mapping], dict[str, list[dict]]]] = {
    "synthetic": synthetic_datasets,
    "champ": champ_datasets,
    "hub": hub_datasets,
}


def build_config_datasets(config: Mapping) -> dict[str, list[dict]]:
    """``{"train": [...], <benchmark>: [...], ...}`` for the config's data source."""
    return DATA_SOURCES[config["data"]["source"]](config)


def write_config_datasets(config: Mapping, out_dir: str | Path) -> dict:
    """Write the config's datasets as train.jsonl + benchmarks/<name>.jsonl + manifest.json; return the manifest."""
    from hara.runinfo import write_run_info

    manifest = write_datasets(build_config_datasets(config), out_dir, seed=config["seed"])
    write_run_info(out_dir, config, extra={"stage": "data"})
    return manifest


def read_config_datasets(config: Mapping, data_dir: str | Path) -> dict[str, list[dict]]:
    """Read a folder written by :func:`write_config_datasets` (corrupt lines raise DataError with file:line)."""
    data_dir = Path(data_dir)
    paths = {TRAIN: data_dir / f"{TRAIN}.jsonl"}
    paths.update({name: data_dir / "benchmarks" / f"{name}.jsonl" for name in config["data"]["benchmarks"]})
    missing = [str(path) for path in paths.values() if not path.is_file()]
    if missing:
        raise DataError(f"{missing[0]}: missing (run `hara data` with the same config into {data_dir})")
    return {name: read_jsonl(path, required_keys=REQUIRED_KEYS) for name, path in paths.items()}
