"""The method registry (hara/methods.py): one declaration per method read by the trainer, `hara train`, config and
sweep validation, the planner and the claims check; plug-ins through the ``hara.methods`` entry point group; the same
contract for every registered method, built in or not."""

from __future__ import annotations

import dataclasses
import importlib
import sys
from importlib.metadata import EntryPoint

import pytest
import torch

import hara.methods as registry
from hara.config import ConfigError, load_config, validate_config
from hara.methods import METHODS, MethodSpec, get_method, methods
from hara.weighting import WeightingContext, apply_weighting, get_weighting
from tests.helpers import REPO, SMOKE, fresh_registry, smoke_train_args

PLUGIN = MethodSpec(
    "flip_late",
    "baseline",
    needs=frozenset({"entropy"}),
    namespace="flip_late/",
    weighting="tests.method_plugin:flip_late",
    params="tests.method_plugin:FlipLateParams",
)


@pytest.fixture
def plugin_installed(monkeypatch):
    """The registry as it is when a package declares ``flip_late = tests.method_plugin:SPEC`` in hara.methods."""
    point = EntryPoint(name="flip_late", value="tests.method_plugin:SPEC", group=registry.ENTRY_POINT_GROUP)
    fresh_registry(monkeypatch, METHODS, lambda group: [point] if group == registry.ENTRY_POINT_GROUP else [])


def contract(name: str) -> None:
    """What every method must do: run on a batch with only the context its spec declares, give finite token
    advantages of the batch's shape that are 0 on padding, and log its info under its namespace (none without one)."""
    from hara.rlvr.metrics_sink import rename_metrics
    from hara.rlvr.session import method_params

    spec = get_method(name)
    config = validate_config({"hara": {"plugins": {"flip_late": {"scale": 0.5}}}})
    gen = torch.Generator().manual_seed(0)
    mask = torch.ones(4, 6, dtype=torch.bool)
    mask[1, 4:] = False
    context = WeightingContext(
        hidden_states=torch.randn(4, 6, 8, generator=gen) if "hidden" in spec.needs else None,
        token_entropies=torch.rand(4, 6, generator=gen) if "entropy" in spec.needs else None,
        error_starts=torch.tensor([-1, 2, -1, -1]) if "steps" in spec.needs else None,
        params=method_params(config, name),
    )
    token_adv, info = apply_weighting(
        name,
        torch.tensor([1.0, -1.0, 1.0, -1.0]),
        mask,
        torch.zeros(4, dtype=torch.long),
        torch.tensor([1.0, 0.0, 1.0, 0.0]),
        context,
    )
    assert token_adv.shape == (4, 6) and torch.isfinite(token_adv).all(), name
    assert (token_adv[~mask] == 0).all(), name
    assert all(spec.namespace and key.startswith(spec.namespace) for key in info), (name, sorted(info))
    assert set(rename_metrics(info)) == set(info), name  # kept under its namespace, not moved to trl/


@pytest.mark.parametrize("name", list(methods()))
def test_every_built_in_method_meets_the_contract(name):
    contract(name)


def test_every_method_names_a_transform_and_its_knobs_that_load():
    """Built-ins and plug-ins are declared alike: the transform and the params dataclass are references, imported on
    first use, and the knobs sit where the spec says (hara.<section>, or hara.plugins.<name>)."""
    config = validate_config({})
    for name, spec in methods().items():
        assert callable(get_weighting(name)) and spec.weighting and spec.params, name
        assert dataclasses.is_dataclass(spec.params_type()), name
        assert spec.section is None or spec.section in config["hara"], name
        assert spec.read_params(spec.knobs(config)) == spec.params_type()(), name  # the config's defaults are its


def test_a_plugin_method_is_registered_validated_swept_and_reported(plugin_installed, tmp_path):
    """Declared in one place (tests/method_plugin.py), no other file edited: the registry, the contract, config
    validation, its knobs, its metric namespace, a sweep study over it and the report's rows and comparisons.
    Trained by `hara train`: test_an_installed_plugin_package_trains_with_hara_train_and_its_contract_violation_is_caught."""
    from hara.layout import grid_cells
    from hara.report.tables import main_table
    from hara.results.collect import Run
    from hara.rlvr.metrics_sink import rename_metrics
    from hara.rlvr.session import method_params
    from hara.sweeps.study import load_study

    assert methods()["flip_late"] == PLUGIN
    contract("flip_late")
    config = load_config(SMOKE, ["grid.methods=[none, flip_late]", "hara.plugins.flip_late.scale=0.5"])
    assert config["grid"]["methods"] == ["none", "flip_late"]
    assert method_params(config, "flip_late") == {"scale": 0.5}
    assert load_config(SMOKE)["hara"]["plugins"]["flip_late"] == {"scale": 1.0}  # its params dataclass's default
    with pytest.raises(ConfigError, match=r"hara.plugins.flip_late.scale: 99 is greater than the maximum of 10"):
        load_config(SMOKE, ["hara.plugins.flip_late.scale=99"])
    assert rename_metrics({"flip_late/w_mean": 1.2}) == {"flip_late/w_mean": 1.2}  # its namespace, not trl/

    study = tmp_path / "study.yaml"
    text = (REPO / "sweeps" / "smoke.yaml").read_text().replace("method: hara_tok", "method: flip_late")
    text = text.replace("hara.hara.alpha:", "hara.plugins.flip_late.scale:")  # its knob, swept like a built-in's
    study.write_text(text.replace("base_config: ../config/smoke.yaml", f"base_config: {SMOKE}"))
    assert load_study(study).fields["method"] == "flip_late"
    assert "hara.plugins.flip_late.scale" in load_study(study).fields["space"]

    benchmarks = config["data"]["benchmarks"]
    outcomes = {"none": [0.0, 1.0, 0.0, 0.0], "flip_late": [1.0, 1.0, 0.0, 1.0]}
    runs = {
        cell: Run(
            cell,
            [],
            {b: sum(outcomes[cell.method]) / 4 for b in benchmarks},
            {b: {str(i): v for i, v in enumerate(outcomes[cell.method])} for b in benchmarks},
            {b: {"n": 1, "backend": "transformers"} for b in benchmarks},
        )  # equal fingerprints
        for cell in grid_cells(config)
    }
    row = next(row for row in main_table(config, runs).rows if row[1] == "flip_late")
    assert row[-1].startswith("75.0; Δ +50.0 [")  # its score and its paired difference from none


ONE_MODULE = '''
"""A credit-assignment method in one module: its transform, its knobs and its declaration."""
from dataclasses import dataclass

from hara.knobs import knob
from hara.methods import MethodSpec


@dataclass(frozen=True)
class LateParams:
    slope: float = knob(1.0, "Weight of a rollout's last token over its first, minus one.", minimum=0, maximum=4)


def late_credit(advantages, completion_mask, group_ids, rewards, context):
    """w = 1 + slope (u - 1/2), u = (t - 1) / (n - 1): mean 1 over each rollout's tokens, growing along it."""
    mask = completion_mask.float()
    u = (mask.cumsum(1) - 1.0) / (mask.sum(1, keepdim=True) - 1.0).clamp_min(1.0)
    weights = (1.0 + context.params.slope * (u - 0.5)) * mask
    return advantages.float()[:, None] * weights, {"late/w_max": float(weights.max())}


SPEC = MethodSpec(
    "late_credit",
    "baseline",
    "late_credit",
    namespace="late/",
    weighting=f"{__name__}:late_credit",
    params=f"{__name__}:LateParams",
)
'''


@pytest.mark.slow
def test_a_method_declared_in_one_module_validates_its_knobs_and_trains(tmp_path, monkeypatch, tiny_base):
    """Adding a method is one module (docs/methods.md counts the files): registered from it, no other file edited,
    its knobs are a config section validated and default-filled from its dataclass, the contract holds, and
    build_trainer trains it with the config's knobs reaching the transform."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hara.rlvr.session import build_trainer, method_params

    (tmp_path / "late_credit.py").write_text(ONE_MODULE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    fresh_registry(monkeypatch, METHODS)
    registry.register_method(importlib.import_module("late_credit").SPEC)

    assert load_config(SMOKE)["hara"]["late_credit"] == {"slope": 1.0}  # its default, filled as a built-in's
    config = load_config(SMOKE, ["grid.methods=[none, late_credit]", "hara.late_credit.slope=2.0"])
    assert config["grid"]["methods"] == ["none", "late_credit"] and method_params(config, "late_credit") == {
        "slope": 2.0
    }
    with pytest.raises(ConfigError, match=r"hara.late_credit.slope: 9 is greater than the maximum of 4"):
        load_config(SMOKE, ["hara.late_credit.slope=9"])
    with pytest.raises(ConfigError, match=r"hara.late_credit.slop: unknown key \(valid keys: slope\)"):
        load_config(SMOKE, ["hara.late_credit.slop=1"])
    contract("late_credit")

    config["training"]["save_steps"] = 1000
    tokenizer = AutoTokenizer.from_pretrained(tiny_base, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(tiny_base, local_files_only=True)
    data = Dataset.from_list([{"prompt": f"Question: {a}+{a}?\nAnswer:", "answer": str(2 * a)} for a in (3, 5)])
    parity = [lambda completions, **kwargs: [float(sum(map(ord, c)) % 2) for c in completions]]
    trainer = build_trainer(config, "grpo", "late_credit", 0, model, tokenizer, data, tmp_path, reward_funcs=parity)
    trainer.train()
    last = trainer.last_advantages
    mask = last["mask"].bool()
    u = (mask.float().cumsum(1) - 1.0) / (mask.sum(1, keepdim=True) - 1.0).clamp_min(1.0)
    expected = last["sequence"].float()[:, None] * (1.0 + 2.0 * (u - 0.5)) * mask  # slope 2.0 from the config
    assert (last["sequence"] != 0).any() and torch.allclose(last["token"].float(), expected, atol=1e-6)


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
    fresh_registry(monkeypatch, METHODS, lambda group: [point])
    with pytest.raises(TypeError, match="entry point 'broken'"):
        methods()
    with pytest.raises(ValueError, match="kind 'other'"):
        MethodSpec("x", "other")
    with pytest.raises(ValueError, match="already registered"):
        registry.register_method(MethodSpec("none", "baseline"))


def test_importing_the_registry_stays_light():
    import subprocess

    code = "import hara.methods, sys; print('torch' in sys.modules)"
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
        == "False"
    )


TOY_PACKAGE = """
from hara.methods import MethodSpec


def toy(advantages, completion_mask, group_ids, rewards, context):
    weights = 1.0 + float(context.params.get("scale", 1.0)) * context.token_entropies
    return advantages[:, None] * weights * completion_mask, {"toy/w_mean": float(weights[completion_mask].mean())}


def leaky(advantages, completion_mask, group_ids, rewards, context):  # planted: advantage on padding tokens
    return advantages[:, None].expand(completion_mask.shape).clone().float(), {}


SPECS = [MethodSpec("toy", "baseline", needs=frozenset({"entropy"}), namespace="toy/", weighting="toy_credit:toy"),
         MethodSpec("toy_leaky", "baseline", weighting="toy_credit:leaky")]
"""


def install_toy_package(root):
    """A throwaway package as pip lays it out: the module and its .dist-info with the hara.methods entry point."""
    (root / "toy_credit").mkdir(parents=True)
    (root / "toy_credit" / "__init__.py").write_text(TOY_PACKAGE, encoding="utf-8")
    info = root / "toy_credit-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-credit\nVersion: 0.1\n", encoding="utf-8")
    (info / "entry_points.txt").write_text("[hara.methods]\ntoy = toy_credit:SPECS\n", encoding="utf-8")
    return root


@pytest.mark.slow
def test_an_installed_plugin_package_trains_with_hara_train_and_its_contract_violation_is_caught(
    tmp_path, tiny_base, monkeypatch
):
    import json
    import os
    import subprocess

    site = install_toy_package(tmp_path / "site")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)]), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "hara.cli",
            *smoke_train_args("toy"),
            "--base-model",
            str(tiny_base),
            "--out",
            str(tmp_path / "run"),
            "--set",
            "hara.plugins.toy.scale=0.5",
            "--set",
            f"tracking.mlflow_uri=sqlite:///{tmp_path / 'mlflow.db'}",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == load_config(SMOKE)["training"]["steps"] and all("toy/w_mean" in line for line in lines)
    assert (tmp_path / "run" / "final" / "config.json").is_file()

    monkeypatch.syspath_prepend(str(site))  # the same package seen by this process's registry
    fresh_registry(monkeypatch, METHODS)
    assert {"toy", "toy_leaky"} <= set(methods())
    contract("toy")
    with pytest.raises(AssertionError, match="toy_leaky"):
        contract("toy_leaky")
