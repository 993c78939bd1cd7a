"""What a credit-assignment method reads from the policy besides its rollouts: one layer's hidden states and the
temperature-1 token entropies at the positions that predict the completion tokens.

A model concern shared by the TRL adapter (hara.rlvr.trainer, which records them while TRL generates or scores) and
the analyses (hara.analysis.interpret): forward hooks on one module, never all layers' hidden states, and entropies
that never hold (rows, T, V) logits.
"""

from __future__ import annotations

import functools
from typing import Any, Self

import torch
from torch import Tensor

__all__ = [
    "ENTROPY_CHUNK",
    "FINAL_NORM",
    "GenerationRecorder",
    "PassRecorder",
    "capture_context",
    "chunked_token_entropies",
    "hidden_module",
]


#: hidden_layer value for the last layer after the final norm (docs/method.md's default; output_hidden_states[-1]).
FINAL_NORM = "final_norm"


def hidden_module(model: torch.nn.Module, layer: int | str) -> torch.nn.Module:
    """The module whose output is the captured hidden state: the decoder's final norm (``FINAL_NORM``) or decoder
    block ``layer`` (``model.model.layers`` / ``model.model.norm`` for Qwen3 / Llama-style models)."""
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else model.model
    return decoder.norm if layer == FINAL_NORM else decoder.layers[layer]


#: Completion positions per LM-head chunk when token entropies are computed (hara.entropy_chunk's default).
ENTROPY_CHUNK = 256


def capture_context(
    model: torch.nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    completion_ids: Tensor,
    completion_mask: Tensor,
    layer: int | str,
    needs: frozenset[str],
    chunk: int | None = None,
    entropy_chunk: int = ENTROPY_CHUNK,
) -> tuple[Tensor | None, Tensor | None]:
    """One no-grad forward over prompt (B, P) + completion (B, T): layer ``layer``'s hidden states (B, T, d), in the
    model's dtype, and token entropies at temperature 1 (B, T) in fp32, both at the positions that predict the
    completion tokens.

    Only what ``needs`` asks for is returned (None otherwise); the hook stores one layer, never all of them.
    ``chunk`` rows per forward bound the activations (default: all rows at once); the entropies never hold
    (rows, T, V) logits: the final norm's output goes through the LM head ``entropy_chunk`` positions at a time
    (:func:`chunked_token_entropies`).
    """
    if not needs:
        return None, None
    step = chunk or prompt_ids.shape[0]
    batch = (prompt_ids, prompt_mask, completion_ids, completion_mask)
    parts = [
        _capture_rows(model, tuple(t[i : i + step] for t in batch), layer, needs, entropy_chunk)
        for i in range(0, prompt_ids.shape[0], step)
    ]
    hidden, entropies = zip(*parts)
    return (torch.cat(hidden) if "hidden" in needs else None), (torch.cat(entropies) if "entropy" in needs else None)


def chunked_token_entropies(final_hidden: Tensor, lm_head: torch.nn.Module, chunk: int = ENTROPY_CHUNK) -> Tensor:
    """Temperature-1 entropies (B, T), fp32, of the LM head's distributions over final-norm states (B, T, d).

    At most (B, chunk, V) logits are alive at once: at the paper's T = 3072 and V = 151936 the full (B, T, V) fp32
    logits are 1.9 GB per row (benchmarks/bench_entropy.py measures both). Per chunk it is the former formula,
    -sum exp(log p) log p, so the entropies equal the full-logits ones up to the LM head's matmul rounding.
    """
    parts = []
    for start in range(0, final_hidden.shape[1], chunk):
        logp = torch.log_softmax(lm_head(final_hidden[:, start : start + chunk]).float(), dim=-1)
        parts.append(-(logp.exp() * logp).sum(-1))
    return torch.cat(parts, 1) if parts else final_hidden.new_zeros(final_hidden.shape[:2], dtype=torch.float32)


def _capture_rows(
    model: torch.nn.Module, rows: tuple[Tensor, ...], layer: int | str, needs: frozenset[str], entropy_chunk: int
) -> tuple[Tensor | None, Tensor | None]:
    """:func:`capture_context` for one chunk of rows (prompt ids, prompt mask, completion ids, completion mask): a
    :class:`PassRecorder` on our own forward, in which the model computes the logits of one position only."""
    prompt_ids, prompt_mask, completion_ids, completion_mask = rows
    with PassRecorder(model, layer, needs, completion_ids.shape[1], entropy_chunk) as recorder, torch.no_grad():
        model(
            input_ids=torch.cat([prompt_ids, completion_ids], 1),
            attention_mask=torch.cat([prompt_mask, completion_mask], 1),
            logits_to_keep=1,
            use_cache=False,
        )
    return recorder.result()


class GenerationRecorder:
    """Forward hooks that record, while ``model.generate`` runs, what :func:`capture_context` would compute with an
    extra forward: layer ``layer``'s output and the temperature-1 token entropy at every position that predicts a
    generated token (the prefill's last position, then each decoding step's single position).

    Used as a context manager around one ``generate`` call over the whole generation batch; :meth:`result` returns
    (B, steps, d) hidden states and (B, steps) entropies, or None for what ``needs`` does not ask for. The entropy is
    taken from the raw ``lm_head`` logits (before temperature / top-p processing) and reduced at once, so a large
    vocabulary never holds (B, T, V) logits.
    """

    def __init__(self, model: torch.nn.Module, layer: int | str, needs: frozenset[str]) -> None:
        self.model, self.layer, self.needs = model, layer, needs
        self.hidden: list[Tensor] = []
        self.entropies: list[Tensor] = []
        self._handles: list[Any] = []

    def __enter__(self) -> Self:
        if "hidden" in self.needs:
            self._handles.append(hidden_module(self.model, self.layer).register_forward_hook(self._keep_hidden))
        if "entropy" in self.needs:
            self._handles.append(self.model.get_output_embeddings().register_forward_hook(self._keep_entropy))
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _keep_hidden(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        out = output[0] if isinstance(output, tuple) else output
        # prefill: its last position predicts the first token; kept in the model's dtype (bf16 on a GPU)
        self.hidden.append(out[:, -1:].detach())

    def _keep_entropy(self, module: torch.nn.Module, args: Any, output: Tensor) -> None:
        logp = torch.log_softmax(output[:, -1:].detach().float(), dim=-1)
        self.entropies.append(-(logp.exp() * logp).sum(-1))

    def result(self) -> tuple[Tensor | None, Tensor | None]:
        hidden = torch.cat(self.hidden, 1) if self.hidden else None
        entropies = torch.cat(self.entropies, 1) if self.entropies else None
        return hidden, entropies


class PassRecorder:
    """Forward hooks that record, during one no-grad pass over prompt + completion (TRL's old log-prob pass, run
    in row chunks, or :func:`capture_context`'s own forward): the captured layer's output at the
    ``completion_length`` positions that predict the completion tokens, and their entropies (LM head in chunks of
    ``entropy_chunk`` positions over the final norm's output, so no (rows, T, V) logits)."""

    def __init__(
        self,
        model: torch.nn.Module,
        layer: int | str,
        needs: frozenset[str],
        completion_length: int,
        entropy_chunk: int = ENTROPY_CHUNK,
    ) -> None:
        self.model, self.needs, self.length, self.entropy_chunk = model, needs, completion_length, entropy_chunk
        self.modules = {
            "hidden": hidden_module(model, layer) if "hidden" in needs else None,
            "entropy": hidden_module(model, FINAL_NORM) if "entropy" in needs else None,
        }
        self.parts: dict[str, list[Tensor]] = {"hidden": [], "entropy": []}
        self._handles: list[Any] = []

    def __enter__(self) -> Self:
        self._handles = [
            m.register_forward_hook(functools.partial(self._keep, name))
            for name, m in self.modules.items()
            if m is not None
        ]
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _keep(self, name: str, module: torch.nn.Module, args: Any, output: Any) -> None:
        out = output[0] if isinstance(output, tuple) else output
        states = out[:, -self.length - 1 : -1].detach()  # position t predicts completion token t
        if name == "entropy":
            states = chunked_token_entropies(states, self.model.get_output_embeddings(), self.entropy_chunk)
        self.parts[name].append(states)

    def result(self) -> tuple[Tensor | None, Tensor | None]:
        return tuple(torch.cat(self.parts[name]) if self.parts[name] else None for name in ("hidden", "entropy"))
