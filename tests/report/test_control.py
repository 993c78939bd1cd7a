"""The controls in the report: their comparisons with the baseline form a family of their own (adding one leaves
the other methods' corrected verdicts and MDEs as they were), its table reads what the grid can detect, and under no
effect it claims a separation in at most 5% of simulated grids (seeded simulation, seconds)."""

from __future__ import annotations

import copy
import functools

import numpy as np

from hara.report.compare import grid_comparisons
from hara.report.tables import build_tables, control_table, main_table
from tests.report.test_families import grid_config, simulated_grid

SIZE_CELLS = 9  # 3 sizes x 3 presets


@functools.cache
def control_config(control: bool = True) -> dict:
    config = copy.deepcopy(grid_config(False))
    config["grid"]["methods"] = ["none", "hara_tok", *(["oracle_steps"] if control else [])]
    return config


def planted(config: dict, rng: np.random.Generator, gain: float) -> dict:
    """simulated_grid with oracle_steps' success probabilities raised by ``gain`` in every cell."""
    runs = simulated_grid(config, rng)
    if gain:
        for cell, run in list(runs.items()):
            if cell.method == "oracle_steps":
                (benchmark,) = run.problems
                lifted = {p: min(1.0, v + gain) for p, v in run.problems[benchmark].items()}
                runs[cell] = type(run)(
                    cell, [], {benchmark: sum(lifted.values()) / len(lifted)}, {benchmark: lifted}, run.fingerprints
                )
    return runs


def test_the_control_is_corrected_in_a_family_of_its_own():
    with_control, without = control_config(True), control_config(False)
    runs = planted(with_control, np.random.default_rng(1), 0.0)
    found = grid_comparisons(with_control, runs)
    alone = grid_comparisons(without, {c: r for c, r in runs.items() if c.method != "oracle_steps"})
    assert found.family_sizes() == {"none": 2 * SIZE_CELLS, "none, controls": 2 * SIZE_CELLS}
    for key, corrected in alone.corrected.items():  # hara_tok's verdicts and MDEs do not move
        assert found.corrected[key][None].critical == corrected[None].critical
        assert found.corrected[key][None].mde == corrected[None].mde


def test_the_control_table_reads_a_planted_effect_and_is_absent_without_a_control():
    config = control_config(True)
    table = control_table(config, planted(config, np.random.default_rng(2), 0.3))
    assert table.header[2:] == ["oracle_steps (positive control) − none", "hara_tok − none"]
    assert f"direction they must in {SIZE_CELLS} of their {SIZE_CELLS} cells" in table.note
    assert f"positive controls better in {SIZE_CELLS} of {SIZE_CELLS}" in table.note
    assert all("better" in row[2] for row in table.rows)
    assert any(row[1] == "oracle_steps (positive control)" for row in main_table(config, {}).rows)
    no_control = control_config(False)
    assert control_table(no_control, {}) is None
    assert "control" not in [t.key for t in build_tables(no_control, {})]


def test_with_no_effect_the_control_claims_a_separation_in_at_most_5_percent_of_grids():
    """Each null grid's 9 control cells are read together: a separation anywhere is a false positive. Uncorrected,
    9 raw intervals would give one in about 1 - 0.975^9 = 20% of grids."""
    config, rng, grids = control_config(True), np.random.default_rng(2027), 120
    false_positive = 0
    for _ in range(grids):
        note = control_table(config, planted(config, rng, 0.0)).note
        false_positive += "in the direction they must in none" not in note
    assert false_positive / grids <= 0.05


def test_a_negative_control_is_read_by_the_verdict_it_must_have_worse():
    """oracle_reversed (a sabotage) is labelled a negative control, and the table counts it as seen when it loses."""
    config = copy.deepcopy(control_config(True))
    config["grid"]["methods"] = ["none", "hara_tok", "oracle_reversed"]
    runs = planted(config, np.random.default_rng(3), 0.0)
    for cell, run in list(runs.items()):
        if cell.method == "oracle_reversed":
            (benchmark,) = run.problems
            lowered = {p: max(0.0, v - 0.3) for p, v in run.problems[benchmark].items()}
            runs[cell] = type(run)(
                cell, [], {benchmark: sum(lowered.values()) / len(lowered)}, {benchmark: lowered}, run.fingerprints
            )
    table = control_table(config, runs)
    assert table.header[2] == "oracle_reversed (negative control) − none"
    assert all("worse" in row[2] for row in table.rows)
    assert f"negative controls worse in {SIZE_CELLS} of {SIZE_CELLS}" in table.note
    assert f"direction they must in {SIZE_CELLS} of their {SIZE_CELLS} cells" in table.note
