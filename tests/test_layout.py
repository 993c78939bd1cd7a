"""hara.layout: the grid with per-method extra seeds, and the paths every stage shares."""

from __future__ import annotations

from pathlib import Path

import pytest

from hara.config import ConfigError, read_yaml, validate_config
from hara.layout import Cell, base_eval_dir, base_model_dir, eval_dir, grid_cells, method_seeds, run_dir
from hara.planning import plan_grid
from hara.report.tables import main_table
from tests.helpers import REPO


def default_with(overlay: dict) -> dict:
    """config/default.yaml with an overlay's grid section merged in (as Snakemake merges --configfile files)."""
    config = read_yaml(REPO / "config" / "default.yaml")
    config["grid"] = {**config["grid"], **overlay["grid"]}
    return validate_config(config)


def config_with(**grid) -> dict:
    return {
        "models": {"sizes": ["tiny-s"]},
        "grid": {"rlvr": ["grpo", "dapo"], "methods": ["none", "hara_tok"], "seeds": [0], **grid},
    }


def test_extra_seeds_add_cells_for_their_methods_only_in_report_order():
    cells = grid_cells(config_with(extra_seeds={"none": [2, 1, 0]}))
    assert [(c.rlvr, c.method, c.seed) for c in cells] == [
        ("grpo", "none", 0),
        ("grpo", "none", 2),
        ("grpo", "none", 1),
        ("grpo", "hara_tok", 0),
        ("dapo", "none", 0),
        ("dapo", "none", 2),
        ("dapo", "none", 1),
        ("dapo", "hara_tok", 0),
    ]
    assert method_seeds(config_with(extra_seeds={"none": [2, 1, 0]}), "none") == [0, 2, 1]  # 0 once
    assert grid_cells(config_with()) == grid_cells(config_with(extra_seeds={}))


def test_paths_follow_the_workflow_patterns():
    cell = Cell("tiny-s", "grpo", "hara_tok", 3)
    assert run_dir("res", cell) == Path("res/train/tiny-s/grpo/hara_tok/seed3")
    assert eval_dir("res", cell) == Path("res/eval/tiny-s/grpo/hara_tok/seed3")
    assert base_eval_dir("res", "tiny-s") == Path("res/eval/tiny-s/base")
    assert base_model_dir("res", "tiny-s") == Path("res/base_model/tiny-s")


def test_seeds_overlay_is_valid_and_extra_seeds_must_name_grid_methods():
    config = default_with(read_yaml(REPO / "config" / "seeds.yaml"))
    assert method_seeds(config, "none") == method_seeds(config, "hara_tok") == [0, 1, 2]
    assert method_seeds(config, "hara_seq") == [0]
    with pytest.raises(ConfigError, match=r"grid\.extra_seeds\.gtpo: not a method of grid\.methods"):
        default_with({"grid": {"extra_seeds": {"gtpo": [1]}}})


def test_plan_and_report_count_each_methods_seeds():
    config = default_with(read_yaml(REPO / "config" / "seeds.yaml"))
    plan = plan_grid(config)
    assert plan.totals["runs"] == 3 * 3 + 3 * 2 * 2  # 9 cells + 2 extra seeds of none and hara_tok per preset
    assert plan.totals["train_device_hours"] == pytest.approx(
        sum((1 if c.method == "hara_seq" else 3) * c.device_hours["total"] for c in plan.cells)
    )
    table = main_table(config, {})
    assert "each method's seeds (none: 3, hara_seq: 1, hara_tok: 3)" in table.note
