"""The embedded tiny Qwen3 family: the stand-ins for Qwen3-1.7B/4B/8B-Base on a CPU.

Same architecture as the real models (``transformers.Qwen3Config`` / ``Qwen3ForCausalLM``: RMSNorm, rotary
embeddings, grouped-query attention with q/k norms, SwiGLU MLP, tied embeddings), only smaller. The sizes grow in
depth and width so that "larger model, higher accuracy" holds after the same number of warm-up steps.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used: the config check (hara.config) reads TINY_SIZES at every Snakefile parse
    import torch
    from transformers import PreTrainedTokenizerBase, Qwen3Config, Qwen3ForCausalLM

__all__ = ["TINY_SIZES", "TinySize", "build_tiny_model", "count_parameters", "tiny_config"]


@dataclass(frozen=True)
class TinySize:
    """Transformer dimensions of one tiny size (the vocabulary comes from the tokenizer)."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int


# Each size is about 3x the previous one in parameters and in compute per token, so that at the same number of
# warm-up steps the larger model is the better one while tiny-l still trains on a CPU in well under an hour.
# Parameter counts with the 259-token char vocabulary (tied embeddings): 115,264 / 348,192 / 788,096.
TINY_SIZES: dict[str, TinySize] = {
    "tiny-s": TinySize(
        hidden_size=64,
        intermediate_size=192,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
    ),
    "tiny-m": TinySize(
        hidden_size=96,
        intermediate_size=288,
        num_hidden_layers=3,
        num_attention_heads=6,
        num_key_value_heads=2,
        head_dim=16,
    ),
    "tiny-l": TinySize(
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=2,
        head_dim=16,
    ),
}


def tiny_config(size: str, tokenizer: PreTrainedTokenizerBase, max_position_embeddings: int = 1024) -> Qwen3Config:
    """The ``Qwen3Config`` of a named size for ``tokenizer``'s vocabulary and special tokens."""
    from transformers import Qwen3Config

    if size not in TINY_SIZES:
        raise ValueError(f"unknown model size {size!r}; valid sizes: {', '.join(TINY_SIZES)}")
    return Qwen3Config(
        vocab_size=len(tokenizer),
        max_position_embeddings=max_position_embeddings,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        dtype="float32",
        **asdict(TINY_SIZES[size]),
    )


def build_tiny_model(size: str, tokenizer: PreTrainedTokenizerBase, seed: int) -> Qwen3ForCausalLM:
    """A freshly initialised tiny Qwen3 of the named size; the same seed gives the same weights."""
    import torch
    from transformers import Qwen3ForCausalLM

    config = tiny_config(size, tokenizer)
    with torch.random.fork_rng(devices=[]):  # seeding here must not move the caller's RNG stream
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    return model


def count_parameters(model: torch.nn.Module) -> int:
    """Number of distinct parameters (tied input/output embeddings counted once)."""
    return sum(p.numel() for p in model.parameters())
