"""Bad input never gets a traceback: hypothesis generates invalid configs (unknown keys, wrong types, out-of-range
values at random key paths of hara/schemas/config.yaml) and corrupt data lines; each is one line naming the key or
file:line, exit status 2. Config values that reach shell commands of the workflow stay one quoted argument."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import shlex
import subprocess
import tempfile
from pathlib import Path

import jsonschema
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hara.cli import main
from hara.config import fill_defaults, key_path, load_schema, read_yaml
from hara.data.io import DataError
from hara.data.pipeline import REQUIRED_KEYS, read_config_datasets, write_config_datasets
from hara.sweeps.study import STUDY_SCHEMA_PATH
from tests.helpers import REPO, SMOKE
from tests.workflow.conftest import BIN, snakemake

SCHEMA = load_schema()
# derandomize: the same examples in every CI run (explicit seed); no database files in the checkout
PROPERTY = settings(
    max_examples=80,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def schema_nodes(schema: dict, path: tuple = ()) -> list[tuple[tuple, dict]]:
    """Every key path of the schema with its subschema (objects with fixed properties are descended into)."""
    nodes = [(path, schema)] if path else []
    for key, sub in schema.get("properties", {}).items():
        nodes += schema_nodes(sub, (*path, key))
    return nodes


NODES = schema_nodes(SCHEMA)
CLOSED_OBJECTS = [
    (path, node)
    for path, node in [((), SCHEMA), *NODES]
    if node.get("type") == "object" and node.get("additionalProperties") is False
]
BOUNDED = [
    (path, node)
    for path, node in NODES
    if any(k in node for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "enum"))
]
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


def invalid_for(node: dict, value) -> bool:
    """Invalid as the loader judges it (an empty section, YAML null, means "all defaults")."""
    return not jsonschema.Draft202012Validator(node).is_valid(fill_defaults(value, node))


def with_value(path: tuple, value) -> dict:
    """The smoke config with ``value`` at ``path`` (sections created on the way)."""
    config = copy.deepcopy(read_yaml(SMOKE))
    node = config
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    return config


def hara_config(config: dict, *command: str) -> tuple[int, str]:
    """`hara config --config F` (or ``command`` with F for the file) in-process on ``config`` written as YAML:
    (exit status, stderr with the file's path spelled F)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "bad.yaml"
        path.write_text(yaml.safe_dump(config, allow_unicode=True), encoding="utf-8")
        err, out = io.StringIO(), io.StringIO()
        argv = [str(path) if word == "F" else word for word in command or ("config", "--config", "F")]
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            code = main(argv)
        return code, err.getvalue().replace(str(path), "F")


def assert_one_line_naming(code: int, err: str, key: str) -> None:
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: F: "), (code, err)
    assert key in err and "Traceback" not in err, (key, err)


@PROPERTY
@given(st.data())
def test_wrong_type_or_value_at_any_key_names_it(data):
    path, node = data.draw(st.sampled_from(NODES), label="key")
    value = data.draw(JSON_VALUES.filter(lambda v: invalid_for(node, v)), label="value")
    assert_one_line_naming(*hara_config(with_value(path, value)), key_path(path))


def beyond(node: dict) -> st.SearchStrategy:
    """Values of the right type just or far outside a node's range or enum."""
    options = []
    whole = node.get("type") == "integer" or "integer" in node.get("type", [])
    number = st.integers if whole else (lambda **kw: st.floats(allow_nan=False, allow_infinity=False, **kw))
    for bound, below in (
        ("minimum", True),
        ("exclusiveMinimum", True),
        ("maximum", False),
        ("exclusiveMaximum", False),
    ):
        if bound in node:
            edge = (
                node[bound] - (1 if whole and bound == "minimum" else 0)
                if below
                else node[bound] + (1 if whole and bound == "maximum" else 0)
            )
            options.append(number(max_value=edge) if below else number(min_value=edge))
    if "enum" in node:
        options.append(st.text(min_size=1, max_size=12).filter(lambda v: v not in node["enum"]))
    return st.one_of(options).filter(lambda v: invalid_for(node, v))


@PROPERTY
@given(st.data())
def test_out_of_range_values_name_the_key(data):
    path, node = data.draw(st.sampled_from(BOUNDED), label="key")
    value = data.draw(beyond(node), label="value")
    assert_one_line_naming(*hara_config(with_value(path, value)), key_path(path))


@PROPERTY
@given(st.data())
def test_unknown_keys_anywhere_are_named(data):
    path, node = data.draw(st.sampled_from(CLOSED_OBJECTS), label="section")
    key = data.draw(
        st.from_regex(r"[a-z][a-z_]{0,10}", fullmatch=True).filter(lambda k: k not in node["properties"]),
        label="unknown key",
    )
    config = copy.deepcopy(read_yaml(SMOKE))
    section = config
    for part in path:
        section = section.setdefault(part, {})
    section[key] = data.draw(JSON_VALUES, label="value")
    code, err = hara_config(config)
    assert_one_line_naming(code, err, f"{key_path((*path, key))}: unknown key")


# ---- sweep study files ------------------------------------------------------------------------------------------

STUDY_SCHEMA = yaml.safe_load(STUDY_SCHEMA_PATH.read_text(encoding="utf-8"))
STUDY_NODES = schema_nodes(STUDY_SCHEMA)


def smoke_study() -> dict:
    study = yaml.safe_load((REPO / "sweeps" / "smoke.yaml").read_text(encoding="utf-8"))
    return {**study, "base_config": str(SMOKE)}  # absolute: the mutated copy lives in a temporary folder


@PROPERTY
@given(st.data())
def test_invalid_sweep_study_files_name_the_key(data):
    path, node = data.draw(st.sampled_from(STUDY_NODES), label="key")
    value = data.draw(JSON_VALUES.filter(lambda v: invalid_for(node, v)), label="value")
    study = smoke_study()
    section = study
    for key in path[:-1]:
        section = section.setdefault(key, {})
    section[path[-1]] = value
    code, err = hara_config(study, "sweep", "report", "--study", "F", "--no-mlflow")
    assert_one_line_naming(code, err, key_path(path))


@pytest.mark.parametrize(
    "text,key",
    [
        ("training: {lr: -1}\n", "training.lr"),
        ("data: {benchmarks: [mini_math500, 7]}\n", "data.benchmarks[1]"),
        ("trainig: {}\n", "trainig: unknown key"),
    ],
)
def test_the_real_command_exits_2_with_one_line(tmp_path, text, key):
    path = tmp_path / "bad.yaml"
    path.write_text(SMOKE.read_text(encoding="utf-8") + text, encoding="utf-8")
    proc = subprocess.run(
        [str(BIN / "hara"), "config", "--config", str(path)], capture_output=True, text=True, timeout=600, check=False
    )  # a hang guard; imports are slow on a loaded machine
    assert proc.returncode == 2 and proc.stdout == "", proc
    assert proc.stderr.count("\n") == 1 and key in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


# ---- corrupt data lines ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def data_folder(tmp_path_factory) -> tuple[Path, dict]:
    """A `hara data` folder of the smoke config with a small training set."""
    from hara.config import load_config

    config = load_config(
        SMOKE, overrides=["data.train_size=12", "data.benchmark_size=2", "selection.validation_problems=2"]
    )
    folder = tmp_path_factory.mktemp("data")
    write_config_datasets(config, folder)
    return folder, config


LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"  # bytes Python's line iteration may split on
CORRUPTIONS = {
    "cut": lambda line, d: line[: d.draw(st.integers(1, len(line) - 1))],
    "garbage": lambda line, d: d.draw(
        st.binary(min_size=1, max_size=40).filter(lambda b: b.strip() and not any(chr(c) in LINE_BREAKS for c in b))
    ),
    "not_an_object": lambda line, d: json.dumps(
        d.draw(st.lists(st.integers(), max_size=3) | st.integers() | st.text(max_size=5))
    ).encode(),
    "missing_key": lambda line, d: json.dumps(
        {k: v for k, v in json.loads(line).items() if k != d.draw(st.sampled_from(REQUIRED_KEYS))}
    ).encode(),
}


@PROPERTY
@given(data=st.data())
def test_corrupt_data_lines_are_reported_as_file_and_line(data_folder, data):
    folder, config = data_folder
    name = data.draw(st.sampled_from(["train.jsonl", *(f"benchmarks/{b}.jsonl" for b in config["data"]["benchmarks"])]))
    original = (folder / name).read_bytes()
    lines = original.split(b"\n")[:-1]
    index = data.draw(st.integers(0, len(lines) - 1), label="line")
    kind = data.draw(st.sampled_from(sorted(CORRUPTIONS)), label="corruption")
    bad = CORRUPTIONS[kind](lines[index], data)
    with contextlib.suppress(Exception):
        record = json.loads(bad)
        if isinstance(record, dict) and set(REQUIRED_KEYS) <= set(record):
            return  # a corruption that happens to be a valid record is no corruption
    try:
        (folder / name).write_bytes(b"\n".join([*lines[:index], bad, *lines[index + 1 :]]) + b"\n")
        with pytest.raises(DataError) as caught:
            read_config_datasets(config, folder)
        assert str(caught.value).startswith(f"{folder / name}:{index + 1}: "), (kind, bad, str(caught.value))
        assert "\n" not in str(caught.value)
    finally:
        (folder / name).write_bytes(original)


def test_corrupt_line_through_the_cli_is_one_line(data_folder, tmp_path):
    folder, _ = data_folder
    corrupt = tmp_path / "data"
    subprocess.run(["cp", "-r", str(folder), str(corrupt)], check=True)
    lines = (corrupt / "train.jsonl").read_text(encoding="utf-8").splitlines()
    lines[4] = lines[4][:-7]
    (corrupt / "train.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    proc = subprocess.run(
        [
            str(BIN / "hara"),
            "base-model",
            "--config",
            str(SMOKE),
            "--size",
            "tiny-s",
            "--data",
            str(corrupt),
            "--out",
            str(tmp_path / "base"),
            "--skip-accuracy",
            "--set",
            "data.train_size=12",
            "--set",
            "data.benchmark_size=2",
            "--set",
            "selection.validation_problems=2",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr[-3000:]
    assert f"{corrupt / 'train.jsonl'}:5: invalid JSON" in proc.stderr


# ---- config values that reach shell commands -------------------------------------------------------------------

HOSTILE = "res x; touch pwned; $(touch pwned2) `touch pwned3` 'q"


def test_hostile_results_dir_stays_one_argument_in_every_shell_command(tmp_path):
    """A dry run prints every job's shell command: each must parse with the hostile folder inside one word."""
    proc = snakemake(
        tmp_path,
        "--configfile",
        str(SMOKE),
        "--config",
        f"results_dir={json.dumps(HOSTILE)}",
        "--dry-run",
        "--printshellcmds",
    )
    output = proc.stdout + proc.stderr
    commands = [
        line.split("Shell command:", 1)[1].strip()
        for line in output.splitlines()
        if "Shell command:" in line and not line.rstrip().endswith("None")
    ]  # None: a script: rule
    hara = {c.split()[1] for c in commands if c.startswith("hara ")}
    assert hara >= {"data", "base-model", "train", "evaluate", "report"}, output[-3000:]
    for command in commands:
        words = shlex.split(command)
        assert "touch" not in words and any(HOSTILE in word for word in words), command


def test_hostile_results_dir_creates_no_file_when_jobs_run(tmp_path):
    """The data and tracking-store jobs run for real under the hostile results_dir: nothing but their outputs."""
    snakemake(
        tmp_path,
        "--configfile",
        str(SMOKE),
        "--config",
        f"results_dir={json.dumps(HOSTILE)}",
        "--",
        f"{HOSTILE}/data/manifest.json",
        f"{HOSTILE}/mlflow_store.json",
    )
    assert (tmp_path / HOSTILE / "data" / "manifest.json").is_file()
    assert (tmp_path / HOSTILE / "mlflow_store.json").is_file() or (tmp_path / "results").is_dir()
    planted = sorted(str(p) for p in tmp_path.rglob("pwned*")) + sorted(str(p) for p in REPO.glob("pwned*"))
    assert planted == [], planted
