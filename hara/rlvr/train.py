"""The train stage: config + base model + (rlvr preset, method, seed) -> a trained policy, its metrics and MLflow run.

Output folder (``--out``)::

    checkpoints/checkpoint-<step>/   TRL/HF checkpoints (model, optimizer, scheduler, RNG states, trainer state)
    final/                           the trained model + tokenizer (``from_pretrained``-loadable)
    metrics.jsonl                    one line per optimizer step (namespaced keys, see ``METRIC_KEYS``)
    mlflow_run.json                  {"tracking_uri", "run_id", "experiment_id"} for the evaluation stage (a copy in
                                     checkpoints/, so every checkpoint-<step>/ has one in its parent folder)
    resolved_config.yaml, run_info.json

Rerunning the same command resumes from the last checkpoint (HF ``resume_from_checkpoint`` restores model,
optimizer, scheduler, RNG states and step), drops the metrics.jsonl lines written after that checkpoint, and logs
into the same MLflow run. A finished run (``final/`` exists) is not trained again; nor is one whose last checkpoint
is at ``training.steps`` (final/ lost after it was written): final/ is rebuilt from that checkpoint.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from hara.errors import ConfigError, UnknownNameError
from hara.layout import base_model_dir, candidate_steps
from hara.methods import get_method, methods
from hara.metric_keys import ACCURACY, CPU_S, ENTROPY, HARA_S, RESPONSE_LENGTH, REWARD, STEP_S
from hara.rlvr.presets import (
    RLVRPreset,
    config_preset,
    grpo_config_kwargs,
    soft_overlong_reward,
)
from hara.rlvr.seam import (
    GRADIENT_ACCUMULATION_KWARGS,
    reseed_after_colocated_engine,
    reserve_master_port,
    stop_kwargs,
    trainer_class,
)

__all__ = [
    "METHOD_SECTIONS",
    "METRIC_KEYS",
    "build_trainer",
    "end_process_group",
    "load_policy",
    "method_params",
    "rename_metrics",
    "start_process_group",
    "train",
]

#: Which ``hara.<section>`` of the config holds each method's knobs (None: the method takes none), from the method
#: registry (hara/methods.py).
METHOD_SECTIONS: dict[str, str | None] = {name: spec.section for name, spec in methods().items()}

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


def method_params(config: Mapping, method: str) -> dict[str, Any]:
    """The knobs of ``method`` from the config's ``hara`` section (flat dict for hara.weighting)."""
    try:
        spec = get_method(method)
    except UnknownNameError as error:
        raise ConfigError(f"--method: {error}") from None
    if spec.weighting is not None:  # a plug-in: its knobs are hara.plugins.<name>
        return dict(config["hara"]["plugins"].get(method, {}))
    return dict(config["hara"][spec.section]) if spec.section else {}


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
    """Keep only metrics.jsonl lines of steps <= ``last_step`` (lines logged after the resumed checkpoint)."""
    if path.is_file():
        lines = [
            line
            for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip() and json.loads(line)["step"] <= last_step
        ]
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def train_dataset(config: Mapping, data_dir: str | Path | None, prompts_dir: str | Path | None = None):
    """The RL prompts as a ``datasets.Dataset`` with TRL's ``prompt``, the gold ``answer``, the reference
    ``solution`` and the problem's ``source``: the problems kept by
    ``hara select-prompts`` when ``prompts_dir`` is given, else the config's whole training set."""
    from datasets import Dataset

    from hara.data.format import prompt_format
    from hara.models.base import config_datasets
    from hara.rlvr.prompts import read_prompts

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


def world_size() -> int:
    """Number of training processes (set by ``accelerate launch``; 1 when run directly)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def grpo_args(config: Mapping, preset: RLVRPreset, out: Path, seed: int, params: int):
    """GRPOConfig from the config's ``training`` section and the preset (CPU: no bf16, no checkpointing), for a
    policy of ``params`` parameters (the collective timeout waits out its checkpoint save).

    ``training.use_vllm`` generates with vLLM wherever vLLM can run (:func:`hara.vllm_cpu.generates_with_vllm`): on
    a GPU with the gpu extra, and on a CPU with vLLM's CPU build (the cluster's code path, in CI); on a CPU without
    it TRL's transformers ``generate``; on a GPU without vllm, an error."""
    import torch
    from trl import GRPOConfig

    from hara.rlvr.checkpoints import collective_timeout_s
    from hara.vllm_cpu import generates_with_vllm

    t = config["training"]
    gpu = torch.cuda.is_available()
    use_vllm = generates_with_vllm(t["use_vllm"])
    rollouts, accum, world = t["prompts_per_step"] * t["group_size"], t["grad_accum_steps"], world_size()
    if t["prompts_per_step"] % world:
        raise ConfigError(
            f"training.prompts_per_step: {t['prompts_per_step']} prompts cannot be split into whole "
            f"groups over {world} processes"
        )
    if (rollouts // world) % accum:
        raise ConfigError(
            f"training.grad_accum_steps: {accum} does not divide the {rollouts // world} rollouts per process of a step"
        )
    # One generation batch per optimizer step: prompts_per_step x group_size rollouts in all, each process holding
    # whole groups (TRL's RepeatSampler lays a prompt's rollouts out consecutively), split into `accum` micro-batches
    # after the advantages are computed on the whole batch (so groups stay whole for the HarA hook).
    return GRPOConfig(
        output_dir=str(Path(out) / "checkpoints"),
        seed=seed,
        data_seed=seed,
        max_steps=t["steps"],
        per_device_train_batch_size=rollouts // (accum * world),
        num_generations=t["group_size"],
        gradient_accumulation_steps=accum,
        steps_per_generation=accum,
        num_iterations=t["num_iterations"],
        max_completion_length=t["max_completion_length"],
        temperature=t["temperature"],
        top_p=t["top_p"],
        learning_rate=t["lr"],
        lr_scheduler_type=t["lr_scheduler"],
        warmup_steps=t["warmup_steps"],
        weight_decay=t["weight_decay"],
        max_grad_norm=t["max_grad_norm"],
        save_strategy="steps",
        save_steps=t["save_steps"],
        save_total_limit=t["save_total_limit"],
        logging_steps=1,
        report_to=[],
        disable_tqdm=not t["progress"],
        log_completions=False,
        disable_dropout=True,
        use_cpu=not gpu,
        bf16=gpu and t["bf16"],
        gradient_checkpointing=gpu and t["gradient_checkpointing"],
        use_vllm=use_vllm,
        vllm_mode=t["vllm_mode"],
        vllm_gpu_memory_utilization=t["vllm"]["gpu_memory_utilization"],
        vllm_max_model_length=t["vllm"]["max_model_len"],
        vllm_tensor_parallel_size=t["vllm"]["tensor_parallel_size"],
        vllm_enable_sleep_mode=t["vllm"]["enable_sleep_mode"],
        generation_kwargs=stop_kwargs(config["prompt"]["stop"], vllm=use_vllm),
        accelerator_config={"gradient_accumulation_kwargs": dict(GRADIENT_ACCUMULATION_KWARGS)},
        ddp_timeout=collective_timeout_s(params, t["checkpoint_write_mb_s"]),
        **grpo_config_kwargs(preset),
    )


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


def policy_dtype(config: Mapping) -> str:
    """The dtype the policy's weights are loaded in. Under FSDP (several GPU processes, training.bf16) bf16, which
    halves each rank's host copy; accelerate then upcasts the sharded parameters to fp32 master weights and computes
    in bf16. One process keeps the weights as loaded, so there fp32 (bf16 compute comes from the autocast of
    GRPOConfig.bf16): pure bf16 weights and AdamW states would round an lr 1e-6 update of a weight ~0.02 away
    (bf16 resolves 2^-8 of it, 8e-5). fp32 on the CPU."""
    import torch

    sharded = torch.cuda.is_available() and world_size() > 1
    return "bfloat16" if sharded and config["training"]["bf16"] else "float32"


def start_process_group(base_model: Path, config: Mapping) -> None:
    """Under ``accelerate launch``, the process group, before the policy is loaded: with FSDP's
    ``fsdp_cpu_ram_efficient_loading`` (config/accelerate/fsdp.yaml) transformers then reads the weights in local
    rank 0 only and the other ranks take them from its broadcast (FSDP's sync_module_states on GPUs, DDP's initial
    broadcast on the CPU), so a node reads the checkpoint once, not once per GPU. Host memory is not saved by it in
    transformers 5.17: the other ranks fill their parameters with zeros on the CPU (resident) until FSDP moves the
    model to the meta device and shards it; bf16 (:func:`policy_dtype`) is what halves it. The group is started
    here, so its timeout is set here: the trainer's ``ddp_timeout`` does not reach a group that already exists
    (transformers' TrainingArguments passes it to a PartialState that finds torch.distributed initialized)."""
    if world_size() > 1:
        from datetime import timedelta

        from accelerate import PartialState

        from hara.rlvr.checkpoints import collective_timeout_s

        seconds = collective_timeout_s(stored_params(base_model), config["training"]["checkpoint_write_mb_s"])
        PartialState(timeout=timedelta(seconds=seconds))


def end_process_group() -> None:
    """Destroy torch.distributed's group at the end of a run: an NCCL group left to the interpreter's exit can hang
    or abort it, and a job that exits non-zero after writing final/ has final/ deleted by Snakemake."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def stored_params(folder: Path) -> int:
    """Parameters of the model saved in ``folder``, read from its safetensors headers (no tensor is loaded)."""
    import math

    from safetensors import safe_open

    total = 0
    for file in sorted(Path(folder).glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as handle:
            names = handle.keys()  # the header's tensor names (the handle itself is not iterable)
            total += sum(math.prod(handle.get_slice(name).get_shape()) for name in names)
    return total


def load_policy(base_model: Path, dtype: str = "float32"):
    """Model + tokenizer from a local folder (never the hub); on a CPU machine the model generates with the grouped
    attention of :mod:`hara.models.attention` (same tokens, faster)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hara.models.attention import use_cpu_attention

    if not (base_model / "config.json").is_file():
        raise FileNotFoundError(f"--base-model: no model at {base_model} (run `hara base-model` first)")
    tokenizer = AutoTokenizer.from_pretrained(str(base_model), local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(str(base_model), local_files_only=True, dtype=dtype)
    return use_cpu_attention(model), tokenizer


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
    if (out / "final" / "config.json").is_file():  # (pruned again: a kill may have interrupted the pruning)
        if is_main_process():
            prune_finished_checkpoints(out / "checkpoints", config["training"]["finished_checkpoints"])
        return {"status": "already finished", "final": str(out / "final")}
    preset = config_preset(config, rlvr)
    method_params(config, method)  # unknown method: fail before any work
    base = Path(base_model) if base_model else base_model_dir(config["results_dir"], size)
    session = TrainingSession(config, rlvr, method, seed, out, base, data_dir, prompts_dir)
    session.join()
    if final_restored(out, config):
        end_process_group()
        return {"status": "finished (final/ rebuilt from its last checkpoint)", "final": str(out / "final")}
    tokenizer = session.load()
    out.mkdir(parents=True, exist_ok=True)
    last = resume_point(out / "checkpoints")  # skips (and warns about) truncated or corrupt ones; rank 0 reads
    run = None  # under `accelerate launch` only the main process writes files and talks to MLflow
    if is_main_process():
        truncate_metrics(out / "metrics.jsonl", int(last.rsplit("-", 1)[1]) if last else 0)
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
        run.save(out / "checkpoints")  # the evaluation stage looks next to a checkpoint folder and in its parent
    callbacks = [MetricsCallback(out / "metrics.jsonl", run), ManifestCallback()]
    if config["selection"]["enabled"]:  # checkpoint selection's candidates, kept beside final/
        steps = candidate_steps(config)[:-1]  # the last one is final/
        callbacks.append(CandidateCallback(out / "candidates", steps))
        if is_main_process():
            link_candidates(out / "checkpoints", out / "candidates", steps)  # what a kill may have left out
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
        prune_finished_checkpoints(out / "checkpoints", config["training"]["finished_checkpoints"])
    if run is not None:
        run.finish()
    end_process_group()
    return {
        "status": "finished",
        "steps": trainer.state.global_step,
        "resumed_from": last,
        "final": str(out / "final"),
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
        if not restore_final(out / "checkpoints", out / "final", config["training"]["steps"]):
            return False
        prune_finished_checkpoints(out / "checkpoints", config["training"]["finished_checkpoints"])
        return True

    return on_rank_zero(restore)


def is_main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def save_final(trainer: Any, tokenizer: Any, out: Path) -> None:
    """Write final/ aside and rename it, so a crash mid-save never leaves a final/ that looks finished. Every
    process takes part in ``save_model`` (FSDP gathers the shards), the main process writes."""
    partial = out / "final.partial"
    if is_main_process():
        shutil.rmtree(partial, ignore_errors=True)
    trainer.accelerator.wait_for_everyone()
    trainer.save_model(str(partial))
    if is_main_process():
        tokenizer.save_pretrained(str(partial))
        partial.rename(out / "final")
    trainer.accelerator.wait_for_everyone()
