"""`hara preflight` without a Slurm cluster: the parsers of Slurm's answers, the config-only checks and the compiler
check. The run against the local Slurm cluster with planted failures is in tests/workflow/test_rehearsal.py (one
cluster per machine)."""

from __future__ import annotations

import sys

import pytest

from hara.config import load_config
from hara.preflight import (
    Check,
    Site,
    check_compiler,
    check_gpus_per_node,
    check_max_time,
    gpus_of_gres,
    parse_lfs_quota,
    parse_slurm_minutes,
    run_preflight,
)
from tests.helpers import REPO

PAPER = REPO / "config" / "paper.yaml"
NO_SLURM = Site(slurm=False)


def paper(*overrides: str) -> dict:
    return load_config(PAPER, overrides=list(overrides), skip_checks=("check_local_folders",))


@pytest.mark.parametrize(
    ("text", "minutes"),
    [("infinite", None), ("UNLIMITED", None), ("30", 30), ("30:30", 30.5), ("2:00:00", 120), ("1-00:00:00", 1440)],
)
def test_slurm_time_limits_read_as_minutes(text, minutes):
    assert parse_slurm_minutes(text) == minutes
    assert parse_slurm_minutes("2-12") == 60 * 60  # days-hours


def test_gres_strings_give_the_gpus_of_a_node():
    assert [gpus_of_gres(g) for g in ("gpu:8", "gpu:h100:4(S:0-1)", "(null)", "gpu:a100:2,gpu:h100:2")] == [8, 4, 0, 4]


def test_lfs_quota_gives_the_bytes_left_below_the_lower_limit():
    assert parse_lfs_quota("/lustre 1000 5000 8000 - 10 0 0 -") == 4000 * 1024
    assert parse_lfs_quota("/lustre 1000* 0 0 - 10 0 0 -") is None


def test_check_lines_read_back():
    check = Check("tracking", False, "https://h:5000 from n1: 401: set the password")
    assert check.line() == "FAIL tracking: https://h:5000 from n1: 401: set the password"
    assert Check.parse(check.line()) == check and Check.parse("srun: error") is None


def test_a_cell_needing_more_gpus_than_a_node_has_fails_with_the_key():
    assert check_gpus_per_node(paper(), NO_SLURM).ok  # 8B on 8 GPUs, plan.gpus_per_node 8
    check = check_gpus_per_node(paper("plan.gpus_per_node=4"), NO_SLURM)
    assert not check.ok and "models.train_gpus.qwen3-8b asks 8 GPUs" in check.line()


def test_a_runtime_above_max_time_fails_with_the_key():
    # the paper's training runtimes are the plan's times plan.runtime_factor: 39.7 / 42.0 / 47.2 h
    assert check_max_time(paper("plan.max_time_h=48"), NO_SLURM).ok
    check = check_max_time(paper("plan.max_time_h=45"), NO_SLURM)
    assert not check.ok and "resources.train.runtime.qwen3-8b asks 47.2 h, above plan.max_time_h 45.0 h" in check.detail


def test_no_compiler_on_path_fails(monkeypatch, tmp_path):
    assert check_compiler({}).ok  # this machine has one, and the interpreter's headers
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    check = check_compiler({})
    assert not check.ok and check.line().startswith("FAIL compiler: no C compiler")


def test_a_compiler_that_cannot_build_against_the_headers_fails(monkeypatch, tmp_path):
    """A venv on a Python without headers: the compiler is there, Python.h is not."""
    monkeypatch.setattr("hara.preflight.python_include", lambda: str(tmp_path))
    check = check_compiler({})
    assert not check.ok and f"Python.h of {tmp_path}" in check.detail


def test_without_slurm_every_check_runs_here_and_a_failure_is_its_line(monkeypatch, tmp_path, capsys):
    """No Slurm: the node checks run in this process; the tracking store's unset variable is the tracking line."""
    from hara.cli import main

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setattr("hara.preflight.slurm_answers", lambda: False)
    out = tmp_path / "preflight.txt"
    rc = main(["preflight", "--config", str(PAPER), "--set", f"results_dir={tmp_path}", "--out", str(out)])
    lines = capsys.readouterr().out.splitlines()
    assert rc == 1 and not out.exists()
    assert [line.split()[1].rstrip(":") for line in lines] == [
        "gpus_per_node",
        "max_time",
        "disk",
        "account",
        "compiler",
        "tracking",
    ]
    assert {line.split()[1] for line in lines if line.startswith("FAIL")} == {"disk:", "tracking:"}
    assert any("MLFLOW_TRACKING_URI is not set" in line for line in lines)


def test_the_node_job_repeats_the_command_with_node_checks():
    from hara.preflight import node_command, node_job_command

    command = node_command(["preflight", "--config", "c.yaml"])
    assert command == [sys.executable, "-m", "hara.cli", "preflight", "--config", "c.yaml", "--node-checks"]
    job = node_job_command(Site(True, "proj", "gpu"), command, "log")
    assert job[:2] == ["sbatch", "--wait"] and ["--account", "proj"] == job[job.index("--account") :][:2]
    assert job[-1].startswith("--wrap=") and "--node-checks" in job[-1]


def test_run_preflight_needs_no_slurm_job_inside_one(monkeypatch):
    """Inside a Slurm job (the DAG's rule on a compute node) the node checks run in the job itself."""
    monkeypatch.setenv("SLURM_JOB_ID", "1")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:////tmp/x.db")
    monkeypatch.setattr("hara.preflight.SITE_CHECKS", {})
    checks = run_preflight(paper(), Site(True), ["false"])
    assert [c.name for c in checks] == ["compiler", "tracking"] and all(c.ok for c in checks), checks


def test_the_plans_peak_disk_counts_the_runs_in_flight_on_top_of_the_kept_checkpoints():
    from hara.planning import peak_disk_bytes, plan_grid

    config = paper()
    grid = plan_grid(config)
    finished = grid.totals["checkpoint_disk_bytes"] + grid.totals["snapshot_disk_bytes"]
    one_8b = next(c for c in grid.cells if c.size == "qwen3-8b").disk
    assert peak_disk_bytes(config, grid, 0) == finished
    assert peak_disk_bytes(config, grid, 1) == finished + one_8b["run_peak"] - one_8b["kept"]  # the largest run
    assert peak_disk_bytes(config, grid, 50) < peak_disk_bytes(config, grid)
