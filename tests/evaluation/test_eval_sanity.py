"""Finish reasons and boxed answers in scores.json, and the Base models' sanity gate (`hara base-sanity`)."""

from __future__ import annotations

import json

import pytest

from hara.data.format import prompt_format
from hara.evaluation.models import TransformersEngine
from hara.evaluation.runner import evaluate_checkpoint, write_result
from hara.evaluation.sanity import base_sanity, completion_stats, finish_reason
from hara.evaluation.tasks import benchmark_records
from tests.evaluation.eval_helpers import StandInEngine, smoke_config
from tests.helpers import REPO

NAME = "mini_math500"
PAPER = REPO / "config" / "paper.yaml"


class BudgetEngine(StandInEngine):
    """Stand-in answers whose token count says how they ended: a boxed answer stops after 3 tokens, anything else
    runs into the budget (max_new_tokens)."""

    def generate(self, prompts, n, sampling, stop=()):
        texts, _ = super().generate(prompts, n, sampling, stop)
        return texts, [[0] * (3 if "\\boxed{" in t else sampling["max_new_tokens"]) for t in texts]


def test_a_completion_that_used_its_budget_ended_by_length():
    assert [finish_reason([1] * k, 4) for k in (1, 3, 4)] == ["stop", "stop", "length"]


def test_scores_record_each_completions_finish_reason_and_the_boxed_share(fake_checkpoint, tmp_path):
    config = smoke_config("evaluation.n=2")
    template = prompt_format(config)
    prompts = [template.prompt(r["problem"]) for r in benchmark_records(config, NAME)]
    answers = {p: (["so \\boxed{1}", "and then"] if i % 2 else ["rambling"]) for i, p in enumerate(prompts)}
    result = evaluate_checkpoint(
        config, fake_checkpoint, [NAME], cache_dir=tmp_path, engine_factory=lambda c: BudgetEngine(answers)
    )["benchmarks"][NAME]
    rows, total = result["predictions"], 2 * len(prompts)
    assert rows[1]["finish_reasons"] == ["stop", "length"] and rows[0]["finish_reasons"] == ["length", "length"]
    boxed = len(prompts) // 2
    assert result["completion_stats"] == {
        "completions": total,
        "finish_reasons": {"stop": boxed, "length": total - boxed},
        "boxed": boxed,
        "stop_rate": boxed / total,
        "boxed_rate": boxed / total,
    }


def test_a_random_models_completions_run_to_the_budget_and_box_nothing(tiny_checkpoints, tmp_path):
    """The real transformers engine on a random tiny model (the rehearsal's kind): no eos, no stop, no boxed answer
    within 8 tokens; the cached second read gives the same reasons (lighteval keeps the output tokens)."""
    config = smoke_config("evaluation.max_new_tokens=8")
    first, again = (
        evaluate_checkpoint(config, tiny_checkpoints[0], [NAME], cache_dir=tmp_path, engine_factory=TransformersEngine)
        for _ in range(2)
    )
    stats = first["benchmarks"][NAME]["completion_stats"]
    assert stats["boxed"] == 0 and stats["finish_reasons"]["length"] >= stats["completions"] - 1
    assert again["benchmarks"][NAME]["completion_stats"] == stats


def scores_with(stats: dict[str, tuple[int, int, int]]) -> dict:
    """A scores.json of benchmarks with (completions, stopped, boxed) each."""
    return {
        "benchmarks": {
            name: {
                "score": 0.4,
                "completion_stats": {
                    "completions": n,
                    "finish_reasons": {"stop": s, "length": n - s},
                    "boxed": b,
                    "stop_rate": s / n,
                    "boxed_rate": b / n,
                },
            }
            for name, (n, s, b) in stats.items()
        }
    }


def test_the_sanity_check_pools_the_benchmarks_and_names_the_worst():
    settings = {"min_boxed_rate": 0.5, "min_stop_rate": 0.6}
    stats, problems = base_sanity(scores_with({"math500": (100, 90, 80), "aime24": (100, 40, 10)}), settings)
    assert (stats["stop_rate"], stats["boxed_rate"]) == (0.65, 0.45)
    assert problems == ["boxed_rate 0.45 < evaluation.base_sanity.min_boxed_rate 0.5 (lowest: aime24 0.10)"]
    assert base_sanity(scores_with({"math500": (10, 0, 0)}), {"min_boxed_rate": None, "min_stop_rate": None})[1] == []


def test_base_sanity_on_the_paper_config_fails_in_one_line_and_writes_nothing(tmp_path, capsys):
    from hara.cli import main

    scores, out = tmp_path / "scores.json", tmp_path / "sanity.json"
    write_result(scores_with({"math500": (2000, 100, 1900)}), scores)
    args = ["base-sanity", "--config", str(PAPER), "--size", "qwen3-8b", "--scores", str(scores), "--out", str(out)]
    assert main(args) == 2 and not out.exists()
    (line,) = capsys.readouterr().err.splitlines()
    assert "qwen3-8b Base model: stop_rate 0.05 < evaluation.base_sanity.min_stop_rate 0.5" in line
    write_result(scores_with({"math500": (2000, 1900, 1900)}), scores)
    assert main(args) == 0
    summary = json.loads(out.read_text())
    assert summary["math500"]["ours"] == 0.4 and summary["math500"]["published"]["pass_at_1"] is None


@pytest.mark.parametrize("published", [{}, {"tiny-s": {"pass_at_1": 41.5, "source": "a table"}}])
def test_the_report_shows_ours_beside_the_published_math500(published):
    from hara.report.tables import base_table

    config = smoke_config()
    config["data"]["benchmarks"] = ["math500"]
    config["evaluation"]["base_sanity"]["published_math500"] = published
    table = base_table(config, {}, {"tiny-s": {"math500": 0.375}})
    if not published:
        assert table is None  # the embedded default's report is unchanged
        return
    assert table.rows[0] == ["tiny-s", "37.5", "41.5", "a table"]
    assert all(row[2] == "n/a" for row in table.rows[1:])  # sizes without a stated figure


def test_completion_stats_of_no_completions_are_zero():
    assert completion_stats([])["stop_rate"] == 0.0
