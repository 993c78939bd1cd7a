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


@pytest.mark.parametrize("corrupt", [cut_scores, cut_metrics_tail, open_selection])
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
