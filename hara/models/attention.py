"""The attention the models run on a CPU: transformers' SDPA, except that no-grad passes let the kernel read grouped
key / value heads in place.

transformers' ``sdpa`` hands the kernel grouped-query attention (``enable_gqa``) only without an attention mask, so
with the left padding of every batched generation it first copies each key and value head ``num_key_value_groups``
times, the whole KV cache at every decoded token. On the tiny models that copy was a quarter of a decode step
(tiny-s: 4 query heads on 2 key / value heads). torch's CPU kernel takes the grouped heads with a mask as well, and
computes each query head from the same numbers, so generation gives the same ids and logits bit for bit
(tests/models/test_attention.py). Passes that take gradients keep transformers' path: the backward of the grouped
kernel sums the key / value gradients in another order, which would change the trained weights in the last bits.
On a GPU the models keep ``sdpa`` (there the masked grouped kernel falls back to the slow math kernel).
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

__all__ = ["CPU_ATTENTION", "grouped_sdpa_forward", "use_cpu_attention"]

#: The name under which transformers finds :func:`grouped_sdpa_forward` (``model.set_attn_implementation``).
CPU_ATTENTION = "sdpa_grouped_no_grad"


def grouped_sdpa_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' ``sdpa_attention_forward``, with ``enable_gqa`` instead of repeated key / value heads when no
    gradient is taken (the arguments and the output are transformers')."""
    # transformers' rule: the kernel's causal flag only for a multi-token query without a mask
    causal = (
        query.shape[2] > 1
        and attention_mask is None
        and (is_causal if is_causal is not None else getattr(module, "is_causal", True))
    )
    grouped = getattr(module, "num_key_value_groups", 1) > 1
    # transformers' own path wherever it does more than repeat the heads: gradients, position biases, a causal
    # prefill into a longer (static) cache, which it crops
    if (
        torch.is_grad_enabled()
        or not grouped
        or kwargs.get("position_bias") is not None
        or (causal and key.shape[2] != query.shape[2])
    ):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
        )
    output = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, is_causal=causal, enable_gqa=True
    )
    return output.transpose(1, 2).contiguous(), None


AttentionInterface.register(CPU_ATTENTION, grouped_sdpa_forward)
AttentionMaskInterface.register(CPU_ATTENTION, sdpa_mask)  # the same boolean masks as sdpa


def use_cpu_attention(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` with :data:`CPU_ATTENTION` where it runs on the CPU with transformers' SDPA, else unchanged (a
    model loaded on the CPU of a GPU machine is bound for the GPU). The attention is not saved with the model."""
    config = getattr(model, "config", None)
    on_cpu = model.device.type == "cpu" and not torch.cuda.is_available()
    if on_cpu and getattr(config, "_attn_implementation", None) == "sdpa":
        model.set_attn_implementation(CPU_ATTENTION)
    return model
