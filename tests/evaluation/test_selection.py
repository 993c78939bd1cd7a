"""Checkpoint selection on the validation split (hara/evaluation/selection.py, config ``selection``): the candidates
spread over training, the split held out of the training problems, the cache, and that the test benchmarks cannot
change the choice."""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

import pytest

from hara.data.embedded import TRAIN, VALIDATION
from hara.data.format import format_prompt, prompt_format
from hara.data.pipeline import hold_out_validation, selection_datasets
from hara.evaluation.selection import select_checkpoint
from hara.layout import candidate_steps
from hara.rlvr.checkpoints import link_candidates, write_manifest
from tests.evaluation.eval_helpers import WRONG, make_tiny_checkpoint, smoke_config

SELECTION = (
    "selection.enabled=true",
    "selection.validation_problems=4",
    "selection.candidates=3",
    "training.steps=4",
    "training.save_steps=1",
)


@pytest.mark.parametrize(
    ("steps", "save_steps", "count", "expected"),
    [
        (150, 50, 3, [50, 100, 150]),
        (500, 50, 3, [150, 350, 500]),
        (4, 1, 3, [1, 3, 4]),
        (4, 1, 1, [4]),
        (10, 50, 3, [10]),
        (7, 2, 4, [2, 4, 6, 7]),
    ],
)
def test_candidates_are_saved_steps_spread_over_training_and_end_at_final(steps, save_steps, count, expected):
    config = smoke_config(
        f"training.steps={steps}", f"training.save_steps={save_steps}", f"selection.candidates={count}"
    )
    assert candidate_steps(config) == expected


def test_validation_split_is_held_out_of_training_and_seeded():
    config = smoke_config(*SELECTION)
    datasets = selection_datasets(config)
    everything = selection_datasets(smoke_config("selection.enabled=false"))[TRAIN]
    ids = lambda rows: [row["id"] for row in rows]
    assert len(datasets[VALIDATION]) == 4
    assert not set(ids(datasets[VALIDATION])) & set(ids(datasets[TRAIN]))
    assert sorted(ids(datasets[VALIDATION]) + ids(datasets[TRAIN])) == sorted(ids(everything))
    assert [row["id"] for row in everything if row["id"] not in set(ids(datasets[VALIDATION]))] == ids(
        datasets[TRAIN]
    )  # training keeps its order
    assert ids(selection_datasets(config)[VALIDATION]) == ids(datasets[VALIDATION])
    with pytest.raises(Exception, match="selection.validation_problems: 9 validation problems, but the training set"):
        hold_out_validation(everything[:9], 9, "x", "selection.validation_problems")


def test_candidates_are_hard_linked_without_resume_only_files(tmp_path):
    checkpoint = tmp_path / "checkpoints" / "checkpoint-2"
    checkpoint.mkdir(parents=True)
    for name in (
        "config.json",
        "model.safetensors",
        "optimizer.pt",
        "rng_state.pth",
        "scheduler.pt",
        "pytorch_model_fsdp.bin",
    ):  # FSDP's fp32 copy of the model: what its resume reads
        (checkpoint / name).write_text(name)
    link_candidates(tmp_path / "checkpoints", tmp_path / "candidates", [2])
    assert not (tmp_path / "candidates").exists()  # no manifest yet: the save is unfinished
    write_manifest(checkpoint)
    link_candidates(tmp_path / "checkpoints", tmp_path / "candidates", [2, 3])
    kept = tmp_path / "candidates" / "step-2"
    assert sorted(p.name for p in kept.iterdir()) == ["config.json", "model.safetensors"]
    assert (kept / "model.safetensors").stat().st_ino == (checkpoint / "model.safetensors").stat().st_ino
    assert sorted(p.name for p in (tmp_path / "candidates").iterdir()) == ["step-2"]


class KnowsEngine:
    """Answers a problem right when its checkpoint "knows" it: ``knows[checkpoint folder name]`` is a set of
    problem texts; every other problem gets a wrong answer. Answers come from ``answers`` (problem -> answer)."""

    tokenizer = None
    live: ClassVar[set] = set()  # engines open at this moment, and the most open at once
    most_live = 0

    def __init__(self, checkpoint: str, knows: dict, answers: dict, template: str, calls: list):
        KnowsEngine.live.add(id(self))
        KnowsEngine.most_live = max(KnowsEngine.most_live, len(KnowsEngine.live))
        self.known = knows[Path(checkpoint).name]
        self.answers = {format_prompt(problem, template): answer for problem, answer in answers.items()}
        self.problems = {format_prompt(problem, template): problem for problem in answers}
        calls.append(Path(checkpoint).name)

    def generate(self, prompts, n, sampling, stop=()):
        texts = [
            f"\\boxed{{{self.answers[p]}}}" if self.problems[p] in self.known else WRONG
            for p in prompts
            for _ in range(n)
        ]
        return texts, [[] for _ in texts]

    def close(self):
        KnowsEngine.live.discard(id(self))


def write_run_and_data(tmp_path: Path, config: dict) -> tuple[Path, Path, dict]:
    """A run folder with candidates step-1, step-3 and final/ (three different random tiny models) and a data
    folder with the validation split and the config's test benchmarks."""
    from hara.data.embedded import write_datasets

    run = tmp_path / "run"
    for seed, name in enumerate(("candidates/step-1", "candidates/step-3", "final")):
        make_tiny_checkpoint(run / name, seed=seed)  # different weights: the cache is keyed by content
    datasets = selection_datasets(config)
    write_datasets(datasets, tmp_path / "data", seed=0)
    return run, tmp_path / "data", datasets


def run_selection(config, run, data, datasets, knows, calls, final_scores):
    answers = {row["problem"]: row["answer"] for rows in datasets.values() for row in rows}
    template = prompt_format(config).template
    return select_checkpoint(
        config,
        run,
        data,
        final_scores,
        backend="transformers",
        cache_dir=run.parent / "cache",
        engine_factory=lambda cfg: KnowsEngine(cfg.checkpoint, knows, answers, template, calls),
    )


def test_changing_the_test_answers_cannot_change_the_selected_checkpoint(tmp_path):
    config = smoke_config(*SELECTION, f"results_dir={tmp_path / 'results'}")
    run, data, datasets = write_run_and_data(tmp_path, config)
    validation = [row["problem"] for row in datasets[VALIDATION]]
    tests = {row["problem"] for name in config["data"]["benchmarks"] for row in datasets[name]}
    # step-3 is best on validation; on the test benchmarks step-1 knows everything and step-3 nothing.
    knows = {"step-1": set(validation[:1]) | tests, "step-3": set(validation[:3]), "final": set(validation[:2])}
    final_scores = tmp_path / "final_scores.json"
    final_scores.write_text(json.dumps({"benchmarks": {}, "checkpoint": "final"}))
    calls: list = []
    selection, test, _ = run_selection(config, run, data, datasets, knows, calls, final_scores)
    assert selection["selected_step"] == test["selected_step"] == 3
    assert [c["validation_pass_at_1"] for c in selection["candidates"]] == [0.25, 0.75, 0.5]
    assert all(entry["score"] == 0.0 for entry in test["benchmarks"].values())
    assert calls == ["step-1", "step-3", "final", "step-3"]  # three validations, then step-3's test evaluation

    # Every test answer changed (and now step-3 gets them all right): same choice, from the cached validation scores.
    for name in config["data"]["benchmarks"]:
        path = data / "benchmarks" / f"{name}.jsonl"
        rows = [{**json.loads(line), "answer": "424242"} for line in path.read_text().splitlines()]
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        datasets[name] = rows
    knows["step-3"] |= tests
    calls.clear()
    again, test_again, _ = run_selection(config, run, data, datasets, knows, calls, final_scores)
    assert again["selected_step"] == 3
    assert [c["validation_pass_at_1"] for c in again["candidates"]] == [0.25, 0.75, 0.5]
    assert all(c["cached"] for c in again["candidates"]) and calls == ["step-3"]
    assert all(entry["score"] == 1.0 for entry in test_again["benchmarks"].values())


def test_when_final_wins_its_own_test_scores_are_used(tmp_path):
    config = smoke_config(*SELECTION, f"results_dir={tmp_path / 'results'}")
    run, data, datasets = write_run_and_data(tmp_path, config)
    validation = [row["problem"] for row in datasets[VALIDATION]]
    knows = {"step-1": set(), "step-3": set(validation[:2]), "final": set(validation[:2])}  # a tie: the later step
    final_scores = tmp_path / "final_scores.json"
    final_scores.write_text(json.dumps({"benchmarks": {"x": {"score": 0.5}}, "checkpoint": "final"}))
    calls: list = []
    selection, test, _ = run_selection(config, run, data, datasets, knows, calls, final_scores)
    assert selection["selected_step"] == selection["final_step"] == 4
    assert test == {"benchmarks": {"x": {"score": 0.5}}, "checkpoint": "final", "selected_step": 4}
    assert calls == ["step-1", "step-3", "final"]


def test_a_missing_candidate_is_named(tmp_path):
    config = smoke_config(*SELECTION, f"results_dir={tmp_path / 'results'}")
    run, data, _ = write_run_and_data(tmp_path, config)
    import shutil

    shutil.rmtree(run / "candidates" / "step-3")
    with pytest.raises(FileNotFoundError, match="step-3: candidate checkpoint missing"):
        select_checkpoint(config, run, data, tmp_path / "none.json", backend="transformers")


def test_hara_evaluate_selects_the_checkpoint_in_the_same_process_as_select_checkpoint_does(tmp_path, monkeypatch):
    """The workflow's evaluate job: `hara evaluate --selection-out` evaluates final/, then selects (one process, one
    lighteval import); the selection and the selected scores equal `hara select-checkpoint`'s on the final's scores."""
    from hara.cli import main
    from hara.evaluation import models

    sets = [arg for pair in zip(["--set"] * 6, [*SELECTION, f"results_dir={tmp_path / 'results'}"]) for arg in pair]
    config = smoke_config(*SELECTION, f"results_dir={tmp_path / 'results'}")
    run, data, datasets = write_run_and_data(tmp_path, config)
    validation = [row["problem"] for row in datasets[VALIDATION]]
    knows = {"step-1": set(validation[:1]), "step-3": set(validation[:3]), "final": set(validation[:2])}
    answers = {row["problem"]: row["answer"] for rows in datasets.values() for row in rows}
    calls: list = []
    monkeypatch.setattr(KnowsEngine, "live", set())
    monkeypatch.setattr(KnowsEngine, "most_live", 0)
    monkeypatch.setitem(
        models.ENGINES,
        "transformers",
        lambda cfg: KnowsEngine(cfg.checkpoint, knows, answers, prompt_format(config).template, calls),
    )
    common = ["--config", "config/smoke.yaml", *sets, "--backend", "transformers"]
    benchmarks = [arg for name in config["data"]["benchmarks"] for arg in ("--benchmark", name)]
    out = tmp_path / "eval"
    assert (
        main(
            [
                "evaluate",
                *common,
                "--checkpoint",
                str(run / "final"),
                *benchmarks,
                "--data",
                str(data),
                "--out",
                str(out / "scores.json"),
                "--no-mlflow",
                "--selection-out",
                str(out / "selection.json"),
                "--selected-scores-out",
                str(out / "selected_scores.json"),
            ]
        )
        == 0
    )
    # final/'s engine serves its test benchmarks and its validation (before: a second start, "final" twice), then
    # the two candidates' validations and step-3's test evaluation, never two engines at once
    assert calls == ["final", "step-1", "step-3", "step-3"]
    assert KnowsEngine.most_live == 1 and not KnowsEngine.live
    assert (
        main(
            [
                "select-checkpoint",
                *common,
                "--run",
                str(run),
                "--data",
                str(data),
                "--final-scores",
                str(out / "scores.json"),
                "--out",
                str(tmp_path / "alone.json"),
                "--scores-out",
                str(tmp_path / "alone_scores.json"),
                "--cache-dir",
                str(tmp_path / "other_cache"),
            ]
        )
        == 0
    )
    merged, alone = (json.loads(p.read_text()) for p in (out / "selection.json", tmp_path / "alone.json"))
    assert merged["selected_step"] == alone["selected_step"] == 3
    strip = lambda s: [{k: v for k, v in c.items() if k != "cached"} for c in s["candidates"]]
    assert strip(merged) == strip(alone)
    selected, selected_alone = (
        json.loads(p.read_text()) for p in (out / "selected_scores.json", tmp_path / "alone_scores.json")
    )
    assert {k: v["score"] for k, v in selected["benchmarks"].items()} == {
        k: v["score"] for k, v in selected_alone["benchmarks"].items()
    }


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"--selected-scores-out": None}, "--selection-out needs --selected-scores-out"),
        ({"--data": None}, "--selection-out needs --data"),
        ({"--checkpoint": "candidates/step-1"}, "--checkpoint must be a run's final/ folder"),
        ({"--set": "selection.enabled=false"}, "selection.enabled is false"),
    ],
)
def test_hara_evaluate_selection_arguments_fail_before_any_work(tmp_path, capsys, monkeypatch, change, message):
    from hara.cli import main
    from hara.evaluation import models

    config = smoke_config(*SELECTION, f"results_dir={tmp_path / 'results'}")
    run, data, _ = write_run_and_data(tmp_path, config)
    monkeypatch.setitem(models.ENGINES, "transformers", lambda cfg: pytest.fail("an engine was built"))
    flags = {
        "--checkpoint": "final",
        "--data": str(data),
        "--selected-scores-out": str(tmp_path / "s.json"),
        "--set": "selection.enabled=true",
    }
    flags.update(change)
    args = [
        "evaluate",
        "--config",
        "config/smoke.yaml",
        "--benchmark",
        "mini_math500",
        "--backend",
        "transformers",
        "--out",
        str(tmp_path / "scores.json"),
        "--selection-out",
        str(tmp_path / "selection.json"),
    ]
    for flag, value in flags.items():
        args += [] if value is None else [flag, str(run / value) if flag == "--checkpoint" else value]
    capsys.readouterr()  # what writing the checkpoints printed
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not any((tmp_path / name).exists() for name in ("scores.json", "selection.json", "s.json"))
