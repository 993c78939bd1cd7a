"""The embedded datasets: five disjoint mini benchmarks of increasing difficulty, deterministic files."""

import hashlib
import json
import statistics

import pytest

from hara.data.embedded import BENCHMARKS, build_embedded_datasets, write_datasets
from hara.data.io import UnknownNameError, read_jsonl
from hara.data.synthetic import RECORD_KEYS, normalize_problem

NAMES = ["mini_math500", "mini_minerva", "mini_olympiad", "mini_amc23", "mini_aime24"]
REGISTERED = [*NAMES, "in_distribution"]


@pytest.fixture(scope="module")
def default_datasets():
    """The default sizes (12,000 train, 200 per mini benchmark, 1,000 in distribution); generation takes about a
    second."""
    return build_embedded_datasets(seed=0)


def test_default_sizes_and_order(default_datasets):
    assert list(BENCHMARKS) == REGISTERED
    assert list(default_datasets) == ["train", *REGISTERED]
    assert len(default_datasets["train"]) == 12000
    assert all(len(default_datasets[name]) == 200 for name in NAMES)
    assert len(default_datasets["in_distribution"]) == 1000
    assert all(tuple(r) == RECORD_KEYS for records in default_datasets.values() for r in records)


def test_no_problem_is_shared_between_sets(default_datasets):
    keys = {name: [normalize_problem(r["problem"]) for r in recs] for name, recs in default_datasets.items()}
    for name, values in keys.items():
        assert len(set(values)) == len(values), f"duplicates inside {name}"
    names = list(keys)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            assert not set(keys[a]) & set(keys[b]), f"{a} and {b} share problems"


def test_exclusion_is_needed_for_this_check_to_mean_something(default_datasets):
    # Level-1 problem spaces are small: drawn independently, train and mini_math500 would collide.
    from hara.data.synthetic import generate_problems

    spec = BENCHMARKS["mini_math500"]
    independent = generate_problems(200, "other", spec.levels, spec.skills, level_weights=spec.level_weights)
    train = {normalize_problem(r["problem"]) for r in default_datasets["train"]}
    assert train & {normalize_problem(r["problem"]) for r in independent}


def test_benchmarks_increase_in_difficulty(default_datasets):
    specified = [BENCHMARKS[name].mean_level for name in NAMES]
    realized = [statistics.mean(r["level"] for r in default_datasets[name]) for name in NAMES]
    assert specified == sorted(specified) and len(set(specified)) == len(specified)
    assert realized == sorted(realized)


def _tree_bytes(root):
    """Relative path -> bytes of every file under root."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_write_is_byte_identical_for_the_same_seed(tmp_path):
    kwargs = dict(train_size=500, benchmark_size=40)
    first = write_datasets(build_embedded_datasets(5, **kwargs), tmp_path / "a", seed=5)
    second = write_datasets(build_embedded_datasets(5, **kwargs), tmp_path / "b", seed=5)
    other = write_datasets(build_embedded_datasets(6, **kwargs), tmp_path / "c", seed=6)
    a, b = _tree_bytes(tmp_path / "a"), _tree_bytes(tmp_path / "b")
    assert a == b and first == second
    assert sorted(a) == ["benchmarks/" + n + ".jsonl" for n in sorted(REGISTERED)] + ["manifest.json", "train.jsonl"]
    assert other["files"]["train.jsonl"]["sha256"] != first["files"]["train.jsonl"]["sha256"]


def test_manifest_matches_files(tmp_path):
    datasets = build_embedded_datasets(3, train_size=300, benchmark_size=20)
    manifest = write_datasets(datasets, tmp_path, seed=3)
    assert json.loads((tmp_path / "manifest.json").read_text()) == manifest
    assert manifest["seed"] == 3 and manifest["benchmarks"] == REGISTERED and manifest["train"] == "train.jsonl"
    for rel, entry in manifest["files"].items():
        assert hashlib.sha256((tmp_path / rel).read_bytes()).hexdigest() == entry["sha256"]
        assert len(read_jsonl(tmp_path / rel, required_keys=RECORD_KEYS)) == entry["count"]
    assert manifest["files"]["benchmarks/mini_aime24.jsonl"]["count"] == 20
    assert read_jsonl(tmp_path / "train.jsonl") == datasets["train"]


def test_unknown_benchmark_lists_valid_names():
    with pytest.raises(UnknownNameError) as info:
        build_embedded_datasets(0, train_size=10, benchmark_size=5, benchmarks=["mini_math500", "gsm8k"])
    assert "'gsm8k'" in str(info.value)
    assert all(name in str(info.value) for name in NAMES)


def test_benchmark_subset_keeps_train_disjoint():
    datasets = build_embedded_datasets(1, train_size=2000, benchmark_size=50, benchmarks=["mini_aime24"])
    assert list(datasets) == ["train", "mini_aime24"]
    bench = {normalize_problem(r["problem"]) for r in datasets["mini_aime24"]}
    assert not bench & {normalize_problem(r["problem"]) for r in datasets["train"]}


def test_skills_restrict_every_set_and_unknown_skills_are_named():
    from hara.data.embedded import build_embedded_datasets
    from hara.data.io import UnknownNameError

    allowed = ("arithmetic", "fractions")
    datasets = build_embedded_datasets(3, train_size=300, benchmark_size=20, skills=allowed)
    for name, records in datasets.items():
        assert {r["skill"] for r in records} <= set(allowed), name
    assert {r["skill"] for r in datasets["train"]} == set(allowed)
    with pytest.raises(UnknownNameError, match="arithmetic"):
        build_embedded_datasets(3, train_size=10, benchmark_size=2, skills=("algebraic_topology",))


def test_schema_skill_enum_matches_the_generator_registry():
    from hara.config import load_schema
    from hara.data.synthetic import SKILLS

    skills = load_schema()["properties"]["data"]["properties"]["skills"]
    assert skills["items"]["enum"] == list(SKILLS)
    assert set(skills["default"]) <= set(SKILLS)


@pytest.mark.parametrize(
    "overrides",
    [
        {"data": {"skills": ["fractions", "percent"]}},
        {
            "data": {
                "skills": ["chain"],
                "benchmarks": [*NAMES, "in_distribution"],
                "benchmark_sizes": {"in_distribution": 9},
            },
            "training": {"prompt_selection": {"enabled": True, "levels": [4, 5]}},
        },
    ],
)
def test_evaluation_generates_the_same_mini_benchmarks_as_the_data_stage(overrides):
    """Evaluation without --data must score exactly the problems `hara data` writes (skills and levels included)."""
    from hara.config import validate_config
    from hara.data.pipeline import build_config_datasets
    from hara.evaluation.tasks import benchmark_records
    from tests.helpers import merged

    config = validate_config(merged({"data": {"train_size": 5, "benchmark_size": 6}}, overrides))
    stage = build_config_datasets(config)
    for name in config["data"]["benchmarks"]:
        assert benchmark_records(config, name) == stage[name], name


def _config(data: dict, prompt_selection: dict | None = None) -> dict:
    """A validated synthetic config with pass-rate selection of the RL prompts and a validation split."""
    from hara.config import validate_config

    return validate_config(
        {
            "data": data,
            "training": {"prompt_selection": {"enabled": True, **(prompt_selection or {})}},
            "selection": {"enabled": True, "validation_problems": 200},
        }
    )


def _keys(records: list[dict]) -> set[str]:
    return {normalize_problem(r["problem"]) for r in records}


@pytest.mark.parametrize(
    "skills,levels",
    [
        (["chain"], [4, 5]),  # the chain world of config/control_chain.yaml
        # the default's skills at levels 1-2: small problem spaces, where drawing without exclusion would collide
        (None, [1, 2]),
    ],
)
def test_in_distribution_draws_the_rl_prompts_skills_and_levels_and_none_of_the_training_problems(
    tmp_path, skills, levels
):
    from hara.data.pipeline import write_config_datasets
    from hara.data.synthetic import generate_problems

    data = {"benchmarks": [*NAMES, "in_distribution"], **({"skills": skills} if skills else {})}
    config = _config(data, {"levels": levels})
    write_config_datasets(config, tmp_path)
    bench = read_jsonl(tmp_path / "benchmarks" / "in_distribution.jsonl")
    train, validation = read_jsonl(tmp_path / "train.jsonl"), read_jsonl(tmp_path / "validation.jsonl")
    assert len(bench) >= 1000 and len(validation) == 200 and len(train) == 12000 - 200
    assert {r["skill"] for r in bench} == set(config["data"]["skills"])
    assert {r["level"] for r in bench} == set(levels)
    assert len(_keys(bench)) == len(bench)
    assert not _keys(bench) & _keys(train) and not _keys(bench) & _keys(validation)
    if skills is None:  # the check above can fail: the same skills and levels drawn independently meet the training set
        independent = generate_problems(1000, "independent", levels, config["data"]["skills"])
        assert _keys(independent) & _keys(train)


def test_in_distribution_follows_every_level_without_a_level_filter_or_without_prompt_selection():
    from hara.data.pipeline import build_config_datasets

    data = {"benchmarks": ["in_distribution"], "train_size": 10, "benchmark_sizes": {"in_distribution": 300}}
    for config in (_config(data), _config(data, {"enabled": False, "levels": [5]})):
        assert {r["level"] for r in build_config_datasets(config)["in_distribution"]} == {1, 2, 3, 4, 5}


def test_an_unlisted_benchmark_is_not_drawn_and_listing_in_distribution_leaves_the_other_benchmarks_alone():
    """The default lists the five mini benchmarks: in_distribution is not drawn, so it takes no problem from the
    default's training set; listed after them, it changes none of their problems (each set has its own seed)."""
    from hara.data.pipeline import build_config_datasets

    plain = build_config_datasets(_config({"train_size": 500}))
    listed = build_config_datasets(_config({"train_size": 500, "benchmarks": [*NAMES, "in_distribution"]}))
    assert list(plain) == ["train", *NAMES] and list(listed) == ["train", *REGISTERED]
    assert all(plain[name] == listed[name] for name in NAMES)
    assert not _keys(listed["in_distribution"]) & _keys(listed["train"])


def test_benchmark_sizes_set_a_benchmarks_size_for_the_data_and_the_planner():
    from hara.data.catalog import get_benchmark
    from hara.data.pipeline import build_config_datasets

    data = {"train_size": 10, "benchmark_size": 7, "benchmarks": ["mini_aime24", "in_distribution"]}
    for sizes, expected in (
        ({}, {"mini_aime24": 7, "in_distribution": 1000}),
        ({"mini_aime24": 3}, {"mini_aime24": 3, "in_distribution": 1000}),
        ({"in_distribution": 40}, {"mini_aime24": 7, "in_distribution": 40}),
    ):
        config = _config({**data, "benchmark_sizes": sizes})
        datasets = build_config_datasets(config)
        assert {name: len(datasets[name]) for name in expected} == expected
        assert {name: get_benchmark(name).size(config) for name in expected} == expected
