"""The config loader: defaults, the shipped configs, and one-line errors that name the offending key."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from hara.cli import main
from hara.config import ConfigError, apply_overrides, fill_defaults, load_config, load_schema, validate_config
from tests.helpers import REPO

SHIPPED = ["default.yaml", "smoke.yaml", "paper.yaml"]

# (id, config as YAML text, text that must appear in the error: the key path)
MALFORMED = [
    ("unknown-top-key", "sed: 1\n", "sed: unknown key"),
    ("unknown-nested-key", "data:\n  trian_size: 5\n", "data.trian_size: unknown key"),
    ("seed-wrong-type", "seed: abc\n", "seed:"),
    ("seed-negative", "seed: -1\n", "seed:"),
    ("seed-bool", "seed: true\n", "seed:"),
    ("threads-zero", "threads: 0\n", "threads:"),
    ("name-with-space", "name: my run\n", "name:"),
    ("train-size-zero", "data:\n  train_size: 0\n", "data.train_size:"),
    ("source-unknown", "data:\n  source: web\n", "data.source:"),
    ("benchmarks-empty", "data:\n  benchmarks: []\n", "data.benchmarks:"),
    ("benchmark-unknown", "data:\n  benchmarks: [gsm8k]\n", "data.benchmarks[0]:"),
    ("benchmark-duplicate", "data:\n  benchmarks: [mini_math500, mini_math500]\n", "data.benchmarks:"),
    ("benchmark-wrong-source", "data:\n  benchmarks: [mini_math500, math500]\n", "data.benchmarks[1]:"),
    ("benchmark-size-not-embedded", "data:\n  benchmark_sizes: {math500: 5}\n", "data.benchmark_sizes.math500:"),
    (
        "benchmark-size-zero",
        "data:\n  benchmark_sizes: {in_distribution: 0}\n",
        "data.benchmark_sizes.in_distribution:",
    ),
    ("skill-unknown", "data:\n  skills: [chains]\n", "data.skills[0]:"),
    ("data-not-mapping", "data: [1, 2]\n", "data:"),
    ("family-unknown", "models:\n  family: huge\n", "models.family:"),
    ("size-unknown", "models:\n  sizes: [tiny-s, tiny-xl]\n", "models.sizes[1]:"),
    ("hub-size-unknown", "models:\n  family: hub\n  sizes: [qwen3-70b]\n", "models.sizes[0]:"),
    ("hub-id-malformed", "models:\n  hub_ids:\n    big: not a repo id\n", "models.hub_ids.big:"),
    ("lr-zero", "warmup:\n  lr: 0\n", "warmup.lr:"),
    ("lr-string", "warmup:\n  lr: fast\n", "warmup.lr:"),
    ("batch-float", "warmup:\n  batch_size: 1.5\n", "warmup.batch_size:"),
    ("steps-zero", "warmup:\n  steps: 0\n", "warmup.steps:"),
    ("temperature-high", "evaluation:\n  temperature: 5\n", "evaluation.temperature:"),
    ("top-p-zero", "evaluation:\n  top_p: 0\n", "evaluation.top_p:"),
    ("mlflow-uri-empty", "tracking:\n  mlflow_uri: ''\n", "tracking.mlflow_uri:"),
    (
        "hub-folder-missing",
        "data:\n  source: hub\n  benchmarks: [math500]\n  local_dir: /nonexistent/hub\n",
        "data.local_dir:",
    ),
]


@pytest.mark.parametrize("name,text,expected", MALFORMED, ids=[case[0] for case in MALFORMED])
def test_malformed_config_gives_one_line_error_naming_the_key(tmp_path, capsys, name, text, expected):
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    assert main(["config", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(f"error: {path}: "), err
    assert expected in err, err
    assert "Traceback" not in err


def test_missing_config_file_names_the_file(tmp_path, capsys):
    path = tmp_path / "absent.yaml"
    assert main(["config", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "not found" in err and err.count("\n") == 1


def test_invalid_yaml_names_file_and_line(tmp_path, capsys):
    path = tmp_path / "broken.yaml"
    path.write_text("seed: 1\ndata: {train_size: 5\n")
    assert main(["config", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:3:" in err or f"{path}:2:" in err, err
    assert err.count("\n") == 1


def test_console_script_prints_no_traceback(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("warmup:\n  lr: -3\n")
    run = subprocess.run(
        [sys.executable, "-m", "hara.cli", "config", "--config", str(path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert run.returncode == 2
    assert run.stderr.strip().startswith("error:") and "warmup.lr" in run.stderr
    assert "Traceback" not in run.stderr and run.stderr.count("\n") == 1


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_configs_are_valid(name, tmp_path, monkeypatch):
    raw = yaml.safe_load((REPO / "config" / name).read_text())
    if raw.get("data", {}).get("source") == "hub":  # the paper config reads fetched folders
        raw["data"]["local_dir"] = str(tmp_path)
    resolved = validate_config(raw, source=name)
    assert resolved["seed"] == raw.get("seed", 0)


@pytest.mark.parametrize(
    "overlays,methods,group_size",
    [
        (("control_chain",), ["none", "oracle_step", "oracle_reversed", "hara_tok"], 8),
        (("control_levels", "control_reversed"), ["none", "oracle_reversed"], 8),
        (("control_chain", "control_chain_batch"), ["none", "oracle_step"], 8),
        (("control_chain", "control_chain_batch", "control_chain_group4"), ["none", "oracle_step"], 4),
    ],
)
def test_the_credit_worlds_overlays_score_the_speed_endpoint_in_distribution(overlays, methods, group_size):
    """config/control_chain.yaml (chain problems only, 7-8 steps, GRPO with groups of 8) and
    config/control_reversed.yaml (the sabotage in the levels 4-5 world), each after the default and the control: RL
    prompts of levels 4-5, a worked-only warm-up, every candidate scored on the in-distribution benchmark (kept out of
    the final benchmarks' average), their own results folder and tracking store."""
    from tests.helpers import merged, read

    raw = {}
    for name in ("default", "control", *overlays):
        raw = merged(raw, read(REPO / "config" / f"{name}.yaml"))
    config = validate_config(raw, source=overlays[-1])
    assert config["report"]["speed"]["benchmark"] == "in_distribution"
    assert "in_distribution" not in config["data"]["benchmarks"]
    assert config["training"]["prompt_selection"]["enabled"] and config["training"]["prompt_selection"]["levels"] == [
        4,
        5,
    ]
    assert config["warmup"]["direct_fraction"] == 0 and config["training"]["group_size"] == group_size
    assert config["grid"]["rlvr"] == ["grpo"] and config["grid"]["seeds"] == [0, 1, 2]
    assert config["grid"]["methods"] == methods
    folder = f"results/{overlays[-1]}"
    assert config["results_dir"] == folder and f"{folder}/" in config["tracking"]["mlflow_uri"]
    if overlays[0] == "control_chain":
        assert config["data"]["skills"] == ["chain"]


def test_defaults_are_filled_from_the_schema():
    resolved = validate_config({}, source="empty")
    schema = load_schema()
    assert resolved["warmup"]["lr"] == schema["properties"]["warmup"]["properties"]["lr"]["default"]
    assert resolved["data"]["benchmarks"] == schema["properties"]["data"]["properties"]["benchmarks"]["default"]


def test_given_values_survive_default_filling():
    assert fill_defaults({"warmup": {"steps": 7}}, load_schema())["warmup"]["steps"] == 7


def walk_leaves(schema: dict, path: str = ""):
    for key, sub in schema.get("properties", {}).items():
        if sub.get("type") == "object" and "properties" in sub:
            assert sub.get("additionalProperties") is False, f"{path}{key}: unknown keys must be rejected"
            assert sub.get("description"), f"{path}{key}: no description"
            yield from walk_leaves(sub, f"{path}{key}.")
        else:
            yield f"{path}{key}", sub


def test_every_schema_key_has_type_description_default_and_range():
    schema = load_schema()
    assert schema["additionalProperties"] is False
    for key, sub in walk_leaves(schema):
        assert {"type", "description", "default"} <= set(sub), key
        if sub["type"] in ("integer", "number"):
            assert ("minimum" in sub or "exclusiveMinimum" in sub) and "maximum" in sub, key
        if sub["type"] == "string":
            assert "enum" in sub or "minLength" in sub or "pattern" in sub, key
        if sub["type"] == "array":
            assert "items" in sub and "minItems" in sub, key


def test_schema_defaults_validate():
    """The defaults themselves must satisfy their own ranges (a default outside its range is a schema bug)."""
    resolved = validate_config({}, source="defaults")
    assert resolved["threads"] >= 1


def test_overrides_set_nested_values_and_are_validated(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("seed: 3\n")
    assert load_config(path, ["warmup.steps=12"])["warmup"]["steps"] == 12
    with pytest.raises(ConfigError, match="warmup.steps"):
        load_config(path, ["warmup.steps=-4"])
    with pytest.raises(ConfigError, match="KEY.PATH=VALUE"):
        apply_overrides({}, ["warmup.steps"])


def test_an_override_reaches_a_key_with_dots_in_its_name():
    """Model sizes name per-size tables (qwen3-1.7b): before, --set split that key at its dot and wrote
    {"qwen3-1": {"7b": 2}}, which the schema then refused."""
    raw = {"models": {"train_gpus": {"qwen3-1.7b": 1, "qwen3-4b": 4}}, "resources": {"train": {"runtime": 60}}}
    out = apply_overrides(raw, ["models.train_gpus.qwen3-1.7b=2", "resources.train.runtime=90", "plan.mfu=0.4"])
    assert out["models"]["train_gpus"] == {"qwen3-1.7b": 2, "qwen3-4b": 4}
    assert out["resources"]["train"]["runtime"] == 90 and out["plan"] == {"mfu": 0.4}
    assert raw["models"]["train_gpus"]["qwen3-1.7b"] == 1  # a copy is overridden
    with pytest.raises(ConfigError, match="runtime is not a section"):
        apply_overrides(raw, ["resources.train.runtime.qwen3-1.7b=90"])


def test_exponent_floats_without_a_dot_are_numbers(tmp_path):
    """YAML 1.1 reads 1e-4 as a string; configs and --set overrides read it as the number users mean."""
    path = tmp_path / "lr.yaml"
    path.write_text((REPO / "config" / "smoke.yaml").read_text() + "\n", encoding="utf-8")
    config = load_config(path, overrides=["training.lr=1e-4", "warmup.lr=2E-3"])
    assert config["training"]["lr"] == 1e-4 and config["warmup"]["lr"] == 2e-3
    path.write_text(path.read_text().replace("lr: 1.0e-3", "lr: 5e-4"), encoding="utf-8")
    assert load_config(path)["training"]["lr"] == 5e-4


def test_vllm_server_mode_is_refused_in_one_line():
    """No rule starts a `trl vllm-serve` around a training job: server mode would hang waiting for one."""
    with pytest.raises(ConfigError, match=r"training\.vllm_mode: 'server' is not supported"):
        load_config(REPO / "config" / "smoke.yaml", overrides=["training.use_vllm=true", "training.vllm_mode=server"])
    assert load_config(REPO / "config" / "smoke.yaml", overrides=["training.vllm_mode=server"])  # vLLM off: unused


def test_paper_prompt_asks_for_a_boxed_answer_and_stops_at_the_next_question():
    from hara.data.format import prompt_format

    prompt = prompt_format(load_config(REPO / "config" / "paper.yaml", skip_checks=("check_local_folders",)))
    assert "\\boxed{}" in prompt.prompt("What is 1+1?") and prompt.prompt("What is 1+1?").startswith("Question: What")
    assert prompt.cut(" 1+1=2, so \\boxed{2}.\nQuestion: What is 2+2?\nAnswer: \\boxed{5}") == " 1+1=2, so \\boxed{2}."


def test_a_value_matching_no_alternative_names_the_alternatives(tmp_path):
    with pytest.raises(ConfigError, match=r"hara.hidden_layer: 'last' is none of: final_norm, integer"):
        validate_config({"hara": {"hidden_layer": "last"}}, source="x")


def test_the_schema_is_parsed_once_per_process_and_each_caller_gets_its_own_copy(monkeypatch):
    """Every config load validates against hara/schemas/config.yaml; parsing its 1,600 lines each time cost ~0.08 s per
    load (hundreds of loads in the bad-config property tests, one or more in every `hara` process)."""
    import hara.config as config_module

    parses = []
    real_load = config_module.yaml.load

    def counted_load(stream, *args, **kwargs):
        parses.extend([1] if getattr(stream, "name", None) == str(config_module.SCHEMA_PATH) else [])
        return real_load(stream, *args, **kwargs)

    monkeypatch.setattr(config_module.yaml, "load", counted_load)  # yaml.safe_load goes through it too
    config_module._parsed_schema.cache_clear()  # parsed anew below, where the spy sees it
    first = load_schema()
    first["properties"].pop("training")
    second = load_schema()
    load_config(REPO / "config" / "smoke.yaml")
    assert len(parses) == 1
    assert "training" in second["properties"]  # the first caller's change did not reach the cache
    with open(config_module.SCHEMA_PATH, encoding="utf-8") as handle:  # libyaml and pure Python read it alike
        plain = yaml.safe_load(handle)
    assert second == config_module.inline_refs(plain, plain)


def test_config_files_merge_as_snakemake_merges_them():
    """hara.config.merge_overlay, the one merge of --configfile files (the pilot's config, the tests' overlays):
    mappings key by key, lists and scalars replaced, neither input changed."""
    from hara.config import merge_overlay

    base = {"grid": {"rlvr": ["grpo", "dapo"], "seeds": [0, 1]}, "seed": 0}
    overlay = {"grid": {"rlvr": ["grpo"]}, "training": {"steps": 4}}
    out = merge_overlay(base, overlay)
    assert out == {"grid": {"rlvr": ["grpo"], "seeds": [0, 1]}, "seed": 0, "training": {"steps": 4}}
    out["grid"]["seeds"].append(2)
    out["training"]["steps"] = 5
    assert base["grid"] == {"rlvr": ["grpo", "dapo"], "seeds": [0, 1]} and overlay["training"] == {"steps": 4}
