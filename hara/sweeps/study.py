"""Study files (sweeps/<name>.yaml): loading, validation, search space, sampler and pruner registries.

A study file is validated against ``hara/schemas/study.yaml`` (package data) with hara.config's machinery (defaults
filled, unknown keys rejected, one-line :class:`~hara.config.ConfigError` naming the file and key path). Then the
checks that need the main config: every swept or overridden key must be a config key of the config schema
(``hara/schemas/config.yaml``), every bound and choice must pass that schema, the method must be valid, and the
objective's steps must fit ``training.steps``.
"""

from __future__ import annotations

import copy
import inspect
import itertools
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from hara import layout
from hara.config import (
    ConfigError,
    apply_overrides,
    fill_defaults,
    get_path,
    read_yaml,
    set_path,
    validate_against_schema,
    validate_config,
    validation_schema,
)
from hara.errors import UnknownNameError
from hara.metric_keys import REWARD

__all__ = [
    "OBJECTIVES",
    "PRUNERS",
    "SAMPLERS",
    "STUDY_SCHEMA_PATH",
    "Objective",
    "StudySpec",
    "load_study",
    "make_pruner",
    "make_sampler",
    "stored_constraints",
]

#: The study file schema (package data, like the config schema).
STUDY_SCHEMA_PATH = resources.files("hara") / "schemas" / "study.yaml"
# lr schedules whose value at a step does not depend on the total step count: only these can be trained in
# segments (a cosine or linear decay would decay to zero at the end of every segment).
SEGMENTABLE_SCHEDULES = ("constant", "constant_with_warmup")


def _optuna_classes(names: Mapping[str, str], module: str) -> dict[str, Callable[..., Any]]:
    """Lazy constructors: importing optuna costs a second, the CLI parser must not pay it."""

    def lazy(class_name: str):
        def build(**options):
            import importlib

            return getattr(importlib.import_module(module), class_name)(**options)

        build.class_name = class_name
        return build

    return {name: lazy(class_name) for name, class_name in names.items()}


SAMPLERS = _optuna_classes(
    {"tpe": "TPESampler", "random": "RandomSampler", "grid": "GridSampler", "gp": "GPSampler"}, "optuna.samplers"
)
PRUNERS = _optuna_classes(
    {
        "none": "NopPruner",
        "median": "MedianPruner",
        "percentile": "PercentilePruner",
        "successive_halving": "SuccessiveHalvingPruner",
        "hyperband": "HyperbandPruner",
        "wilcoxon": "WilcoxonPruner",
    },
    "optuna.pruners",
)
#: pruners that suit a trial of several seeds: they are consulted between its seeds, not at training steps
BETWEEN_SEEDS_PRUNERS = ("none", "wilcoxon")


@dataclass(frozen=True)
class Objective:
    """What an objective metric measures (hara.sweeps.objective.METRICS computes it): its description for summaries
    and the report, the scale and unit its differences are printed in, and whether it has per-problem outcomes
    (which pair trials problem by problem: the sensitivity intervals and the Wilcoxon pruner)."""

    description: str
    scale: float
    unit: str
    per_problem: bool


OBJECTIVES = {
    "validation/pass@1": Objective(
        "pass@1 on the validation split held out of the training set, not a test benchmark", 100.0, "points", True
    ),
    REWARD: Objective("mean training reward, not a test benchmark", 1.0, "", False),
}


@dataclass(frozen=True)
class StudySpec:
    """A validated study: the study file's resolved fields plus the resolved base config it perturbs."""

    path: Path
    fields: dict
    base_raw: dict  # the base config before defaults (trial params are applied to it, then it is validated)
    base_source: str

    @property
    def base_config(self) -> dict:
        return trial_config(self, {})

    @property
    def study_dir(self) -> Path:
        """results/sweeps/<name>/ under the base config's results_dir."""
        return layout.sweep_dir(self.base_config["results_dir"], self.fields["name"])

    @property
    def kind(self) -> str:
        return self.fields["kind"]

    @property
    def seeds(self) -> list[int]:
        """The training seeds of every search trial and of every sensitivity value (the same: common random numbers)."""
        return list(range(self.fields["seed"], self.fields["seed"] + self.fields["repeats"]))

    @property
    def reevaluation_seeds(self) -> list[int]:
        """Fresh seeds of the re-evaluations: after the search's, the same for every candidate (paired among them)."""
        start = self.fields["seed"] + self.fields["repeats"]
        return list(range(start, start + self.fields["reevaluate"]["repeats"]))

    @property
    def reference(self) -> dict:
        """The base config's value of each swept key (a sensitivity study's reference point)."""
        config = self.base_config
        return {dotted: get_path(config, dotted) for dotted in self.fields["space"]}

    @property
    def points(self) -> list[dict]:
        """A sensitivity study's listed points: the product of its parameters' value lists, in file order."""
        names = list(self.fields["space"])
        return [
            dict(zip(names, values))
            for values in itertools.product(*(self.fields["space"][n]["choices"] for n in names))
        ]

    @property
    def trial_budget(self) -> int:
        """Search: the trials of the file. Sensitivity: every distinct point (the reference included) x seeds."""
        if self.kind == "sensitivity":
            return len(distinct_points([self.reference, *self.points])) * self.fields["repeats"]
        return self.fields["trials"]

    @property
    def trainings(self) -> int:
        """Training runs of the whole plan (each seed of a trial is one): a worker job's runtime is sized on them."""
        if self.kind == "sensitivity":
            return self.trial_budget
        reevaluate = self.fields["reevaluate"]
        return self.fields["trials"] * self.fields["repeats"] + reevaluate["top"] * reevaluate["repeats"]

    @property
    def max_failed(self) -> int:
        return self.fields["max_failed_trials"] or self.trial_budget

    def report_steps(self, config: Mapping) -> list[int]:
        """Steps at which the objective is measured: objective.report_steps up to training.steps, which is last."""
        total = config["training"]["steps"]
        return sorted({step for step in self.fields["objective"]["report_steps"] if step < total} | {total})


def distinct_points(points: Iterable[Mapping]) -> list[dict]:
    """Points in first-seen order without repeats (a listed value equal to the reference is the reference)."""
    seen: list[dict] = []
    for point in points:
        if dict(point) not in seen:
            seen.append(dict(point))
    return seen


def stored_constraints(trial) -> list[float]:
    """The sampler's constraints_func: the values the trial stored (<= 0 is feasible; hara.sweeps.objective)."""
    return list(trial.user_attrs.get("constraints", []))


def trial_config(spec: StudySpec, params: Mapping[str, Any]) -> dict:
    """The resolved config of one trial: base config + the study's fixed overrides + the trial's parameters."""
    raw = copy.deepcopy(spec.base_raw)
    for dotted, value in {**spec.fields["overrides"], **params}.items():
        set_path(raw, dotted, copy.deepcopy(value))  # as `--set` does, but without parsing YAML
    return validate_config(raw, source=spec.base_source, skip_checks=("check_local_folders",))


def schema_node(dotted: str) -> Mapping | None:
    """The config schema's node of a dotted key path (None when there is no such key)."""
    node: Mapping = validation_schema()
    for part in dotted.split("."):
        node = node.get("properties", {}).get(part) if isinstance(node, Mapping) else None
        if node is None:
            return None
    return node


def missing_required(data: Any, schema: Mapping, path: str = "") -> str | None:
    """The first required key missing (checked before defaults are filled, which would hide it)."""
    if not isinstance(data, dict):
        return None
    for key in schema.get("required", []):
        if key not in data:
            return f"{path}{key}: missing (required)"
    for key, sub in schema.get("properties", {}).items():
        problem = missing_required(data.get(key), sub, f"{path}{key}.")
        if problem:
            return problem
    return None


def check_keys(fields: Mapping) -> str | None:
    """Swept and overridden keys must be leaf keys of the config schema; data.* is shared by all trials."""
    for section in ("overrides", "space"):
        for dotted in fields[section]:
            node = schema_node(dotted)
            if node is None or node.get("type") == "object" and "properties" in node:
                return f"{section}.{dotted}: not a config key of hara/schemas/config.yaml"
            if section == "space" and dotted.split(".")[0] in ("data", "results_dir", "tracking", "name"):
                return f"space.{dotted}: every trial shares the data split and the stores; this key cannot be swept"
    return None


def check_distributions(fields: Mapping) -> str | None:
    """Each distribution has the fields its kind needs, in a consistent order."""
    for name, dist in fields["space"].items():
        kind, where = dist["type"], f"space.{name}"
        if kind == "categorical":
            if "choices" not in dist or {"low", "high"} & set(dist):
                return f"{where}: a categorical parameter takes choices (and no low/high)"
            continue
        if "choices" in dist or not {"low", "high"} <= set(dist):
            return f"{where}: an {kind} parameter takes low and high (and no choices)"
        if not dist["low"] < dist["high"]:
            return f"{where}.high: must exceed low ({dist['low']})"
        if kind == "int" and not all(float(dist[k]).is_integer() for k in ("low", "high")):
            return f"{where}: an int parameter needs integer low and high"
        if dist.get("log") and (dist["low"] <= 0 or dist.get("step") is not None):
            return f"{where}.log: a log scale needs low > 0 and no step"
    if fields["sampler"]["name"] == "grid" and any(d["type"] != "categorical" for d in fields["space"].values()):
        return "sampler.name: grid needs every parameter of space to be categorical"
    return None


#: keys a sensitivity study does without (its trials are its values x seeds, all trained to the end)
SEARCH_ONLY_KEYS = ("sampler", "trials", "reevaluate", "constraints")


def check_kind(raw: Mapping, fields: Mapping) -> str | None:
    """The rules of each kind that the schema cannot say."""
    if fields["kind"] == "sensitivity":
        for key in SEARCH_ONLY_KEYS:
            if key in raw:
                return f"{key}: a sensitivity study has no {key} (its trials are every value x seed)"
        if fields["pruner"]["name"] != "none" and "pruner" in raw:
            return "pruner.name: a sensitivity study trains every run to the end (none)"
        if len(fields["space"]) > 2 or any(d["type"] != "categorical" for d in fields["space"].values()):
            return "space: a sensitivity study takes one or two parameters, each a categorical list of values"
        return None
    if fields["trials"] is None:
        return "trials: missing (required by a search study)"
    pruner, repeats = fields["pruner"]["name"], fields["repeats"]
    if repeats > 1 and pruner not in BETWEEN_SEEDS_PRUNERS:
        return (
            f"pruner.name: a trial of {repeats} seeds is pruned between its seeds, by one of "
            f"{list(BETWEEN_SEEDS_PRUNERS)} (got {pruner!r})"
        )
    if pruner == "wilcoxon" and repeats == 1:
        return "pruner.name: wilcoxon compares a trial's seeds as they finish; it needs repeats > 1"
    if (
        fields["constraints"]
        and "constraints_func" not in inspect.signature(_optuna_class("sampler", fields["sampler"]["name"])).parameters
    ):
        return f"constraints: sampler {fields['sampler']['name']!r} takes no constraints (use tpe or gp)"
    return None


def _optuna_class(section: str, name: str):
    import importlib

    module, registry = ("optuna.samplers", SAMPLERS) if section == "sampler" else ("optuna.pruners", PRUNERS)
    return getattr(importlib.import_module(module), registry[name].class_name)


def boundary_values(dist: Mapping) -> list:
    return list(dist["choices"]) if dist["type"] == "categorical" else [dist["low"], dist["high"]]


def check_against_config(spec: StudySpec) -> None:
    """Each bound and choice, applied alone to the base config, must pass the config schema (names the key)."""
    for name, dist in spec.fields["space"].items():
        for value in boundary_values(dist):
            value = int(value) if dist["type"] == "int" else value
            try:
                trial_config(spec, {name: value})
            except ConfigError as error:
                problem = str(error).split(": ", 1)[-1]
                raise ConfigError(
                    f"{spec.path}: space.{name}: value {value!r} is invalid for the config ({problem})"
                ) from None


def check_objective(spec: StudySpec) -> None:
    config = spec.base_config
    steps = spec.fields["objective"]["report_steps"]
    total = config["training"]["steps"]
    if any(step > total for step in steps):
        raise ConfigError(f"{spec.path}: objective.report_steps: steps beyond training.steps ({total})")
    several = spec.kind == "search" and spec.fields["repeats"] > 1
    if (several or spec.fields["pruner"]["name"] == "wilcoxon") and len(spec.report_steps(config)) > 1:
        raise ConfigError(
            f"{spec.path}: objective.report_steps: a trial of several seeds is measured at its end "
            "and pruned between its seeds, never at a training step (leave report_steps out)"
        )
    schedule = config["training"]["lr_scheduler"]
    if len(spec.report_steps(config)) > 1 and schedule not in SEGMENTABLE_SCHEDULES:
        raise ConfigError(
            f"{spec.path}: objective.report_steps: intermediate steps train in resumed segments, which "
            f"needs training.lr_scheduler in {list(SEGMENTABLE_SCHEDULES)} (got {schedule!r})"
        )
    held_out, train_size = spec.fields["validation"]["size"], config["data"]["train_size"]
    if held_out >= train_size:
        raise ConfigError(
            f"{spec.path}: validation.size: {held_out} leaves no training problems (data.train_size is {train_size})"
        )


def check_options(spec: StudySpec, section: str, registry: Mapping[str, Callable]) -> None:
    """sampler/pruner options must be constructor arguments of the chosen Optuna class."""
    cls = _optuna_class(section, spec.fields[section]["name"])
    accepted = set(inspect.signature(cls).parameters) - {"seed", "search_space", "constraints_func"}
    for option in spec.fields[section]["options"]:
        if option not in accepted:
            raise ConfigError(
                f"{spec.path}: {section}.options.{option}: not an option of {cls.__name__} "
                f"(valid: {', '.join(sorted(accepted))})"
            )
    try:
        make_sampler(spec, 0) if section == "sampler" else make_pruner(spec)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"{spec.path}: {section}.options: {' '.join(str(error).split())}") from None


def make_sampler(spec: StudySpec, trial_number: int):
    """The study's sampler seeded for trial ``trial_number`` (distinct streams for parallel workers)."""
    sampler = spec.fields["sampler"]
    options = dict(sampler["options"], seed=sampler["seed"] + trial_number)
    if sampler["name"] == "grid":
        options["search_space"] = {name: list(d["choices"]) for name, d in spec.fields["space"].items()}
    if spec.fields["constraints"]:
        options["constraints_func"] = stored_constraints
    return SAMPLERS[sampler["name"]](**options)


def make_pruner(spec: StudySpec):
    return PRUNERS[spec.fields["pruner"]["name"]](**spec.fields["pruner"]["options"])


def distributions(spec: StudySpec) -> dict:
    """The search space as Optuna distributions (sampled all at once by ``study.ask``)."""
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )

    result = {}
    reference = spec.reference if spec.kind == "sensitivity" else {}
    for name, dist in spec.fields["space"].items():
        if dist["type"] == "categorical":  # a sensitivity study's reference is a value of it too
            extra = [reference[name]] if name in reference and reference[name] not in dist["choices"] else []
            result[name] = CategoricalDistribution([*dist["choices"], *extra])
        elif dist["type"] == "int":
            result[name] = IntDistribution(
                int(dist["low"]), int(dist["high"]), log=dist.get("log", False), step=int(dist.get("step") or 1)
            )
        else:
            result[name] = FloatDistribution(
                dist["low"], dist["high"], log=dist.get("log", False), step=dist.get("step")
            )
    return result


def check_method(fields: Mapping) -> str | None:
    """The swept method must be in the method registry (hara/methods.py: built-ins and installed plug-ins), its preset
    in the preset registry (hara/rlvr/presets.py)."""
    from hara.methods import METHODS
    from hara.rlvr.presets import PRESETS

    for key, registry in (("method", METHODS), ("rlvr", PRESETS)):
        try:
            registry.get(fields[key])
        except UnknownNameError as error:
            return f"{key}: {error}"
    return None


def load_study(path: str | Path, base_config: str | Path | None = None, overrides: Iterable[str] = ()) -> StudySpec:
    """Read and validate a study file; ``base_config`` replaces its base_config, ``overrides`` (KEY.PATH=VALUE, as
    `--set`) apply to the base config."""
    path = Path(path)
    raw = read_yaml(path)
    schema = yaml.safe_load(STUDY_SCHEMA_PATH.read_text(encoding="utf-8"))
    problem = missing_required(raw, schema)
    if problem:
        raise ConfigError(f"{path}: {problem}")
    fields = fill_defaults(raw, schema)
    validate_against_schema(fields, schema, str(path))
    if fields["kind"] == "sensitivity" and "pruner" not in raw:
        fields["pruner"] = {"name": "none", "options": {}}
    problem = check_kind(raw, fields) or check_keys(fields) or check_distributions(fields) or check_method(fields)
    if problem:
        raise ConfigError(f"{path}: {problem}")
    base = Path(base_config) if base_config else path.parent / fields["base_config"]
    if not base.is_file():
        where = "--config" if base_config else "base_config"
        raise ConfigError(f"{path}: {where}: config file {base} not found")
    spec = StudySpec(
        path=path, fields=fields, base_raw=apply_overrides(read_yaml(base), overrides), base_source=str(base)
    )
    try:
        config = spec.base_config
    except ConfigError as error:
        raise ConfigError(f"{path}: overrides: {error}") from None
    from hara.models.base import valid_model_sizes

    if fields["size"] not in valid_model_sizes(config):
        raise ConfigError(
            f"{path}: size: {fields['size']!r} is not a size of the {config['models']['family']} "
            f"family (valid: {', '.join(valid_model_sizes(config))})"
        )
    check_against_config(spec)
    check_objective(spec)
    check_options(spec, "sampler", SAMPLERS)
    check_options(spec, "pruner", PRUNERS)
    return spec


def param_label(value: Any) -> str:
    """A compact, stable text of a parameter value (for MLflow params and figure labels)."""
    return f"{value:.6g}" if isinstance(value, float) and math.isfinite(value) else str(value)
