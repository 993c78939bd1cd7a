"""One trial: train with the trial's config, measure the objective at each report step, report it to the pruner.

The objective is never measured on a test benchmark. :func:`write_validation_split` holds a seeded sample of the
training set out as ``validation.jsonl`` and writes the rest as the trials' training set (a `hara data` folder), so
the RL prompts and the validation problems are disjoint. When the config selects its RL prompts
(``training.prompt_selection``, on in the embedded default), :func:`write_trial_prompts` selects them once per study
from that split with the study's base model, so trials train on the same kind of prompts as the grid.
``validation/pass@1`` is scored by the evaluation stage's own lighteval task and pass@1 metric (avg@evaluation.n) on
that split.

The trial trains in-process with the training stage's own trainer (``hara.rlvr.session.build_trainer``, its
``MetricsCallback`` logging every step into the trial's MLflow run). :class:`PruningCallback` measures the metric
at each report step, reports it (``trial.report``) and, when the pruner says so, stops training there. A trial is
never resumed (a killed trial is failed and a new one runs), so it keeps no checkpoints unless the study asks.

A trial of several seeds (its ``seeds`` attribute: the study's ``repeats``, or a re-evaluation's fresh seeds) trains
them one after the other, each in ``seed<s>/`` of the trial folder; its objective is their mean, stored with the
per-seed values, their standard error and, for validation/pass@1, every problem's outcome per seed (what pairs the
trials of a sensitivity study and what the Wilcoxon pruner tests). Such a trial is pruned between its seeds, on
paired instances: seed k's problem i is instance ``k * P + i``, the same for every trial of the study.
"""

from __future__ import annotations

import math
import shutil
import statistics
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from transformers import TrainerCallback

from hara.data.embedded import VALIDATION
from hara.data.pipeline import validation_records
from hara.layout import FINAL_DIR, MANIFEST_FILE, METRICS_FILE, SELECTION_FILE
from hara.metric_keys import REWARD
from hara.results.collect import read_metrics

__all__ = ["METRICS", "VALIDATION", "Measurement", "run_trial", "write_trial_prompts", "write_validation_split"]

PROMPTS = "prompts"


@contextmanager
def written_aside(out_dir: Path) -> Iterator[Path]:
    """A scratch folder beside ``out_dir``, renamed to it once filled, so a reader never sees half of it."""
    partial = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-", dir=out_dir.parent))
    yield partial
    partial.rename(out_dir)


def write_validation_split(config: Mapping, held_out: int, seed: int, out_dir: Path) -> Path:
    """Write the trials' data folder once: train.jsonl without the held-out problems, the config's benchmarks (the
    training stage expects them) and validation.jsonl. Written aside and renamed, so a reader never sees half."""
    from hara.data.embedded import TRAIN, write_datasets
    from hara.data.pipeline import build_config_datasets, hold_out_validation

    if (out_dir / MANIFEST_FILE).is_file():
        return out_dir
    datasets = build_config_datasets(config)
    datasets[TRAIN], datasets[VALIDATION] = hold_out_validation(
        datasets[TRAIN], held_out, f"sweep-validation:{seed}", "validation.size"
    )
    with written_aside(out_dir) as partial:
        write_datasets(datasets, partial, seed=config["seed"])
    return out_dir


def write_trial_prompts(config: Mapping, base_model: Path, data_dir: Path, out_dir: Path) -> Path | None:
    """The study's RL prompts: ``hara select-prompts`` on the split's training problems (never the validation ones),
    written once, aside and renamed like the split; None when the config trains on every problem. Selected with the
    study's base config (a swept training.temperature does not reselect), so every trial sees the same prompts."""
    from hara.models.base import config_datasets
    from hara.rlvr.prompts import select_prompts

    if not config["training"]["prompt_selection"]["enabled"]:
        return None
    if not (out_dir / SELECTION_FILE).is_file():
        with written_aside(out_dir) as partial:
            select_prompts(config, base_model, config_datasets(config, data_dir)["train"], partial)
    return out_dir


@dataclass(frozen=True)
class Measurement:
    """An objective's value and, when it has them, the per-problem outcomes it is the mean of (problem id -> value)."""

    value: float
    problems: dict[str, float] | None = None


def validation_pass_at_1(config: Mapping, run_dir: Path, data_dir: Path) -> Measurement:
    """pass@1 (avg@n, the evaluation stage's lighteval task and metric) of ``run_dir/final`` on the validation split."""
    from hara.data.format import prompt_format
    from hara.evaluation.models import (
        CheckpointModel,
        checkpoint_fingerprint,
        evaluation_backend,
        load_engine,
        make_model_config,
    )
    from hara.evaluation.runner import evaluate_benchmark
    from hara.evaluation.settings import benchmark_settings
    from hara.evaluation.tasks import build_task

    checkpoint = run_dir / FINAL_DIR
    settings = benchmark_settings(config, VALIDATION)  # the evaluation defaults (no per-benchmark override)
    backend = evaluation_backend(config)
    model_config = make_model_config(
        checkpoint,
        settings,
        backend,
        run_dir / "lighteval_cache",
        batch_size=config["evaluation"]["batch_size"],
        threads=config["threads"],
        fingerprint=checkpoint_fingerprint(checkpoint),
        vllm=config["evaluation"]["vllm"],
    )
    task = build_task(VALIDATION, validation_records(data_dir), settings, prompt_format(config))
    engine = load_engine(model_config)
    try:
        with tempfile.TemporaryDirectory(prefix="hara-sweep-eval-") as work_dir:
            model = CheckpointModel(model_config, engine)
            result = evaluate_benchmark(task, model, settings, work_dir)
            return Measurement(
                result["score"], {str(row["id"]): float(row[result["metric"]]) for row in result["predictions"]}
            )
    finally:
        engine.close()


def train_reward(config: Mapping, run_dir: Path, data_dir: Path) -> Measurement:
    """Mean train/reward over the steps trained so far (metrics.jsonl of the run)."""
    lines = read_metrics(run_dir / METRICS_FILE)
    rewards = [line[REWARD] for line in lines if REWARD in line and line["step"] <= config["training"]["steps"]]
    if not rewards:
        raise ValueError(f"{run_dir / METRICS_FILE}: no train/reward logged")
    return Measurement(sum(rewards) / len(rewards))


#: objective.metric -> fn(trial config at the step, run folder, data folder) -> its measurement
METRICS: dict[str, Callable[[Mapping, Path, Path], Measurement]] = {
    "validation/pass@1": validation_pass_at_1,
    REWARD: train_reward,
}
#: metrics that read the policy from ``<run folder>/final`` (saved at each report step only for these)
NEEDS_MODEL = {"validation/pass@1"}


class PruningCallback(TrainerCallback):
    """At each report step: save the policy to ``final/`` (if the metric reads it), measure the metric, report it;
    stop training when the pruner says so."""

    def __init__(
        self,
        trial,
        config: Mapping,
        metric: str,
        steps: list[int],
        run_dir: Path,
        data_dir: Path,
        on_value: Callable[[float, int], None] | None,
    ) -> None:
        """``on_value`` None: measure at the last step only, report nothing (a trial of several seeds)."""
        self.trial, self.config, self.metric = trial, config, metric
        self.steps = steps if on_value is not None else steps[-1:]
        self.run_dir, self.data_dir, self.on_value = run_dir, data_dir, on_value
        self.pruned_at: tuple[int, float] | None = None
        self.measurement = Measurement(math.nan)

    def on_log(self, args, state, control, logs=None, model=None, processing_class=None, **kwargs):
        # on_log, not on_step_end: the step's metrics.jsonl line (MetricsCallback, called first) is written by now
        step = state.global_step
        if not logs or "loss" not in logs or step not in self.steps:
            return
        if self.metric in NEEDS_MODEL:
            final = self.run_dir / FINAL_DIR
            shutil.rmtree(final, ignore_errors=True)
            model.save_pretrained(str(final))
            processing_class.save_pretrained(str(final))
        config = {**self.config, "training": {**self.config["training"], "steps": step}}
        self.measurement = METRICS[self.metric](config, self.run_dir, self.data_dir)
        value = self.measurement.value
        if not math.isfinite(value):
            raise ValueError(f"objective {self.metric} is {value} at step {step}")
        if self.on_value is None:
            return
        self.trial.report(value, step)
        self.on_value(value, step)
        if step != self.steps[-1] and self.trial.should_prune():
            self.pruned_at = (step, value)
            control.should_training_stop = True


def trial_training_config(config: Mapping, keep_checkpoints: bool) -> dict:
    """No checkpoints unless kept (the training schema's largest save_steps never comes)."""
    if keep_checkpoints:
        return dict(config)
    return {**config, "training": {**config["training"], "save_steps": 10_000_000}}


@dataclass(frozen=True)
class TrialRun:
    """Where and how one trial trains: its folder, the split and prompts, the base model, its MLflow run."""

    run_dir: Path
    data_dir: Path
    base_model: Path
    run: object
    prompts_dir: Path | None = None


def train_seed(
    spec,
    trial,
    config: Mapping,
    where: TrialRun,
    seed: int,
    run_dir: Path,
    on_value: Callable[[float, int], None] | None,
    run=None,
) -> PruningCallback:
    """Train one seed of the trial into ``run_dir`` (its training curves into ``run``, when given), measuring the
    objective (at every report step when ``on_value`` is given, else at the end only); returns the callback holding
    the measurement."""
    from hara.rlvr.metrics_sink import MetricsCallback
    from hara.rlvr.session import TrainingSession

    fields = spec.fields
    session = TrainingSession(
        config, fields["rlvr"], fields["method"], seed, run_dir, where.base_model, where.data_dir, where.prompts_dir
    )
    session.start()
    session.record(
        {
            "stage": "sweep",
            "study": fields["name"],
            "trial": trial.number,
            "params": trial.params,
            "seed": seed,
            "base_model": str(where.base_model),
            "prompts": str(where.prompts_dir or ""),
        }
    )
    metric = fields["objective"]["metric"]
    pruning = PruningCallback(trial, config, metric, spec.report_steps(config), run_dir, where.data_dir, on_value)
    trainer = session.trainer([MetricsCallback(run_dir / METRICS_FILE, run), pruning])
    trainer.train()
    return pruning


def constraint_values(constraints: Mapping[str, float], run_dir: Path) -> list[float]:
    """Per constraint: the trained steps' mean of its metrics.jsonl key minus its limit (<= 0 is feasible)."""
    lines = read_metrics(run_dir / METRICS_FILE)
    values = []
    for key, limit in constraints.items():
        logged = [line[key] for line in lines if isinstance(line.get(key), (int, float))]
        if not logged:
            raise ValueError(f"constraints.{key}: not logged by the trial's training ({run_dir / METRICS_FILE})")
        values.append(sum(logged) / len(logged) - limit)
    return values


def record_seed(trial, seed: int, measurement: Measurement, constraints: list[float] | None) -> None:
    """Store a finished seed on the trial: its value, its problems' outcomes, the running constraints (worst seed)."""
    values = {**trial.user_attrs.get("seed_values", {}), str(seed): measurement.value}
    trial.set_user_attr("seed_values", values)
    if len(values) > 1:
        trial.set_user_attr("se", statistics.stdev(values.values()) / math.sqrt(len(values)))
    if measurement.problems is not None:
        trial.set_user_attr(
            "problem_scores", {**trial.user_attrs.get("problem_scores", {}), str(seed): measurement.problems}
        )
    if constraints is not None:
        previous = trial.user_attrs.get("constraints")
        trial.set_user_attr(
            "constraints", constraints if previous is None else [max(a, b) for a, b in zip(previous, constraints)]
        )


def instances(index: int, measurement: Measurement) -> dict[int, float]:
    """Seed ``index``'s paired instances for a between-seeds pruner: one per problem (sorted ids), or the seed."""
    if measurement.problems is None:
        return {index: measurement.value}
    size = len(measurement.problems)
    return {index * size + i: measurement.problems[key] for i, key in enumerate(sorted(measurement.problems))}


def run_trial(
    spec,
    trial,
    config: Mapping,
    where: TrialRun,
    seeds: list[int],
    on_value: Callable[[float, int], None],
    prune: bool = True,
) -> float:
    """Train the trial's config on each of ``seeds`` (one seed: in the trial folder, reported at every report step;
    several: in ``seed<s>/``, pruned between seeds when ``prune``); returns the mean objective (raises
    TrialPruned)."""
    import optuna

    config = trial_training_config(config, spec.fields["keep_checkpoints"])
    metric, constraints = spec.fields["objective"]["metric"], spec.fields["constraints"]
    values = []
    for index, seed in enumerate(seeds):
        run_dir = where.run_dir if len(seeds) == 1 else where.run_dir / f"seed{seed}"
        pruning = train_seed(
            spec,
            trial,
            config,
            where,
            seed,
            run_dir,
            on_value if len(seeds) == 1 else None,
            run=where.run if index == 0 else None,
        )  # the child run keeps the first seed's curves
        if pruning.pruned_at is not None:
            step, value = pruning.pruned_at
            raise optuna.TrialPruned(f"pruned at step {step} ({metric} = {value:.4g})")
        record_seed(trial, seed, pruning.measurement, constraint_values(constraints, run_dir) if constraints else None)
        values.append(pruning.measurement.value)
        if len(seeds) > 1 and prune and index < len(seeds) - 1:
            for step, value in instances(index, pruning.measurement).items():
                trial.report(value, step)
            if trial.should_prune():
                raise optuna.TrialPruned(f"pruned after seed {seed} ({metric} = {statistics.mean(values):.4g})")
    return statistics.mean(values)
