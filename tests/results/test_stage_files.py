"""A corrupt stage file makes `hara report` fail with one line naming the file (and line) and the rule that rewrites
it, not a JSONDecodeError traceback: tried as a user would on a copy of a finished run (issue 52, item 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hara.cli import main
from hara.layout import eval_dir, grid_cells, run_dir
from tests.report.finished import smoke_argv, write_finished


def cut_scores(results: Path, cell) -> tuple[Path, str]:
    path = eval_dir(results, cell) / "scores.json"
    path.write_bytes(path.read_bytes()[:300])
    return path, "rule evaluate"


def cut_metrics_tail(results: Path, cell) -> tuple[Path, str]:
    path = run_dir(results, cell) / "metrics.jsonl"
    path.write_bytes(path.read_bytes()[:-20])  # a job killed while it appended its second line
    return Path(f"{path}:2"), "rule train"


def open_selection(results: Path, cell) -> tuple[Path, str]:
    path = eval_dir(results, cell) / "selection.json"
    path.write_text('{"a":', encoding="utf-8")
    return path, "rule evaluate"


def search_summary():
    from hara.results.study_summary import SearchChoice, SearchFindings, StudySummary

    best = SearchChoice(3, 0.61, {"hara.alpha": 0.5}, 0.64, 0.02, 0.61, 0.01, 0.03, 2, [7, 8])
    return StudySummary(
        "alpha",
        "search",
        "FGW trade-off.",
        "sampled_pass1",
        "pass@1 sampled",
        "maximize",
        "hara_tok",
        [0],
        {"COMPLETE": 4},
        SearchFindings(best, "n/a (one parameter: its importance is 1 by definition)", {"history": "history.png"}),
    )


def summary_without_its_choice(results: Path, cell) -> tuple[Path, str]:
    """Valid JSON, a field gone (a hand edit, or a summary from another tool): the typed reader names the field."""
    path = results / "sweeps" / "alpha" / "summary.json"
    path.parent.mkdir(parents=True)
    search_summary().write(path)
    path.write_text(path.read_text(encoding="utf-8").replace('"best"', '"best_trial"'), encoding="utf-8")
    return path, "no field 'best'; rule sweep_summary"


@pytest.mark.parametrize("corrupt", [cut_scores, cut_metrics_tail, open_selection, summary_without_its_choice])
def test_a_corrupt_stage_file_is_one_line_naming_it_and_its_rule(tmp_path, capsys, corrupt):
    results = tmp_path / "results"
    config = write_finished(results)
    where, rule = corrupt(results, grid_cells(config)[-1])
    assert main(smoke_argv(results, "--no-mlflow")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {where}: ") and rule in err, err


def test_the_named_rule_rewrites_a_cut_metrics_line(tmp_path):
    """The error names rule train for metrics.jsonl: its resume drops the cut last line of a killed job (and the
    lines after its checkpoint) instead of failing on it."""
    from hara.results.collect import read_metrics
    from hara.rlvr.metrics_sink import truncate_metrics

    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "x": 0.5}\n{"step": 2, "x": 1e-05}\n{"step": 3, "x"', encoding="utf-8")
    truncate_metrics(path, 1)
    assert path.read_text(encoding="utf-8") == '{"step": 1, "x": 0.5}\n'
    path.write_text('{"step": 1, "x": 0.5}\n{"step": 2, "x": 1e-05}\n{"step": 3, "x"', encoding="utf-8")
    truncate_metrics(path, 5)
    assert read_metrics(path) == [{"step": 1, "x": 0.5}, {"step": 2, "x": 1e-05}]


def test_a_study_summary_reads_back_as_it_was_written(tmp_path):
    from hara.results.study_summary import EffectRow, SensitivityFindings, StudySummary, read_summary

    row = EffectRow({"hara.epsilon": 0.1}, "epsilon 0.1", 60.2, -1.5, -3.0, 0.1, -3.4, 0.4, "within noise", 2.9, 3, 200)
    findings = SensitivityFindings(
        {"hara.epsilon": 0.05}, "epsilon 0.05", 61.7, "points", 1, [row], [], "No value.", {}
    )
    sensitivity = StudySummary("eps", "sensitivity", "d", "m", "md", "maximize", "hara_tok", [0, 1], {}, findings)
    for summary in (search_summary(), sensitivity):
        summary.write(tmp_path / "summary.json")
        assert read_summary(tmp_path / "summary.json") == summary
