"""Base-model warm-up: supervised fine-tuning of a fresh tiny Qwen3 on solved problems.

The result plays the role of a *Base* model: it has seen the prompt/answer format (``Question: ...\\nAnswer: ...
The answer is \\boxed{...}.``) and is right sometimes, wrong often, which leaves room for RL.

Loss is on completion tokens only (prompt and padding masked out), AdamW with a linear warm-up then a cosine decay
to ``min_lr_ratio * lr``, all set in optimizer steps so the result does not depend on the machine's speed. Most of
the accuracy arrives in the low-learning-rate tail of the schedule, so ``steps`` is the knob that matters.
"""

from __future__ import annotations

import json
import math
import platform
import random
import time
from pathlib import Path

import numpy as np
import torch
import transformers
from tqdm.auto import tqdm

from hara.data.format import PROMPT_TEMPLATE, format_completion, format_direct_answer, format_prompt
from hara.layout import WARMUP_FILE
from hara.models.tiny import TINY_SIZES, build_tiny_model, count_parameters
from hara.models.tokenizer import DEFAULT_TOKENIZER, build_tokenizer
from hara.runinfo import seed_everything, set_threads

__all__ = ["WARMUP_DEFAULTS", "cosine_schedule", "encode_records", "warmup_base_model"]

# One setting for every size (the config has one warm-up block), so "larger size, higher accuracy after the same
# number of steps" compares like with like. Measured on the shared 2-core CPU with 1 thread: tiny-s takes ~37 ms per
# step, so 6000 steps (8 epochs of 12,000 problems) take ~3.8 minutes. On the 9-skill data, at equal examples seen,
# more and smaller batches learned more (16 x 4000 steps: 8.4% greedy, 32 x 2000: 4.6%); lr 5e-3 and 1e-2 did worse
# than 3e-3; accuracy arrives late (32 x 2000 steps: 4.6%, 32 x 4000: 12.8%), in the low-learning-rate tail.
# Threads: 2 threads were 1.7x faster than 1 on an idle machine (tiny-s, batch 32: 78 vs 131 ms per step) but 6x
# slower as soon as another process used the second core (tiny-l: 10.1 vs 1.6 s per step), hence 1.
_DEFAULTS = dict(
    steps=6000,
    batch_size=16,
    lr=3e-3,
    warmup_steps=50,
    min_lr_ratio=0.05,
    weight_decay=0.1,
    max_length=256,
    direct_fraction=0.0,
    seed=0,
    threads=1,
    tokenizer_name=DEFAULT_TOKENIZER,
)
WARMUP_DEFAULTS: dict[str, dict] = {size: dict(_DEFAULTS) for size in TINY_SIZES}


def cosine_schedule(step: int, *, steps: int, warmup_steps: int, min_lr_ratio: float) -> float:
    """Learning-rate multiplier: linear from 1/warmup_steps to 1, then cosine from 1 down to ``min_lr_ratio``."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, steps - warmup_steps))
    return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def direct_answer_mask(n: int, fraction: float, seed: int) -> list[bool]:
    """Which of ``n`` records also get a direct-answer example: exactly ``round(fraction * n)``, chosen by ``seed``."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"warmup.direct_fraction must be in [0, 1], got {fraction}")
    chosen = set(random.Random(f"hara-direct:{seed}").sample(range(n), round(fraction * n)))
    return [i in chosen for i in range(n)]


def warmup_texts(
    records: list[dict], direct_fraction: float, seed: int, template: str = PROMPT_TEMPLATE
) -> list[tuple[str, str]]:
    """(prompt, completion) pairs: every record's worked solution, then the direct answers of a seeded share.

    The direct examples are added, not substituted, so the worked skill sees as many examples as without them.
    ``template`` is the config's prompt.template, the prompt RL and evaluation use too.
    """
    texts = [
        (format_prompt(r["problem"], template), format_completion(r["solution"], str(r["answer"]))) for r in records
    ]
    direct = direct_answer_mask(len(records), direct_fraction, seed)
    texts += [
        (format_prompt(r["problem"], template), format_direct_answer(str(r["answer"])))
        for r, chosen in zip(records, direct)
        if chosen
    ]
    return texts


def encode_records(
    records: list[dict],
    tokenizer,
    max_length: int,
    *,
    direct_fraction: float = 0.0,
    seed: int = 0,
    template: str = PROMPT_TEMPLATE,
) -> list[tuple[list[int], int]]:
    """Token ids of prompt + completion + eos and the prompt length, per example; longer than ``max_length``: dropped.

    Prompt and completion are tokenized separately because that is what the model sees at generation time. Long
    examples are dropped rather than truncated: a completion cut before its boxed answer and eos would teach the
    model to ramble. ``direct_fraction`` adds direct-answer examples (see :func:`warmup_texts`).
    """
    texts = warmup_texts(records, direct_fraction, seed, template)
    prompts = tokenizer([prompt for prompt, _ in texts], add_special_tokens=False)["input_ids"]
    completions = tokenizer([completion for _, completion in texts], add_special_tokens=False)["input_ids"]
    encoded = []
    for prompt, completion in zip(prompts, completions):
        ids = prompt + completion + [tokenizer.eos_token_id]
        if len(ids) <= max_length:
            encoded.append((ids, len(prompt)))
    return encoded


def _collate(batch: list[tuple[list[int], int]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded (B, T) input_ids, attention_mask and labels (-100 on prompt and padding)."""
    width = max(len(ids) for ids, _ in batch)
    input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    attention_mask = torch.zeros((len(batch), width), dtype=torch.long)
    for row, (ids, prompt_len) in enumerate(batch):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        labels[row, prompt_len : len(ids)] = torch.tensor(ids[prompt_len:])
        attention_mask[row, : len(ids)] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def _batches(lengths: list[int], batch_size: int, generator: torch.Generator, window: int = 32):
    """Endless stream of index batches of similar length (less padding), in a seeded random order.

    Each epoch is a fresh permutation; every ``window`` batches' worth of it is sorted by length, cut into batches,
    and those batches are shuffled, so batches stay random in content while padding drops by about a third. The
    last partial batch of an epoch is dropped.
    """
    n = len(lengths)
    while True:
        order = torch.randperm(n, generator=generator).tolist()
        usable = n - n % batch_size
        for start in range(0, usable, window * batch_size):
            chunk = sorted(order[start : min(usable, start + window * batch_size)], key=lengths.__getitem__)
            batches = [chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size)]
            for k in torch.randperm(len(batches), generator=generator).tolist():
                yield batches[k]


def _optimizer(model: torch.nn.Module, lr: float, weight_decay: float) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (norm gains are left alone, as usual for transformers)."""
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8)


def warmup_base_model(
    size: str,
    train_records: list[dict],
    out_dir: str | Path,
    *,
    steps: int | None = None,
    batch_size: int | None = None,
    lr: float | None = None,
    warmup_steps: int | None = None,
    min_lr_ratio: float | None = None,
    weight_decay: float | None = None,
    max_length: int | None = None,
    direct_fraction: float | None = None,
    seed: int | None = None,
    threads: int | None = None,
    tokenizer_name: str | None = None,
    progress: bool = True,
    prompt_template: str = PROMPT_TEMPLATE,
) -> dict:
    """Build ``size`` and fine-tune it on ``train_records``; save model, tokenizer and ``warmup.json`` in ``out_dir``.

    Arguments left as ``None`` take the size's value from ``WARMUP_DEFAULTS``. Returns the content of warmup.json:
    the resolved arguments, parameter count, package versions, final loss (mean of the last 20 steps), loss curve
    and wall time. The same seed and thread count give the same losses on CPU.
    """
    if size not in TINY_SIZES:
        raise ValueError(f"unknown model size {size!r}; valid sizes: {', '.join(TINY_SIZES)}")
    given = dict(
        steps=steps,
        batch_size=batch_size,
        lr=lr,
        warmup_steps=warmup_steps,
        min_lr_ratio=min_lr_ratio,
        weight_decay=weight_decay,
        max_length=max_length,
        direct_fraction=direct_fraction,
        seed=seed,
        threads=threads,
        tokenizer_name=tokenizer_name,
    )
    args = {k: (WARMUP_DEFAULTS[size][k] if v is None else v) for k, v in given.items()}
    start = time.perf_counter()
    set_threads(args["threads"])
    seed_everything(args["seed"])

    tokenizer = build_tokenizer(args["tokenizer_name"])
    model = build_tiny_model(size, tokenizer, seed=args["seed"])
    examples = encode_records(
        train_records,
        tokenizer,
        args["max_length"],
        direct_fraction=args["direct_fraction"],
        seed=args["seed"],
        template=prompt_template,
    )
    if len(examples) < args["batch_size"]:
        raise ValueError(f"{len(examples)} usable training examples, fewer than batch_size={args['batch_size']}")
    optimizer = _optimizer(model, args["lr"], args["weight_decay"])
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda s: cosine_schedule(
            s, steps=args["steps"], warmup_steps=args["warmup_steps"], min_lr_ratio=args["min_lr_ratio"]
        ),
    )
    generator = torch.Generator().manual_seed(args["seed"])
    batches = _batches([len(ids) for ids, _ in examples], args["batch_size"], generator)

    model.train()
    losses = []
    bar = tqdm(range(args["steps"]), desc=f"warm-up {size}", disable=not progress, unit="step")
    for _ in bar:
        batch = _collate([examples[i] for i in next(batches)], tokenizer.pad_token_id)
        loss = model(**batch).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
        bar.set_postfix(loss=f"{losses[-1]:.3f}", lr=f"{schedule.get_last_lr()[0]:.2e}", refresh=False)
    train_seconds = time.perf_counter() - start

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.eval()
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    record = {
        "size": size,
        **args,
        "n_parameters": count_parameters(model),
        "n_train_records": len(train_records),
        "n_train_examples": len(examples),
        "epochs": args["steps"] * args["batch_size"] / len(examples),
        "final_loss": float(np.mean(losses[-20:])),
        "last_loss": losses[-1],
        "loss_curve": losses[:: max(1, len(losses) // 100)],  # at most ~100 points
        "train_seconds": train_seconds,
        "wall_seconds": time.perf_counter() - start,
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "numpy": np.__version__,
            "python": platform.python_version(),
        },
    }
    (out / WARMUP_FILE).write_text(json.dumps(record, indent=2) + "\n")
    return record
