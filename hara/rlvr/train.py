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
from collections.abc import Mapping
from pathlib import Path

from hara.layout import CANDIDATES_DIR, CHECKPOINTS_DIR, FINAL_DIR, METRICS_FILE, base_model_dir, candidate_steps
from hara.rlvr.metrics_sink import MetricsCallback, truncate_metrics
from hara.rlvr.policy import end_process_group, is_main_process, world_size
from hara.rlvr.presets import config_preset
from hara.rlvr.session import TrainingSession, method_params, tracking_run

__all__ = ["train"]


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
        final_restored,
        link_candidates,
        prune_finished_checkpoints,
        refuse_changed_config,
        resume_point,
        save_final,
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
        run, _ = tracking_run(config, size, rlvr, method, seed, out, preset)
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
