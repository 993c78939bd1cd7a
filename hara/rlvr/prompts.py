"""Pass-rate selection of the RL prompts: keep the training problems the base model solves sometimes, not always
and not never.

A group whose rollouts all get the same reward has zero advantage everywhere and teaches GRPO nothing (measured on
the embedded default: with unselected problems about half of the groups of a step were all-wrong or all-right).
Before the training grid, one job per size samples the base model ``samples`` times on a seeded pool of training
problems, at the training temperature and completion budget, and keeps those whose pass rate lies in
``[min_pass, max_pass]`` (offline difficulty filtering, as in several RLVR recipes; DAPO's dynamic sampling does the
same online, per step). Every training run of that size then draws its prompts from the kept problems.

Output folder: ``prompts.jsonl`` (problem, answer, pass_rate per kept problem, in pool order) and
``selection.json`` (settings, counts, pass-rate histogram of the whole pool, wall time).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Mapping
from pathlib import Path

from hara.errors import ConfigError
from hara.layout import PROMPTS_FILE, SELECTION_FILE

__all__ = ["pass_rates", "read_prompts", "select_prompts", "train_dataset"]


def pass_rates(
    model_dir: str | Path,
    records: list[dict],
    *,
    samples: int,
    temperature: float,
    top_p: float,
    max_new_tokens: int,
    seed: int,
    batch_size: int = 256,
    prompt=None,
) -> list[float]:
    """Fraction of ``samples`` sampled completions per record that the RL reward scores correct (``prompt``: the
    config's :class:`hara.data.format.PromptFormat`, as in training)."""
    from hara.boxed_answer import math_reward
    from hara.data.format import PromptFormat
    from hara.models.generate import generate_completions, load_model

    prompt = prompt or PromptFormat()
    model, tokenizer = load_model(model_dir)
    prompts = [prompt.prompt(r["problem"]) for r in records for _ in range(samples)]
    texts = generate_completions(
        model,
        tokenizer,
        prompts,
        greedy=False,
        temperature=temperature,
        top_p=top_p,
        max_new_tokens=max_new_tokens,
        seed=seed,
        batch_size=batch_size,
        stop=prompt.stop,
    )
    correct = [math_reward(text, str(records[i // samples]["answer"])) for i, text in enumerate(texts)]
    return [sum(correct[i * samples : (i + 1) * samples]) / samples for i in range(len(records))]


def of_levels(records: list[dict], levels: list[int]) -> list[dict]:
    """The records of ``levels`` (all for none); problems without a level (hub data) cannot be filtered by it."""
    if not levels:
        return records
    if any("level" not in record for record in records):
        raise ConfigError(
            "training.prompt_selection.levels: the training problems carry no level (synthetic "
            "data only); leave it empty"
        )
    kept = [record for record in records if record["level"] in levels]
    if not kept:
        raise ConfigError(f"training.prompt_selection.levels: no training problem of levels {levels}")
    return kept


def select_prompts(config: Mapping, model_dir: str | Path, train_records: list[dict], out_dir: str | Path) -> dict:
    """Measure pass rates on the pool, write the kept problems and the selection summary; return the summary."""
    from hara.data.format import prompt_format
    from hara.runinfo import set_threads

    settings, training = config["training"]["prompt_selection"], config["training"]
    if settings["min_pass"] > settings["max_pass"]:
        raise ConfigError(
            f"training.prompt_selection: min_pass {settings['min_pass']} is above max_pass {settings['max_pass']}"
        )
    set_threads(config["threads"])
    records = of_levels(train_records, settings["levels"])
    pool = random.Random(settings["seed"]).sample(records, min(settings["pool"], len(records)))
    start = time.perf_counter()
    rates = pass_rates(
        model_dir,
        pool,
        samples=settings["samples"],
        temperature=training["temperature"],
        top_p=training["top_p"],
        max_new_tokens=training["max_completion_length"],
        seed=settings["seed"],
        prompt=prompt_format(config),
    )
    kept = [
        dict(record, pass_rate=rate)
        for record, rate in zip(pool, rates)
        if settings["min_pass"] <= rate <= settings["max_pass"]
    ]
    if len(kept) < training["prompts_per_step"]:
        raise ConfigError(
            f"training.prompt_selection: only {len(kept)} of {len(pool)} problems have a pass rate in "
            f"[{settings['min_pass']}, {settings['max_pass']}], fewer than training.prompts_per_step"
        )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / PROMPTS_FILE, "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(record, sort_keys=True) + "\n" for record in kept)
    histogram = {
        f"{k}/{settings['samples']}": sum(round(r * settings["samples"]) == k for r in rates)
        for k in range(settings["samples"] + 1)
    }
    summary = {
        "model": str(model_dir),
        **settings,
        "temperature": training["temperature"],
        "max_new_tokens": training["max_completion_length"],
        "pool_size": len(pool),
        "kept": len(kept),
        "pool_mean_pass_rate": sum(rates) / len(rates),
        "kept_mean_pass_rate": sum(r["pass_rate"] for r in kept) / len(kept),
        "histogram": histogram,
        "seconds": time.perf_counter() - start,
    }
    (out / SELECTION_FILE).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return summary


def read_prompts(folder: str | Path) -> list[dict]:
    """The kept problems written by :func:`select_prompts` (file:line errors for corrupt lines)."""
    from hara.data.io import read_jsonl

    path = Path(folder) / PROMPTS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"--prompts: no {PROMPTS_FILE} in {folder} (run `hara select-prompts` first)")
    return read_jsonl(path)


def train_dataset(config: Mapping, data_dir: str | Path | None, prompts_dir: str | Path | None = None):
    """The RL prompts as a ``datasets.Dataset`` with TRL's ``prompt``, the gold ``answer``, the reference
    ``solution`` and the problem's ``source``: the problems kept by
    ``hara select-prompts`` when ``prompts_dir`` is given, else the config's whole training set."""
    from datasets import Dataset

    from hara.data.format import prompt_format
    from hara.models.base import config_datasets

    records = read_prompts(prompts_dir) if prompts_dir else config_datasets(config, data_dir)["train"]
    prompt = prompt_format(config)
    # the reference solution and the source ride along for methods that read the problem (the step oracle)
    return Dataset.from_list(
        [
            {
                "prompt": prompt.prompt(r["problem"]),
                "answer": str(r["answer"]),
                "solution": str(r.get("solution") or ""),
                "source": str(r.get("source") or ""),
            }
            for r in records
        ]
    )
