"""Must-show 3: checkpoints never share cached predictions (the same one does reuse them); lighteval stays offline."""

from __future__ import annotations

import shutil
import socket
import sys

from hara.evaluation.models import TransformersEngine, checkpoint_fingerprint
from hara.evaluation.runner import evaluate_checkpoint
from hara.evaluation.settings import benchmark_settings
from hara.evaluation.tasks import benchmark_records, build_task
from tests.evaluation.eval_helpers import smoke_config

NAME = "mini_math500"


class CountingModel(TransformersEngine):
    """The real CPU engine, counting how many times it actually generated (cache misses)."""

    generated = 0

    def generate(self, prompts, n, sampling, stop=()):
        CountingModel.generated += len(prompts)
        return super().generate(prompts, n, sampling, stop)


def completions(result: dict) -> list[list[str]]:
    return [p["completions"] for p in result["benchmarks"][NAME]["predictions"]]


def run(checkpoint, cache_dir, config=None) -> dict:
    return evaluate_checkpoint(
        config or smoke_config(), checkpoint, [NAME], cache_dir=cache_dir, engine_factory=CountingModel
    )


def test_two_checkpoints_evaluated_in_turn_do_not_share_predictions(tiny_checkpoints, tmp_path):
    a, b = tiny_checkpoints
    alone_b = run(b, tmp_path / "fresh")  # b's own predictions, from an empty cache
    first_a, then_b = run(a, tmp_path / "shared"), run(b, tmp_path / "shared")
    assert completions(then_b) == completions(alone_b)
    assert completions(first_a) != completions(then_b)
    assert first_a["benchmarks"][NAME]["cache_model_name"] != then_b["benchmarks"][NAME]["cache_model_name"]


def test_a_checkpoint_overwritten_in_place_is_not_answered_from_the_old_cache(tiny_checkpoints, tmp_path):
    """The same folder path with new weights (the next save of a run): lighteval's path-keyed cache would reuse."""
    a, b = tiny_checkpoints
    slot = tmp_path / "checkpoint"
    shutil.copytree(a, slot)
    old = run(slot, tmp_path / "cache")
    shutil.rmtree(slot)
    shutil.copytree(b, slot)
    new = run(slot, tmp_path / "cache")
    assert completions(new) == completions(run(b, tmp_path / "fresh"))
    assert completions(new) != completions(old)


def test_the_same_checkpoint_and_settings_are_answered_from_the_cache(tiny_checkpoints, tmp_path):
    """So that the two tests above are not passing only because nothing is ever cached."""
    CountingModel.generated = 0
    first = run(tiny_checkpoints[0], tmp_path / "cache")
    generated = CountingModel.generated
    second = run(tiny_checkpoints[0], tmp_path / "cache")
    assert generated == first["benchmarks"][NAME]["n_problems"]
    assert CountingModel.generated == generated  # nothing generated the second time
    assert completions(second) == completions(first)
    other = run(tiny_checkpoints[0], tmp_path / "cache", smoke_config("evaluation.seed=7"))  # new sampling seed
    assert CountingModel.generated == 2 * generated and completions(other) != completions(first)


def test_fingerprint_ignores_provenance_but_not_weights(tiny_checkpoints, tmp_path):
    slot = shutil.copytree(tiny_checkpoints[0], tmp_path / "c")
    before = checkpoint_fingerprint(slot)
    (slot / "run_info.json").write_text('{"time": 1}')
    assert checkpoint_fingerprint(slot) == before
    (slot / "accuracy.json").write_text('{"greedy": {"seconds": 0.23}}')  # a Base model's check: before, it counted
    assert checkpoint_fingerprint(slot) == before
    (slot / "generation_config.json").write_text("{}")
    assert checkpoint_fingerprint(slot) != before


def test_task_cache_key_is_stable_and_follows_the_data():
    config = smoke_config()
    settings = benchmark_settings(config, NAME)
    records = benchmark_records(config, NAME)

    def text(task):
        return task.config.__str__(lite=True)  # what lighteval hashes into the task part of the key

    assert text(build_task(NAME, records, settings)) == text(build_task(NAME, records, settings))
    assert "0x" not in text(build_task(NAME, records, settings))
    edited = [dict(records[0], answer="12345"), *records[1:]]
    assert text(build_task(NAME, edited, settings)) != text(build_task(NAME, records, settings))


def test_evaluation_makes_no_network_connection_and_loads_no_builtin_task(tiny_checkpoints, tmp_path, monkeypatch):
    attempts = []

    def refuse(self, address):
        attempts.append(address)
        raise OSError("network disabled by the test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setitem(sys.modules, "vllm", None)
    result = evaluate_checkpoint(
        smoke_config(), tiny_checkpoints[0], [NAME], cache_dir=tmp_path / "cache", backend="transformers"
    )
    assert result["benchmarks"][NAME]["n_problems"] == 8
    assert attempts == []
    assert not [m for m in sys.modules if m.startswith("lighteval.tasks.tasks.")]


def test_a_benchmark_scores_the_same_alone_or_after_others(tiny_checkpoints, tmp_path):
    """Sampling is seeded per benchmark: one `hara evaluate` over five benchmarks equals five separate jobs."""
    config = smoke_config()
    together = evaluate_checkpoint(config, tiny_checkpoints[0], ["mini_aime24", NAME], cache_dir=tmp_path / "one")
    alone = evaluate_checkpoint(config, tiny_checkpoints[0], [NAME], cache_dir=tmp_path / "two")
    assert together["benchmarks"][NAME]["predictions"] == alone["benchmarks"][NAME]["predictions"]


def test_evaluation_leaves_autograd_on(tiny_checkpoints, tmp_path):
    """lighteval disables autograd when lighteval.pipeline is imported; hara.evaluation.offline restores it."""
    import torch

    assert torch.is_grad_enabled()
    evaluate_checkpoint(smoke_config(), tiny_checkpoints[0], [NAME], cache_dir=tmp_path / "cache")
    assert "lighteval.pipeline" in sys.modules and torch.is_grad_enabled()
