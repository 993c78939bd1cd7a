"""hara.report on hand-made runs: seed statistics, efficiency measures, n/a for missing data, rendering."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from hara.config import load_config
from hara.report import build_report
from hara.report.compare import LOW_POWER_MARK
from hara.report.render import verdict_class
from hara.report.tables import build_tables, efficiency_measures, main_table, seq_tok_table
from hara.results.collect import Cell, Run
from hara.results.stats import first_passage, mean_se, shared_target
from tests.helpers import REPO
from tests.report.simulated import grid_config, simulated_runs


def metrics(accuracies, step_s):
    return [
        {"step": i + 1, "train/accuracy": a, "time/step_s": step_s, "train/entropy": 1.0, "train/response_length": 10.0}
        for i, a in enumerate(accuracies)
    ]


def test_mean_se_is_the_standard_error_of_the_mean():
    est = mean_se([1.0, 2.0, 3.0, None])
    assert est.mean == pytest.approx(2.0) and est.n == 3
    assert est.se == pytest.approx(1.0 / math.sqrt(3))
    assert mean_se([0.5]).se is None and mean_se([]).format() == "n/a"


def test_first_passage_to_a_target_shared_by_both_runs():
    assert first_passage([2.0, 4.0, 6.0, 8.0], [0.0, 0.2, 0.4, 0.6], 0.4) == (6.0, True)
    assert first_passage([2.0, 4.0, 6.0, 8.0], [0.0, 0.2, 0.4, 0.6], 0.9) == (8.0, False)  # censored at its end
    # half the gain of the two runs' mean curve, from its first full window (one step here) to its end
    assert shared_target([0.0, 0.1, 0.2, 0.3], [0.0, 0.3, 0.3, 0.5]) == pytest.approx(0.2)


def test_efficiency_pairs_a_method_with_its_baseline():
    cell = Cell("tiny-s", "grpo", "hara_tok", 0)
    base = Run(Cell("tiny-s", "grpo", "none", 0), metrics([0.0, 0.1, 0.2, 0.3], step_s=1.0))
    run = Run(cell, metrics([0.0, 0.3, 0.3, 0.5], step_s=1.5))
    measures = efficiency_measures(run, base)
    assert measures["overhead"] == pytest.approx(0.5)
    # no CPU time logged: steps are the cost; target 0.2, reached at step 2 by the run and step 3 by none
    assert measures["speedup"] == pytest.approx(1.5)
    assert measures["equal_time"] == pytest.approx(0.2)  # after none's 4 steps: 0.5 against none's final 0.3


def smoke_config():
    return load_config(REPO / "config" / "smoke.yaml")


def test_tables_say_na_for_missing_cells_and_show_scores():
    config = smoke_config()
    benchmarks = config["data"]["benchmarks"]
    runs = {
        Cell("tiny-s", "grpo", "none", 0): Run(Cell("tiny-s", "grpo", "none", 0), [], {b: 0.25 for b in benchmarks}),
        Cell("tiny-s", "grpo", "hara_tok", 0): Run(Cell("tiny-s", "grpo", "hara_tok", 0)),
    }
    rows = main_table(config, runs).rows
    assert [row[1] for row in rows] == ["base (no RL)", "none", "hara_tok"]
    assert rows[0][2:] == ["n/a"] * (len(benchmarks) + 1)  # the Base model was not evaluated
    assert rows[1][2:] == ["25.0"] * (len(benchmarks) + 1)
    assert rows[2][2:] == ["n/a"] * (len(benchmarks) + 1)
    base = {"tiny-s": {b: 0.125 * (i + 1) for i, b in enumerate(benchmarks)}}
    base_row = main_table(config, runs, base).rows[0]
    expected_mean = 0.125 * (len(benchmarks) + 1) / 2
    assert base_row[2:] == [f"{12.5 * (i + 1):.1f}" for i in range(len(benchmarks))] + [f"{100 * expected_mean:.1f}"]
    assert seq_tok_table(config, runs).rows[0][-1] == "n/a"  # no hara_seq run: no invented gap


def test_build_report_writes_html_markdown_and_figures(tmp_path):
    config = smoke_config()
    run_dir = tmp_path / "train" / "tiny-s" / "grpo" / "none" / "seed0"
    run_dir.mkdir(parents=True)
    run_dir.joinpath("metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics([0.1, 0.2], 1.0)))
    base_dir = tmp_path / "eval" / "tiny-s" / "base"
    base_dir.mkdir(parents=True)
    base_dir.joinpath("scores.json").write_text(
        json.dumps({"benchmarks": {b: {"score": 0.175} for b in config["data"]["benchmarks"]}})
    )
    summary = build_report(config, tmp_path, tmp_path / "report", mlflow=False)
    page = (tmp_path / "report" / "index.html").read_text(encoding="utf-8")
    base_line = next(
        line
        for line in (tmp_path / "report" / "report.md").read_text().splitlines()
        if line.startswith("| tiny-s | base (no RL) |")
    )
    assert base_line.count("17.5") == len(config["data"]["benchmarks"]) + 1
    assert summary["figures"]["tiny-s"] and "data:image/png;base64," in page
    assert "n/a" in (tmp_path / "report" / "report.md").read_text(encoding="utf-8")  # no scores were written


def test_the_page_template_escapes_every_text_value_and_stays_one_line():
    """hara/report/templates/report.html runs without autoescape (byte-identical to the page it replaced), so each
    value goes through `esc`: markup in titles, notes, cells and analysis texts is shown, never interpreted."""
    from hara.analysis.output import AnalysisResult
    from hara.report.render import render_html
    from hara.report.sections import Section
    from hara.report.tables import Table

    evil = '<script>alert("x")</script>'
    table = Table("main", evil, evil, [evil], [[evil, "a & b"]])
    result = AnalysisResult("variants", evil, evil, evil, [evil], [[evil]], note=evil)
    page = render_html(evil, evil, [table], {evil: None}, [Section("variants", result), Section("gone", None)])
    shown = "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;"
    assert "<script>" not in page and page.count(shown) == 14  # every text slot of the page
    assert "a &amp; b" in page and page.endswith("</body></html>\n") and page.count("\n") == 1
    assert '<h2 id="analysis-gone">Analysis: gone</h2><p>n/a (the analysis wrote no output)</p>' in page


def test_each_verdict_is_coloured_in_the_html_table():
    """The colour comes from the verdict a cell carries (hara.report.compare.VerdictCell); text that reads like a
    verdict is not searched."""
    from hara.report.compare import VerdictCell
    from hara.report.render import render_html
    from hara.report.tables import Table

    rows = [
        ["a", VerdictCell("25.0; Δ +9.0 [+4.0, +14.0] better, MDE 3.1", "better")],
        ["b", VerdictCell("20.0; Δ -9.0 [-14.0, -4.0] worse, MDE 3.1", "worse")],
        ["c", VerdictCell("20.0; Δ +1.0 [-4.0, +6.0] within noise, MDE 9.9‡", "within noise", low_power=True)],
        ["d", VerdictCell("20.0; Δ +1.0 [-1.0, +2.0] within noise, MDE 2.0", "within noise")],
        ["e", "30.0; Δ +9.0 [+4.0, +14.0] better, MDE 3.1"],
    ]
    page = render_html("t", "s", [Table("main", "T", "n", ["m", "score"], rows)], {})
    assert '<td class="better">25.0; Δ +9.0' in page and '<td class="worse">20.0; Δ -9.0' in page
    assert '<td class="low-power">20.0; Δ +1.0 [-4.0' in page and "<td>20.0; Δ +1.0 [-1.0" in page
    assert "<td>30.0; Δ +9.0" in page  # plain text: no verdict, whatever it reads


def stated_class(text: str) -> str:
    """The colour a cell's text states (how the page read it before cells carried their verdicts): the oracle the
    carried verdict is checked against."""
    for verdict in ("better", "worse"):
        if f"] {verdict}" in text:
            return f' class="{verdict}"'
    return ' class="low-power"' if "] within noise" in text and LOW_POWER_MARK in text else ""


def test_every_cell_of_a_simulated_grid_carries_the_verdict_its_text_states():
    """The grid's tables over simulated runs (hara_tok planted better, then worse): each cell's colour, read from the
    verdict it carries, is the one its text states; the three colours occur."""
    config, seen = grid_config(None, seeds=2, resamples=200), set()
    for planted in (0.15, -0.15):
        for table in build_tables(config, simulated_runs(config, np.random.default_rng(5), 0.1, planted)):
            for row in table.rows:
                for cell in row:
                    assert verdict_class(cell) == stated_class(cell), (table.key, cell)
                    seen.add(verdict_class(cell))
    assert seen == {"", ' class="better"', ' class="worse"', ' class="low-power"'}
