"""Pass-rate selection of the RL prompts: the kept problems are exactly those inside [min_pass, max_pass], the files
are what `hara train --prompts` reads, and a model that never answers right stops with the key named."""

from __future__ import annotations

import copy
import json

import pytest

from hara.config import ConfigError, load_config
from hara.rlvr import prompts
from hara.rlvr.prompts import train_dataset
from tests.helpers import SMOKE

RECORDS = [{"problem": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(40)]


def config(**selection) -> dict:
    result = copy.deepcopy(load_config(SMOKE))
    result["training"]["prompt_selection"].update(dict(enabled=True, pool=40, samples=4), **selection)
    return result


def test_keeps_exactly_the_problems_inside_the_band(tmp_path, monkeypatch):
    planted = [(i % 5) / 4 for i in range(40)]  # 0, 0.25, 0.5, 0.75, 1 in turn
    rates = {r["problem"]: rate for r, rate in zip(RECORDS, planted)}
    monkeypatch.setattr(prompts, "pass_rates", lambda model, pool, **kw: [rates[r["problem"]] for r in pool])
    summary = prompts.select_prompts(config(min_pass=0.25, max_pass=0.75), "unused", RECORDS, tmp_path)
    kept = prompts.read_prompts(tmp_path)
    assert {r["problem"] for r in kept} == {p for p, rate in rates.items() if 0.25 <= rate <= 0.75}
    assert all(r["pass_rate"] == rates[r["problem"]] for r in kept)
    assert summary["kept"] == len(kept) == 24 and summary["histogram"] == {f"{k}/4": 8 for k in range(5)}
    assert json.loads((tmp_path / "selection.json").read_text())["pool_mean_pass_rate"] == pytest.approx(0.5)
    dataset = train_dataset(config(), None, tmp_path)  # what `hara train --prompts` trains on
    assert len(dataset) == 24 and set(dataset["answer"]) == {r["answer"] for r in kept}


def test_levels_restrict_the_pool_and_hub_problems_without_a_level_are_refused(tmp_path, monkeypatch):
    leveled = [dict(r, level=i % 5 + 1) for i, r in enumerate(RECORDS)]
    monkeypatch.setattr(prompts, "pass_rates", lambda model, pool, **kw: [0.5 for _ in pool])
    summary = prompts.select_prompts(config(levels=[4, 5]), "unused", leveled, tmp_path)
    kept = prompts.read_prompts(tmp_path)
    assert summary["pool_size"] == len(kept) == 16 and {r["level"] for r in kept} == {4, 5}
    with pytest.raises(ConfigError, match="levels: the training problems carry no level"):
        prompts.select_prompts(config(levels=[4]), "unused", RECORDS, tmp_path / "hub")


def test_a_model_that_never_answers_right_stops_with_the_key(tiny_base, tmp_path):
    with pytest.raises(ConfigError, match=r"training.prompt_selection: only 0 of 8 problems"):
        prompts.select_prompts(config(pool=8, samples=2), tiny_base, RECORDS, tmp_path)
    assert not (tmp_path / "prompts.jsonl").exists()


def test_pass_rates_sample_each_problem_the_given_number_of_times(tiny_base, monkeypatch):
    seen = []
    monkeypatch.setattr("hara.boxed_answer.math_reward", lambda text, gold: seen.append(gold) or float(gold == "3"))
    rates = prompts.pass_rates(tiny_base, RECORDS[:3], samples=3, temperature=1.0, top_p=1.0, max_new_tokens=4, seed=0)
    assert rates == [0.0, 0.0, 1.0] and seen == ["1"] * 3 + ["2"] * 3 + ["3"] * 3


def test_inverted_band_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="min_pass 0.9 is above max_pass 0.1"):
        prompts.select_prompts(config(min_pass=0.9, max_pass=0.1), "unused", RECORDS, tmp_path)
