"""JSON Lines I/O: deterministic bytes, and errors that name the file and line."""

import pytest

from hara.data.io import DataError, UnknownNameError, lookup, read_jsonl, write_jsonl


def test_write_jsonl_is_canonical_and_round_trips(tmp_path):
    path = tmp_path / "sub" / "records.jsonl"
    records = [{"b": 1, "a": "é½"}, {"z": [1, 2], "id": "x"}]
    assert write_jsonl(path, records) == 2
    assert path.read_bytes() == '{"a": "é½", "b": 1}\n{"id": "x", "z": [1, 2]}\n'.encode()
    assert read_jsonl(path) == records
    assert [p.name for p in path.parent.iterdir()] == ["records.jsonl"]  # no temporary file left behind


def test_read_jsonl_skips_blank_lines(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('\n{"a": 1}\n   \n{"a": 2}\n\n', encoding="utf-8")
    assert read_jsonl(path, required_keys=("a",)) == [{"a": 1}, {"a": 2}]


@pytest.mark.parametrize(
    ("lines", "bad_line", "problem"),
    [
        (['{"a": 1}', '{"a": 2', '{"a": 3}'], 2, "invalid JSON"),
        (['{"a": 1}', "", "[1, 2]"], 3, "expected a JSON object, got list"),
        (['{"a": 1}', '{"b": 2}'], 2, "missing key(s) 'a'"),
    ],
)
def test_read_jsonl_names_file_and_line(tmp_path, lines, bad_line, problem):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(DataError) as info:
        read_jsonl(path, required_keys=("a",))
    message = str(info.value)
    assert message.startswith(f"{path}:{bad_line}: ")
    assert problem in message


def test_lookup_lists_valid_names():
    registry = {"alpha": 1, "beta": 2}
    assert lookup(registry, "beta", "thing") == 2
    with pytest.raises(UnknownNameError, match=r"unknown thing 'gamma' \(valid: alpha, beta\)"):
        lookup(registry, "gamma", "thing")
