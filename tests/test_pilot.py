"""The pilot's summary and `hara plan --calibrate` (hara/pilot.py, hara/planning/calibration.py) without a cluster:
the arithmetic on a hand-made summary, the round trip through the plan, one-line errors for a bad summary, a run's
figures from its metrics.jsonl, and the Slurm records with and without accounting (fake sacct / scontrol). The
pilot itself runs on the local Slurm cluster in tests/workflow/test_rehearsal.py."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import yaml

from hara.cli import main
from hara.config import load_config, validate_config
from hara.planning import architecture_of, plan_grid, setup_of, step_flops
from hara.planning.calibration import SUMMARY_FORMAT, calibrated_rates, measured_rates
from tests.helpers import REPO, merged, read

PAPER = REPO / "config" / "paper.yaml"


def test_tokens_per_s_and_mfu_from_a_run():
    """Tokens/s per GPU: generated tokens over generation seconds x GPUs; MFU: pass FLOPs over the rest of the step
    x GPUs x peak."""
    run = {"size": "s", "gpus": 2, "step_s": 100.0, "phase_s": {"generation": 60.0}}
    rates = measured_rates({**run, "generated_tokens_per_step": 1.2e6, "flops_per_step": 2e16}, peak_tflops=989)
    assert rates["generation_tokens_per_s"] == pytest.approx(1.2e6 / (60 * 2))  # 10,000
    assert rates["mfu"] == pytest.approx(2e16 / (40 * 2 * 989e12))  # 0.2528


def test_a_size_takes_its_slowest_run():
    base = {"size": "s", "gpus": 1, "step_s": 10.0, "generated_tokens_per_step": 1000.0, "flops_per_step": 1e15}
    fast = {**base, "phase_s": {"generation": 2.0}}  # 500 tokens/s, 1e15 / 8 s
    slow = {**base, "phase_s": {"generation": 5.0}, "flops_per_step": 4e15}  # 200 tokens/s, 4e15 / 5 s
    rates = calibrated_rates([fast, slow], peak_tflops=1000)
    assert rates == {"s": {"generation_tokens_per_s": pytest.approx(200.0), "mfu": pytest.approx(0.125)}}


def paper_config() -> dict:
    return validate_config(read(PAPER), source="paper", skip_checks=("check_local_folders",))


def measured_run(config: dict, size: str, step_s: float, generation_s: float) -> dict:
    """A run of the paper's (size, grpo, none) cell whose rollouts all ran to max_completion_length, as the pilot
    writes it."""
    setup = setup_of(config, size, "grpo", "none")
    return {
        "size": size,
        "rlvr": "grpo",
        "method": "none",
        "gpus": setup.world,
        "step_s": step_s,
        "phase_s": {"generation": generation_s, "scoring": 5.0, "training": 20.0, "optimizer": 1.0},
        "generated_tokens_per_step": setup.rollouts * setup.completion_tokens,
        "flops_per_step": step_flops(architecture_of(config, size), setup, setup.context),
    }


def write_summary(path: Path, runs: list[dict]) -> Path:
    path.write_text(json.dumps({"format": SUMMARY_FORMAT, "runs": runs}), encoding="utf-8")
    return path


def test_calibrate_prints_stated_beside_measured_and_its_plan_gives_back_the_measured_step(tmp_path, capsys):
    """At the planned length the calibrated plan's step time is the measured one; the overlay it writes is a valid
    overlay of the paper config and sets the Slurm runtime the DAG asks."""
    config = paper_config()
    runs = [measured_run(config, "qwen3-1.7b", 300.0, 200.0), measured_run(config, "qwen3-8b", 900.0, 500.0)]
    summary, overlay = write_summary(tmp_path / "pilot.json", runs), tmp_path / "calibrated.yaml"
    args = ["plan", "--config", str(PAPER), "--calibrate", str(summary), "--overlay", str(overlay)]
    assert main([*args, "--out", str(tmp_path / "plan.json")]) == 0
    printed = capsys.readouterr().out
    assert "qwen3-1.7b: generation 6,000 tokens/s per GPU stated" in printed and "mfu 0.300 stated" in printed
    assert "qwen3-4b: training wall" in printed and "qwen3-4b: not in the pilot: plans with the slowest" in printed
    calibrated = validate_config(merged(read(PAPER), read(overlay)), source="x", skip_checks=("check_local_folders",))
    assert set(calibrated["plan"]["mfu"]) == {"qwen3-1.7b", "qwen3-8b"}
    grid = plan_grid(calibrated)
    for run in runs:
        (cell,) = [c for c in grid.cells if (c.size, c.rlvr, c.method) == (run["size"], "grpo", "none")]
        assert cell.wall_hours * 3600 / cell.setup.steps == pytest.approx(run["step_s"], rel=1e-3)
        longest = max(c.wall_hours for c in grid.cells if c.size == cell.size)  # the size's slowest method
        assert cell.runtime_asked_hours * 60 == math.ceil(longest * 60 * calibrated["plan"]["runtime_factor"])
    written = json.loads((tmp_path / "plan.json").read_text(encoding="utf-8"))
    assert written["resources"]["train"]["runtime"]["qwen3-1.7b"] == grid.resources["train"]["runtime"]["qwen3-1.7b"]


@pytest.mark.parametrize(
    ("content", "named"),
    [
        (None, "no such file"),
        ("{not json", "not JSON"),
        (json.dumps({"format": "other", "runs": []}), "format 'other'"),
        (json.dumps({"format": SUMMARY_FORMAT, "runs": []}), "runs: no training run"),
        (json.dumps({"format": SUMMARY_FORMAT, "runs": [{"size": "qwen3-1.7b", "gpus": 2}]}), "runs[0].step_s"),
        (
            json.dumps({"format": SUMMARY_FORMAT, "runs": [{"size": "x", "gpus": 1, "step_s": 1, "phase_s": {}}]}),
            "runs[0].phase_s.generation: missing",
        ),
    ],
)
def test_a_bad_summary_is_one_line_naming_the_file_and_field(tmp_path, capsys, content, named):
    path = tmp_path / "pilot.json"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    assert main(["plan", "--config", str(PAPER), "--calibrate", str(path), "--overlay", str(tmp_path / "o.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and named in err, err
    assert not (tmp_path / "o.yaml").exists()


def test_a_run_figures_skip_warm_up_steps_and_read_the_phases(tmp_path):
    """Medians over the steps after the first and after the resume (checkpoint-2: steps 1 and 3 are warm-up)."""
    from hara.layout import Cell
    from hara.pilot import run_figures

    config = paper_config()
    run = tmp_path / "run"
    run.mkdir()
    (run / "run_info.json").write_text(json.dumps({"resumed_from": str(run / "checkpoints/checkpoint-2")}))
    lines = [
        {"step": s, "time/step_s": 100.0 * s, "time/generation_s": 10.0 * s, "train/response_length": 1000.0}
        for s in range(1, 7)
    ]
    lines[3]["memory/training_peak_gib"] = 40.0
    (run / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    figures = run_figures(config, Cell("qwen3-1.7b", "grpo", "none", 0), run)
    assert figures["steady_steps"] == [2, 4, 5, 6] and figures["resumed_from"] == "checkpoint-2"
    assert figures["step_s"] == 450.0 and figures["phase_s"]["generation"] == 45.0
    assert figures["peak_gib"]["training"] == 40.0 and figures["peak_gib"]["generation"] is None
    setup = setup_of(config, "qwen3-1.7b", "grpo", "none")
    assert figures["generated_tokens_per_step"] == setup.rollouts * 1000.0 and figures["gpus"] == 2
    context = setup.prompt_tokens + 1000
    assert figures["flops_per_step"] == step_flops(architecture_of(config, "qwen3-1.7b"), setup, context)


def fake_commands(folder: Path, scripts: dict[str, str]) -> dict:
    folder.mkdir()
    for name, body in scripts.items():
        (folder / name).write_text(f"#!/bin/sh\n{body}\n", encoding="utf-8")
        (folder / name).chmod(0o755)
    return {**os.environ, "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}


SCONTROL = 'echo "JobId=$3 JobState=COMPLETED Reason=None Restarts=0 RunTime=00:02:05 TimeLimit=00:30:00"'


def test_maxrss_from_sacct_where_accounting_answers(tmp_path):
    from hara.pilot import job_records

    sacct = "printf '7|COMPLETED|125|\\n7.batch|COMPLETED|125|2048K\\n7.0|COMPLETED|120|3000M\\n'"
    env = fake_commands(tmp_path / "bin", {"sacct": sacct, "scontrol": SCONTROL})
    assert job_records(["7"], env) == [{"job_id": "7", "state": "COMPLETED", "elapsed_s": 125, "max_rss_mb": 3145.7}]


def test_maxrss_is_not_available_without_accounting(tmp_path):
    from hara.pilot import job_records

    sacct = 'echo "sacct: error: Slurm accounting storage is disabled" >&2; exit 1'
    env = fake_commands(tmp_path / "bin", {"sacct": sacct, "scontrol": SCONTROL})
    (record,) = job_records(["7"], env)
    assert record == {
        "job_id": "7",
        "state": "COMPLETED",
        "elapsed_s": 125,
        "restarts": 0,
        "max_rss_mb": "not available: sacct: error: Slurm accounting storage is disabled",
    }


def test_the_pilot_overlay_shrinks_the_paper_grid_only():
    config = validate_config(
        merged(read(PAPER), read(REPO / "config" / "pilot.yaml")), source="pilot", skip_checks=("check_local_folders",)
    )
    assert config["models"]["sizes"] == ["qwen3-1.7b", "qwen3-8b"]
    assert config["training"]["steps"] == 6 and config["training"]["save_steps"] == 2
    assert config["grid"] == {**config["grid"], "rlvr": ["grpo"], "methods": ["none"], "seeds": [0]}
    paper = load_config(PAPER, skip_checks=("check_local_folders",))
    kept = ("training", "evaluation", "prompt", "plan", "hara", "rlvr", "tracking")
    for section in kept:
        ours = {k: v for k, v in config[section].items() if k not in ("steps", "save_steps")}
        assert ours == {k: v for k, v in paper[section].items() if k not in ("steps", "save_steps")}, section
    assert yaml.safe_load((REPO / "config" / "pilot.yaml").read_text())["cluster"] == {"gates": False}


def test_the_pilot_targets_keep_the_configs_results_dir_and_name_a_wrong_size(tmp_path):
    """Snakemake matches targets against the rules' outputs as written: results/..., not the absolute path."""
    from hara.errors import UserError
    from hara.pilot import interrupted_cell, pilot_config, pilot_targets

    config = pilot_config([str(PAPER), str(REPO / "config" / "pilot.yaml")], tmp_path)
    assert pilot_targets(config, ["qwen3-1.7b"]) == [
        "results/eval/qwen3-1.7b/base/sanity.json",
        "results/train/qwen3-1.7b/grpo/none/seed0/final",
        "results/train/qwen3-8b/grpo/none/seed0/final",
    ]
    assert interrupted_cell(config, None).size == "qwen3-8b"
    with pytest.raises(UserError, match="--evaluate-base qwen3-4b: not in models.sizes"):
        pilot_targets(config, ["qwen3-4b"])
