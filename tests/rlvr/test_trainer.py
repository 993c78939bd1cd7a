"""The TRL adapter: every preset x every registry method trains; HarA keeps signs and changes token advantages;
hidden states and entropies are captured at the right positions; `hara train` writes its outputs and resumes after a
SIGKILL to the same final weights and metrics as an uninterrupted run."""

from __future__ import annotations

import copy
import importlib.util
import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from datasets import Dataset
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from hara.cli import main
from hara.config import ConfigError, load_config
from hara.methods import methods
from hara.models.capture import GenerationRecorder, capture_context, chunked_token_entropies
from hara.rlvr.presets import PRESETS
from hara.rlvr.session import build_trainer
from hara.rlvr.trainer import equal_reward_groups, group_ids_of
from tests.helpers import REPO, SMOKE, smoke_train_args

HARA_METHODS = [m for m in sorted(methods()) if m.startswith("hara_")]


def parity_reward(completions, **kwargs):
    """A deterministic reward that splits random-model rollouts into both outcomes."""
    return [float(sum(map(ord, c)) % 2) for c in completions]


def smoke_config() -> dict:
    config = copy.deepcopy(load_config(SMOKE))
    config["training"]["save_steps"] = 1000  # no checkpoints in the matrix (time)
    return config


@pytest.mark.parametrize("method", sorted(methods()))
@pytest.mark.parametrize("rlvr", sorted(PRESETS.names()))
def test_every_preset_and_method_trains(tiny_base, tmp_path, rlvr, method):
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(tiny_base, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(tiny_base, local_files_only=True)
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    data = Dataset.from_list(
        [
            {
                "prompt": f"Question: {a}+{a}?\nAnswer:",
                "answer": str(2 * a),
                "solution": f"{a} + {a} = {2 * a}.",
                "source": "synthetic",
            }
            for a in (3, 5)
        ]
    )
    trainer = build_trainer(
        smoke_config(), rlvr, method, 0, model, tokenizer, data, tmp_path, reward_funcs=[parity_reward]
    )
    trainer.train()

    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
    assert any(not torch.equal(before[k], v) for k, v in model.named_parameters()), "no parameter moved"
    last = trainer.last_advantages
    seq, tok, mask = last["sequence"], last["token"], last["mask"].bool()
    assert tok.shape == mask.shape and torch.all(tok[~mask] == 0)
    live = (seq != 0)[:, None] & mask
    assert live.any(), "no group with mixed rewards: the checks below would be vacuous"
    if method in HARA_METHODS:
        plain = seq[:, None] * mask
        assert torch.all(tok * seq[:, None] >= 0), "HarA flipped an advantage's sign"
        assert not torch.allclose(tok[live], plain[live]), "HarA left GRPO's token advantages unchanged"


def test_group_ids_follow_repeat_sampler_blocks():
    assert group_ids_of(["a", "a", "b", "b"], 2, offset=10).tolist() == [10, 10, 11, 11]
    with pytest.raises(AssertionError, match="mix prompts"):
        group_ids_of(["a", "b", "b", "b"], 2)
    with pytest.raises(AssertionError, match="whole groups"):
        group_ids_of(["a", "a", "a"], 2)


def test_equal_reward_groups_are_flagged():
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0])
    assert equal_reward_groups(rewards, torch.tensor([0, 0, 1, 1, 2, 2])).tolist() == [
        True,
        True,
        False,
        False,
        True,
        True,
    ]


def test_dynamic_sampling_masks_equal_groups_out_of_the_loss(tiny_base, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(tiny_base, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(tiny_base, local_files_only=True)
    data = Dataset.from_list([{"prompt": "Question: 1+1?\nAnswer:", "answer": "2"}])
    trainer = build_trainer(
        smoke_config(),
        "dapo",
        "none",
        0,
        model,
        tokenizer,
        data,
        tmp_path,
        reward_funcs=[lambda completions, **kw: [1.0] * len(completions)],
    )
    output = {"completion_mask": torch.ones(4, 3, dtype=torch.long)}
    trainer._mask_equal_reward_groups(output, torch.tensor([1.0, 1.0, 0.0, 1.0]), torch.tensor([0, 0, 1, 1]))
    assert output["tool_mask"][:, 0].tolist() == [0, 0, 1, 1]  # group 0 all equal: out of the loss mask
    assert int(output["num_items_in_batch"]) == 6  # and out of DAPO's token count
    assert trainer._metrics["train"]["train/dynamic_sampling_dropped"] == [0.5]


def test_capture_aligns_hidden_states_and_entropies_with_completion_tokens(tiny_base):
    model = AutoModelForCausalLM.from_pretrained(tiny_base, local_files_only=True).eval()
    gen = torch.Generator().manual_seed(0)
    prompt_ids, completion_ids = (
        torch.randint(3, 200, (3, 5), generator=gen),
        torch.randint(3, 200, (3, 4), generator=gen),
    )
    prompt_mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 1, 1, 1, 1]])  # TRL left-pads prompts
    completion_mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]])
    hidden, entropies = capture_context(
        model, prompt_ids, prompt_mask, completion_ids, completion_mask, 0, frozenset({"hidden", "entropy"})
    )
    with torch.no_grad():
        ref = model(
            input_ids=torch.cat([prompt_ids, completion_ids], 1),
            attention_mask=torch.cat([prompt_mask, completion_mask], 1),
            output_hidden_states=True,
        )
    # position 4 (last prompt token) predicts completion token 0, ..., position 7 predicts token 3
    torch.testing.assert_close(hidden, ref.hidden_states[1][:, 4:8])  # hidden_states[1]: output of block 0
    logp = torch.log_softmax(ref.logits[:, 4:8], -1)
    torch.testing.assert_close(entropies, -(logp.exp() * logp).sum(-1))
    chunked = capture_context(
        model, prompt_ids, prompt_mask, completion_ids, completion_mask, 0, frozenset({"hidden", "entropy"}), chunk=2
    )  # rows 0-1, then row 2
    torch.testing.assert_close(chunked[0], hidden)
    torch.testing.assert_close(chunked[1], entropies)
    assert capture_context(model, prompt_ids, prompt_mask, completion_ids, completion_mask, -1, frozenset()) == (
        None,
        None,
    )
    hidden_only, no_entropy = capture_context(
        model, prompt_ids, prompt_mask, completion_ids, completion_mask, -1, frozenset({"hidden"})
    )
    assert hidden_only.shape == (3, 4, model.config.hidden_size) and no_entropy is None


def test_the_default_hidden_states_are_the_last_layer_after_the_final_norm(tiny_base):
    """method.md: h_t is the last layer after the final norm, what output_hidden_states[-1] gives (and what the LM
    head reads); the last decoder block's output before the norm stays available as hidden_layer -1."""
    model = AutoModelForCausalLM.from_pretrained(tiny_base, local_files_only=True).eval()
    prompt_ids, completion_ids = torch.randint(3, 200, (2, 5)), torch.randint(3, 200, (2, 4))
    prompt_mask, completion_mask = torch.ones(2, 5, dtype=torch.long), torch.ones(2, 4, dtype=torch.long)
    with torch.no_grad():
        ref = model(input_ids=torch.cat([prompt_ids, completion_ids], 1), output_hidden_states=True)
    default = load_config(REPO / "config" / "default.yaml")["hara"]["hidden_layer"]
    hidden, _ = capture_context(
        model, prompt_ids, prompt_mask, completion_ids, completion_mask, default, frozenset({"hidden"})
    )
    torch.testing.assert_close(hidden, ref.hidden_states[-1][:, 4:8])
    block, _ = capture_context(
        model, prompt_ids, prompt_mask, completion_ids, completion_mask, -1, frozenset({"hidden"})
    )
    torch.testing.assert_close(model.model.norm(block), hidden)
    assert not torch.allclose(block, hidden)
    with GenerationRecorder(model, default, frozenset({"hidden"})) as recorder, torch.no_grad():
        model(input_ids=prompt_ids)
    torch.testing.assert_close(recorder.result()[0][:, 0], ref.hidden_states[-1][:, 4])


def test_generation_recording_equals_an_extra_forward(tiny_base):
    """What the hooks see while `generate` samples equals what a separate forward over prompt + completion gives
    at the positions that predict each completion token (left-padded prompts, sequences ending at different steps)."""
    model = AutoModelForCausalLM.from_pretrained(tiny_base, local_files_only=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(tiny_base, local_files_only=True)
    prompts = [tokenizer(text)["input_ids"] for text in ("Question: 12+7?\nAnswer:", "Q: 3*4?", "Solve x+1=3.\n")]
    width = max(map(len, prompts))
    prompt_ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(p)) + p for p in prompts])
    prompt_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    needs = frozenset({"hidden", "entropy"})
    torch.manual_seed(0)
    with GenerationRecorder(model, 0, needs) as recorder, torch.no_grad():
        generated = model.generate(
            input_ids=prompt_ids,
            attention_mask=prompt_mask,
            do_sample=True,
            max_new_tokens=12,
            temperature=1.3,
            pad_token_id=tokenizer.pad_token_id,
        )
    completion_ids = generated[:, width:]
    is_eos = completion_ids == tokenizer.eos_token_id
    ends = torch.where(is_eos.any(1), is_eos.int().argmax(1), completion_ids.shape[1])
    completion_mask = (torch.arange(completion_ids.shape[1])[None] <= ends[:, None]).long()
    hidden, entropies = recorder.result()
    assert hidden.shape[:2] == entropies.shape == completion_ids.shape  # one position per generated token
    expected = capture_context(model, prompt_ids, prompt_mask, completion_ids, completion_mask, 0, needs)
    live = completion_mask.bool()
    torch.testing.assert_close(hidden[live], expected[0][live], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(entropies[live], expected[1][live], rtol=1e-4, atol=1e-4)
    assert not model.model.layers[0]._forward_hooks and not model.lm_head._forward_hooks  # removed on exit


def test_chunked_entropies_equal_the_full_logits_entropies_for_any_chunk():
    """Chunks that do not divide T, a chunk of 1 and one larger than T all give -sum p log p of the full logits."""
    gen = torch.Generator().manual_seed(0)
    lm_head = torch.nn.Linear(16, 503, bias=False)
    with torch.no_grad():
        lm_head.weight.normal_(0.0, 1.0, generator=gen)
    hidden = torch.randn(3, 37, 16, generator=gen)
    logp = torch.log_softmax(lm_head(hidden), -1)
    expected = -(logp.exp() * logp).sum(-1)
    for chunk in (1, 5, 16, 37, 100):
        torch.testing.assert_close(chunked_token_entropies(hidden, lm_head, chunk), expected, rtol=0, atol=1e-5)


def test_entropy_capture_never_holds_logits_of_the_whole_completion(tiny_base):
    """The LM head sees at most ``entropy_chunk`` positions per call (the former capture asked the model for the
    logits of all T + 1 positions at once: (rows, T + 1, V), 60 GB per tensor at the paper's micro-batch)."""
    model = AutoModelForCausalLM.from_pretrained(tiny_base, local_files_only=True).eval()
    gen = torch.Generator().manual_seed(1)
    prompt_ids, completion_ids = (
        torch.randint(3, 200, (2, 5), generator=gen),
        torch.randint(3, 200, (2, 11), generator=gen),
    )
    prompt_mask, completion_mask = torch.ones(2, 5, dtype=torch.long), torch.ones(2, 11, dtype=torch.long)
    widths = []
    handle = model.lm_head.register_forward_hook(lambda module, args, out: widths.append(out.shape[1]))
    try:
        _, entropies = capture_context(
            model, prompt_ids, prompt_mask, completion_ids, completion_mask, 0, frozenset({"entropy"}), entropy_chunk=4
        )
    finally:
        handle.remove()
    assert max(widths) <= 4 and entropies.shape == (2, 11)
    with torch.no_grad():
        logits = model(input_ids=torch.cat([prompt_ids, completion_ids], 1)).logits[:, 4:15]
    logp = torch.log_softmax(logits, -1)
    torch.testing.assert_close(entropies, -(logp.exp() * logp).sum(-1), rtol=0, atol=1e-5)


def test_hidden_states_are_kept_in_the_models_dtype(tiny_base):
    """A bf16 policy (the GPU path) gives bf16 hidden states, half of fp32's memory; the novelty code upcasts."""
    model = AutoModelForCausalLM.from_pretrained(tiny_base, local_files_only=True, dtype=torch.bfloat16).eval()
    prompt_ids, completion_ids = torch.randint(3, 200, (2, 5)), torch.randint(3, 200, (2, 4))
    masks = torch.ones(2, 5, dtype=torch.long), torch.ones(2, 4, dtype=torch.long)
    hidden, entropies = capture_context(
        model, prompt_ids, masks[0], completion_ids, masks[1], "final_norm", frozenset({"hidden", "entropy"})
    )
    assert hidden.dtype == torch.bfloat16 and entropies.dtype == torch.float32
    with GenerationRecorder(model, "final_norm", frozenset({"hidden"})) as recorder, torch.no_grad():
        model(input_ids=prompt_ids)
    assert recorder.result()[0].dtype == torch.bfloat16


def test_the_extra_forward_runs_under_the_accelerators_autocast(tiny_base, tmp_path, monkeypatch):
    data = Dataset.from_list([{"prompt": f"Question: {a}+{a}?\nAnswer:", "answer": str(2 * a)} for a in (3, 5)])
    tokenizer = AutoTokenizer.from_pretrained(tiny_base, local_files_only=True)
    config = smoke_config()
    config["hara"]["capture"], config["training"]["steps"] = "forward", 1
    model = AutoModelForCausalLM.from_pretrained(tiny_base, local_files_only=True)
    trainer = build_trainer(
        config, "grpo", "hara_tok", 0, model, tokenizer, data, tmp_path, reward_funcs=[parity_reward]
    )
    entered, autocast = [], trainer.accelerator.autocast

    def recording_autocast(*args, **kwargs):
        entered.append(True)
        return autocast(*args, **kwargs)

    monkeypatch.setattr(trainer.accelerator, "autocast", recording_autocast)
    monkeypatch.setattr(
        "hara.rlvr.trainer.capture_context",
        lambda *args, **kwargs: (
            (_ for _ in ()).throw(AssertionError("outside autocast"))
            if not entered
            else capture_context(*args, **kwargs)
        ),
    )
    trainer.train()
    assert entered and trainer.state.log_history[0]["hara/capture_from_generation"] == 0.0


def test_the_trainer_reduce_scatters_every_micro_batch_and_waits_out_a_checkpoint_save(tiny_base, tmp_path):
    """accelerate's sync_each_batch reaches the trainer through the GRPOConfig it builds (under FSDP2 transformers'
    no_sync would otherwise hold a whole unsharded gradient per GPU across the micro-batches), and the collective
    timeout is sized for rank 0's FULL_STATE_DICT save at training.checkpoint_write_mb_s."""
    from hara.rlvr.checkpoints import collective_timeout_s

    data = Dataset.from_list([{"prompt": "Question: 1+1?\nAnswer:", "answer": "2"}])
    tokenizer = AutoTokenizer.from_pretrained(tiny_base, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(tiny_base, local_files_only=True)
    config = smoke_config()
    trainer = build_trainer(config, "grpo", "none", 0, model, tokenizer, data, tmp_path, reward_funcs=[parity_reward])
    assert trainer.args.accelerator_config.gradient_accumulation_kwargs["sync_each_batch"] is True
    assert trainer.accelerator.gradient_state.plugin_kwargs["sync_each_batch"] is True
    params = sum(p.numel() for p in model.parameters())
    assert trainer.args.ddp_timeout == collective_timeout_s(params, config["training"]["checkpoint_write_mb_s"])
    assert collective_timeout_s(8_190_735_360, 200) > 1800  # 8B: torch's 30 minutes are too short at 200 MB/s


def test_the_process_group_starts_with_the_save_sized_timeout(tiny_base, monkeypatch):
    """Under `accelerate launch` the group starts before the trainer exists (so that only rank 0 reads the weights):
    the timeout goes to that PartialState, since the trainer's ddp_timeout cannot reach a group already started."""
    import accelerate

    from hara.rlvr.checkpoints import collective_timeout_s
    from hara.rlvr.policy import start_process_group, stored_params

    started = []
    monkeypatch.setattr(accelerate, "PartialState", lambda **kwargs: started.append(kwargs))
    monkeypatch.setenv("WORLD_SIZE", "2")
    config = smoke_config()
    start_process_group(tiny_base, config)
    params = AutoModelForCausalLM.from_pretrained(tiny_base, local_files_only=True).num_parameters()
    assert stored_params(tiny_base) == params
    expected = collective_timeout_s(params, config["training"]["checkpoint_write_mb_s"])
    assert [kwargs["timeout"].total_seconds() for kwargs in started] == [expected]


@pytest.mark.parametrize("method", ["hara_tok", "gtpo"])
def test_trainer_takes_context_from_generation_like_an_extra_forward(tiny_base, tmp_path, method):
    """One training step captured during generation and one with the extra forward give the same advantages."""
    data = Dataset.from_list([{"prompt": f"Question: {a}+{a}?\nAnswer:", "answer": str(2 * a)} for a in (3, 5)])
    tokenizer = AutoTokenizer.from_pretrained(tiny_base, local_files_only=True)
    results = {}
    for capture in ("generation", "forward"):
        config = smoke_config()
        config["hara"]["capture"], config["training"]["steps"] = capture, 1
        model = AutoModelForCausalLM.from_pretrained(tiny_base, local_files_only=True)
        trainer = build_trainer(
            config, "grpo", method, 0, model, tokenizer, data, tmp_path / capture, reward_funcs=[parity_reward]
        )
        trainer.train()
        results[capture] = (trainer.last_advantages, trainer.state.log_history[0]["hara/capture_from_generation"])
    (recorded, from_generation), (forward, from_forward) = results["generation"], results["forward"]
    assert (from_generation, from_forward) == (1.0, 0.0)
    assert torch.equal(recorded["mask"], forward["mask"])  # same seed, same rollouts
    torch.testing.assert_close(recorded["token"], forward["token"], rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("method", ["hara_tok", "gtpo"])
def test_where_generation_cannot_be_hooked_trls_logprob_pass_carries_the_capture(
    tiny_base, tmp_path, method, monkeypatch
):
    """Under vLLM (simulated: generation not hookable) TRL already runs a no-grad pass over prompt + completion for
    the old log-probs (here because num_iterations 2 misaligns generation and optimisation, as vLLM's importance
    sampling does on the cluster); the capture rides on it instead of an extra forward, with the same advantages."""
    data = Dataset.from_list([{"prompt": f"Question: {a}+{a}?\nAnswer:", "answer": str(2 * a)} for a in (3, 5)])
    tokenizer = AutoTokenizer.from_pretrained(tiny_base, local_files_only=True)
    monkeypatch.setattr("hara.rlvr.trainer.HaraGRPOTrainer._records_during_generation", lambda self: False)
    results, forwards = {}, []
    original = capture_context
    monkeypatch.setattr("hara.rlvr.trainer.capture_context", lambda *a, **k: forwards.append(1) or original(*a, **k))
    for capture in ("generation", "forward"):
        config = smoke_config()
        config["hara"]["capture"], config["training"]["steps"] = capture, 1
        config["training"]["num_iterations"] = 2
        model = AutoModelForCausalLM.from_pretrained(tiny_base, local_files_only=True)
        trainer = build_trainer(
            config, "grpo", method, 0, model, tokenizer, data, tmp_path / capture, reward_funcs=[parity_reward]
        )
        forwards.clear()
        trainer.train()
        logged = trainer.state.log_history[0]
        results[capture] = (trainer.last_advantages, logged["hara/capture_from_logprob_pass"], len(forwards))
    (ridden, from_pass, extra_passes), (forward, from_forward, forward_passes) = (
        results["generation"],
        results["forward"],
    )
    assert (from_pass, from_forward, extra_passes) == (1.0, 0.0, 0) and forward_passes > 0
    assert torch.equal(ridden["mask"], forward["mask"])  # same seed, same rollouts
    torch.testing.assert_close(ridden["token"], forward["token"], rtol=1e-4, atol=1e-5)


def oracle_trainer(tiny_base, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(tiny_base, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(tiny_base, local_files_only=True)
    data = Dataset.from_list(
        [{"prompt": "Question: 2+2?\nAnswer:", "answer": "4", "solution": "2 + 2 = 4.", "source": "synthetic"}]
    )
    return build_trainer(
        smoke_config(), "grpo", "oracle_steps", 0, model, tokenizer, data, tmp_path, reward_funcs=[parity_reward]
    )


def test_the_step_oracle_reaches_the_method_as_the_tokens_of_the_wrong_step(tiny_base, tmp_path):
    trainer = oracle_trainer(tiny_base, tmp_path)
    assert trainer.needs == frozenset() and trainer.reads_steps  # nothing is captured from the model for it
    texts = [
        " 3 * 4 = 12. 12 + 5 = 18. The answer is \\boxed{18}.",
        (" 3 * 4 = 12. 12 + 5 = 17. The answer is \\boxed{17}."),
        " The answer is \\boxed{9}.",
        " zzz",
    ]
    rows = [trainer.processing_class(t, add_special_tokens=False)["input_ids"] for t in texts]
    ids = torch.zeros(len(rows), max(map(len, rows)), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, : len(row)], mask[i, : len(row)] = torch.tensor(row), 1
    inputs = [{"prompt": "p", "answer": "17", "solution": "3 * 4 = 12. 12 + 5 = 17.", "source": "synthetic"}] * 4
    starts, ends, steps = trainer._wrong_spans(
        {"completion_ids": ids, "completion_mask": mask}, inputs, torch.tensor([0.0, 1.0, 0.0, 0.0])
    )
    # the char tokenizer: one token per character, so token indices are the character offsets of the wrong step:
    # a worked step runs to the next step's start, a wrong answer step is its boxed value only
    assert starts.tolist() == [texts[0].index("12 + 5"), -1, texts[2].index("9"), -1]
    assert ends.tolist() == [texts[0].index("The answer"), -1, texts[2].index("9") + 1, -1]
    assert steps.tolist() == [1, -1, 0, -1]


def test_the_step_oracle_refuses_problems_from_the_hub_in_one_line(tiny_base, tmp_path):
    trainer = oracle_trainer(tiny_base, tmp_path)
    inputs = [{"prompt": "p", "answer": "4", "solution": "", "source": "HuggingFaceH4/MATH-500"}]
    ids = torch.tensor([[5, 6]])
    with pytest.raises(
        ValueError,
        match="^method 'oracle_steps' needs the synthetic world's reference steps; "
        "training problems from source 'HuggingFaceH4/MATH-500' have none",
    ):
        trainer._wrong_spans(
            {"completion_ids": ids, "completion_mask": torch.ones_like(ids)}, inputs, torch.tensor([0.0])
        )


def test_the_oracles_step_logs_the_gradient_it_moved_from_the_loss_pass(tiny_base, tmp_path, monkeypatch):
    """The host advantages ride along TRL's batch split into the loss, whose own log-probs weigh what moved."""
    data = Dataset.from_list(
        [
            {"prompt": f"Question: {a}+{a}?\nAnswer:", "answer": str(2 * a), "solution": "", "source": "synthetic"}
            for a in (3, 5)
        ]
    )
    tokenizer = AutoTokenizer.from_pretrained(tiny_base, local_files_only=True)
    config = smoke_config()
    config["training"]["steps"] = 2
    model = AutoModelForCausalLM.from_pretrained(tiny_base, local_files_only=True)
    trainer = build_trainer(
        config, "grpo", "oracle_step", 0, model, tokenizer, data, tmp_path, reward_funcs=[parity_reward]
    )
    # a random model writes no steps: every incorrect rollout is said to go wrong on its first two tokens
    monkeypatch.setattr(
        trainer, "_wrong_spans", lambda output, inputs, outcome: torch.tensor([[0, 2, 0]] * len(inputs)).T
    )
    trainer.train()
    logged = [line for line in trainer.state.log_history if "oracle/gradient_moved" in line]
    assert len(logged) == 2
    assert all(0 < line["oracle/gradient_moved"] and 0 < line["oracle/token_moved"] < 1 for line in logged)
    assert all(line["oracle/first_wrong_step_0"] == 1.0 for line in logged)


def test_method_without_context_captures_and_logs_nothing(tiny_base, tmp_path):
    data = Dataset.from_list([{"prompt": f"Question: {a}+{a}?\nAnswer:", "answer": str(2 * a)} for a in (3, 5)])
    tokenizer = AutoTokenizer.from_pretrained(tiny_base, local_files_only=True)
    config = smoke_config()
    config["training"]["steps"] = 1
    model = AutoModelForCausalLM.from_pretrained(tiny_base, local_files_only=True)
    trainer = build_trainer(config, "grpo", "none", 0, model, tokenizer, data, tmp_path, reward_funcs=[parity_reward])
    trainer.train()
    logged = trainer.state.log_history[0]
    assert "hara/capture_s" in logged and "hara/capture_from_generation" not in logged


def test_unconverged_transport_is_a_metric_every_step_and_a_warning_once(tiny_base, tmp_path, caplog):
    data = Dataset.from_list([{"prompt": f"Question: {a}+{a}?\nAnswer:", "answer": str(2 * a)} for a in (3, 5)])
    tokenizer = AutoTokenizer.from_pretrained(tiny_base, local_files_only=True)
    config = smoke_config()
    config["training"]["steps"] = 2
    config["hara"]["hara"].update(eps_rel=0.001, sinkhorn_max_iter=1, final_max_iter=1)  # 50 iterations: too few
    model = AutoModelForCausalLM.from_pretrained(tiny_base, local_files_only=True)
    trainer = build_trainer(
        config, "grpo", "hara_tok", 0, model, tokenizer, data, tmp_path, reward_funcs=[parity_reward]
    )
    with caplog.at_level("WARNING", logger="hara.rlvr.trainer"):
        trainer.train()
    steps = [line for line in trainer.state.log_history if "hara/sinkhorn_unconverged" in line]
    assert len(steps) == 2 and all(line["hara/sinkhorn_unconverged"] > 0 for line in steps)
    assert all(line["hara/sinkhorn_marginal_error"] > 5e-3 for line in steps)
    assert len([r for r in caplog.records if "did not reach hara.hara.marginal_tol" in r.message]) == 1


def train_args(base: Path, out: Path, tmp: Path, method: str = "hara_tok", rlvr: str = "grpo") -> list[str]:
    return [
        *smoke_train_args(method, 3, rlvr),
        "--out",
        str(out),
        "--base-model",
        str(base),
        "--set",
        f"tracking.mlflow_uri=sqlite:///{tmp}/mlflow.db",
        "--set",
        "training.steps=4",
        "--set",
        "training.save_steps=2",
        "--set",
        "data.train_size=20",
    ]


def test_hara_train_writes_model_metrics_and_provenance(tiny_base, tmp_path):
    out = tmp_path / "run"
    monitored = ["--set", "tracking.system_metrics.enabled=true", "--set", "tracking.system_metrics.interval_s=0.2"]
    assert main([*train_args(tiny_base, out, tmp_path, rlvr="dapo"), *monitored]) == 0
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2, 3, 4]
    from mlflow import MlflowClient  # MLflow's system metrics beside the loss (tracking.system_metrics)

    logged = (
        MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
        .get_run(json.loads((out / "mlflow_run.json").read_text())["run_id"])
        .data.metrics
    )
    assert {"system/cpu_utilization_percentage", "system/system_memory_usage_megabytes"} <= set(logged), logged
    for key in (
        "train/reward",
        "train/entropy",
        "train/response_length",
        "train/clip_fraction",
        "hara/w_std",
        "hara/novelty_mean",
        "time/step_s",
        "time/hara_s",
        "train/dynamic_sampling_dropped",
    ):
        assert all(key in line for line in lines), key
    from hara.tracking import RUN_KEYS, read_run_file

    model = AutoModelForCausalLM.from_pretrained(out / "final", local_files_only=True)
    AutoTokenizer.from_pretrained(out / "final", local_files_only=True)
    assert model.config.num_hidden_layers == 2
    assert sorted(p.name for p in (out / "checkpoints").glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    # next to checkpoints too, naming the same run in the same store (its relative store one folder further up)
    beside, run = (read_run_file(folder / "mlflow_run.json") for folder in (out / "checkpoints", out))
    assert {key: beside[key] for key in RUN_KEYS} == {key: run[key] for key in RUN_KEYS}
    info = json.loads((out / "run_info.json").read_text())
    assert (info["rlvr"], info["method"], info["train_seed"]) == ("dapo", "hara_tok", 3)
    assert (out / "resolved_config.yaml").is_file()
    # a second run of the same command is a no-op on a finished run
    assert main(train_args(tiny_base, out, tmp_path, rlvr="dapo")) == 0
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 4


KILLER = """
import os, signal, sys
from hara.rlvr.metrics_sink import MetricsCallback
original = MetricsCallback.on_log
def on_log(self, args, state, control, logs=None, **kwargs):
    original(self, args, state, control, logs=logs, **kwargs)
    if state.global_step == 3:  # after checkpoint-2 was saved and step 3 was logged
        os.kill(os.getpid(), signal.SIGKILL)
MetricsCallback.on_log = on_log
from hara.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _steady(line: dict) -> dict:
    """A metrics line without wall-clock timings (those differ between any two runs)."""
    return {k: v for k, v in line.items() if not (k.startswith("time/") or k.endswith("_s"))}


def test_sigkilled_run_resumes_to_the_uninterrupted_result(tiny_base, tmp_path):
    killed, clean = tmp_path / "killed", tmp_path / "clean"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    run = subprocess.run(
        [sys.executable, "-c", KILLER, *train_args(tiny_base, killed, tmp_path)],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == -signal.SIGKILL, run.stderr[-2000:]
    assert (killed / "checkpoints" / "checkpoint-2").is_dir() and not (killed / "final").exists()
    assert len((killed / "metrics.jsonl").read_text().splitlines()) == 3  # step 3 logged after the checkpoint
    run_id = json.loads((killed / "mlflow_run.json").read_text())["run_id"]

    assert main(train_args(tiny_base, killed, tmp_path)) == 0  # the same command again: resumes at step 2
    assert main(train_args(tiny_base, clean, tmp_path)) == 0

    resumed, reference = (
        load_file(killed / "final" / "model.safetensors"),
        load_file(clean / "final" / "model.safetensors"),
    )
    assert resumed.keys() == reference.keys()
    for key in reference:
        torch.testing.assert_close(resumed[key], reference[key], rtol=0, atol=0)
    a = [_steady(json.loads(x)) for x in (killed / "metrics.jsonl").read_text().splitlines()]
    b = [_steady(json.loads(x)) for x in (clean / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in a] == [1, 2, 3, 4] and a == b
    assert json.loads((killed / "mlflow_run.json").read_text())["run_id"] == run_id
    assert json.loads((killed / "run_info.json").read_text())["resumed_from"].endswith("checkpoint-2")


def test_a_finished_run_that_lost_final_after_the_prune_rebuilds_it_without_training(tiny_base, tmp_path, monkeypatch):
    """A job that exits non-zero after final/ is written and its checkpoints are pruned to their weights (a teardown
    crash, a TIMEOUT in the MLflow flush) loses final/ to Snakemake; FSDP cannot resume a pruned checkpoint, so
    before, every retry failed. Now the pruned checkpoint is marked unresumable, and the rerun rebuilds final/ from
    the checkpoint saved at training.steps: the same weights, no trainer built, and the process group ended."""
    import shutil

    import torch.distributed as dist

    from hara.evaluation.models import checkpoint_fingerprint
    from hara.hashing import file_sha256
    from hara.rlvr.checkpoints import checkpoint_problem

    out = tmp_path / "run"
    args = [*train_args(tiny_base, out, tmp_path, method="none"), "--set", "training.finished_checkpoints=weights"]
    assert main(args) == 0
    digest, metrics = file_sha256(out / "final" / "model.safetensors"), (out / "metrics.jsonl").read_text()
    fingerprint = checkpoint_fingerprint(out / "final")
    last = out / "checkpoints" / "checkpoint-4"
    assert not (last / "optimizer.pt").exists()
    assert "pruned to its weights" in checkpoint_problem(last)
    shutil.rmtree(out / "final")  # Snakemake deletes the declared output of a job that failed

    def no_training(*args, **kwargs):
        raise AssertionError("a trainer was built for a run that had finished")

    monkeypatch.setattr("hara.rlvr.session.build_trainer", no_training)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'group'}", rank=0, world_size=1)
    assert main(args) == 0
    assert not dist.is_initialized()  # ended with the run (an NCCL group left alive can hang the exit)
    assert file_sha256(out / "final" / "model.safetensors") == digest
    assert checkpoint_fingerprint(out / "final") == fingerprint  # the evaluation's caches still apply
    assert (out / "metrics.jsonl").read_text() == metrics
    AutoTokenizer.from_pretrained(out / "final", local_files_only=True)


def test_kl_override_builds_a_reference_model_and_logs_kl(tiny_base, tmp_path):
    config = smoke_config()
    config["rlvr"]["grpo"]["beta"] = 0.04  # GRPO paper's KL, off in the preset
    tokenizer = AutoTokenizer.from_pretrained(tiny_base, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(tiny_base, local_files_only=True)
    data = Dataset.from_list([{"prompt": f"Question: {a}+{a}?\nAnswer:", "answer": str(2 * a)} for a in (3, 5)])
    trainer = build_trainer(
        config, "grpo", "hara_tok", 0, model, tokenizer, data, tmp_path, reward_funcs=[parity_reward]
    )
    trainer.train()
    assert trainer.ref_model is not None and trainer.beta == 0.04
    kl = [entry["kl"] for entry in trainer.state.log_history if "loss" in entry]
    assert kl[0] == 0.0 and kl[1] > 0.0  # the policy moved away from the reference after one step


@pytest.mark.parametrize(
    "change,expected",
    [
        (["--method", "bogus"], "--method: unknown method 'bogus'"),
        (["--size", "tiny-xl"], "--size: unknown tiny size 'tiny-xl'"),
        (["--base-model", "/nonexistent/base"], "--base-model: no model at /nonexistent/base"),
    ],
)
def test_train_user_errors_are_one_line(tiny_base, tmp_path, capsys, change, expected):
    args = train_args(tiny_base, tmp_path / "run", tmp_path)
    for i in range(0, len(change), 2):
        args[args.index(change[i]) + 1] = change[i + 1]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1, err
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


@pytest.mark.parametrize("rlvr", sorted(PRESETS.names()))
def test_method_none_reproduces_plain_trl_exactly(tiny_base, tmp_path, rlvr):
    """The hook itself is neutral: (B, T) advantages of `none` train to the same weights as TRL's own (B,) ones."""
    from trl import GRPOTrainer

    from hara.rlvr.grpo_config import grpo_args
    from hara.rlvr.presets import get_preset
    from hara.rlvr.trainer import HaraGRPOTrainer

    config = smoke_config()
    preset = get_preset(rlvr, config["rlvr"][rlvr])
    tokenizer = AutoTokenizer.from_pretrained(tiny_base, local_files_only=True)
    data = Dataset.from_list([{"prompt": f"Question: {a}+{a}?\nAnswer:", "answer": str(2 * a)} for a in (3, 5)])
    weights = []
    for make in (GRPOTrainer, lambda **kw: HaraGRPOTrainer(method="none", **kw)):
        model = AutoModelForCausalLM.from_pretrained(tiny_base, local_files_only=True)
        trainer = make(
            model=model,
            processing_class=tokenizer,
            reward_funcs=[parity_reward],
            train_dataset=data,
            args=grpo_args(config, preset, tmp_path, seed=0, params=model.num_parameters()),
        )
        trainer.train()
        weights.append({k: v.detach().clone() for k, v in model.named_parameters()})
    assert any(
        not torch.equal(weights[0][k], v)
        for k, v in AutoModelForCausalLM.from_pretrained(tiny_base, local_files_only=True).named_parameters()
    )  # training moved the weights at all
    for key, value in weights[0].items():
        torch.testing.assert_close(weights[1][key], value, rtol=0, atol=0)


def test_gradient_accumulation_keeps_groups_whole(tiny_base, tmp_path):
    """Two micro-batches per step: the hook still sees the whole generation batch (group check inside)."""
    config = smoke_config()
    config["training"]["grad_accum_steps"] = 2
    tokenizer = AutoTokenizer.from_pretrained(tiny_base, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(tiny_base, local_files_only=True)
    data = Dataset.from_list([{"prompt": f"Question: {a}+{a}?\nAnswer:", "answer": str(2 * a)} for a in (3, 5)])
    trainer = build_trainer(
        config, "dapo", "hara_tok", 0, model, tokenizer, data, tmp_path, reward_funcs=[parity_reward]
    )
    assert (trainer.args.per_device_train_batch_size, trainer.args.gradient_accumulation_steps) == (4, 2)
    trainer.train()
    assert trainer.state.global_step == 2
    assert trainer.last_advantages["token"].shape[0] == 8  # 2 prompts x 4 rollouts reweighted together
    config["training"]["grad_accum_steps"] = 3
    with pytest.raises(ConfigError, match="grad_accum_steps"):
        build_trainer(config, "grpo", "none", 0, model, tokenizer, data, tmp_path)


def test_rollouts_stop_at_the_configured_stop_strings(tiny_base, tmp_path):
    """prompt.stop reaches TRL's transformers generation (which refuses stop strings without the tokenizer): every
    rollout ends at its first stop string or runs to the length limit, and a stopped row carries no padding."""
    stop = list("aeiouAEIOU0123")  # single characters: a random char-level model hits one within a few tokens
    seen = []

    def recording_reward(completions, completion_ids, **kwargs):
        seen.extend(zip(completions, completion_ids))
        return parity_reward(completions)

    config = smoke_config()
    config["prompt"]["stop"] = stop
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(tiny_base, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(tiny_base, local_files_only=True)
    data = Dataset.from_list([{"prompt": f"Question: {a}+{a}?\nAnswer:", "answer": str(2 * a)} for a in (3, 5)])
    build_trainer(
        config, "grpo", "hara_tok", 0, model, tokenizer, data, tmp_path, reward_funcs=[recording_reward]
    ).train()
    limit = config["training"]["max_completion_length"]
    stopped = 0
    for text, ids in seen:
        first = min((i for i in (text.find(s) for s in stop) if i >= 0), default=-1)
        assert first < 0 or first == len(text) - 1, text  # nothing is generated after a stop string
        assert tokenizer.pad_token_id not in ids
        stopped += first >= 0 and len(ids) < limit
    assert stopped > 0, "no rollout hit a stop string: the check above would be vacuous"


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM (or its CPU build) is not installed")
def test_a_run_without_vllm_does_not_load_it_and_a_later_vllm_run_in_the_process_does():
    """TRL imports vLLM with its trainer whenever vLLM is installed (~12 s per training process on a CPU):
    trainer_class keeps it out of runs that do not generate with it, and gives it back to a later run that does."""
    code = (
        "import sys\n"
        "from hara.rlvr.session import trainer_class\n"
        "loaded = lambda: ('vllm' in sys.modules, hasattr(sys.modules['trl.generation.vllm_generation'], 'LLM'))\n"
        "trainer_class(use_vllm=False)\n"
        "print(*loaded())\n"
        "trainer_class(use_vllm=True)\n"
        "print(*loaded())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    assert out.stdout.split("\n")[:2] == ["False False", "True True"], out.stderr[-2000:]
