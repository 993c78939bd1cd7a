"""One real GRPO step of a tiny Qwen3 with the real Qwen3 vocabulary on the CPU (fp32, one process), in a process
of its own: prints the measured peak host memory it added (peak RSS minus the RSS after imports, tokenizer and
dataset, before the model exists) and what hara.planning predicts for the same run, as JSON.

Run by tests/planning/test_planning.py as ``python tests/planning/planning_peak.py METHOD OUT_DIR``. The shape is chosen so that the
modelled terms (weights, grads, AdamW states, the fused LM head's fp32 weight gradient and tile, activations) add
up to about 1 GB, well above what the trainer itself allocates besides them.

What is measured is anonymous memory (tensors, Python objects, allocator heaps): the peak RSS minus the growth of
file-backed pages (shared libraries' code faulted in after the baseline), which the plan does not model. The test
runs it under a fixed glibc malloc configuration (:data:`ALLOCATOR_ENV` in tests/planning/test_planning.py), so freed
tensors go back to the system at once and the peak is the peak of live memory, not of what an allocator kept.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import torch
from datasets import Dataset
from transformers import Qwen3Config, Qwen3ForCausalLM

from hara.config import load_config
from hara.models.tokenizer import build_tokenizer
from hara.planning import Architecture, plan_cell
from hara.rlvr.session import build_trainer

REPO = Path(__file__).resolve().parents[2]
SHAPE = Architecture(hidden=256, layers=4, heads=4, kv_heads=2, head_dim=64, intermediate=768, vocab=0, tied=True)
COMPLETION_TOKENS = 64


def parity_reward(completions, **kwargs):
    """Splits random-model rollouts into both outcomes, so every method has work to do."""
    return [float(sum(map(ord, c)) % 2) for c in completions]


def memory_status() -> dict[str, int]:
    """Bytes of the process's resident set (VmRSS), its peak (VmHWM) and its file-backed part (RssFile)."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return {key: int(fields[key].split()[0]) * 1024 for key in ("VmRSS", "VmHWM", "RssFile", "RssAnon")}


def run_config(prompt_tokens: int) -> dict:
    config = copy.deepcopy(load_config(REPO / "config" / "smoke.yaml"))
    config["training"].update(
        group_size=4,
        prompts_per_step=2,
        grad_accum_steps=1,
        steps=2,
        save_steps=1000,
        max_completion_length=COMPLETION_TOKENS,
        progress=False,
    )
    config["plan"]["prompt_tokens"] = prompt_tokens
    return config


def main(method: str, out: str) -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    tokenizer = build_tokenizer("qwen3")
    prompts = [f"Question: What is {a} + {a}?\nAnswer:" for a in (3, 5)]
    data = Dataset.from_list([{"prompt": p, "answer": "0"} for p in prompts])
    config = run_config(max(len(tokenizer(p).input_ids) for p in prompts))
    arch = Architecture(**{**SHAPE.__dict__, "vocab": len(tokenizer)})
    before = memory_status()

    model = Qwen3ForCausalLM(
        Qwen3Config(
            vocab_size=arch.vocab,
            hidden_size=arch.hidden,
            intermediate_size=arch.intermediate,
            num_hidden_layers=arch.layers,
            num_attention_heads=arch.heads,
            num_key_value_heads=arch.kv_heads,
            head_dim=arch.head_dim,
            tie_word_embeddings=True,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
            dtype="float32",
        )
    )
    trainer = build_trainer(config, "grpo", method, 0, model, tokenizer, data, Path(out), reward_funcs=[parity_reward])
    trainer.train()
    after = memory_status()
    file_growth = max(0, after["RssFile"] - before["RssFile"])
    planned = plan_cell(config, arch, "tiny-s", "grpo", method)
    print(
        json.dumps(
            {
                "measured": after["VmHWM"] - before["VmRSS"] - file_growth,
                "planned": planned.memory.peak,
                "before": before,
                "after": after,
                "params": arch.params,
                "peak_phase": planned.memory.peak_phase,
                "resident": planned.memory.resident,
                "phases": planned.memory.phases,
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
