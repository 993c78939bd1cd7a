"""Numerical faults inside real HaraGRPOTrainer steps on the smoke config: NaN / Inf hidden states, all-identical
rollouts and zero-length (EOS-first) completions keep the loss and the advantages finite; broken groups fall back
to w = 1 and are counted in the HarA diagnostics written to metrics.jsonl."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer

import hara.rlvr.trainer as trainer_module
from hara.config import load_config
from hara.rlvr.metrics_sink import MetricsCallback
from hara.rlvr.session import build_trainer
from tests.helpers import SMOKE

GROUP = 4  # config/smoke.yaml's training.group_size
PROMPTS = 3
pytestmark = pytest.mark.slow


SEEN: list[list[str]] = []  # the completions of every step, as the reward function received them


def alternating_reward(completions, **kwargs):
    """Half of every group right, half wrong, whatever was generated: each group carries signal, so HarA really
    reweights it (identical or empty rollouts included)."""
    SEEN.append([str(c) for c in completions])
    return [float(i % 2) for i in range(len(completions))]


def run_steps(tiny_base: Path, out: Path, steps: int = 2, top_p: float = 1.0, eos_bias: float | None = None):
    """``steps`` real hara_tok steps (3 prompts x 4 rollouts each); returns (trainer, metrics.jsonl lines)."""
    SEEN.clear()
    config = copy.deepcopy(load_config(SMOKE))
    config["training"].update(steps=steps, save_steps=1000, prompts_per_step=PROMPTS, top_p=top_p)
    tokenizer = AutoTokenizer.from_pretrained(tiny_base, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(tiny_base, local_files_only=True)
    data = Dataset.from_list([{"prompt": f"Question: {a}+{a}?\nAnswer:", "answer": str(2 * a)} for a in (3, 5, 7)])
    trainer = build_trainer(
        config,
        "grpo",
        "hara_tok",
        0,
        model,
        tokenizer,
        data,
        out,
        reward_funcs=[alternating_reward],
        callbacks=[MetricsCallback(out / "metrics.jsonl", None)],
    )
    if eos_bias is not None:  # EOS made about as likely as every other token together: many completions are empty
        trainer.generation_config.sequence_bias = {(tokenizer.eos_token_id,): eos_bias}
    trainer.train()
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == steps
    return trainer, lines


def assert_finite_step(trainer, lines: list[dict]) -> None:
    assert all(math.isfinite(line["train/loss"]) for line in lines), lines
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters()), "a weight became NaN/Inf"
    assert torch.isfinite(trainer.last_advantages["token"]).all()


def plain_advantages(trainer) -> torch.Tensor:
    last = trainer.last_advantages
    return last["sequence"][:, None] * last["mask"]


def test_nan_and_inf_hidden_states_fall_back_and_are_counted(tiny_base, tmp_path, monkeypatch):
    real = trainer_module.apply_weighting

    def poisoned(method, advantages, mask, group_ids, rewards, context):
        """Rollout 0's captured hidden states get a NaN, rollout 5's an Inf (every step)."""
        hidden = context.hidden_states.clone()
        hidden[0, 0, 0] = float("nan")
        hidden[GROUP + 1, 0, :] = float("inf")
        context.hidden_states = hidden
        return real(method, advantages, mask, group_ids, rewards, context)

    monkeypatch.setattr(trainer_module, "apply_weighting", poisoned)
    trainer, lines = run_steps(tiny_base, tmp_path)
    assert_finite_step(trainer, lines)
    # HarA's groups are the outcome groups (right / wrong rollouts of one prompt): the NaN breaks the wrong rollouts
    # of prompt 0 (rows 0, 2), the Inf the right rollouts of prompt 1 (rows 5, 7); both fall back, every step
    assert [line["hara/nan_fallbacks"] for line in lines] == [2.0, 2.0]
    token, plain = trainer.last_advantages["token"], plain_advantages(trainer)
    broken = torch.tensor([0, 2, GROUP + 1, GROUP + 3])
    clean = torch.tensor([i for i in range(PROMPTS * GROUP) if i not in broken.tolist()])
    torch.testing.assert_close(token[broken], plain[broken])  # fallback: w = 1, the host's advantages
    assert not torch.allclose(token[clean], plain[clean])  # the other groups are still reweighted


def test_all_identical_rollouts_keep_plain_advantages(tiny_base, tmp_path):
    trainer, lines = run_steps(tiny_base, tmp_path, top_p=1e-9)  # nucleus of one token: greedy, identical rollouts
    for step in SEEN:
        assert all(len(set(step[i : i + GROUP])) == 1 for i in range(0, len(step), GROUP)), step
    assert_finite_step(trainer, lines)
    # identical rollouts have no geometry to reweight by: w = 1, i.e. exactly the host's advantages
    torch.testing.assert_close(trainer.last_advantages["token"], plain_advantages(trainer))
    assert all(line["hara/w_std"] == 0.0 for line in lines)


def test_zero_length_completions_keep_the_step_finite(tiny_base, tmp_path):
    vocab = AutoTokenizer.from_pretrained(tiny_base, local_files_only=True).vocab_size
    trainer, lines = run_steps(tiny_base, tmp_path, eos_bias=math.log(vocab))
    lengths = trainer.last_advantages["mask"].sum(1)
    assert (lengths == 1).any(), f"no EOS-first completion was sampled: {lengths.tolist()}"  # mask counts the EOS
    assert (lengths > 1).any(), "every completion empty: the groups would not mix lengths"
    assert_finite_step(trainer, lines)
    assert min(line["trl/completions/min_length"] for line in lines) == 1.0
