"""Benchmark: the per-step time cost of HarA-tok over plain GRPO in the TRL trainer, in one process.

Two trainers built from the same base model and config (config/default.yaml unless --config): GRPO with method
``none`` and GRPO with ``hara_tok``. Each step both see the same batch of prompts from the same data loader, in
alternating order (which one goes first flips every step, so drift in machine load hits both alike), with the same
RNG state before generation (so while the two policies are still close they sample similar completions). A step is
what TRL's training loop does per optimizer step: generation + scoring (+ the HarA hook for hara_tok), loss,
backward, optimizer and scheduler step.

Printed: per-step times of both, the HarA hook's own time, where the hidden states came from, and as the last line
the median of the per-step ratios ``hara_tok_step_ratio=<r>`` (the paper reports up to +13.6% total time; the target
is <= 1.10 now and 1.05 later).

    .venv/bin/python benchmarks/bench_step.py                       # base model: <results_dir>/base_model/tiny-s
    .venv/bin/python benchmarks/bench_step.py --base-model /path --steps 20 --set hara.capture=forward
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from pathlib import Path

import torch

from hara.config import load_config
from hara.rlvr.policy import load_policy
from hara.rlvr.prompts import train_dataset
from hara.rlvr.session import build_trainer
from hara.runinfo import seed_everything, set_threads

REPO = Path(__file__).resolve().parents[1]
METHODS = ("none", "hara_tok")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(REPO / "config" / "default.yaml"))
    parser.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE", help="config override")
    parser.add_argument("--base-model", help="base model folder (default: <results_dir>/base_model/tiny-s)")
    parser.add_argument("--steps", type=int, default=16, help="timed steps per method")
    parser.add_argument("--warmup-steps", type=int, default=2, help="untimed steps first (allocator, caches)")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def make_trainers(config: dict, base: Path, seed: int, out: Path) -> dict:
    """One trainer per method, each on its own copy of the base model, ready for manual steps."""
    trainers = {}
    dataset = train_dataset(config, None)
    for method in METHODS:
        seed_everything(seed)
        model, tokenizer = load_policy(base)
        trainer = build_trainer(config, "grpo", method, seed, model, tokenizer, dataset, out / method)
        trainer.create_optimizer_and_scheduler(num_training_steps=config["training"]["steps"])
        trainer.current_gradient_accumulation_steps = 1  # set by Trainer.train()'s loop, which is not used here
        model.train()
        trainers[method] = trainer
    return trainers


def timed_step(trainer, batch: list, rng_state: torch.Tensor) -> float:
    """One optimizer step of TRL's loop on ``batch`` (generation happens inside ``training_step``)."""
    torch.set_rng_state(rng_state)
    start = time.perf_counter()
    trainer.training_step(trainer.model, batch, None)  # GRPO's loss normalises itself
    trainer.optimizer.step()
    trainer.lr_scheduler.step()
    trainer.optimizer.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def main() -> None:
    args = parse_args()
    config = copy.deepcopy(load_config(args.config, overrides=args.set))
    config["training"]["grad_accum_steps"] = 1  # one generation + one loss pass per step, as timed here
    set_threads(config["threads"])
    base = Path(args.base_model or Path(config["results_dir"]) / "base_model" / "tiny-s")
    if not (base / "config.json").is_file():
        raise SystemExit(
            f"no base model at {base}: run `hara base-model --config {args.config} --size tiny-s "
            f"--out {base}` (or `make reproduce`) first, or pass --base-model"
        )
    out = Path(config["results_dir"]) / "bench_step"
    trainers = make_trainers(config, base, args.seed, out)
    batches = iter(trainers["none"].get_train_dataloader())
    times: dict[str, list[float]] = {m: [] for m in METHODS}
    for step in range(args.warmup_steps + args.steps):
        batch, rng_state = next(batches), torch.get_rng_state()
        order = METHODS if step % 2 == 0 else METHODS[::-1]
        elapsed = {method: timed_step(trainers[method], batch, rng_state) for method in order}
        if step >= args.warmup_steps:
            for method in METHODS:
                times[method].append(elapsed[method])
            print(
                f"step {step - args.warmup_steps + 1:3d}: grpo {elapsed['none']:.3f} s  "
                f"hara_tok {elapsed['hara_tok']:.3f} s  ratio {elapsed['hara_tok'] / elapsed['none']:.3f}",
                flush=True,
            )
    hara_metrics = trainers["hara_tok"]._metrics["train"]
    hook = statistics.median(hara_metrics["hara/step_overhead_s"])
    source = "generation" if statistics.mean(hara_metrics["hara/capture_from_generation"]) == 1 else "extra forward"
    ratios = [h / g for h, g in zip(times["hara_tok"], times["none"])]
    print(
        f"median step: grpo {statistics.median(times['none']):.3f} s, hara_tok "
        f"{statistics.median(times['hara_tok']):.3f} s; HarA hook {hook:.3f} s per step; hidden states from "
        f"{source}; {config['training']['prompts_per_step']} prompts x {config['training']['group_size']} rollouts, "
        f"threads={config['threads']}, base model {base}"
    )
    print(f"hara_tok_step_ratio={statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
