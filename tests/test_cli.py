"""The `hara` command line on the smoke config: data -> base model -> accuracy, and its one-line user errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from hara.cli import COMMANDS, main
from tests.helpers import REPO, smoke_train_args

SMOKE = str(REPO / "config" / "smoke.yaml")


@pytest.fixture(scope="module")
def smoke_data(tmp_path_factory):
    out = tmp_path_factory.mktemp("data")
    assert main(["data", "--config", SMOKE, "--out", str(out)]) == 0
    return out


def test_data_writes_train_benchmarks_manifest_and_provenance(smoke_data):
    manifest = json.loads((smoke_data / "manifest.json").read_text())
    config = yaml.safe_load((REPO / "config" / "smoke.yaml").read_text())
    held_out = config["selection"]["validation_problems"]  # checkpoint selection's split, out of the 200
    assert manifest["files"]["train.jsonl"]["count"] == 200 - held_out
    assert manifest["files"]["validation.jsonl"]["count"] == held_out and manifest["validation"] == "validation.jsonl"
    for name in config["data"]["benchmarks"]:
        assert manifest["files"][f"benchmarks/{name}.jsonl"]["count"] == 8
    info = json.loads((smoke_data / "run_info.json").read_text())
    assert info["seed"] == 0 and info["versions"]["torch"].startswith("2.13.0") and info["git_commit"]
    assert yaml.safe_load((smoke_data / "resolved_config.yaml").read_text())["warmup"]["steps"] == 4


def test_base_model_trains_saves_and_reports_accuracy(smoke_data, tmp_path, capsys):
    out = tmp_path / "tiny-s"
    assert (
        main(["base-model", "--config", SMOKE, "--size", "tiny-s", "--data", str(smoke_data), "--out", str(out)]) == 0
    )
    for name in ("config.json", "warmup.json", "accuracy.json", "resolved_config.yaml", "run_info.json"):
        assert (out / name).is_file(), name
    report = json.loads((out / "accuracy.json").read_text())
    assert set(report) == {"greedy", "sampled"}
    assert set(report["greedy"]["accuracy"]) == set(yaml.safe_load(Path(SMOKE).read_text())["data"]["benchmarks"])
    assert report["sampled"]["temperature"] == 0.8
    assert "average" in capsys.readouterr().out

    from hara.models.generate import load_model

    model, tokenizer = load_model(out)
    assert model.config.model_type == "qwen3" and len(tokenizer) == model.config.vocab_size


def test_unknown_size_lists_valid_sizes(smoke_data, tmp_path, capsys):
    code = main(
        ["base-model", "--config", SMOKE, "--size", "tiny-xl", "--data", str(smoke_data), "--out", str(tmp_path / "x")]
    )
    err = capsys.readouterr().err
    assert code == 2 and "tiny-s, tiny-m, tiny-l" in err and err.count("\n") == 1
    assert not (tmp_path / "x").exists()


def test_corrupt_data_line_names_file_and_line(smoke_data, tmp_path, capsys):
    broken = tmp_path / "data"
    (broken / "benchmarks").mkdir(parents=True)
    lines = (smoke_data / "train.jsonl").read_text().splitlines()
    lines[6] = lines[6][:-5]  # truncate line 7
    (broken / "train.jsonl").write_text("\n".join(lines) + "\n")
    for path in (smoke_data / "benchmarks").iterdir():
        (broken / "benchmarks" / path.name).write_text(path.read_text())
    code = main(
        ["base-model", "--config", SMOKE, "--size", "tiny-s", "--data", str(broken), "--out", str(tmp_path / "m")]
    )
    err = capsys.readouterr().err
    assert code == 2 and f"{broken / 'train.jsonl'}:7:" in err and err.count("\n") == 1


def test_missing_data_folder_is_a_one_line_error(tmp_path, capsys):
    code = main(["accuracy", "--config", SMOKE, "--model", str(tmp_path), "--data", str(tmp_path / "none")])
    err = capsys.readouterr().err
    assert code == 2 and "train.jsonl: missing" in err


def test_every_command_is_registered_once():
    assert {"config", "data", "base-model", "accuracy"} <= set(COMMANDS)


def test_fetch_data_plan_does_not_require_the_folder_it_creates(tmp_path, capsys):
    """fetch-data writes data.local_dir, so the 'folder must exist' check must not stop it (other commands keep it)."""
    paper = str(REPO / "config" / "paper.yaml")
    target = tmp_path / "hub"
    assert main(["fetch-data", "--config", paper, "--set", f"data.local_dir={target}", "--dry-run"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert any("MATH-500" in step["path"] for step in plan["plan"]) and not target.exists()
    assert main(["config", "--config", paper, "--set", f"data.local_dir={target}"]) == 2
    assert "data.local_dir" in capsys.readouterr().err


@pytest.mark.parametrize("processes", ["0", "-2"])
def test_train_refuses_fewer_than_one_process(tmp_path, capsys, processes):
    code = main(
        [
            *smoke_train_args(),
            "--out",
            str(tmp_path / "run"),
            "--processes",
            processes,
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and f"--processes: must be at least 1, got {processes}" in err and err.count("\n") == 1
    assert not (tmp_path / "run").exists()
