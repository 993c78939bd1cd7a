"""The training metrics sink: TRL's per-step logs renamed into the project's namespaces (hara/metric_keys.py), one
``metrics.jsonl`` line per optimizer step and the same metrics in the MLflow run; a resumed run first drops the lines
logged after its checkpoint."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from hara.methods import methods
from hara.metric_keys import ACCURACY, CPU_S, ENTROPY, HARA_S, RESPONSE_LENGTH, REWARD, STEP_S
from hara.results.collect import read_metrics

__all__ = ["METRIC_KEYS", "MetricsCallback", "own_namespaces", "rename_metrics", "truncate_metrics"]

#: TRL's log keys -> the project's namespaced metric names; other TRL keys are kept under trl/.
METRIC_KEYS: dict[str, str] = {
    "loss": "train/loss",
    "grad_norm": "train/grad_norm",
    "learning_rate": "train/lr",
    "reward": REWARD,
    "reward_std": "train/reward_std",
    "rewards/accuracy_reward/mean": ACCURACY,
    "rewards/soft_overlong/mean": "train/overlong_penalty",
    "frac_reward_zero_std": "train/frac_reward_zero_std",
    "entropy": ENTROPY,
    "completions/mean_length": RESPONSE_LENGTH,
    "completions/clipped_ratio": "train/truncated_fraction",
    "clip_ratio/region_mean": "train/clip_fraction",
    "kl": "train/kl",
    "step_time": STEP_S,
    "hara/step_overhead_s": HARA_S,
}
_OWN_NAMESPACES = ("train/", "time/", "memory/")


def own_namespaces() -> tuple[str, ...]:
    """Metric namespaces kept as they are: the project's own and every registered method's (hara/methods.py)."""
    return (*_OWN_NAMESPACES, *sorted({spec.namespace for spec in methods().values() if spec.namespace}))


def rename_metrics(logs: Mapping[str, Any]) -> dict[str, float]:
    """TRL's per-step log dict -> namespaced numeric metrics (non-numeric entries dropped)."""
    out, own = {}, own_namespaces()
    for key, value in logs.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            name = METRIC_KEYS.get(key, key if key.startswith(own) else f"trl/{key}")
            out[name] = float(value)
    return out


class MetricsCallback(TrainerCallback):
    """Every optimizer step's metrics -> one metrics.jsonl line and the MLflow run (main process only).

    Adds ``time/cpu_s``: the process's CPU time (all its threads) since the previous step's line. Unlike the wall
    time it does not grow when other jobs share the cores, so costs of runs made side by side stay comparable
    (hara.report.repro's overhead check reads it)."""

    def __init__(self, path: Path, run: Any | None) -> None:
        self.path, self.run, self.cpu_mark = path, run, time.process_time()

    def on_train_begin(self, args, state, control, **kwargs):
        self.cpu_mark = time.process_time()

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs or "loss" not in logs:
            return  # the end-of-training summary has no per-step loss
        now, metrics = time.process_time(), rename_metrics(logs)
        metrics[CPU_S], self.cpu_mark = now - self.cpu_mark, now
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"step": state.global_step, **metrics}, sort_keys=True) + "\n")
        if self.run is not None:
            self.run.log_metrics(metrics, step=state.global_step)


def truncate_metrics(path: Path, last_step: int) -> None:
    """Keep only metrics.jsonl lines of steps <= ``last_step`` (lines logged after the resumed checkpoint). A job
    killed while it appended leaves a cut last line (every line ends with a newline): that step is trained again."""
    if not path.is_file():
        return
    text = path.read_text(encoding="utf-8")
    path.write_text(text[: text.rfind("\n") + 1], encoding="utf-8")
    kept = [row for row in read_metrics(path) if row["step"] <= last_step]
    path.write_text("".join(json.dumps(row, sort_keys=True) + "\n" for row in kept), encoding="utf-8")
