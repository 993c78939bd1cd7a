"""hara.layout: the grid with per-method extra seeds, and the paths every stage shares."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

from hara.config import ConfigError, read_yaml, validate_config
from hara.layout import (
    FINAL_DIR,
    STAGE_FILES,
    Cell,
    base_eval_dir,
    base_model_dir,
    eval_dir,
    grid_cells,
    method_seeds,
    run_dir,
    run_of,
)
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
    assert run_of(f"res/train/tiny-s/grpo/hara_tok/seed3/{FINAL_DIR}") == "res/train/tiny-s/grpo/hara_tok/seed3"
    with pytest.raises(ValueError, match="not a run's final/ folder"):
        run_of("res/train/tiny-s/grpo/hara_tok/seed3")


#: A string that spells out a stage file: the whole string, its last path component (an f-string's
#: ``{EVAL_DIR}/scores.json``), or a literal quoted inside an f-string (``{run / 'metrics.jsonl'}``).
SPELLED = re.compile(r"(?:^|/|(?<!\[)['\"])(?:" + "|".join(map(re.escape, STAGE_FILES)) + r")/?(?:$|['\"])")
#: Strings that spell a stage file's name and are something else, by file: why each is allowed.
NOT_STAGE_FILES = {("hara/report/render.py", '"report.md"'): "the Markdown page template (templates/report.md)"}
SKIPPED = {tokenize.NL, tokenize.COMMENT}
STATEMENT_START = {tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}


def stage_file_literals(source: str) -> list[tuple[int, str]]:
    """(line, string) of each string token of Python (or Snakemake) source that spells out a stage file name, outside
    docstrings, comments, ``__all__`` and the keys of dict displays and subscripts (``"final": ...``,
    ``selection["candidates"]``: a field of a file's JSON, not a path)."""
    tokens = [t for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type not in SKIPPED]
    found = []
    for i, token in enumerate(tokens):
        if token.type != tokenize.STRING or token.line.lstrip().startswith("__all__"):
            continue
        before, after = (tokens[i - 1] if i else None), tokens[i + 1]
        if (before is None or before.type in STATEMENT_START) and after.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
            continue  # a docstring (a string statement)
        subscript = before is not None and before.string == "[" and tokens[i - 2].type == tokenize.NAME
        if after.string == ":" or (subscript and after.string == "]"):
            continue
        quoted = token.string.lstrip("rRbBfFuU")
        content = quoted[3:-3] if quoted[:3] in ('"""', "'''") else quoted[1:-1]
        if SPELLED.search(content):
            found.append((token.start[0], token.string))
    return found


def test_stage_file_literals_are_found_outside_docstrings_comments_and_keys():
    source = (
        '"""metrics.jsonl"""\n'
        "# scores.json\n"
        '__all__ = ["candidates"]\n'
        'x = {"final": run / "final"}\n'
        'y = selection["candidates"]\n'
        'z = f"{EVAL}/scores.json"\n'
        "w = f\"{run / 'metrics.jsonl'}: no reward\"\n"
        'v = "final.partial"\n'
        "u = f\"top {best['candidates']}\"\n"
    )
    assert stage_file_literals(source) == [
        (4, '"final"'),
        (6, 'f"{EVAL}/scores.json"'),
        (7, "f\"{run / 'metrics.jsonl'}: no reward\""),
    ]


def test_stage_files_are_named_only_in_the_layout():
    """hara/layout.py names every stage file; code elsewhere uses its constants (issue 52, item 2: the check found 100
    string literals in hara/, workflows/ and the Snakefile before)."""
    sources = [*(REPO / "hara").rglob("*.py"), *(REPO / "workflows").rglob("*.py"), *(REPO / "workflows").glob("*.smk")]
    found = [
        f"{path.relative_to(REPO)}:{line}: {string}"
        for path in sorted([*sources, REPO / "Snakefile"])
        if path != REPO / "hara" / "layout.py"
        for line, string in stage_file_literals(path.read_text(encoding="utf-8"))
        if (str(path.relative_to(REPO)), string) not in NOT_STAGE_FILES
    ]
    assert found == []


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
