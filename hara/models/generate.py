"""Batched generation with the tiny models and the accuracy of a model folder on the mini benchmarks.

Prompts are left-padded so every row's last prompt token sits in the same column and generation appends to all rows
at once; rows stop at eos (later positions are pad). Sampling is seeded per benchmark, so the score of one
benchmark does not depend on which benchmarks were evaluated before it.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerBase, Qwen3ForCausalLM, StoppingCriteriaList
from transformers.generation.stopping_criteria import StopStringCriteria

from hara.data.format import PromptFormat, cut_at_stop, is_direct_answer
from hara.models.tokenizer import load_tokenizer
from hara.runinfo import set_threads

__all__ = [
    "generate_completions",
    "generate_ids",
    "generation_placement",
    "load_model",
    "measure_accuracy",
    "stop_string_criteria",
    "strip_padding",
]

#: tokenizer -> {stop strings: StopStringCriteria}. Building the criterion scans the whole vocabulary (1.3 s of CPU
#: for Qwen3's 151,669 tokens, 5 ms for the char tokenizer). transformers keeps a cache of its own, but keys it on
#: the order of ``get_vocab()``, which a fast tokenizer returns in a different order on every call, so it never hits
#: (transformers 5.17) and each ``generate`` call with ``stop_strings`` built it again: once per benchmark and per
#: checkpoint candidate. The criterion keeps no state between calls.
_STOP_CRITERIA: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def generation_placement(cuda: bool | None = None) -> tuple[str, torch.dtype]:
    """Where a model that only generates goes: the GPU in bf16 when the job has one (a Qwen3-8B in fp32 on the CPU
    of a GPU job would take hours and over 30 GB), else the CPU in fp32 (the tiny models, CI)."""
    cuda = torch.cuda.is_available() if cuda is None else cuda
    return ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)


def load_model(model_dir: str | Path) -> tuple[Qwen3ForCausalLM, PreTrainedTokenizerBase]:
    """Model (eval mode, placed by :func:`generation_placement`, CPU attention of :mod:`hara.models.attention`) and
    tokenizer from a local folder, never touching the hub."""
    from hara.models.attention import use_cpu_attention

    device, dtype = generation_placement()
    model = Qwen3ForCausalLM.from_pretrained(str(model_dir), local_files_only=True, dtype=dtype).to(device)
    return use_cpu_attention(model.eval()), load_tokenizer(model_dir)


@torch.no_grad()
def generate_ids(
    model: Qwen3ForCausalLM,
    tokenizer: PreTrainedTokenizerBase,
    prompts: list[str],
    *,
    greedy: bool = True,
    temperature: float = 1.0,
    top_p: float = 1.0,
    max_new_tokens: int = 256,
    seed: int = 0,
    batch_size: int = 256,
    stop: tuple[str, ...] = (),
) -> list[list[int]]:
    """New token ids per prompt, in order: at most ``max_new_tokens``, ending at the first eos (kept) if any, or
    at the end of the first ``stop`` string (its tokens kept: :func:`generate_completions` cuts the text).
    transformers also matches a stop string that begins inside the prompt; vLLM only looks at the completion, so
    a stop sequence should not be able to start with the prompt's last characters (``\\nQuestion:`` after
    ``Answer:`` cannot).

    ``greedy`` picks the arg-max token; otherwise tokens are sampled at ``temperature`` within nucleus ``top_p``.
    The torch RNG is seeded with ``seed`` at the start, so the same call gives the same ids.
    """
    torch.manual_seed(seed)
    sampling = {} if greedy else {"temperature": temperature, "top_p": top_p, "top_k": 0}
    if stop:
        sampling["stopping_criteria"] = stop_string_criteria(tokenizer, stop)
    eos = tokenizer.eos_token_id
    rows = []
    for start in range(0, len(prompts), batch_size):
        batch = tokenizer(
            prompts[start : start + batch_size],
            add_special_tokens=False,
            padding=True,
            padding_side="left",
            return_tensors="pt",
        ).to(model.device)
        output = model.generate(
            **batch,
            do_sample=not greedy,
            max_new_tokens=max_new_tokens,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=eos,
            **sampling,
        )
        for row in output[:, batch["input_ids"].shape[1] :].tolist():
            if eos in row:
                rows.append(row[: row.index(eos) + 1])  # after eos there is only padding
            else:  # a row ended by a stop string is padded from there on
                rows.append(strip_padding(row, tokenizer.pad_token_id) if stop else row)
    return rows


def stop_string_criteria(tokenizer: PreTrainedTokenizerBase, stop: tuple[str, ...] | list[str]) -> StoppingCriteriaList:
    """What ``generate(stop_strings=stop, tokenizer=tokenizer)`` would build (it matches stop strings on the decoded
    tokens), built once per tokenizer and stop strings: see :data:`_STOP_CRITERIA`."""
    built = _STOP_CRITERIA.setdefault(tokenizer, {})
    key = tuple(stop)
    if key not in built:
        built[key] = StopStringCriteria(tokenizer, list(key))
    return StoppingCriteriaList([built[key]])


def strip_padding(row: list[int], pad: int) -> list[int]:
    """``row`` without its trailing pad tokens."""
    end = len(row)
    while end and row[end - 1] == pad:
        end -= 1
    return row[:end]


def generate_completions(
    model: Qwen3ForCausalLM, tokenizer: PreTrainedTokenizerBase, prompts: list[str], **kwargs
) -> list[str]:
    """Completion text per prompt (special tokens removed, cut before the first ``stop`` string); keyword arguments
    as in :func:`generate_ids`."""
    texts = tokenizer.batch_decode(generate_ids(model, tokenizer, prompts, **kwargs), skip_special_tokens=True)
    return [cut_at_stop(text, kwargs.get("stop", ())) for text in texts]


def measure_accuracy(
    model_dir: str | Path,
    benchmarks: dict[str, list[dict]],
    *,
    greedy: bool,
    temperature: float = 1.0,
    top_p: float = 1.0,
    max_new_tokens: int = 256,
    seed: int = 0,
    threads: int = 1,
    limit: int | None = None,
    reward_fn: Callable[[str, str], float] | None = None,
    prompt: PromptFormat = PromptFormat(),
) -> dict:
    """Mean reward (accuracy) per benchmark of the model in ``model_dir``, and their unweighted average.

    Each benchmark is a list of records with ``problem`` and ``answer``; ``limit`` keeps the first n of each.
    Completions are scored with ``reward_fn(completion, gold)``, by default the RL reward
    (``hara.boxed_answer.math_reward``: math-verify on the last ``\\boxed{}``). ``boxed`` is the share of completions
    that contain a ``\\boxed{`` at all, i.e. that follow the answer format; ``direct`` the share that are a bare
    boxed answer with no working (:func:`hara.data.format.is_direct_answer`) and ``direct_correct`` the share that
    are both direct and right, so accuracy splits into direct and worked answers. ``prompt`` is the config's
    prompt format (template and stop sequences).
    """
    if reward_fn is None:
        from hara.boxed_answer import math_reward as reward_fn
    set_threads(threads)
    model, tokenizer = load_model(model_dir)
    start = time.perf_counter()
    accuracy, boxed, direct, direct_correct, counts = {}, {}, {}, {}, {}
    for name, records in benchmarks.items():
        records = records[:limit] if limit is not None else records
        if not records:
            raise ValueError(f"benchmark {name!r} has no records")
        texts = generate_completions(
            model,
            tokenizer,
            [prompt.prompt(r["problem"]) for r in records],
            greedy=greedy,
            temperature=temperature,
            top_p=top_p,
            max_new_tokens=max_new_tokens,
            seed=seed,
            stop=prompt.stop,
        )
        rewards = [reward_fn(text, str(r["answer"])) for text, r in zip(texts, records)]
        accuracy[name] = sum(rewards) / len(rewards)
        boxed[name] = sum("\\boxed{" in text for text in texts) / len(texts)
        is_direct = [is_direct_answer(text) for text in texts]
        direct[name] = sum(is_direct) / len(texts)
        direct_correct[name] = sum(r for r, d in zip(rewards, is_direct) if d) / len(texts)
        counts[name] = len(records)
    return {
        "accuracy": accuracy,
        "average": sum(accuracy.values()) / len(accuracy),
        "boxed": boxed,
        "direct": direct,
        "direct_correct": direct_correct,
        "n": counts,
        "greedy": greedy,
        "temperature": None if greedy else temperature,
        "top_p": None if greedy else top_p,
        "max_new_tokens": max_new_tokens,
        "seed": seed,
        "threads": threads,
        "model_dir": str(model_dir),
        "seconds": time.perf_counter() - start,
    }
