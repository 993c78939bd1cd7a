"""The method registry (hara/methods.py): one declaration per method read by the trainer, `hara train`, config and
sweep validation, the planner and the claims check; plug-ins through the ``hara.methods`` entry point group; the same
contract for every registered method, built in or not."""

from __future__ import annotations

import sys
from importlib.metadata import EntryPoint

import pytest
import torch

import hara.methods as registry
from hara.config import ConfigError, load_config, validate_config
from hara.methods import MethodSpec, get_method, methods
from hara.weighting import WeightingContext, apply_weighting, available_weightings
from tests.evaluation.eval_helpers import REPO, SMOKE

PLUGIN = MethodSpec("flip_late", "baseline", needs=frozenset({"entropy"}), namespace="flip_late/",
                    weighting="tests.method_plugin:flip_late")


@pytest.fixture
def plugin_installed(monkeypatch):
    """The registry as it is when a package declares ``flip_late = tests.method_plugin:SPEC`` in hara.methods."""
    point = EntryPoint(name="flip_late", value="tests.method_plugin:SPEC", group=registry.ENTRY_POINT_GROUP)
    monkeypatch.setattr(registry, "entry_points",
                        lambda group: [point] if group == registry.ENTRY_POINT_GROUP else [])
    monkeypatch.setattr(registry, "_PLUGINS_LOADED", False)
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    yield
    import hara.weighting

    hara.weighting._REGISTRY.pop("flip_late", None)


def contract(name: str) -> None:
    """What every method must do: run on a batch with only the context its spec declares, give finite token
    advantages of the batch's shape that are 0 on padding, and log its info under its namespace."""
    from hara.rlvr.train import method_params, rename_metrics

    spec = get_method(name)
    config = validate_config({"hara": {"plugins": {"flip_late": {"scale": 0.5}}}})
    gen = torch.Generator().manual_seed(0)
    mask = torch.ones(4, 6, dtype=torch.bool)
    mask[1, 4:] = False
    context = WeightingContext(
        hidden_states=torch.randn(4, 6, 8, generator=gen) if "hidden" in spec.needs else None,
        token_entropies=torch.rand(4, 6, generator=gen) if "entropy" in spec.needs else None,
        params=method_params(config, name))
    token_adv, info = apply_weighting(name, torch.tensor([1.0, -1.0, 1.0, -1.0]), mask,
                                      torch.zeros(4, dtype=torch.long), torch.tensor([1.0, 0.0, 1.0, 0.0]), context)
    assert token_adv.shape == (4, 6) and torch.isfinite(token_adv).all(), name
    assert (token_adv[~mask] == 0).all(), name
    renamed = rename_metrics({f"{spec.namespace}{key}" if spec.namespace else key: value
                              for key, value in info.items() if isinstance(value, float)})
    assert not any(key.startswith("trl/") for key in renamed) or spec.namespace is None, name


@pytest.mark.parametrize("name", list(methods()))
def test_every_built_in_method_meets_the_contract(name):
    contract(name)


def test_the_registry_and_the_transforms_cover_each_other():
    assert set(methods()) == set(available_weightings())
    for name, spec in methods().items():
        assert spec.section is None or spec.section in validate_config({})["hara"], name


def test_a_plugin_method_is_registered_validated_and_meets_the_contract(plugin_installed):
    from hara.rlvr.train import method_params, rename_metrics

    assert methods()["flip_late"] == PLUGIN
    contract("flip_late")
    config = load_config(SMOKE, ["grid.methods=[none, flip_late]", "hara.plugins.flip_late.scale=0.5"])
    assert config["grid"]["methods"] == ["none", "flip_late"]
    assert method_params(config, "flip_late") == {"scale": 0.5}
    assert rename_metrics({"flip_late/w_mean": 1.2}) == {"flip_late/w_mean": 1.2}  # its namespace, not trl/


def test_an_unknown_method_is_named_in_config_and_study_files(tmp_path):
    with pytest.raises(ConfigError, match=r"grid.methods\[1\]: unknown method 'hara_fast'"):
        load_config(SMOKE, ["grid.methods=[none, hara_fast]"])
    from hara.sweeps.study import load_study

    study = tmp_path / "study.yaml"
    text = (REPO / "sweeps" / "alpha.yaml").read_text().replace("method: hara_tok", "method: hara_fast")
    study.write_text(text.replace("base_config: ../config/default.yaml", f"base_config: {SMOKE}"))
    with pytest.raises(ConfigError, match="method: unknown method 'hara_fast'"):
        load_study(study)


def test_a_bad_plugin_is_refused_with_its_entry_point(monkeypatch):
    point = EntryPoint(name="broken", value="tests.method_plugin:NOT_A_SPEC", group=registry.ENTRY_POINT_GROUP)
    monkeypatch.setattr(registry, "entry_points", lambda group: [point])
    monkeypatch.setattr(registry, "_PLUGINS_LOADED", False)
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    with pytest.raises(TypeError, match="entry point 'broken'"):
        methods()
    with pytest.raises(ValueError, match="kind 'other'"):
        MethodSpec("x", "other")
    with pytest.raises(ValueError, match="already registered"):
        registry.register_method(MethodSpec("none", "baseline"))


def test_importing_the_registry_stays_light():
    import subprocess

    code = "import hara.methods, sys; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"
