"""Per-benchmark sampling settings: evaluation defaults with per-benchmark overrides."""

from __future__ import annotations

import pytest
import yaml

from hara.config import ConfigError, validate_config
from hara.evaluation.settings import benchmark_settings
from tests.evaluation.eval_helpers import smoke_config
from tests.helpers import REPO


def test_defaults_apply_where_a_benchmark_has_no_override():
    config = smoke_config("evaluation.benchmarks={mini_aime24: {n: 8, temperature: 0}}")
    aime, math = benchmark_settings(config, "mini_aime24"), benchmark_settings(config, "mini_math500")
    assert (aime.n, aime.temperature, aime.greedy, aime.max_new_tokens) == (8, 0.0, True, 24)
    assert (math.n, math.temperature, math.greedy) == (2, 0.8, False)


def test_paper_config_uses_many_samples_on_the_small_benchmarks(tmp_path):
    raw = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    raw["data"]["local_dir"] = str(tmp_path)
    config = validate_config(raw, source="paper.yaml")
    assert benchmark_settings(config, "aime24").n >= 16 and benchmark_settings(config, "amc23").n >= 16
    assert benchmark_settings(config, "math500").n == config["evaluation"]["n"]


@pytest.mark.parametrize(
    "override,key",
    [
        ("{gsm8k: {n: 2}}", "evaluation.benchmarks"),
        ("{mini_aime24: {n: 0}}", "evaluation.benchmarks.mini_aime24.n"),
        ("{mini_aime24: {k: 2}}", "evaluation.benchmarks.mini_aime24.k"),
    ],
)
def test_bad_overrides_are_one_line_errors_naming_the_key(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        smoke_config(f"evaluation.benchmarks={override}")
