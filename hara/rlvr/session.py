"""A training session: what every training process does, `hara train` (hara.rlvr.train) and a sweep trial alike.

Its threads, seed and process group, the policy from the Base model, the run's record and MLflow run, and TRL's
trainer for one (RLVR preset, credit-assignment method, seed) over the training prompts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hara.errors import ConfigError, UnknownNameError
from hara.methods import get_method
from hara.rlvr.grpo_config import grpo_args
from hara.rlvr.policy import load_policy, policy_dtype, start_process_group
from hara.rlvr.presets import RLVRPreset, config_preset, soft_overlong_reward
from hara.rlvr.prompts import train_dataset
from hara.rlvr.seam import reseed_after_colocated_engine, reserve_master_port, trl_imports_for

__all__ = ["TrainingSession", "build_trainer", "method_params", "tracking_run", "trainer_class"]


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


def tracking_run(config: Mapping, size: str, rlvr: str, method: str, seed: int, out: Path, preset: RLVRPreset):
    """Open or reopen the MLflow run of this training run."""
    from hara.tracking import run_name, start_run

    knobs = {f"hara.{k}": v for k, v in method_params(config, method).items()}
    params = {**knobs, **{f"rlvr.{k}": v for k, v in dataclasses.asdict(preset).items()}}
    params.update({f"training.{k}": v for k, v in config["training"].items()})
    tags = {"size": size, "rlvr": rlvr, "method": method, "seed": seed, "stage": "train", **knobs}
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
