"""`hara fetch-data`: its plan, its files (read back by hara.data.hub) and its arguments, with the hub mocked out."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pytest

from hara.cli import main
from hara.data.catalog import load_local_dataset
from hara.data.pipeline import hub_folder
from hara.evaluation.fetch import fetch_datasets, fetch_plan
from tests.evaluation.eval_helpers import HUB_IDS, HUB_ROWS, smoke_config

TRAIN_ROWS = [{"problem": "What is $1+1$?", "answer": "2"}, {"problem": "What is $2+2$?", "answer": "4"}]


@pytest.fixture(autouse=True)
def no_hub(monkeypatch):
    """Any real download fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError("load_dataset must not be called")

    monkeypatch.setattr(datasets, "load_dataset", refuse)


def fake_loader(calls):
    rows = {hub_id: [row for row, _ in HUB_ROWS[name]] for name, hub_id in HUB_IDS.items()}
    rows["hiyouga/math12k"] = TRAIN_ROWS

    def load(hub_id, config, split):
        calls.append((hub_id, config, split))
        return datasets.Dataset.from_list(rows[hub_id])

    return load


def test_plan_covers_five_benchmarks_and_the_training_set_in_the_hub_folder_layout(tmp_path):
    config = smoke_config(f"data.local_dir={tmp_path}")
    plan = fetch_plan(config, tmp_path)
    assert [item.hub_id for item in plan] == [*HUB_IDS.values(), "hiyouga/math12k"]
    for item in plan:
        assert Path(item.path).parent == hub_folder(config, item.hub_id)
    olympiad = next(item for item in plan if item.hub_id == "Hothan/OlympiadBench")
    assert (olympiad.config, olympiad.split) == ("OE_TO_maths_en_COMP", "train")


def test_fetched_folders_load_back_through_the_hub_schemas(tmp_path):
    calls = []
    manifest = fetch_datasets(fetch_plan(smoke_config(), tmp_path), tmp_path, loader=fake_loader(calls))
    assert len(calls) == 6 and ("math-ai/amc23", None, "test") in calls
    for name, hub_id in HUB_IDS.items():
        records = load_local_dataset(hub_id, tmp_path / hub_id)
        assert len(records) == len(HUB_ROWS[name]) == manifest[hub_id]["rows"]
    olympiad = load_local_dataset("Hothan/OlympiadBench", tmp_path / "Hothan/OlympiadBench")
    assert olympiad[0]["answer"] == "\\frac{1}{2}, 3"  # list column survived the round trip
    train = load_local_dataset("hiyouga/math12k", tmp_path / "hiyouga/math12k", split="train")
    assert [r["answer"] for r in train] == ["2", "4"]
    assert json.loads((tmp_path / "fetch_manifest.json").read_text()) == manifest


def test_dry_run_prints_the_plan_and_downloads_nothing(tmp_path, capsys):
    assert main(["fetch-data", "--config", "config/smoke.yaml", "--out", str(tmp_path), "--dry-run"]) == 0
    plan = json.loads(capsys.readouterr().out)["plan"]
    assert len(plan) == 6 and plan[0]["path"] == str(tmp_path / "HuggingFaceH4/MATH-500/test.parquet")
    assert list(tmp_path.iterdir()) == []


def test_fetch_command_downloads_through_datasets(tmp_path, monkeypatch, capsys):
    calls = []
    load = fake_loader(calls)
    monkeypatch.setattr(datasets, "load_dataset", lambda hub_id, name=None, split=None: load(hub_id, name, split))
    assert main(["fetch-data", "--config", "config/smoke.yaml", "--out", str(tmp_path)]) == 0
    fetched = json.loads(capsys.readouterr().out)["fetched"]
    assert set(fetched) == {*HUB_IDS.values(), "hiyouga/math12k"} and len(calls) == 6
