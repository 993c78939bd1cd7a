"""The data stage: config -> the training set and benchmarks as canonical records, in memory or as local files.

Sources are a registry (``DATA_SOURCES``): ``synthetic`` (seeded generator, offline), ``champ`` (real competition
problems shipped on PyPI as the training set, evaluated on the embedded mini benchmarks) and ``hub`` (the paper's
datasets, read from folders that `hara fetch-data` wrote; a hub dataset ``owner/name`` lives in
``<data.local_dir>/owner/name``). Nothing here touches the network.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from pathlib import Path

from hara.data.catalog import get_benchmark, load_local_dataset
from hara.data.embedded import TRAIN, VALIDATION, build_embedded_datasets, write_datasets
from hara.data.io import DataError, read_jsonl

REQUIRED_KEYS = ("id", "problem", "answer")


def rl_prompt_levels(config: Mapping) -> list[int]:
    """The levels the RL prompts are drawn from (empty: all): ``training.prompt_selection.levels``, which only
    applies when the selection is on."""
    selection = config["training"]["prompt_selection"]
    return list(selection["levels"]) if selection["enabled"] else []


def embedded_options(config: Mapping) -> dict:
    """How a config's mini benchmarks are drawn (build_embedded_datasets' keywords): the data stage and evaluation
    without a data folder pass the same, so they score the same problems."""
    data = config["data"]
    return {
        "benchmark_size": data["benchmark_size"],
        "benchmark_sizes": data["benchmark_sizes"],
        "skills": data["skills"],
        "prompt_levels": rl_prompt_levels(config),
    }


def data_benchmarks(config: Mapping) -> list[str]:
    """The benchmarks the data stage writes: data.benchmarks, then the speed benchmark (report.speed.benchmark)
    when they do not list it. Drawn last, it leaves the final benchmarks' problems as they are; like every set it is
    kept out of the training problems."""
    listed, speed = list(config["data"]["benchmarks"]), config["report"]["speed"]["benchmark"]
    return listed + ([speed] if speed is not None and speed not in listed else [])


def synthetic_datasets(config: Mapping) -> dict[str, list[dict]]:
    """The embedded world: seeded synthetic train set and mini benchmarks, disjoint by problem text."""
    data = config["data"]
    return build_embedded_datasets(
        config["seed"], train_size=data["train_size"], benchmarks=data_benchmarks(config), **embedded_options(config)
    )


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
    data = config["data"]
    train = load_local_dataset(data["train_dataset"], hub_folder(config, data["train_dataset"]), split="train")
    datasets = {TRAIN: train[: data["train_size"]]}
    for name in data_benchmarks(config):
        datasets[name] = hub_benchmark(config, name)
    return datasets


def hub_benchmark(config: Mapping, name: str) -> list[dict]:
    """A hub benchmark from the folder `hara fetch-data` wrote, mapped from the dataset's own schema."""
    hub_id = get_benchmark(name).hub_id
    return load_local_dataset(hub_id, hub_folder(config, hub_id))


DATA_SOURCES: dict[str, Callable[[Mapping], dict[str, list[dict]]]] = {
    "synthetic": synthetic_datasets,
    "champ": champ_datasets,
    "hub": hub_datasets,
}


def build_config_datasets(config: Mapping) -> dict[str, list[dict]]:
    """``{"train": [...], <benchmark>: [...], ...}`` for the config's data source."""
    return DATA_SOURCES[config["data"]["source"]](config)


def hold_out_validation(problems: list[dict], count: int, salt: str, key: str) -> tuple[list[dict], list[dict]]:
    """(training problems, validation problems): a seeded sample of ``count`` problems (``random.Random(salt)``)
    held out of ``problems``, the rest in their order. ``key`` names the config key of ``count`` in the error."""
    if count >= len(problems):
        raise DataError(f"{key}: {count} validation problems, but the training set has only {len(problems)}")
    chosen = seeded_choice(len(problems), count, salt)
    held_out = set(chosen)
    return ([p for i, p in enumerate(problems) if i not in held_out], [problems[i] for i in chosen])


def seeded_choice(n: int, count: int, salt: str) -> list[int]:
    """``count`` of the indices 0..n-1, in the order ``random.Random(salt)`` shuffles them: the same salt, the same
    choice (validation hold-outs, the speed benchmark's sample)."""
    order = list(range(n))
    random.Random(salt).shuffle(order)
    return order[:count]


def selection_datasets(config: Mapping) -> dict[str, list[dict]]:
    """The config's datasets; with ``selection.enabled``, ``selection.validation_problems`` of the training problems
    moved to a validation split (hara.evaluation.selection), so training never sees them."""
    datasets = build_config_datasets(config)
    selection = config["selection"]
    if selection["enabled"]:
        datasets[TRAIN], datasets[VALIDATION] = hold_out_validation(
            datasets[TRAIN],
            selection["validation_problems"],
            f"selection-validation:{config['seed']}",
            "selection.validation_problems",
        )
    return datasets


def write_config_datasets(config: Mapping, out_dir: str | Path) -> dict:
    """Write the config's datasets as train.jsonl + benchmarks/<name>.jsonl (+ validation.jsonl when selection is on)
    + manifest.json; return the manifest."""
    from hara.runinfo import write_run_info

    manifest = write_datasets(selection_datasets(config), out_dir, seed=config["seed"])
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


def validation_records(data_dir: Path) -> list[dict]:
    """The validation split a data folder holds (``validation.jsonl``: written with selection on, or for a study)."""
    return read_jsonl(Path(data_dir) / f"{VALIDATION}.jsonl", required_keys=REQUIRED_KEYS)
