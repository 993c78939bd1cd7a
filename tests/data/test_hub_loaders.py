"""Local-folder loaders in each hub dataset's own schema, mapped to the canonical record."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hara.data.catalog import benchmarks, hub_schemas, load_local_dataset
from hara.data.hub import TRAINING_SETS
from hara.data.io import DataError, UnknownNameError
from hara.data.synthetic import RECORD_KEYS
from tests.hub_assets import olympiad_row

# One row per dataset, in the dataset's own column names and value types, and the canonical record expected.
FIXTURES = {
    "hiyouga/math12k": (
        {"problem": "What is $1+1$?", "answer": "2"},
        {"problem": "What is $1+1$?", "answer": "2", "solution": "", "skill": None, "level": None},
    ),
    "joyheyueya/math500": (
        {
            "problem": "Solve $2x=4$.",
            "solution": "So $x=\\boxed{2}$.",
            "answer": "2",
            "subject": "Algebra",
            "level": 2,
            "unique_id": "train/algebra/1.json",
        },
        {
            "problem": "Solve $2x=4$.",
            "answer": "2",
            "solution": "So $x=\\boxed{2}$.",
            "skill": "Algebra",
            "level": 2,
            "id": "joyheyueya/math500:train/algebra/1.json",
        },
    ),
    "HuggingFaceH4/MATH-500": (
        {
            "problem": "Compute $\\frac{1}{2}+\\frac{1}{4}$.",
            "solution": "It is $\\boxed{\\frac34}$.",
            "answer": "\\frac34",
            "subject": "Prealgebra",
            "level": 3,
            "unique_id": "test/prealgebra/7.json",
        },
        {"answer": "\\frac34", "skill": "Prealgebra", "level": 3, "source": "hub:HuggingFaceH4/MATH-500"},
    ),
    "HuggingFaceH4/aime_2024": (
        {
            "id": 60,
            "problem": "Find the number.",
            "solution": "Long solution.",
            "answer": "204",
            "url": "https://artofproblemsolving.com/wiki/index.php/2024_AIME_I_Problems/Problem_1",
            "year": "2024",
        },
        {"id": "HuggingFaceH4/aime_2024:60", "answer": "204", "solution": "Long solution.", "level": None},
    ),
    "math-ai/amc23": (
        {"question": "How many digits?", "answer": 27.0},
        {"problem": "How many digits?", "answer": "27", "solution": ""},
    ),
    "math-ai/minervamath": (
        {"question": "Compute the energy in eV.", "answer": "1.5 \\times 10^{3}"},
        {"problem": "Compute the energy in eV.", "answer": "1.5 \\times 10^{3}"},
    ),
    "Hothan/OlympiadBench": (
        olympiad_row(1606, "Find all $x$.", ["First way.", "Second way."], ["$\\frac{1}{2}$", "$3$"]),
        {
            "answer": "\\frac{1}{2}, 3",
            "solution": "First way.",
            "skill": "Algebra",
            "source": "hub:Hothan/OlympiadBench:OE_TO_maths_en_COMP",
            "id": "Hothan/OlympiadBench:1606",
        },
    ),
}


def _write(folder, fmt, rows):
    """Write rows the way a download rule would: JSON Lines, a JSON array, or parquet."""
    folder.mkdir(parents=True, exist_ok=True)
    if fmt == "jsonl":
        (folder / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    elif fmt == "json_array":
        (folder / "test.json").write_text(json.dumps(rows), encoding="utf-8")
    else:
        pq.write_table(pa.Table.from_pylist(rows), folder / "test-00000-of-00001.parquet")


def test_registry_covers_the_papers_datasets():
    assert set(TRAINING_SETS) == {"hiyouga/math12k", "joyheyueya/math500"}
    assert {b.hub_id for b in benchmarks("hub").values()} == {
        "HuggingFaceH4/MATH-500",
        "HuggingFaceH4/aime_2024",
        "math-ai/amc23",
        "math-ai/minervamath",
        "Hothan/OlympiadBench",
    }
    assert hub_schemas()["Hothan/OlympiadBench"].config == "OE_TO_maths_en_COMP"
    assert set(FIXTURES) == set(hub_schemas())


@pytest.mark.parametrize("fmt", ["jsonl", "json_array", "parquet"])
@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_load_each_schema(tmp_path, name, fmt):
    row, expected = FIXTURES[name]
    _write(tmp_path / "data", fmt, [row, row])
    records = load_local_dataset(name, tmp_path / "data")
    assert len(records) == 2
    record = records[0]
    assert tuple(sorted(record)) == tuple(sorted(RECORD_KEYS))
    assert record["source"].startswith(f"hub:{name}")
    for key, value in expected.items():
        assert record[key] == value, (key, record)


def test_hf_datasets_exports_load(tmp_path):
    datasets = pytest.importorskip("datasets")
    row, expected = FIXTURES["Hothan/OlympiadBench"]
    ds = datasets.Dataset.from_list([row])
    ds.to_json(str(tmp_path / "json" / "train.json"))  # JSON Lines, the datasets default
    ds.to_parquet(str(tmp_path / "parquet" / "train.parquet"))
    for sub in ("json", "parquet"):
        record = load_local_dataset("Hothan/OlympiadBench", tmp_path / sub)[0]
        assert record["answer"] == expected["answer"] and record["solution"] == expected["solution"]


def test_split_filter(tmp_path):
    rows = {"train": {"problem": "p-train", "answer": "1"}, "test": {"problem": "p-test", "answer": "2"}}
    for split, row in rows.items():
        (tmp_path / f"{split}.jsonl").write_text(json.dumps(row) + "\n", encoding="utf-8")
    assert [r["problem"] for r in load_local_dataset("hiyouga/math12k", tmp_path, split="test")] == ["p-test"]
    assert len(load_local_dataset("hiyouga/math12k", tmp_path)) == 2
    with pytest.raises(DataError, match="for split 'validation'"):
        load_local_dataset("hiyouga/math12k", tmp_path, split="validation")


def test_unknown_name_lists_valid_names(tmp_path):
    with pytest.raises(UnknownNameError) as info:
        load_local_dataset("openai/gsm8k", tmp_path)
    assert all(name in str(info.value) for name in hub_schemas())


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_missing_column_names_file_and_column(tmp_path, fmt):
    _write(tmp_path, fmt, [{"problem": "Compute.", "solution": "none"}])  # MATH-500 row without "answer"
    with pytest.raises(DataError) as info:
        load_local_dataset("HuggingFaceH4/MATH-500", tmp_path)
    message = str(info.value)
    assert "test" in message and str(tmp_path) in message
    assert "missing column 'answer'" in message


def test_amc23_with_math500_columns_fails_on_question(tmp_path):
    _write(tmp_path, "jsonl", [{"problem": "x", "answer": "1"}])
    with pytest.raises(DataError, match="missing column 'question'"):
        load_local_dataset("math-ai/amc23", tmp_path)


def test_bad_folders_and_lines(tmp_path):
    with pytest.raises(DataError, match="not a directory"):
        load_local_dataset("math-ai/amc23", tmp_path / "absent")
    (tmp_path / "notes.txt").write_text("nothing here")
    with pytest.raises(DataError, match="no .jsonl/.json/.parquet files"):
        load_local_dataset("math-ai/amc23", tmp_path)
    (tmp_path / "test.jsonl").write_text('{"question": "q", "answer": 1}\n{"question": \n', encoding="utf-8")
    with pytest.raises(DataError, match=r"test\.jsonl:2: invalid JSON"):
        load_local_dataset("math-ai/amc23", tmp_path)
    (tmp_path / "test.jsonl").write_text('{"question": "q", "answer": null}\n', encoding="utf-8")
    with pytest.raises(DataError, match="row 1: empty 'answer'"):
        load_local_dataset("math-ai/amc23", tmp_path)
