"""Study files: the shipped ones validate; a bad one fails with one line naming the file and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from hara.cli import main
from hara.config import ConfigError
from hara.sweeps.study import load_study
from tests.helpers import REPO
from tests.sweeps.conftest import KNOB, REFERENCE, write_sensitivity_study, write_study

STUDIES = sorted((REPO / "sweeps").glob("*.yaml"))


def test_the_four_studies_of_issue_7_and_the_smoke_study_are_shipped():
    assert [p.stem for p in STUDIES] == ["alpha", "barycenter_size", "epsilon", "joint", "smoke"]


@pytest.mark.parametrize("path", STUDIES, ids=lambda p: p.stem)
def test_shipped_studies_validate(path: Path):
    spec = load_study(path)
    assert spec.fields["name"] == path.stem and spec.fields["space"]
    assert spec.report_steps(spec.base_config)[-1] == spec.base_config["training"]["steps"]


BAD = [
    ({"trials": None}, "trials: missing (required by a search study)"),
    ({"trials": 0}, "trials: 0 is less than the minimum of 1"),
    ({"repeats": 2}, "pruner.name: a trial of 2 seeds is pruned between its seeds, by one of ['none', 'wilcoxon']"),
    ({"pruner": {"name": "wilcoxon"}}, "pruner.name: wilcoxon compares a trial's seeds as they finish"),
    (
        {"repeats": 2, "pruner": {"name": "wilcoxon"}},
        "objective.report_steps: a trial of several seeds is measured at its end and pruned between its seeds",
    ),
    (
        {"constraints": {"hara/sinkhorn_marginal_error": 0.005}, "sampler": {"name": "random"}},
        "constraints: sampler 'random' takes no constraints (use tpe or gp)",
    ),
    ({"kind": "sensitivity"}, "sampler: a sensitivity study has no sampler"),
    ({"sampler": {"name": "anneal"}}, "sampler.name: 'anneal' is not one of"),
    ({"surprise": 1}, "surprise: unknown key"),
    (
        {"space": {"hara.hara.barycenter_sizes": {"type": "int", "low": 2, "high": 8}}},
        "space.hara.hara.barycenter_sizes: not a config key of hara/schemas/config.yaml",
    ),
    (
        {"space": {"hara.hara.alpha": {"type": "float", "low": 0.5, "high": 1.5}}},
        "space.hara.hara.alpha: value 1.5 is invalid for the config (hara.hara.alpha: 1.5 is greater than",
    ),
    ({"space": {"hara.hara.alpha": {"type": "float", "low": 0.5, "high": 0.2}}}, "space.hara.hara.alpha.high"),
    (
        {"space": {"hara.hara.alpha": {"type": "float", "low": 0.0, "high": 1.0, "log": True}}},
        "space.hara.hara.alpha.log: a log scale needs low > 0",
    ),
    ({"space": {"data.train_size": {"type": "int", "low": 10, "high": 20}}}, "space.data.train_size: every trial"),
    ({"sampler": {"name": "grid"}}, "sampler.name: grid needs every parameter of space to be categorical"),
    ({"sampler": {"name": "tpe", "options": {"n_startup": 3}}}, "sampler.options.n_startup: not an option of"),
    (
        {"objective": {"metric": "validation/pass@1", "direction": "maximize", "report_steps": [5]}},
        "objective.report_steps: steps beyond training.steps (2)",
    ),
    (
        {"overrides": {"training.lr_scheduler": "cosine"}},
        "objective.report_steps: intermediate steps train in resumed segments",
    ),
    ({"objective": {"metric": "test/pass@1", "direction": "maximize"}}, "objective.metric: 'test/pass@1'"),
    ({"validation": {"size": 500}}, "validation.size: 500 leaves no training problems"),
    ({"size": "tiny-xl"}, "size: 'tiny-xl' is not a size of the tiny family"),
    ({"base_config": "missing.yaml"}, "base_config: config file missing.yaml not found"),
]


SENSITIVITY_BAD = [
    ({"pruner": {"name": "median"}}, "pruner.name: a sensitivity study trains every run to the end (none)"),
    (
        {"space": {"hara.hara.alpha": {"type": "float", "low": 0.0, "high": 1.0}}},
        "space: a sensitivity study takes one or two parameters, each a categorical list of values",
    ),
    (
        {
            "space": {
                key: {"type": "categorical", "choices": [1.0]}
                for key in ("hara.hara.alpha", "training.temperature", "training.lr")
            }
        },
        "space: a sensitivity study takes one or two parameters",
    ),
]


@pytest.mark.parametrize("changes,message", SENSITIVITY_BAD, ids=[str(i) for i in range(len(SENSITIVITY_BAD))])
def test_bad_sensitivity_study_is_one_line(tmp_path, changes, message):
    path = write_sensitivity_study(tmp_path, **changes)
    with pytest.raises(ConfigError) as error:
        load_study(path)
    assert str(error.value) == f"{path}: {message}" or message in str(error.value)


def test_sensitivity_plan_is_every_value_and_the_reference_on_the_same_seeds(tmp_path):
    spec = load_study(write_sensitivity_study(tmp_path, values=[0.5, REFERENCE, 1.5], repeats=3))
    assert spec.reference == {KNOB: REFERENCE}
    assert spec.trial_budget == 3 * 3  # the listed reference is the reference: 3 distinct points x 3 seeds
    assert spec.seeds == [0, 1, 2] and spec.fields["pruner"]["name"] == "none"


@pytest.mark.parametrize("changes,message", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_study_is_one_line_naming_file_and_key(tmp_path, changes, message):
    if "base_config" in changes:
        changes = {"base_config": str(tmp_path / changes["base_config"])}
        message = message.replace("missing.yaml", str(tmp_path / "missing.yaml"))
    path = write_study(tmp_path, **changes)
    with pytest.raises(ConfigError) as error:
        load_study(path)
    text = str(error.value)
    assert text.startswith(f"{path}: ") and message in text and "\n" not in text


def test_missing_required_key_and_cli_exit_code(tmp_path, capsys):
    path = write_study(tmp_path)
    path.write_text(path.read_text().replace("method: hara_tok\n", ""))
    assert main(["sweep", "run", "--study", str(path)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {path}: method: missing (required)\n"
