"""One generation engine per evaluation job, shared by its benchmarks and closed at the end; the config's prompt
template and stop sequences reach the engine exactly as training uses them."""

from __future__ import annotations

import json

import pytest

from hara.data.format import format_prompt
from hara.data.pipeline import build_config_datasets
from hara.evaluation.runner import evaluate_checkpoint
from tests.evaluation.eval_helpers import StandInEngine, smoke_config

BENCHMARKS = ["mini_math500", "mini_aime24"]
TEMPLATE = "Problem: {problem}\nReason step by step, and put your final answer within \\boxed{}.\nSolution:"
STOP = ["\nProblem:", "\n\n\n"]


class RecordingEngine(StandInEngine):
    """Answers every prompt with a boxed '1' and records what it was asked."""

    built = 0

    def __init__(self, answers):
        super().__init__(answers)
        RecordingEngine.built += 1
        self.stops, self.prompts = [], []

    def generate(self, prompts, n, sampling, stop=()):
        self.calls += 1
        self.stops.append(tuple(stop))
        self.prompts.extend(prompts)
        return [" \\boxed{1}"] * (len(prompts) * n), [[] for _ in range(len(prompts) * n)]


def test_one_engine_serves_every_benchmark_and_is_closed(fake_checkpoint, tmp_path):
    """Before: a new engine (for vLLM, 0.9 of the GPU each) per benchmark, the last one freed by `del` only."""
    engines = []

    def factory(model_config):
        engines.append(RecordingEngine({}))
        return engines[-1]

    result = evaluate_checkpoint(
        smoke_config(), fake_checkpoint, BENCHMARKS, cache_dir=tmp_path / "cache", engine_factory=factory
    )
    assert set(result["benchmarks"]) == set(BENCHMARKS)
    assert len(engines) == 1 and engines[0].calls == len(BENCHMARKS) and engines[0].closed


def test_the_engine_is_closed_when_a_benchmark_fails(fake_checkpoint, tmp_path):
    engines = []

    class Failing(RecordingEngine):
        def generate(self, prompts, n, sampling, stop=()):
            raise RuntimeError("out of memory")

    def factory(model_config):
        engines.append(Failing({}))
        return engines[-1]

    with pytest.raises(RuntimeError, match="out of memory"):
        evaluate_checkpoint(
            smoke_config(), fake_checkpoint, BENCHMARKS, cache_dir=tmp_path / "cache", engine_factory=factory
        )
    assert len(engines) == 1 and engines[0].closed


def test_prompt_template_and_stop_sequences_reach_the_engine(fake_checkpoint, tmp_path):
    config = smoke_config(f"prompt.template={json.dumps(TEMPLATE)}", f"prompt.stop={json.dumps(STOP)}")
    engines = []
    result = evaluate_checkpoint(
        config,
        fake_checkpoint,
        BENCHMARKS[:1],
        cache_dir=tmp_path / "cache",
        engine_factory=lambda cfg: engines.append(RecordingEngine({})) or engines[-1],
    )
    records = build_config_datasets(config)[BENCHMARKS[0]]
    assert engines[0].stops == [tuple(STOP)]
    assert sorted(engines[0].prompts) == sorted(format_prompt(r["problem"], TEMPLATE) for r in records)
    assert engines[0].prompts[0].startswith("Problem: ") and "\\boxed{}" in engines[0].prompts[0]
    first = result["benchmarks"][BENCHMARKS[0]]["predictions"][0]
    assert first["prompt"] == format_prompt(records[0]["problem"], TEMPLATE)


def test_another_prompt_is_not_answered_from_the_cache(fake_checkpoint, tmp_path):
    """The prompt format is part of lighteval's cache key: the same checkpoint with another template generates."""
    engines = []

    def factory(model_config):
        engines.append(RecordingEngine({}))
        return engines[-1]

    evaluate_checkpoint(
        smoke_config(), fake_checkpoint, BENCHMARKS[:1], cache_dir=tmp_path / "c", engine_factory=factory
    )
    evaluate_checkpoint(
        smoke_config(f"prompt.template={json.dumps(TEMPLATE)}"),
        fake_checkpoint,
        BENCHMARKS[:1],
        cache_dir=tmp_path / "c",
        engine_factory=factory,
    )
    evaluate_checkpoint(
        smoke_config(f"prompt.stop={json.dumps(STOP)}"),
        fake_checkpoint,
        BENCHMARKS[:1],
        cache_dir=tmp_path / "c",
        engine_factory=factory,
    )
    assert [engine.calls for engine in engines] == [1, 1, 1]


def test_each_benchmark_records_its_fingerprint_and_the_job_its_cost(fake_checkpoint, tmp_path):
    """What makes two scores comparable (hara.report.compare) is written beside them, and what the job cost."""
    from hara.evaluation.runner import FINGERPRINT_PACKAGES

    def evaluate(*overrides):
        result = evaluate_checkpoint(
            smoke_config(*overrides),
            fake_checkpoint,
            BENCHMARKS[:1],
            cache_dir=tmp_path / "cache",
            engine_factory=lambda cfg: RecordingEngine({}),
        )
        return result, result["benchmarks"][BENCHMARKS[0]]["eval_fingerprint"]

    result, plain = evaluate()
    entry = result["benchmarks"][BENCHMARKS[0]]
    assert plain["benchmark_sha256"] == entry["dataset_fingerprint"] and plain["backend"] == result["backend"]
    assert {key: plain[key] for key in entry["sampling"]} == entry["sampling"] and plain["device"] == "cpu"
    assert set(plain["versions"]) == set(FINGERPRINT_PACKAGES)
    _, templated = evaluate(f"prompt.template={json.dumps(TEMPLATE)}")
    _, stopped = evaluate(f"prompt.stop={json.dumps(STOP)}")
    assert [k for k in plain if plain[k] != templated[k]] == ["prompt_template_sha256"]
    assert [k for k in plain if plain[k] != stopped[k]] == ["stop"]
    cost = result["cost"]
    assert cost["device"] == "cpu" and cost["devices"] == 1 and cost["device_seconds"] == cost["cpu_seconds"] > 0
