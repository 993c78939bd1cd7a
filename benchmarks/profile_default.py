"""Where the embedded default's time goes (docs/profile.md): a warm-up, a few training steps and one evaluation of
config/default.yaml run through the real `hara` commands in this process, each stage's wall time split into
generation, forward, backward, optimizer, reward scoring, novelty (the HarA hook), data (tokenising, decoding,
collating) and the rest (framework overhead: imports, model loading, trainer set-up, logging, checkpoints).

    python benchmarks/profile_default.py [--warmup-steps 300] [--train-steps 4] [--eval-problems 50]
                                         [--base-model DIR] [--method hara_tok] [--out DIR]

A call is counted once, in the outermost category it runs in (a forward inside generation is generation). The
first row is the imports a training job pays before its first step (every DAG job is a process of its own). The
warm-up runs ``--warmup-steps`` of the default's 9000; training and evaluation use ``--base-model`` (a real Base model,
e.g. results/base_model/tiny-s after `make reproduce`) or else the warm-up's model, whose completions run longer than
a real Base model's (generation is then an upper bound). The last line is machine-readable: ``stage_category_s=...``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

CATEGORIES = ("generation", "forward", "backward", "optimizer", "reward", "novelty", "data")


class Ledger:
    """Seconds per category of the running stage; only the outermost timed call counts."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.active: str | None = None

    def timed(self, category: str, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if self.active is not None:
                return fn(*args, **kwargs)
            self.active, start = category, time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[category] += time.perf_counter() - start
                self.active = None

        wrapper.__profiled__ = True
        return wrapper


def patch(ledger: Ledger, owner, name: str, category: str) -> None:
    fn = getattr(owner, name)
    if not getattr(fn, "__profiled__", False):
        setattr(owner, name, ledger.timed(category, fn))


def patch_everywhere(ledger: Ledger, original, category: str) -> None:
    """Replace a function in every loaded module that imported it by name (``from x import f``)."""
    wrapped = ledger.timed(category, original)
    for module in list(sys.modules.values()):
        with contextlib.suppress(Exception):
            for attr, value in vars(module).items():
                if value is original:
                    setattr(module, attr, wrapped)


def instrument(ledger: Ledger) -> None:
    """Wrap the functions that make up each category (after the modules are imported)."""
    import torch
    import transformers
    from transformers.generation.utils import GenerationMixin

    import hara.boxed_answer
    import hara.evaluation.scoring
    from hara.models import warmup
    from hara.rlvr import trainer

    patch(ledger, GenerationMixin, "generate", "generation")
    patch(ledger, transformers.Qwen3ForCausalLM, "forward", "forward")
    patch(ledger, torch.autograd, "backward", "backward")
    patch(ledger, torch.optim.AdamW, "step", "optimizer")
    patch(ledger, trainer.HaraGRPOTrainer, "_get_per_token_logps_and_entropies", "forward")  # TRL's passes
    patch(ledger, trainer.HaraGRPOTrainer, "_calculate_rewards", "reward")
    patch(ledger, trainer.HaraGRPOTrainer, "_reweight_advantages", "novelty")
    for name in ("__call__", "batch_decode", "decode", "apply_chat_template"):
        patch(ledger, transformers.PreTrainedTokenizerBase, name, "data")
    patch(ledger, warmup, "_collate", "data")
    patch_everywhere(ledger, hara.boxed_answer.math_reward, "reward")


def stage(ledger: Ledger, name: str, argv: list[str], rows: list) -> None:
    from hara.cli import main

    ledger.seconds.clear()
    start = time.perf_counter()
    code = main(argv)
    wall = time.perf_counter() - start
    if code != 0:
        raise SystemExit(f"{name}: `hara {' '.join(argv)}` exited with {code}")
    rows.append(row(name, wall, ledger.seconds))


def row(name: str, wall: float, seconds: dict[str, float]) -> tuple[str, float, dict[str, float]]:
    """(stage, wall s, seconds per category with the unattributed rest as "overhead")."""
    parts = {c: seconds.get(c, 0.0) for c in CATEGORIES}
    return name, wall, {**parts, "overhead": wall - sum(parts.values())}


def print_table(rows: list) -> None:
    head = ["stage", "wall s", *CATEGORIES, "overhead"]
    print(" | ".join(f"{h:>10}" for h in head))
    for name, wall, parts in rows:
        cells = [f"{parts[c]:7.1f} {100 * parts[c] / wall:3.0f}%" for c in (*CATEGORIES, "overhead")]
        print(" | ".join([f"{name:>10}", f"{wall:10.1f}", *cells]))
    print(" ".join(f"{name}_{c}_s={parts[c]:.2f}" for name, _, parts in rows for c in (*CATEGORIES, "overhead")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(REPO / "config" / "default.yaml"))
    parser.add_argument("--warmup-steps", type=int, default=300)
    parser.add_argument("--train-steps", type=int, default=4)
    parser.add_argument("--eval-problems", type=int, default=50, help="problems of the one evaluated benchmark")
    parser.add_argument("--base-model", help="a `make reproduce` Base model (results/base_model/tiny-s)")
    parser.add_argument("--method", default="hara_tok")
    parser.add_argument("--out", help="working folder (default: a temporary one)")
    args = parser.parse_args()

    ledger, rows = Ledger(), []
    start = time.perf_counter()
    instrument(ledger)  # imports torch, transformers, TRL and hara's trainer: what every training job pays first
    rows.append(row("imports", time.perf_counter() - start, {}))
    work = Path(args.out or tempfile.mkdtemp(prefix="hara-profile-"))
    common = [
        "--config",
        args.config,
        "--set",
        f"results_dir={work}",
        "--set",
        f"tracking.mlflow_uri=sqlite:///{work}/mlflow.db",
        "--set",
        "selection.enabled=false",
        "--set",
        f"data.benchmark_size={args.eval_problems}",
    ]
    stage(ledger, "data", ["data", *common, "--out", str(work / "data")], rows)
    stage(
        ledger,
        "warm-up",
        [
            "base-model",
            *common,
            "--set",
            f"warmup.steps={args.warmup_steps}",
            "--size",
            "tiny-s",
            "--data",
            str(work / "data"),
            "--out",
            str(work / "base"),
            "--skip-accuracy",
        ],
        rows,
    )
    base = Path(args.base_model) if args.base_model else work / "base"
    run = work / "train"
    stage(
        ledger,
        "train",
        [
            "train",
            *common,
            "--set",
            f"training.steps={args.train_steps}",
            "--set",
            f"training.save_steps={args.train_steps}",
            "--set",
            "training.prompt_selection.enabled=false",
            "--size",
            "tiny-s",
            "--rlvr",
            "grpo",
            "--method",
            args.method,
            "--seed",
            "0",
            "--base-model",
            str(base),
            "--data",
            str(work / "data"),
            "--out",
            str(run),
        ],
        rows,
    )
    stage(
        ledger,
        "evaluate",
        [
            "evaluate",
            *common,
            "--checkpoint",
            str(run / "final"),
            "--benchmark",
            "mini_math500",
            "--data",
            str(work / "data"),
            "--out",
            str(work / "scores.json"),
        ],
        rows,
    )
    print_table(rows)


if __name__ == "__main__":
    main()
