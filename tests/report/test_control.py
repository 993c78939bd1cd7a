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


def planted(config: dict, rng: np.random.Generator, gain: float, control: str = "oracle_steps") -> dict:
    """simulated_grid with ``control``'s success probabilities moved by ``gain`` (clipped to [0, 1]) in every cell."""
    runs = simulated_grid(config, rng)
    if gain:
        for cell, run in list(runs.items()):
            if cell.method == control:
                (benchmark,) = run.problems
                moved = {p: min(1.0, max(0.0, v + gain)) for p, v in run.problems[benchmark].items()}
                runs[cell] = type(run)(
                    cell, [], {benchmark: sum(moved.values()) / len(moved)}, {benchmark: moved}, run.fingerprints
                )
    return runs


def with_control(control: str) -> dict:
    config = copy.deepcopy(control_config(True))
    config["grid"]["methods"] = ["none", "hara_tok", control]
    return config


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
    config = with_control("oracle_reversed")
    table = control_table(config, planted(config, np.random.default_rng(3), -0.3, "oracle_reversed"))
    assert table.header[2] == "oracle_reversed (negative control) − none"
    assert all("worse" in row[2] for row in table.rows)
    assert f"negative controls worse in {SIZE_CELLS} of {SIZE_CELLS}" in table.note
    assert f"direction they must in {SIZE_CELLS} of their {SIZE_CELLS} cells" in table.note


def cells_seen(note: str) -> int:
    """How many cells the control table's note counts as separating in the direction they must."""
    return int(note.split("direction they must in ")[1].split()[0].replace("none", "0"))


def test_a_negative_control_is_seen_in_at_most_5_percent_of_null_grids_and_never_when_it_wins():
    """The negative control's reading, measured on seeded grids: under no effect a sabotage "seen" anywhere in a grid's
    9 cells is a false positive (at most 5% of 120 grids); a sabotage that wins by 0.3 is never counted as seen; one
    that loses by 1.2 planted MDEs (about 1.07 MDEs after clipping at 0) is seen in about 80% of the cells (measured
    80% over 270 cells; at 1 planted MDE, 0.9 after clipping, 56%), so a reading of "worse" is about as strong as the
    MDE says."""
    config, rng, grids = with_control("oracle_reversed"), np.random.default_rng(2028), 120
    null = [cells_seen(control_table(config, planted(config, rng, 0.0, "oracle_reversed")).note) for _ in range(grids)]
    assert sum(seen > 0 for seen in null) / grids <= 0.05
    winning = [control_table(config, planted(config, rng, 0.3, "oracle_reversed")).note for _ in range(10)]
    assert all(cells_seen(note) == 0 for note in winning)
    comparisons = grid_comparisons(config, planted(config, rng, 0.0, "oracle_reversed"))
    mde = np.mean([c[None].mde for key, c in comparisons.corrected.items() if "oracle_reversed" in str(key)])
    losing = [
        cells_seen(control_table(config, planted(config, rng, -1.2 * mde, "oracle_reversed")).note) for _ in range(20)
    ]
    assert np.mean(losing) / SIZE_CELLS >= 0.7
