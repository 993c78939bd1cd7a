"""The one config loader, used by the CLI and by the Snakefile.

A config is a YAML file validated against ``hara/schemas/config.yaml`` (JSON Schema, shipped as package data, so an
installed package validates as a checkout does): defaults are filled from the schema, unknown keys are rejected, and
every problem is reported as a single line ``<file>: <key.path>: <problem>`` through :class:`ConfigError`, which the
CLI prints without a traceback. Checks that need the registries (model sizes, benchmark names, folders that must
exist) run after the schema, as a small list of named checks.
"""

from __future__ import annotations

import copy
import functools
import os
import re
from collections.abc import Callable, Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from hara.errors import ConfigError, UnknownNameError
from hara.rlvr.presets import PRESETS

#: The config schema (package data: read the same way from a checkout and from an installed wheel).
SCHEMA_PATH = resources.files("hara") / "schemas" / "config.yaml"


class ConfigLoader(yaml.SafeLoader):
    """PyYAML's safe loader reading ``1e-4`` and ``3E5`` as floats: YAML 1.1 wants ``1.0e-4`` and would hand the
    schema the string '1e-4', whose "not of type number" error surprises everyone writing a learning rate."""


ConfigLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                   |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                   |\.[0-9_]+(?:[eE][-+][0-9]+)?
                   |[-+]?\.(?:inf|Inf|INF)
                   |\.(?:nan|NaN|NAN))$""",
        re.VERBOSE,
    ),
    list("-+0123456789."),
)


def load_yaml(stream: Any) -> Any:
    """``yaml.safe_load`` with :class:`ConfigLoader` (configs, overrides and study files)."""
    return yaml.load(stream, Loader=ConfigLoader)


def load_schema() -> dict:
    """The JSON Schema of configs (hara/schemas/config.yaml), its ``$ref``s inlined: a copy of
    :func:`_parsed_schema`'s, so a caller may change it."""
    return copy.deepcopy(_parsed_schema())


def validation_schema() -> dict:
    """The schema a config is validated against: hara/schemas/config.yaml with the grid's preset enum read from the
    preset registry at this moment, so a preset is declared in PRESETS alone and one registered at run time (a
    plug-in, a test) is valid too; the file's enum lists the built-in presets for its readers. The knobs of a
    registered method that the file lacks are added from its params dataclass (:func:`add_method_knobs`)."""
    schema = load_schema()
    schema["properties"]["grid"]["properties"]["rlvr"]["items"]["enum"] = PRESETS.names()
    return add_method_knobs(schema)


def add_method_knobs(schema: dict) -> dict:
    """``schema`` with the knobs block (:func:`hara.knobs.knob_schema` of its params dataclass) of every registered
    method with knobs whose section it lacks, in place: a method declared in one module (a plug-in's, under
    ``hara.plugins.<name>``, or one registered at run time) is validated and default-filled like a built-in. The
    built-ins' blocks are in the file, equal to their dataclasses' (tests/test_method_knobs.py), so reading them
    imports no transform (and no torch)."""
    from hara.knobs import knob_names, knob_schema
    from hara.methods import methods

    hara = schema["properties"]["hara"]["properties"]
    for spec in methods().values():
        *_, key = spec.knobs_path
        parent = hara if spec.section else hara["plugins"].setdefault("properties", {})
        if key in parent or spec.params is None or not knob_names(cls := spec.params_type()):
            continue
        parent[key] = {"description": f"Knobs of method {spec.name} ({cls.__name__}).", **knob_schema(cls)}
    return schema


@functools.cache
def _parsed_schema() -> dict:
    """hara/schemas/config.yaml parsed once per process, with libyaml where PyYAML has it: every config load validates
    against it, and the pure-Python parser took ~0.08 s for its 1,600 lines, per load (hypothesis's bad-config
    tests load hundreds; every `hara` process and Snakemake's parse load at least one)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with SCHEMA_PATH.open(encoding="utf-8") as handle:
        schema = yaml.load(handle, Loader=loader)
    return inline_refs(schema, schema)


def inline_refs(node: Any, root: Mapping) -> Any:
    """``node`` with every ``{"$ref": "#/$defs/NAME", ...}`` replaced by a copy of that definition, the referring
    node's own keys on top. An object ``default`` there gives the definition's properties their defaults (each RLVR
    preset states its own values for the one shared block). The expanded tree is what fill_defaults, the error
    messages and the sweeps' key lookup walk: one place to declare a block, no resolver in each walker."""
    if isinstance(node, list):
        return [inline_refs(item, root) for item in node]
    if not isinstance(node, dict):
        return node
    node = {key: inline_refs(value, root) for key, value in node.items()}
    if "$ref" not in node:
        return node
    target = root
    for part in node.pop("$ref").removeprefix("#/").split("/"):
        target = target[part]
    merged = {**inline_refs(copy.deepcopy(target), root), **node}
    defaults = merged.get("default")
    if isinstance(defaults, dict) and "properties" in merged:
        for key, value in merged.pop("default").items():
            merged["properties"][key]["default"] = value  # a KeyError names a default for no property
    return merged


def key_path(parts: Iterable[Any]) -> str:
    """Render a JSON path as ``data.benchmarks[2]`` (the form used in every error message)."""
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "<root>"


def read_yaml(path: str | os.PathLike) -> dict:
    """Parse a YAML config file into a mapping, with one-line errors for missing or malformed files."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found")
    try:
        with open(path, encoding="utf-8") as handle:
            data = load_yaml(handle)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise ConfigError(f"{path}{where}: invalid YAML: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: <root>: expected a mapping of keys, got {type(data).__name__}")
    return data


def merge_overlay(base: Mapping, overlay: Mapping) -> dict:
    """Snakemake's merge of ``--configfile`` files, the later over the earlier: mappings key by key, anything else
    (lists included) replaced; neither input is changed."""
    out = copy.deepcopy(dict(base))
    for key, value in overlay.items():
        both = isinstance(value, Mapping) and isinstance(out.get(key), dict)
        out[key] = merge_overlay(out[key], value) if both else copy.deepcopy(value)
    return out


def fill_defaults(config: Any, schema: Mapping) -> Any:
    """Return ``config`` with every missing key set to its schema default (objects recursively)."""
    if schema.get("type") != "object" or "properties" not in schema:
        return config
    if config is None:
        config = {}
    if not isinstance(config, dict):
        return config  # the validator reports the wrong type
    filled = dict(config)
    for key, subschema in schema["properties"].items():
        if key not in filled:
            if subschema.get("type") == "object" and "properties" in subschema:
                filled[key] = fill_defaults({}, subschema)
            else:
                filled[key] = copy.deepcopy(subschema.get("default"))
        else:
            filled[key] = fill_defaults(filled[key], subschema)
    return filled


#: Keys that moved, with where to: an old config names its key and the fix instead of "unknown key".
MOVED_KEYS = {
    "plan.power": (
        "moved: the variance components are a declared file named by report.run_variance (config/variance/*.yaml; "
        "`hara plan --results DIR --write-variance FILE` measures one; docs/plan.md)"
    ),
}


def describe_schema_error(error: jsonschema.ValidationError) -> str:
    """One line naming the key path and what is wrong with it."""
    where = key_path(error.absolute_path)
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(allowed)) if isinstance(error.instance, dict) else []
        if extra and allowed:
            key = key_path([*error.absolute_path, extra[0]])
            return f"{key}: {MOVED_KEYS.get(key) or 'unknown key (valid keys: ' + ', '.join(allowed) + ')'}"
    message = " ".join(error.message.split())
    if error.validator == "anyOf":
        message = f"{error.instance!r} is none of: {', '.join(map(_alternative, error.validator_value))}"
    return f"{where}: {message[:300]}"


def _alternative(schema: Mapping) -> str:
    """One branch of an anyOf, for an error message: its values, or its type and range."""
    if "enum" in schema:
        return " or ".join(map(str, schema["enum"]))
    bounds = [f"{key} {schema[key]}" for key in ("minimum", "maximum") if key in schema]
    return f"{schema.get('type', 'value')}" + (f" ({', '.join(bounds)})" if bounds else "")


def validate_against_schema(config: Mapping, schema: Mapping, source: str) -> None:
    """Raise ConfigError for the first schema violation (deterministic: the shallowest, then by path)."""
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: (len(e.absolute_path), key_path(e.absolute_path)))
    if errors:
        raise ConfigError(f"{source}: {describe_schema_error(errors[0])}")


def check_model_sizes(config: Mapping) -> str | None:
    """Every size must exist in the registry of its model family."""
    from hara.models.base import valid_model_sizes

    valid = valid_model_sizes(config)
    for index, size in enumerate(config["models"]["sizes"]):
        if size not in valid:
            family = config["models"]["family"]
            return f"models.sizes[{index}]: unknown {family} size {size!r} (valid: {', '.join(valid)})"
    return None


def benchmarks_of_source(source: str) -> list[str]:
    """Benchmark names that a data source provides (the benchmark registry, hara/data/catalog.py)."""
    from hara.data.catalog import benchmarks

    return list(benchmarks(source))


def check_benchmarks(config: Mapping) -> str | None:
    """Benchmarks must belong to the chosen data source (mini benchmarks offline, hub benchmarks from local folders);
    per-benchmark evaluation settings must name registered benchmarks, and per-benchmark sizes embedded ones."""
    from hara.data.catalog import benchmarks

    source = config["data"]["source"]
    valid = benchmarks_of_source(source)
    for index, name in enumerate(config["data"]["benchmarks"]):
        if name not in valid:
            return f"data.benchmarks[{index}]: {name!r} is not a benchmark of source {source!r} (valid: {', '.join(valid)})"
    for name in config["evaluation"]["benchmarks"]:
        if name not in benchmarks():
            return f"evaluation.benchmarks.{name}: unknown benchmark (valid: {', '.join(benchmarks())})"
    embedded = list(benchmarks("synthetic"))
    for name in config["data"]["benchmark_sizes"]:
        if name not in embedded:
            return f"data.benchmark_sizes.{name}: not an embedded benchmark (valid: {', '.join(embedded)})"
    return None


def check_speed(config: Mapping) -> str | None:
    """The speed benchmark (report.speed) must be a benchmark of the data source, and the candidates it scores
    exist only with checkpoint selection on."""
    name, source = config["report"]["speed"]["benchmark"], config["data"]["source"]
    if name is None:
        return None
    if not config["selection"]["enabled"]:
        return "report.speed.benchmark: needs selection.enabled (the runs keep their candidate checkpoints only then)"
    valid = benchmarks_of_source(source)
    if name not in valid:
        return f"report.speed.benchmark: {name!r} is not a benchmark of source {source!r} (valid: {', '.join(valid)})"
    return None


def check_methods(config: Mapping) -> str | None:
    """Every grid method must be in the method registry (built-ins and installed plug-ins, hara/methods.py), its
    needs supplied by the data source (the step oracle: synthetic only), and every method given extra seeds must be
    one of them."""
    from hara.methods import NEED_SOURCES, get_method

    source = config["data"]["source"]
    for index, name in enumerate(config["grid"]["methods"]):
        try:
            needs = get_method(name).needs
        except UnknownNameError as error:
            return f"grid.methods[{index}]: {error}"
        for need in sorted(needs & set(NEED_SOURCES)):
            if source not in NEED_SOURCES[need]:
                return (
                    f"grid.methods[{index}]: {name} needs {need} that only data.source "
                    f"{' or '.join(NEED_SOURCES[need])} supplies, not {source!r}"
                )
    for name in config["grid"]["extra_seeds"]:
        if name not in config["grid"]["methods"]:
            return f"grid.extra_seeds.{name}: not a method of grid.methods ({', '.join(config['grid']['methods'])})"
    return None


def check_local_folders(config: Mapping) -> str | None:
    """Folders of fetched hub data must exist before anything reads them."""
    if config["data"]["source"] == "hub" and not Path(config["data"]["local_dir"]).is_dir():
        return f"data.local_dir: folder {config['data']['local_dir']!r} does not exist (run `hara fetch-data` first)"
    return None


def check_vllm_mode(config: Mapping) -> str | None:
    """vLLM server mode needs a server that lives as long as the training job; no rule of the DAG provides one."""
    training = config["training"]
    if training["use_vllm"] and training["vllm_mode"] == "server":
        return (
            "training.vllm_mode: 'server' is not supported (no rule starts and stops a `trl vllm-serve` "
            "around a training job); use 'colocate'"
        )
    return None


SEMANTIC_CHECKS: list[Callable[[Mapping], str | None]] = [
    check_model_sizes,
    check_methods,
    check_benchmarks,
    check_speed,
    check_local_folders,
    check_vllm_mode,
]


def validate_config(config: Any, source: str = "<config>", skip_checks: Iterable[str] = ()) -> dict:
    """Fill defaults, validate against the schema and the registries; return the resolved config."""
    schema = validation_schema()
    resolved = fill_defaults(config, schema)
    validate_against_schema(resolved, schema, source)
    for check in (c for c in SEMANTIC_CHECKS if c.__name__ not in set(skip_checks)):
        problem = check(resolved)
        if problem:
            raise ConfigError(f"{source}: {problem}")
    return resolved


def parse_override(text: str) -> tuple[list[str], Any]:
    """``warmup.steps=200`` -> (["warmup", "steps"], 200); the value is parsed as YAML."""
    if "=" not in text:
        raise ConfigError(f"--set {text}: expected KEY.PATH=VALUE")
    key, value = text.split("=", 1)
    parts = [part for part in key.strip().split(".") if part]
    if not parts:
        raise ConfigError(f"--set {text}: empty key path")
    try:
        return parts, load_yaml(value)
    except yaml.YAMLError:
        raise ConfigError(f"--set {text}: value is not valid YAML") from None


def apply_overrides(config: dict, overrides: Iterable[str]) -> dict:
    """Apply ``KEY.PATH=VALUE`` overrides (from the command line) on a copy of the config."""
    config = copy.deepcopy(config)
    for text in overrides:
        key, value = parse_override(text)
        set_path(config, key, value, f"--set {text}")
    return config


def _next_key(node: Mapping, parts: list[str], start: int) -> tuple[str, int]:
    """The key of ``node`` that ``parts[start:]`` begins with, and where the rest begins: a key with dots in its name
    (a model size: qwen3-1.7b) when ``node`` has one, longest first, else the next part."""
    for end in range(len(parts), start + 1, -1):
        if ".".join(parts[start:end]) in node:
            return ".".join(parts[start:end]), end
    return parts[start], start + 1


def get_path(config: Mapping, key: str | list[str]) -> Any:
    """The value at dotted ``key`` (``hara.hara.alpha``; keys with dots in their names matched longest first)."""
    parts, node, start = key.split(".") if isinstance(key, str) else list(key), config, 0
    while start < len(parts):
        name, start = _next_key(node, parts, start)
        node = node[name]
    return node


def set_path(config: dict, key: str | list[str], value: Any, origin: str = "") -> None:
    """Set dotted ``key`` to ``value`` in place, making missing sections (keys with dots matched as in
    :func:`get_path`); a ConfigError names ``origin`` where a part of the path is not a section."""
    parts, node, start = key.split(".") if isinstance(key, str) else list(key), config, 0
    while True:
        name, start = _next_key(node, parts, start)
        if start == len(parts):
            break
        node = node.setdefault(name, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{origin or '.'.join(parts)}: {name} is not a section")
    node[name] = value


def load_config(path: str | os.PathLike, overrides: Iterable[str] = (), skip_checks: Iterable[str] = ()) -> dict:
    """Read, override, default-fill and validate one config file; the result is the resolved config."""
    raw = apply_overrides(read_yaml(path), overrides)
    return validate_config(raw, source=str(path), skip_checks=skip_checks)
