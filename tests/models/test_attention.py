"""The CPU attention (hara.models.attention): the grouped kernel in no-grad passes changes no number, gradients keep
transformers' path, and every CPU model that generates or trains uses it."""

from __future__ import annotations

import json

import pytest
import torch

from hara.models.attention import CPU_ATTENTION, use_cpu_attention
from hara.models.generate import load_model
from hara.models.tiny import build_tiny_model
from hara.models.tokenizer import build_tokenizer
from hara.rlvr.policy import load_policy

PROMPTS = ["Question: What is 2 + 2?\nAnswer:", "Question: Find gcd(12, 18) and explain.\nAnswer:", "Q"]


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer("char")


@pytest.fixture()
def pair(tokenizer):
    """The same random tiny-s (4 query heads on 2 key / value heads) with transformers' sdpa and with ours."""
    reference, ours = (build_tiny_model("tiny-s", tokenizer, seed=3).eval() for _ in range(2))
    assert reference.config.num_attention_heads > reference.config.num_key_value_heads
    use_cpu_attention(ours)
    assert reference.config._attn_implementation == "sdpa" and ours.config._attn_implementation == CPU_ATTENTION
    return reference, ours


def sample(model, tokenizer, **kwargs):
    batch = tokenizer(PROMPTS, add_special_tokens=False, padding=True, padding_side="left", return_tensors="pt")
    assert not batch["attention_mask"].all()  # left padding: the masked case transformers repeats heads for
    torch.manual_seed(0)
    return model.generate(
        **batch,
        do_sample=True,
        temperature=1.0,
        top_k=0,
        max_new_tokens=24,
        pad_token_id=tokenizer.pad_token_id,
        return_dict_in_generate=True,
        **kwargs,
    )


def test_sampled_generation_gives_the_same_ids_logits_and_hidden_states(pair, tokenizer):
    reference, ours = (sample(m, tokenizer, output_logits=True, output_hidden_states=True) for m in pair)
    assert torch.equal(reference.sequences, ours.sequences)
    assert all(torch.equal(a, b) for a, b in zip(reference.logits, ours.logits))
    assert all(
        torch.equal(a, b)
        for step_a, step_b in zip(reference.hidden_states, ours.hidden_states)
        for a, b in zip(step_a, step_b)
    )


def test_gradients_keep_transformers_path(pair, tokenizer):
    batch = tokenizer(PROMPTS, add_special_tokens=False, padding=True, padding_side="left", return_tensors="pt")
    grads = []
    for model in pair:
        model.zero_grad()
        model(**batch).logits.sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*grads))


def test_models_loaded_on_the_cpu_generate_with_it_and_do_not_save_it(tmp_path, tokenizer):
    build_tiny_model("tiny-s", tokenizer, seed=0).save_pretrained(tmp_path / "base")
    tokenizer.save_pretrained(tmp_path / "base")
    generating, _ = load_model(tmp_path / "base")
    training, _ = load_policy(tmp_path / "base")
    assert generating.config._attn_implementation == CPU_ATTENTION == training.config._attn_implementation
    training.save_pretrained(tmp_path / "saved")
    saved = json.loads((tmp_path / "saved" / "config.json").read_text(encoding="utf-8"))
    assert CPU_ATTENTION not in json.dumps(saved)


def test_a_model_bound_for_a_gpu_keeps_sdpa(tokenizer, monkeypatch):
    """On a GPU machine (the cluster path) the masked grouped kernel would fall back to SDPA's slow math kernel, so a
    model loaded on its CPU before moving to the GPU keeps transformers' sdpa."""
    model = build_tiny_model("tiny-s", tokenizer, seed=0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert use_cpu_attention(model).config._attn_implementation == "sdpa"
