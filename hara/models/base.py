"""The base-model stage: config -> a saved "Base" model of one size, with its accuracy measured.

Tiny family: build + SFT warm-up (hara.models.warmup). Hub family: the released Base model, read from a local snapshot
that the workflow's download rule wrote (never downloaded here). Either way the output folder loads with
``from_pretrained`` and holds resolved_config.yaml and run_info.json.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path

from hara.errors import ConfigError
from hara.layout import ACCURACY_FILE
from hara.runinfo import write_run_info

WARMUP_KEYS = (
    "steps",
    "batch_size",
    "lr",
    "warmup_steps",
    "min_lr_ratio",
    "weight_decay",
    "max_length",
    "direct_fraction",
    "threads",
)
#: The files `from_pretrained` reads (config, safetensors weights, tokenizer), not the duplicate PyTorch .bin weights
#: some hub repositories also hold.
SNAPSHOT_FILES = ["*.json", "*.safetensors", "*.txt", "*.model", "*.tiktoken"]


def valid_model_sizes(config: Mapping) -> list[str]:
    """Size names of the config's model family (the tiny registry, or the keys of models.hub_ids)."""
    if config["models"]["family"] == "tiny":
        from hara.models.tiny import TINY_SIZES  # torch and transformers: only for the tiny family

        return list(TINY_SIZES)
    return list(config["models"]["hub_ids"])


def download_snapshot(hub_id: str, out_dir: str | Path, **hub_options) -> Path:
    """Fetch the snapshot of ``hub_id`` through the Hugging Face cache (HF_HOME; offline, an earlier download found
    there) and copy its files, not the cache's links, to ``out_dir``, renamed into place only when complete (the
    workflow's download_model rule). ``hub_options``: more ``snapshot_download`` arguments (cache_dir, ...)."""
    from huggingface_hub import snapshot_download

    snapshot = snapshot_download(repo_id=hub_id, allow_patterns=SNAPSHOT_FILES, **hub_options)
    partial = Path(f"{out_dir}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(snapshot, partial, symlinks=False)
    partial.rename(out_dir)
    return Path(snapshot)


def config_datasets(config: Mapping, data_dir: str | Path | None) -> dict[str, list[dict]]:
    """The train set and benchmarks of a config: read from a `hara data` folder, or built in memory."""
    from hara.data.pipeline import build_config_datasets, read_config_datasets

    return read_config_datasets(config, data_dir) if data_dir else build_config_datasets(config)


def warm_up_tiny(config: Mapping, size: str, out: Path, data_dir: str | Path | None) -> dict:
    """Build and fine-tune a tiny model; returns warmup.json's content."""
    from hara.models.warmup import warmup_base_model

    train = config_datasets(config, data_dir)["train"]
    return warmup_base_model(size, train, out, **warmup_arguments(config))


def warmup_arguments(config: Mapping) -> dict:
    """The keyword arguments of ``warmup_base_model`` that a config sets (its warm-up recipe, seed, tokenizer and
    prompt template)."""
    return dict(
        {key: config["warmup"][key] for key in WARMUP_KEYS},
        seed=config["seed"],
        tokenizer_name=config["models"]["tokenizer"],
        prompt_template=config["prompt"]["template"],
    )


def copy_hub_snapshot(config: Mapping, size: str, out: Path, data_dir: str | Path | None) -> dict:
    """Copy the local snapshot of a hub Base model into the stage's output folder."""
    snapshot = Path(config["models"]["local_dir"]) / size
    if not (snapshot / "config.json").is_file():
        raise FileNotFoundError(
            f"models.local_dir: no snapshot of {config['models']['hub_ids'][size]} at {snapshot} "
            "(the workflow's download rule writes it on a machine with hub access)"
        )
    shutil.copytree(snapshot, out, dirs_exist_ok=True)
    return {"size": size, "hub_id": config["models"]["hub_ids"][size], "snapshot": str(snapshot)}


def check_size(config: Mapping, size: str) -> None:
    """An unknown --size is a user error that lists the valid names."""
    valid = valid_model_sizes(config)
    if size not in valid:
        raise ConfigError(f"--size: unknown {config['models']['family']} size {size!r} (valid: {', '.join(valid)})")


BASE_MODEL_BUILDERS = {"tiny": warm_up_tiny, "hub": copy_hub_snapshot}


def accuracy_report(config: Mapping, model_dir: str | Path, data_dir: str | Path | None = None) -> dict:
    """Greedy and sampled accuracy of a saved model on the config's benchmarks."""
    from hara.data.format import prompt_format
    from hara.models.generate import measure_accuracy

    datasets = config_datasets(config, data_dir)
    benchmarks = {name: datasets[name] for name in config["data"]["benchmarks"]}
    evaluation = config["evaluation"]
    common = dict(
        max_new_tokens=evaluation["max_new_tokens"],
        seed=config["seed"],
        threads=config["threads"],
        limit=evaluation["limit"] or None,
        prompt=prompt_format(config),
    )
    greedy = measure_accuracy(model_dir, benchmarks, greedy=True, **common)
    sampled = measure_accuracy(
        model_dir, benchmarks, greedy=False, temperature=evaluation["temperature"], top_p=evaluation["top_p"], **common
    )
    return {"greedy": greedy, "sampled": sampled}


def format_accuracy_table(report: Mapping) -> str:
    """A plain-text table: one row per benchmark, greedy and sampled accuracy and sampled direct answers, in percent."""
    names = list(report["greedy"]["accuracy"])
    width = max(len(name) for name in [*names, "average"])
    sampled_label = f"sampled@T={report['sampled']['temperature']}"
    lines = [f"{'benchmark':<{width}}  {'greedy':>8}  {sampled_label:>16}  {'direct answers':>14}"]
    rows = [
        (
            name,
            report["greedy"]["accuracy"][name],
            report["sampled"]["accuracy"][name],
            report["sampled"]["direct"][name],
        )
        for name in names
    ]
    rows.append(
        (
            "average",
            report["greedy"]["average"],
            report["sampled"]["average"],
            sum(report["sampled"]["direct"].values()) / len(names),
        )
    )
    for name, greedy, sampled, direct in rows:
        lines.append(f"{name:<{width}}  {100 * greedy:7.1f}%  {100 * sampled:15.1f}%  {100 * direct:13.1f}%")
    return "\n".join(lines)


def make_base_model(
    config: Mapping, size: str, out_dir: str | Path, data_dir: str | Path | None = None, measure: bool = True
) -> dict:
    """Run the base-model stage for one size; writes the model, run info and (optionally) accuracy.json."""
    check_size(config, size)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_run_info(out, config, extra={"stage": "base_model", "size": size, "data_dir": str(data_dir or "")})
    summary = BASE_MODEL_BUILDERS[config["models"]["family"]](config, size, out, data_dir)
    summary = {key: value for key, value in summary.items() if key != "loss_curve"}
    if measure:
        report = accuracy_report(config, out, data_dir)
        (out / ACCURACY_FILE).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(format_accuracy_table(report))
        summary["accuracy"] = {mode: report[mode]["average"] for mode in ("greedy", "sampled")}
        summary["sampled_direct_share"] = sum(report["sampled"]["direct"].values()) / len(report["sampled"]["direct"])
    return summary
