import json

import pytest
import torch

from hara.data.synthetic import generate_problems
from hara.models.tokenizer import build_tokenizer
from hara.models.warmup import WARMUP_DEFAULTS, cosine_schedule, direct_answer_mask, encode_records, warmup_base_model
from tests.helpers import REPO

FAST = dict(
    batch_size=8,
    lr=3e-3,
    warmup_steps=2,
    min_lr_ratio=0.1,
    weight_decay=0.1,
    max_length=256,
    threads=1,
    tokenizer_name="char",
    progress=False,
)


@pytest.fixture(scope="module")
def records():
    return generate_problems(96, seed=0, levels=(1, 2))


def test_cosine_schedule_shape():
    kw = dict(steps=100, warmup_steps=10, min_lr_ratio=0.05)
    values = [cosine_schedule(s, **kw) for s in range(100)]
    assert values[0] == pytest.approx(0.1) and values[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(values[9:], values[10:]))  # noqa: RUF007 - non-increasing after the warm-up
    assert cosine_schedule(100, **kw) == pytest.approx(0.05)
    assert cosine_schedule(0, steps=10, warmup_steps=0, min_lr_ratio=0.0) == pytest.approx(1.0)


def test_loss_mask_covers_completion_and_eos_only(records):
    tokenizer = build_tokenizer("char")
    ((ids, prompt_len),) = encode_records(records[:1], tokenizer, max_length=256)
    prompt = tokenizer.decode(ids[:prompt_len])
    assert prompt.startswith("Question: ") and prompt.endswith("Answer:")
    assert ids[-1] == tokenizer.eos_token_id
    assert tokenizer.decode(ids[prompt_len:-1]).endswith("\\boxed{" + records[0]["answer"] + "}.")
    longest = max(len(e[0]) for e in encode_records(records, tokenizer, 10_000))
    assert len(encode_records(records, tokenizer, longest - 1)) < len(records)  # too long: dropped, not cut


def test_direct_answers_are_added_for_a_seeded_share_of_problems(records):
    tokenizer = build_tokenizer("char")
    mask = direct_answer_mask(len(records), 0.25, seed=3)
    assert sum(mask) == 24 and mask == direct_answer_mask(len(records), 0.25, seed=3)
    assert mask != direct_answer_mask(len(records), 0.25, seed=4)
    worked_only = encode_records(records, tokenizer, 10_000)
    encoded = encode_records(records, tokenizer, 10_000, direct_fraction=0.25, seed=3)
    assert encoded[: len(records)] == worked_only and len(encoded) == len(records) + 24
    direct_records = [r for r, chosen in zip(records, mask) if chosen]
    for record, (ids, prompt_len) in zip(direct_records, encoded[len(records) :]):
        assert tokenizer.decode(ids[:prompt_len]).endswith(record["problem"] + "\nAnswer:")
        assert tokenizer.decode(ids[prompt_len:-1]) == " The answer is \\boxed{" + record["answer"] + "}."
    assert worked_only == encode_records(records, tokenizer, 10_000, direct_fraction=0.0, seed=3)
    with pytest.raises(ValueError, match="direct_fraction"):
        direct_answer_mask(10, 1.5, seed=0)


def test_same_seed_same_losses(records, tmp_path):
    runs = [
        warmup_base_model("tiny-s", records, tmp_path / name, steps=4, seed=seed, **FAST)
        for name, seed in (("a", 1), ("b", 1), ("c", 2))
    ]
    assert runs[0]["loss_curve"] == runs[1]["loss_curve"]
    assert runs[0]["final_loss"] == runs[1]["final_loss"]
    assert runs[0]["loss_curve"] != runs[2]["loss_curve"]


def test_loss_decreases_and_run_is_saved(records, tmp_path):
    result = warmup_base_model("tiny-s", records, tmp_path, steps=40, seed=0, **FAST)
    curve = result["loss_curve"]
    assert sum(curve[-5:]) / 5 < 0.7 * sum(curve[:5]) / 5
    for name in ("config.json", "model.safetensors", "tokenizer.json", "warmup.json"):
        assert (tmp_path / name).is_file(), name
    saved = json.loads((tmp_path / "warmup.json").read_text())
    assert saved["steps"] == 40 and saved["seed"] == 0 and saved["threads"] == 1 and saved["size"] == "tiny-s"
    assert set(saved["versions"]) >= {"torch", "transformers"}
    assert saved["final_loss"] == pytest.approx(result["final_loss"]) and saved["wall_seconds"] > 0


def test_defaults_fill_unset_arguments(records, tmp_path):
    result = warmup_base_model("tiny-s", records, tmp_path, steps=1, batch_size=4, progress=False)
    assert result["lr"] == WARMUP_DEFAULTS["tiny-s"]["lr"]
    assert result["tokenizer_name"] == WARMUP_DEFAULTS["tiny-s"]["tokenizer_name"]


def test_bad_arguments_are_named(records, tmp_path):
    with pytest.raises(ValueError, match="valid sizes"):
        warmup_base_model("tiny-q", records, tmp_path, steps=1, progress=False)
    with pytest.raises(ValueError, match="batch_size"):
        warmup_base_model("tiny-s", records[:3], tmp_path, steps=1, batch_size=8, progress=False)


def test_qwen3_vocabulary_also_trains(records, tmp_path):
    result = warmup_base_model(
        "tiny-s", records[:8], tmp_path, steps=1, seed=0, **dict(FAST, batch_size=2, tokenizer_name="qwen3")
    )
    assert result["tokenizer_name"] == "qwen3" and result["n_parameters"] > 151669 * 64  # the 151k-row embedding
    assert (tmp_path / "tokenizer.json").is_file() and result["final_loss"] > 0


def test_two_threads_give_the_same_base_model_twice(records, tmp_path):
    """warmup.threads above 1 (2 ran 1.5x faster): a fixed thread count must still give one Base model."""
    import hashlib

    try:
        runs = [
            warmup_base_model("tiny-s", records, tmp_path / name, steps=4, seed=1, **dict(FAST, threads=2))
            for name in ("a", "b")
        ]
        assert torch.get_num_threads() == 2 and runs[0]["threads"] == 2
    finally:
        torch.set_num_threads(1)
    assert runs[0]["loss_curve"] == runs[1]["loss_curve"]
    digests = {hashlib.sha256((tmp_path / name / "model.safetensors").read_bytes()).hexdigest() for name in "ab"}
    assert len(digests) == 1


def test_base_model_stage_warms_up_on_the_warmup_threads(records, tmp_path, monkeypatch):
    """`hara base-model` passes warmup.threads (before: the run's `threads`, so the key had no effect)."""
    from hara.config import load_config
    from hara.models import base

    config = load_config(REPO / "config" / "default.yaml", overrides=["warmup.threads=2"])
    assert (config["warmup"]["threads"], config["threads"]) == (2, 1)
    seen = {}
    monkeypatch.setattr(base, "config_datasets", lambda config, data_dir: {"train": records})
    monkeypatch.setattr("hara.models.warmup.warmup_base_model", lambda size, train, out, **kwargs: seen.update(kwargs))
    base.warm_up_tiny(config, "tiny-s", tmp_path, None)
    assert seen["threads"] == 2 and seen["steps"] == config["warmup"]["steps"]
