"""Host presets as data: the published factors, config overrides, DAPO's overlong term, and registry coverage."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from hara.config import ConfigError, load_config, load_schema, validate_config
from hara.methods import methods
from hara.rlvr.metrics_sink import rename_metrics
from hara.rlvr.presets import (
    PRESETS,
    config_preset,
    get_preset,
    grpo_config_kwargs,
    overlong_penalty,
    soft_overlong_reward,
)
from hara.rlvr.session import method_params
from hara.weighting import WeightingContext, apply_weighting, get_weighting
from tests.helpers import REPO, SMOKE, fresh_registry


def test_presets_carry_the_published_factors():
    grpo, dr, dapo = PRESETS.get("grpo"), PRESETS.get("dr_grpo"), PRESETS.get("dapo")
    assert (grpo.scale_rewards, grpo.loss_type, grpo.epsilon_low, grpo.epsilon_high) == ("group", "grpo", 0.2, 0.2)
    assert (dr.scale_rewards, dr.loss_type) == ("none", "dr_grpo")  # no std; token sum / constant
    assert (dapo.loss_type, dapo.epsilon_low, dapo.epsilon_high) == ("dapo", 0.2, 0.28)  # clip-higher
    assert dapo.dynamic_sampling and dapo.overlong_shaping and dapo.beta == 0.0
    assert not (grpo.dynamic_sampling or grpo.overlong_shaping or dr.dynamic_sampling or dr.overlong_shaping)


def test_schema_defaults_equal_the_presets():
    sections = load_schema()["properties"]["rlvr"]["properties"]
    assert set(sections) == set(PRESETS.names())
    for name, preset in PRESETS.entries().items():
        defaults = {k: v["default"] for k, v in sections[name]["properties"].items()}
        assert defaults == dataclasses.asdict(preset), name


def test_overrides_change_one_factor_and_unknown_keys_raise():
    preset = get_preset("grpo", {"epsilon_high": 0.3, "beta": 0.04})
    assert (preset.epsilon_high, preset.beta, preset.loss_type) == (0.3, 0.04, "grpo")
    with pytest.raises(ValueError, match="clip_hi"):
        get_preset("grpo", {"clip_hi": 0.3})
    with pytest.raises(ValueError, match="ppo"):
        get_preset("ppo")
    with pytest.raises(ValueError, match="loss_type"):
        get_preset("dapo", {"loss_type": "token_sum"})


def test_config_overrides_reach_grpo_config_kwargs():
    config = validate_config({"rlvr": {"dr_grpo": {"epsilon_high": 0.5, "scale_rewards": "group"}}})
    kwargs = grpo_config_kwargs(get_preset("dr_grpo", config["rlvr"]["dr_grpo"]))
    assert kwargs == {
        "scale_rewards": "group",
        "loss_type": "dr_grpo",
        "epsilon": 0.2,
        "epsilon_high": 0.5,
        "beta": 0.0,
    }


@pytest.mark.parametrize(
    "length,expected", [(0, 0.0), (12, 0.0), (13, -0.25), (14, -0.5), (16, -1.0), (17, -1.0), (100, -1.0)]
)
def test_soft_overlong_penalty(length, expected):
    # L_max = 16, L_cache = 4: free up to 12 tokens, linear to -1 at 16, -1 beyond
    assert overlong_penalty(length, 16, 4) == pytest.approx(expected)


def test_soft_overlong_reward_reads_completion_lengths():
    reward = soft_overlong_reward(16, 4)
    assert reward(["a", "b"], completion_ids=[[1] * 10, [1] * 14]) == pytest.approx([0.0, -0.5])
    with pytest.raises(ValueError):
        soft_overlong_reward(8, 9)


def test_every_registry_method_is_wired():
    assert all(callable(get_weighting(name)) for name in methods())


@pytest.mark.parametrize("method", sorted(methods()))
def test_config_params_are_accepted_by_each_method(method):
    """The schema's hara.* keys are exactly knobs the registry accepts (a renamed knob would raise here)."""
    config = validate_config({})
    params = method_params(config, method)
    gen = torch.Generator().manual_seed(0)
    mask = torch.ones(4, 6, dtype=torch.bool)
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0])
    context = WeightingContext(
        hidden_states=torch.randn(4, 6, 8, generator=gen),
        token_entropies=torch.rand(4, 6, generator=gen),
        error_starts=torch.tensor([-1, 2, -1, 3]),
        params=params,
    )
    token_adv, _ = apply_weighting(
        method, adv, mask, torch.zeros(4, dtype=torch.long), torch.tensor([1.0, 0.0, 1.0, 0.0]), context
    )
    assert token_adv.shape == (4, 6) and torch.isfinite(token_adv).all()


def test_rename_metrics_namespaces_trl_keys():
    out = rename_metrics(
        {
            "reward": 0.5,
            "entropy": 1.2,
            "completions/mean_length": 9.0,
            "clip_ratio/region_mean": 0.1,
            "hara/w_std": 0.3,
            "epoch": 0.1,
            "clip_ratio/low_min": None,
        }
    )
    assert out == {
        "train/reward": 0.5,
        "train/entropy": 1.2,
        "train/response_length": 9.0,
        "train/clip_fraction": 0.1,
        "hara/w_std": 0.3,
        "trl/epoch": 0.1,
    }


def test_vllm_settings_and_the_policy_dtype_follow_the_config(tmp_path, monkeypatch):
    """training.vllm reaches TRL's colocated engine; on a GPU the policy loads in bf16 (training.bf16), never fp32."""
    from hara.config import load_config
    from hara.rlvr.grpo_config import grpo_args
    from hara.rlvr.policy import policy_dtype
    from hara.rlvr.presets import get_preset

    config = load_config(
        REPO / "config" / "smoke.yaml",
        overrides=[
            "training.vllm.gpu_memory_utilization=0.45",
            "training.vllm.max_model_len=4096",
            "training.vllm.enable_sleep_mode=true",
        ],
    )
    args = grpo_args(config, get_preset("grpo", config["rlvr"]["grpo"]), tmp_path, seed=0, params=10**6)
    assert (args.vllm_gpu_memory_utilization, args.vllm_max_model_length, args.vllm_enable_sleep_mode) == (
        0.45,
        4096,
        True,
    )
    assert policy_dtype(config) == "float32"  # no CUDA here
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert policy_dtype(config) == "bfloat16"  # FSDP: bf16 on the host, fp32 master weights after accelerate's upcast
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert policy_dtype(config) == "float32"  # one GPU: fp32 master weights (pure bf16 loses lr 1e-6 updates)


def test_one_gpu_training_keeps_updates_that_bf16_weights_would_round_away():
    """Why one process loads fp32: an AdamW step of lr 1e-6 on weights ~0.02 leaves bf16 weights unchanged."""
    weights = torch.full((1000,), 0.02).uniform_(0.01, 0.05, generator=torch.Generator().manual_seed(0))
    moved = {}
    for dtype in (torch.float32, torch.bfloat16):
        param = torch.nn.Parameter(weights.to(dtype).clone())
        optimizer = torch.optim.AdamW([param], lr=1e-6, weight_decay=0.0)
        param.grad = torch.ones_like(param)
        optimizer.step()
        moved[dtype] = float((param.detach().float() != weights.to(dtype).float()).float().mean())
    assert moved[torch.float32] == 1.0 and moved[torch.bfloat16] < 0.01


def test_every_preset_refers_to_the_one_preset_block_and_states_its_own_defaults():
    """hara/schemas/config.yaml declares a preset's keys once ($defs.rlvr_preset); each rlvr.<preset> is a reference
    with its defaults, inlined by load_schema (hara.config.inline_refs)."""
    import yaml

    from hara.config import SCHEMA_PATH, inline_refs

    raw = yaml.safe_load(SCHEMA_PATH.read_text(encoding="utf-8"))
    nodes = raw["properties"]["rlvr"]["properties"]
    assert set(nodes) == set(PRESETS.names())
    assert {node["$ref"] for node in nodes.values()} == {"#/$defs/rlvr_preset"}
    assert all("properties" not in node for node in nodes.values())  # no copy of the block
    block = {"$defs": {"b": {"type": "object", "properties": {"x": {"type": "number"}}}}}
    assert inline_refs({"$ref": "#/$defs/b", "default": {"x": 2}}, block) == {
        "type": "object",
        "properties": {"x": {"type": "number", "default": 2}},
    }
    with pytest.raises(KeyError, match="y"):  # a default for a key the block does not have
        inline_refs({"$ref": "#/$defs/b", "default": {"y": 2}}, block)


def test_a_preset_added_in_one_place_is_validated_reported_and_swept(monkeypatch, tmp_path):
    """Registered in PRESETS alone (no schema, report or sweep file edited): the config accepts it, the
    report's preset table has its row, sweep validation accepts it; an unregistered name is refused by both."""
    from hara.report.tables import rlvr_table
    from hara.sweeps.study import load_study

    fresh_registry(monkeypatch, PRESETS)
    PRESETS.register(dataclasses.replace(PRESETS.get("grpo"), epsilon_high=0.3), "toy_po")
    config = load_config(SMOKE, ["grid.rlvr=[grpo, toy_po]"])
    assert config_preset(config, "toy_po") == PRESETS.get("toy_po")  # what `hara train --rlvr toy_po` trains with
    assert [row[1] for row in rlvr_table(config, {}).rows] == ["grpo", "dr_grpo", "dapo", "toy_po"]
    study = tmp_path / "study.yaml"
    text = (
        (REPO / "sweeps" / "alpha.yaml").read_text().replace("base_config: ../config/", f"base_config: {REPO}/config/")
    )
    study.write_text(text.replace("rlvr: grpo", "rlvr: toy_po"))
    assert load_study(study).fields["rlvr"] == "toy_po"
    study.write_text(text.replace("rlvr: grpo", "rlvr: ppo"))
    with pytest.raises(ConfigError, match="rlvr: unknown preset 'ppo'"):
        load_study(study)
    with pytest.raises(ConfigError, match=r"grid.rlvr\[1\]: 'ppo' is not one of \['grpo'"):
        load_config(SMOKE, ["grid.rlvr=[grpo, ppo]"])
