"""The train stage: config + base model + (rlvr preset, method, seed) -> a trained policy, its metrics and MLflow run.

Output folder (``--out``)::

    checkpoints/checkpoint-<step>/   TRL/HF checkpoints (model, optimizer, scheduler, RNG states, trainer state)
    final/                           the trained model + tokenizer (``from_pretrained``-loadable)
    metrics.jsonl                    one line per optimizer step (namespaced keys, see ``hara.rlvr.metrics_sink.METRIC_KEYS``)
    mlflow_run.json                  the MLflow run and its store (hara.tracking.read_run_file) for the evaluation
                                     stage (a copy in checkpoints/, so every checkpoint-<step>/ has one in its parent
                                     folder)
    resolved_config.yaml, run_info.json

Rerunning the same command resumes from the last checkpoint (HF ``resume_from_checkpoint`` restores model,
optimizer, scheduler, RNG states and step), drops the metrics.jsonl lines written after that checkpoint, and logs
into the same MLflow run. A finished run (``final/`` exists) is not trained again; nor is one whose last checkpoint
is at ``training.steps`` (final/ lost after it was written): final/ is rebuilt from that checkpoint.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hara.errors import ConfigError, UnknownNameError
from hara.layout import CANDIDATES_DIR, CHECKPOINTS_DIR, FINAL_DIR, METRICS_FILE, base_model_dir, candidate_steps
from hara.methods import get_method
from hara.rlvr.grpo_config import grpo_args
from hara.rlvr.metrics_sink import MetricsCallback, truncate_metrics
from hara.rlvr.policy import (
    end_process_group,
    is_main_process,
    load_policy,
    policy_dtype,
    start_process_group,
    world_size,
)
from hara.rlvr.presets import RLVRPreset, config_preset, soft_overlong_reward
from hara.rlvr.prompts import train_dataset
from hara.rlvr.seam import reseed_after_colocated_engine, reserve_master_port, trl_imports_for

__all__ = ["TrainingSession", "build_trainer", "method_params", "train", "trainer_class"]


def method_params(config: Mapping, method: str) -> dict[str, Any]:
    """The knobs of ``method`` as the config holds them (a flat mapping: its spec's section, built in or plug-in)."""
    try:
        return get_method(method).knobs(config)
    except UnknownNameError as error:
        raise ConfigError(f"--method: {error}") from None


def trainer_class(use_vllm: bool) -> type:
    """:class:`~hara.rlvr.trainer.HaraGRPOTrainer`, imported so that a run without vLLM does not load vLLM."""
    with trl_imports_for(use_vllm):
        from hara.rlvr.trainer import HaraGRPOTrainer
    return HaraGRPOTrainer


def build_trainer(
    config: Mapping,
    rlvr: str,
    method: str,
    seed: int,
    model: Any,
    tokenizer: Any,
    dataset: Any,
    out: Path,
    reward_funcs: list | None = None,
    callbacks: list | None = None,
):
    """A :class:`HaraGRPOTrainer` for one (preset, method, seed). ``reward_funcs`` replaces the math-verify
    correctness reward (tests); DAPO's overlong term is appended when the preset asks for it."""
    from hara.rlvr.rewards import accuracy_reward
    from hara.vllm_cpu import colocated_generation

    HaraGRPOTrainer = trainer_class(use_vllm=config["training"]["use_vllm"])
    preset = config_preset(config, rlvr)
    funcs = list(reward_funcs or [accuracy_reward])
    if preset.overlong_shaping:
        funcs.append(soft_overlong_reward(config["training"]["max_completion_length"], preset.overlong_cache))
    args = grpo_args(config, preset, out, seed, sum(p.numel() for p in model.parameters()))
    if args.use_vllm and args.vllm_mode == "colocate":
        from hara.device import prepare_job_environment

        prepare_job_environment()  # the colocated engine starts inside the trainer
        reserve_master_port()
    with colocated_generation(args):  # vLLM's CPU build only: its engine arguments and weight sync
        trainer = HaraGRPOTrainer(
            model=model,
            processing_class=tokenizer,
            reward_funcs=funcs,
            args=args,
            train_dataset=dataset,
            callbacks=callbacks,
            method=method,
            method_params=method_params(config, method),
            hidden_layer=config["hara"]["hidden_layer"],
            capture=config["hara"]["capture"],
            dynamic_sampling=preset.dynamic_sampling,
            outcome_reward=0,
            stop=tuple(config["prompt"]["stop"]),
            entropy_chunk=config["hara"]["entropy_chunk"],
        )
    if args.use_vllm and args.vllm_mode == "colocate":
        reseed_after_colocated_engine(trainer, seed)
    return trainer


def _tracking(config: Mapping, size: str, rlvr: str, method: str, seed: int, out: Path, preset: RLVRPreset):
    """Open or reopen the MLflow run of this training run."""
    from hara.tracking import run_name, start_run

    params = {f"hara.{k}": v for k, v in method_params(config, method).items()}
    params.update({f"rlvr.{k}": v for k, v in dataclasses.asdict(preset).items()})
    params.update({f"training.{k}": v for k, v in config["training"].items()})
    tags = {
        "size": size,
        "rlvr": rlvr,
        "method": method,
        "seed": seed,
        "stage": "train",
        **{f"hara.{k}": v for k, v in method_params(config, method).items()},
    }
    return start_run(
        config["tracking"]["mlflow_uri"], config["name"], run_name(size, rlvr, method, seed), out, tags, params
    )


@dataclasses.dataclass
class TrainingSession:
    """What every training process does, `hara train` and a sweep trial alike: its threads and seed, the record of
    its run, the policy from the Base model, and the trainer over the training prompts."""

    config: Mapping
    rlvr: str
    method: str
    seed: int
    out: Path
    base_model: Path
    data_dir: str | Path | None = None
    prompts_dir: str | Path | None = None
    policy: tuple[Any, Any] | None = None

    def join(self) -> None:
        """Threads, seed, and (under `accelerate launch`) the process group."""
        from hara.runinfo import seed_everything, set_threads

        set_threads(self.config["threads"])
        seed_everything(self.seed)
        start_process_group(Path(self.base_model), self.config)

    def load(self) -> Any:
        """The policy in :func:`policy_dtype`; returns its tokenizer."""
        self.policy = load_policy(Path(self.base_model), policy_dtype(self.config))
        return self.policy[1]

    def start(self) -> Any:
        """:meth:`join`, then :meth:`load`; returns the policy's tokenizer."""
        self.join()
        return self.load()

    def record(self, run_info: Mapping[str, Any]) -> None:
        """run_info.json in the run folder: versions, device, commit, the resolved config and ``run_info``."""
        from hara.runinfo import write_run_info

        write_run_info(self.out, self.config, extra=dict(run_info))

    def trainer(self, callbacks: list, reward_funcs: list | None = None) -> Any:
        """The trainer of the started session (:func:`build_trainer`)."""
        model, tokenizer = self.policy
        dataset = train_dataset(self.config, self.data_dir, self.prompts_dir)
        return build_trainer(
            self.config,
            self.rlvr,
            self.method,
            self.seed,
            model,
            tokenizer,
            dataset,
            self.out,
            reward_funcs=reward_funcs,
            callbacks=callbacks,
        )


def train(
    config: Mapping,
    size: str,
    rlvr: str,
    method: str,
    seed: int,
    out_dir: str | Path,
    base_model: str | Path | None = None,
    data_dir: str | Path | None = None,
    reward_funcs: list | None = None,
    prompts_dir: str | Path | None = None,
) -> dict:
    """Run (or resume) one training run; returns a summary with the final step and paths.

    ``prompts_dir``: a `hara select-prompts` folder (the RL prompts); default: the whole training set.
    ``reward_funcs`` replaces the math-verify correctness reward (tests on random models, whose rollouts are never
    right, use a deterministic stand-in that splits groups)."""
    from hara.models.base import check_size
    from hara.rlvr.checkpoints import (
        CandidateCallback,
        ManifestCallback,
        link_candidates,
        prune_finished_checkpoints,
        refuse_changed_config,
        resume_point,
    )

    check_size(config, size)
    out = Path(out_dir)
    refuse_changed_config(out, config)  # before anything is resumed or overwritten
    if (out / FINAL_DIR / "config.json").is_file():  # (pruned again: a kill may have interrupted the pruning)
        if is_main_process():
            prune_finished_checkpoints(out / CHECKPOINTS_DIR, config["training"]["finished_checkpoints"])
        return {"status": "already finished", "final": str(out / FINAL_DIR)}
    preset = config_preset(config, rlvr)
    method_params(config, method)  # unknown method: fail before any work
    base = Path(base_model) if base_model else base_model_dir(config["results_dir"], size)
    session = TrainingSession(config, rlvr, method, seed, out, base, data_dir, prompts_dir)
    session.join()
    if final_restored(out, config):
        end_process_group()
        return {"status": "finished (final/ rebuilt from its last checkpoint)", "final": str(out / FINAL_DIR)}
    tokenizer = session.load()
    out.mkdir(parents=True, exist_ok=True)
    last = resume_point(out / CHECKPOINTS_DIR)  # skips (and warns about) truncated or corrupt ones; rank 0 reads
    run = None  # under `accelerate launch` only the main process writes files and talks to MLflow
    if is_main_process():
        truncate_metrics(out / METRICS_FILE, int(last.rsplit("-", 1)[1]) if last else 0)
        session.record(
            {
                "stage": "train",
                "size": size,
                "rlvr": rlvr,
                "method": method,
                "train_seed": seed,
                "base_model": str(base),
                "resumed_from": last or "",
                "preset": dataclasses.asdict(preset),
                "processes": world_size(),
            }
        )
        run, _ = _tracking(config, size, rlvr, method, seed, out, preset)
        run.save(out / CHECKPOINTS_DIR)  # the evaluation stage looks next to a checkpoint folder and in its parent
    callbacks = [MetricsCallback(out / METRICS_FILE, run), ManifestCallback()]
    if config["selection"]["enabled"]:  # checkpoint selection's candidates, kept beside final/
        steps = candidate_steps(config)[:-1]  # the last one is final/
        callbacks.append(CandidateCallback(out / CANDIDATES_DIR, steps))
        if is_main_process():
            link_candidates(out / CHECKPOINTS_DIR, out / CANDIDATES_DIR, steps)  # what a kill may have left out
    trainer = session.trainer(callbacks, reward_funcs)
    from hara.tracking import system_metrics

    try:
        with system_metrics(run, config["tracking"]["system_metrics"]):
            trainer.train(resume_from_checkpoint=last)
    except BaseException:
        if run is not None:
            run.finish("FAILED")
        raise
    save_final(trainer, tokenizer, out)
    if is_main_process():
        prune_finished_checkpoints(out / CHECKPOINTS_DIR, config["training"]["finished_checkpoints"])
    if run is not None:
        run.finish()
    end_process_group()
    return {
        "status": "finished",
        "steps": trainer.state.global_step,
        "resumed_from": last,
        "final": str(out / FINAL_DIR),
        "mlflow_run_id": run.run_id if run is not None else None,
        "processes": trainer.accelerator.num_processes,
        "distributed_type": str(trainer.accelerator.distributed_type),
    }


def final_restored(out: Path, config: Mapping) -> bool:
    """Rank 0 rebuilds final/ from the checkpoint saved at ``training.steps`` and prunes the run's checkpoints
    (:func:`hara.rlvr.checkpoints.restore_final`), every rank learns whether it did: True = the run is finished,
    with no step trained."""
    from hara.rlvr.checkpoints import on_rank_zero, prune_finished_checkpoints, restore_final

    def restore() -> bool:
        if not restore_final(out / CHECKPOINTS_DIR, out / FINAL_DIR, config["training"]["steps"]):
            return False
        prune_finished_checkpoints(out / CHECKPOINTS_DIR, config["training"]["finished_checkpoints"])
        return True

    return on_rank_zero(restore)


def save_final(trainer: Any, tokenizer: Any, out: Path) -> None:
    """Write final/ aside and rename it, so a crash mid-save never leaves a final/ that looks finished. Every
    process takes part in ``save_model`` (FSDP gathers the shards), the main process writes."""
    partial = out / f"{FINAL_DIR}.partial"
    if is_main_process():
        shutil.rmtree(partial, ignore_errors=True)
    trainer.accelerator.wait_for_everyone()
    trainer.save_model(str(partial))
    if is_main_process():
        tokenizer.save_pretrained(str(partial))
        partial.rename(out / FINAL_DIR)
    trainer.accelerator.wait_for_everyone()
