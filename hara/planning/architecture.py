"""The architecture of a policy model (Qwen3's config.json names): the paper's models, a hub snapshot's, the tiny family's."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Architecture:
    """Shapes of a Qwen3 decoder (transformers' Qwen3Config names)."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool
    max_positions: int = 32768

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def block_params(self) -> int:
        """One decoder block: q/k/v/o projections (no biases), q/k RMSNorms, SwiGLU MLP, two RMSNorms."""
        d = self.hidden
        attention = d * self.q_dim + 2 * d * self.kv_dim + self.q_dim * d + 2 * self.head_dim
        return attention + 3 * d * self.intermediate + 2 * d

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def head_params(self) -> int:
        """Parameters of the tail FSDP unit: final norm + LM head (+ the embedding it shares when tied)."""
        return self.hidden + self.embedding_params

    @property
    def params(self) -> int:
        untied_head = 0 if self.tied else self.embedding_params
        return self.embedding_params + self.layers * self.block_params + self.hidden + untied_head

    @property
    def largest_tensor(self) -> int:
        return max(self.embedding_params, self.hidden * self.intermediate)

    def kv_cache_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        return 2 * self.layers * self.kv_dim * dtype_bytes

    def layer_activation_units(self) -> int:
        """Elements per token one decoder block saves for its backward, in compute-dtype units (fp32 tensors count
        twice): 8 d (the two RMSNorms' fp32 inputs, their outputs, the residual branch outputs), 6 q_dim (q
        projection, q-norm's fp32 input, rotary, attention output and its transposed copy), 4 kv_dim (k, v, k-norm's
        fp32 input), 4 intermediate (gate, up, SiLU(gate), their product). Fitted to the bytes torch's saved-tensor
        hooks see for Qwen3 blocks in bf16 with a padded batch (SDPA, GQA repeated by transformers): within 6% over
        nine block shapes, 2% low at Qwen3-1.7B's (tests/planning/test_planning.py). In fp32 the norms keep no extra copies
        and the count is 10-17% high."""
        return 8 * self.hidden + 6 * self.q_dim + 4 * self.kv_dim + 4 * self.intermediate

    def nograd_layer_units(self) -> int:
        """Elements per token alive at once inside one block of a no-grad forward (residual, normed input, the
        larger of attention's q/k/v/out and the MLP's gate/up/product)."""
        return 3 * self.hidden + max(3 * self.q_dim + 2 * self.kv_dim, 3 * self.intermediate)

    def forward_flops_per_token(self, context: int) -> float:
        """2 x matmul parameters (blocks + LM head) + causal attention scores and values over ``context`` tokens."""
        matmul = self.layers * self.block_params + self.embedding_params
        return 2.0 * matmul + 2.0 * self.layers * context * self.q_dim


# The paper's models (config.json of each hub snapshot), used when no local snapshot is at hand.
PAPER_ARCHITECTURES: dict[str, Architecture] = {
    "Qwen/Qwen3-1.7B-Base": Architecture(2048, 28, 16, 8, 128, 6144, 151936, tied=True),
    "Qwen/Qwen3-4B-Base": Architecture(2560, 36, 32, 8, 128, 9728, 151936, tied=True),
    "Qwen/Qwen3-8B-Base": Architecture(4096, 36, 32, 8, 128, 12288, 151936, tied=False),
}


def architecture_from_hf_config(hf: Mapping) -> Architecture:
    """An :class:`Architecture` from a config.json dictionary (Qwen3 / Llama-style keys)."""
    heads = hf["num_attention_heads"]
    return Architecture(
        hidden=hf["hidden_size"],
        layers=hf["num_hidden_layers"],
        heads=heads,
        kv_heads=hf.get("num_key_value_heads") or heads,
        head_dim=hf.get("head_dim") or hf["hidden_size"] // heads,
        intermediate=hf["intermediate_size"],
        vocab=hf["vocab_size"],
        tied=bool(hf.get("tie_word_embeddings", False)),
        max_positions=hf.get("max_position_embeddings", 32768),
    )


def _hub_cache_config(hub_id: str) -> Path | None:
    """config.json of ``hub_id`` in the local Hugging Face cache (HF_HOME / HF_HUB_CACHE), never the network."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - huggingface_hub ships with transformers
        return None
    found = try_to_load_from_cache(hub_id, "config.json")
    return Path(found) if isinstance(found, str) else None


def architecture_of(config: Mapping, size: str) -> Architecture:
    """The architecture of one size. Tiny family: hara.models.tiny.TINY_SIZES and the tokenizer's vocabulary. Hub
    family: config.json of the local snapshot (models.local_dir/<size>), else of the local Hugging Face cache, else
    the shipped table of the paper's models."""
    models = config["models"]
    if models["family"] == "tiny":
        return _tiny_architecture(size, models["tokenizer"])
    hub_id = models["hub_ids"][size]
    for candidate in (Path(models["local_dir"]) / size / "config.json", _hub_cache_config(hub_id)):
        if candidate is not None and candidate.is_file():
            return architecture_from_hf_config(json.loads(candidate.read_text(encoding="utf-8")))
    if hub_id in PAPER_ARCHITECTURES:
        return PAPER_ARCHITECTURES[hub_id]
    from hara.errors import ConfigError

    raise ConfigError(
        f"models.hub_ids.{size}: no config.json for {hub_id!r} in {models['local_dir']}/{size} or the "
        f"local Hugging Face cache, and it is not one of the shipped {', '.join(PAPER_ARCHITECTURES)}"
    )


def _tiny_architecture(size: str, tokenizer: str) -> Architecture:
    from hara.models.tiny import TINY_SIZES
    from hara.models.tokenizer import build_tokenizer

    shape = TINY_SIZES[size]
    return Architecture(
        hidden=shape.hidden_size,
        layers=shape.num_hidden_layers,
        heads=shape.num_attention_heads,
        kv_heads=shape.num_key_value_heads,
        head_dim=shape.head_dim,
        intermediate=shape.intermediate_size,
        vocab=len(build_tokenizer(tokenizer)),
        tied=True,
        max_positions=1024,
    )
