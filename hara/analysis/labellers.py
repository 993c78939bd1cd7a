"""Reasoning-stage labellers of sampled completions, chosen by name (``analyses.interpretability.labeller``) [R].

- ``rules``: the documented rule-based labeller of the synthetic solutions (:mod:`hara.analysis.stages`); no model,
  no network. The embedded default.
- ``llm``: a local instruction model (``llm_model``, a downloaded snapshot: nothing is fetched at run time) asked
  with the versioned prompt of the config, as the paper labels MATH500 completions with an external LLM. Backend
  ``vllm`` where CUDA and vllm are present (``llm_backend: auto``), else ``transformers``; vllm is imported inside
  its backend only, so the CPU path never imports it.

How the LLM labels one completion: the decoded text is cut into segments (character spans ending after a sentence
stop ``.``/``!``/``?`` followed by whitespace or the end, or after a newline; whitespace-only pieces join the
segment before them), the segments are numbered from 1 and filled into the prompt with the stage definitions, and
the model must answer one line ``<index>: <stage>`` per segment. The answer is parsed strictly: only lines of exactly
that form count (surrounding whitespace and letter case ignored), every other line is ignored. A segment whose line
is missing, names an unknown stage or is given twice with different stages falls back to the rule-based labels of
its characters, and is counted (:class:`Labels` ``fallbacks`` with the reason): the fallback fraction is part of
the study's output, never hidden. A token gets the stage of its first character (:func:`stages.token_stages`).

The prompt's identity is logged with every result: ``prompt_version`` from the config and the sha256 of the prompt
text (the template, before filling), because the paper notes that the mapping depends on the prompt.
"""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from hara.analysis.stages import STAGE_DEFINITIONS, STAGES, char_stages, token_stages

__all__ = [
    "GENERATORS",
    "LABELLERS",
    "Labeller",
    "Labels",
    "build_labeller",
    "parse_answer",
    "prompt_sha256",
    "render_prompt",
    "resolve_backend",
    "split_segments",
]

Decode = Callable[[list[int]], str]
PLACEHOLDERS = ("{stages}", "{segments}")
_SEGMENT_END = re.compile(r"[.!?](?=\s|$)|\n")
_ANSWER_LINE = re.compile(r"^\s*(\d+)\s*:\s*([A-Za-z_]+)\s*$")


@dataclass
class Labels:
    """Stage of every token of every row (-1 = unlabelled), and how the labels were made: ``provenance`` (labeller,
    model, prompt version and sha256), ``segments`` asked about, ``fallbacks`` among them labelled by the rules
    instead, with ``reasons`` (missing / unknown_stage / conflict)."""

    stages: list[list[int]]
    provenance: dict
    segments: int = 0
    fallbacks: int = 0
    reasons: dict[str, int] = field(default_factory=dict)

    @property
    def fallback_fraction(self) -> float | None:
        return self.fallbacks / self.segments if self.segments else None

    def summary(self) -> dict:
        """Everything a result file records about the labels."""
        return {
            **self.provenance,
            "segments": self.segments,
            "fallbacks": self.fallbacks,
            "fallback_fraction": self.fallback_fraction,
            "fallback_reasons": dict(self.reasons),
        }


class Labeller(Protocol):
    def label(self, rows: Sequence[Sequence[int]], decode: Decode) -> Labels: ...


def split_segments(text: str) -> list[tuple[int, int]]:
    """Character spans [start, end) of the segments of ``text``, covering it without gaps (module docstring)."""
    cuts = [m.end() for m in _SEGMENT_END.finditer(text)]
    bounds = sorted({0, *cuts, len(text)})
    spans = list(itertools.pairwise(bounds))
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and not text[start:end].strip():
            merged[-1] = (merged[-1][0], end)  # trailing whitespace belongs to the segment before it
        else:
            merged.append((start, end))
    if len(merged) > 1 and not text[slice(*merged[0])].strip():  # leading whitespace-only piece: join the next
        merged[:2] = [(merged[0][0], merged[1][1])]
    return merged


def prompt_sha256(prompt: str) -> str:
    return hashlib.sha256(prompt.encode("utf-8")).hexdigest()


def render_prompt(template: str, text: str, spans: Sequence[tuple[int, int]]) -> str:
    """The template with ``{stages}`` (name: definition lines) and ``{segments}`` (``[i] text`` lines, newlines
    inside a segment shown as spaces so that each segment is one line) filled in. Plain replacement, not
    ``str.format``: literal braces elsewhere in the prompt (``\\boxed{}``) stay as they are."""
    stages = "\n".join(f"- {name}: {STAGE_DEFINITIONS[name]}" for name in STAGES)
    segments = "\n".join(f"[{i}] {' '.join(text[a:b].split())}" for i, (a, b) in enumerate(spans, start=1))
    return template.replace("{stages}", stages).replace("{segments}", segments)


def parse_answer(output: str, count: int) -> tuple[list[int | None], Counter]:
    """Stage index per segment (None = fall back to the rules) and the fallback reasons, from the model's answer."""
    given: dict[int, set[str]] = {}
    for line in output.splitlines():
        match = _ANSWER_LINE.match(line)
        if match and 1 <= int(match.group(1)) <= count:
            given.setdefault(int(match.group(1)), set()).add(match.group(2).lower())
    labels: list[int | None] = []
    reasons: Counter = Counter()
    for index in range(1, count + 1):
        reason = _invalid(given.get(index, set()))
        labels.append(None if reason else STAGES.index(given[index].pop()))
        reasons.update([reason] if reason else [])
    return labels, reasons


def _invalid(names: set[str]) -> str | None:
    """Why the stage names given for one segment cannot be used (None: exactly one known stage)."""
    if not names:
        return "missing"
    if len(names) > 1:
        return "conflict"
    return None if next(iter(names)) in STAGES else "unknown_stage"


def char_labels(text: str, spans: Sequence[tuple[int, int]], labels: Sequence[int | None]) -> list[int]:
    """Every character's stage: its segment's LLM label, or the rules' label of the character where it fell back."""
    out = list(char_stages(text))
    for (start, end), label in zip(spans, labels):
        if label is not None:
            out[start:end] = [label] * (end - start)
    return out


class RuleLabeller:
    """The rules of :mod:`hara.analysis.stages` (no segments, no fallbacks: the rules label every character)."""

    def __init__(self, cfg: Mapping, seed: int) -> None:
        self.provenance = {"labeller": "rules", "source": "hara/analysis/stages.py"}

    def label(self, rows: Sequence[Sequence[int]], decode: Decode) -> Labels:
        return Labels([token_stages(row, decode) for row in rows], dict(self.provenance))


class LLMLabeller:
    """The ``llm`` labeller (module docstring); the model is loaded when :meth:`label` runs, once per call."""

    def __init__(self, cfg: Mapping, seed: int) -> None:
        from hara.errors import ConfigError

        key = "analyses.interpretability"
        self.folder = Path(cfg["llm_model"])
        if not cfg["llm_model"] or not self.folder.is_dir():
            raise ConfigError(
                f"{key}.llm_model: folder {str(self.folder)!r} does not exist (download the labelling "
                "model's snapshot there first)"
            )
        missing = [p for p in PLACEHOLDERS if p not in cfg["prompt"]]
        if missing:
            raise ConfigError(f"{key}.prompt: lacks the placeholder(s) {', '.join(missing)}")
        self.template, self.seed = cfg["prompt"], seed
        self.max_new_tokens, self.temperature = cfg["llm_max_new_tokens"], cfg["llm_temperature"]
        self.backend = resolve_backend(cfg["llm_backend"])
        self.provenance = {
            "labeller": "llm",
            "model": str(self.folder),
            "backend": self.backend,
            "prompt_version": cfg["prompt_version"],
            "prompt_sha256": prompt_sha256(self.template),
            "max_new_tokens": self.max_new_tokens,
            "temperature": self.temperature,
        }

    def label(self, rows: Sequence[Sequence[int]], decode: Decode) -> Labels:
        texts = [decode(list(row)) for row in rows]
        spans = [split_segments(text) for text in texts]
        asked = [i for i, s in enumerate(spans) if s]  # an empty completion has nothing to ask about
        generator = GENERATORS[self.backend](self.folder, self.max_new_tokens, self.temperature, self.seed)
        answers = dict(
            zip(asked, generator.generate([render_prompt(self.template, texts[i], spans[i]) for i in asked]))
        )
        stages, reasons = [], Counter()
        for i, row in enumerate(rows):
            labels, why = parse_answer(answers.get(i, ""), len(spans[i]))
            reasons.update(why)
            chars = char_labels(texts[i], spans[i], labels)
            stages.append(token_stages(row, decode, labels_of=lambda _text, chars=chars: chars))
        return Labels(
            stages,
            dict(self.provenance),
            segments=sum(map(len, spans)),
            fallbacks=sum(reasons.values()),
            reasons=dict(reasons),
        )


def resolve_backend(name: str) -> str:
    """``auto`` -> ``vllm`` where CUDA and vllm are present, else ``transformers`` (vllm is looked up, not imported)."""
    if name != "auto":
        return name
    import torch

    return "vllm" if torch.cuda.is_available() and importlib.util.find_spec("vllm") is not None else "transformers"


def chat_prompt(tokenizer, prompt: str) -> str:
    """The prompt as one user turn of the model's chat template (instruction models); raw where there is none."""
    if not getattr(tokenizer, "chat_template", None):
        return prompt
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
    )


class TransformersGenerator:
    """Greedy (temperature 0) or seeded sampled generation with transformers, on CUDA when present."""

    batch_size = 8

    def __init__(self, folder: Path, max_new_tokens: int, temperature: float, seed: int) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        device = "cuda" if torch.cuda.is_available() else "cpu"
        self.tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True, padding_side="left")
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForCausalLM.from_pretrained(
            str(folder), local_files_only=True, dtype="auto" if device == "cuda" else torch.float32
        )
        self.model.to(device).eval()
        self.max_new_tokens, self.temperature, self.seed = max_new_tokens, temperature, seed

    def generate(self, prompts: list[str]) -> list[str]:
        import torch

        torch.manual_seed(self.seed)
        sampling = (
            {"do_sample": True, "temperature": self.temperature, "top_k": 0}
            if self.temperature > 0
            else {"do_sample": False}
        )
        texts = []
        for start in range(0, len(prompts), self.batch_size):
            chunk = [chat_prompt(self.tokenizer, p) for p in prompts[start : start + self.batch_size]]
            batch = self.tokenizer(chunk, add_special_tokens=False, padding=True, return_tensors="pt")
            with torch.no_grad():
                output = self.model.generate(
                    **batch.to(self.model.device),
                    max_new_tokens=self.max_new_tokens,
                    pad_token_id=self.tokenizer.pad_token_id,
                    **sampling,
                )
            texts += self.tokenizer.batch_decode(output[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
        return texts


class VLLMGenerator:
    """vLLM's offline ``LLM.generate`` (GPU); vllm is imported here only."""

    def __init__(self, folder: Path, max_new_tokens: int, temperature: float, seed: int) -> None:
        from vllm import LLM, SamplingParams  # the gpu extra; never imported on the CPU path

        self.llm = LLM(model=str(folder), tokenizer=str(folder), seed=seed)
        self.params = SamplingParams(temperature=temperature, max_tokens=max_new_tokens, seed=seed)

    def generate(self, prompts: list[str]) -> list[str]:
        from vllm.inputs import TokensPrompt

        tokenizer = self.llm.get_tokenizer()
        # Token ids of the chat-formatted text: vLLM would otherwise add special tokens the template already has.
        inputs = [
            TokensPrompt(prompt_token_ids=tokenizer(chat_prompt(tokenizer, p), add_special_tokens=False)["input_ids"])
            for p in prompts
        ]
        return [output.outputs[0].text for output in self.llm.generate(inputs, self.params)]


#: Generation backends of the ``llm`` labeller: name -> class(folder, max_new_tokens, temperature, seed).
GENERATORS: dict[str, Callable[[Path, int, float, int], object]] = {
    "transformers": TransformersGenerator,
    "vllm": VLLMGenerator,
}

#: Labellers by name: class(interpretability config section, seed) with ``label(rows, decode) -> Labels``.
LABELLERS: dict[str, Callable[[Mapping, int], Labeller]] = {
    "rules": RuleLabeller,
    "llm": LLMLabeller,
}


def build_labeller(cfg: Mapping) -> Labeller:
    """The labeller named by the config section ``analyses.interpretability`` (its ``labeller`` key)."""
    name = cfg["labeller"]
    if name not in LABELLERS:
        raise ValueError(f"unknown labeller {name!r}; valid labellers: {', '.join(sorted(LABELLERS))}")
    return LABELLERS[name](cfg, cfg["seed"])
