"""benchmarks/gpu_check.py: its CPU toy run (the GPU run needs a lent accelerator; docs/gpu_check.md) and its parts."""

import importlib.util
import json
import math
import subprocess
import sys

import torch
import torch.nn.functional as F

from tests.benchmarks.scripts import load_benchmark
from tests.helpers import REPO

SCRIPT = REPO / "benchmarks" / "gpu_check.py"

#: The toy run as on a bare GPU machine: POT, numpy and scipy blocked, so only torch and the repository's maths.
_RUN_TORCH_ONLY = """
import runpy, sys
for name in ("ot", "numpy", "scipy"):
    sys.modules[name] = None
sys.argv = [sys.argv[1]] + sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_toy_run_on_cpu_prints_sane_figures(tmp_path):
    out_json = tmp_path / "gpu_check.json"
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            _RUN_TORCH_ONLY,
            str(SCRIPT),
            "--device",
            "cpu",
            "--scale",
            "toy",
            "--logit-chunk",
            "12",
            "--out",
            str(out_json),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.strip().splitlines()
    fig = dict(line.rsplit("=", 1) for line in lines if "=" in line and " " not in line)
    for key in (
        "step_s_none",
        "step_s_hara_tok",
        "hara_tok_step_ratio",
        "hara_tok_step_ratio_without_capture",
        "bandwidth_gb_s",
        "capture_s_hara_tok",
        "weighting_s_hara_tok",
        "achieved_tflops_none",
    ):
        value = float(fig[key])
        assert math.isfinite(value) and value > 0, (key, value)
    assert float(fig["hara_tok_step_ratio_without_capture"]) < float(fig["hara_tok_step_ratio"])
    for key in ("peak_memory_gib_none", "peak_memory_gib_hara_tok", "resident_memory_gib"):
        assert fig[key] == "unavailable", key  # no CUDA memory counters on the CPU
    planned = importlib.util.find_spec("hara.planning") is not None  # `hara plan`'s model, when it is there
    for method in ("none", "hara_tok"):
        value = fig[f"plan_memory_gib_{method}"]
        assert float(value) > 0 if planned else value == "unavailable", (method, value)
    assert "plan: " in run.stdout  # where the prediction came from, or why there is none
    assert int(fig["timed_steps"]) == 2
    # the hara_tok step really reweights: token advantages differ from the sequence advantages; none never does
    assert float(fig["hara_tok_reweighted_fraction"]) > 0.5
    assert float(fig["none_reweighted_fraction"]) == 0.0
    assert fig["token_advantages_finite"] == "1" and fig["novelty_finite"] == "1"
    # the novelty kernel ran at every toy length, and cannot beat reading its input once
    for n in (64, 256):
        assert float(fig[f"novelty_ms@{n}"]) > 0
        assert float(fig[f"ratio_to_bandwidth_floor@{n}"]) > 1
    assert lines[-1].startswith("ratio_to_bandwidth_floor@256=")
    saved = json.loads(out_json.read_text())
    assert saved["scale"]["logit_chunk"] == 12  # --logit-chunk reached the run (the toy scale's own is 16)
    assert saved["figures"]["hara_tok_step_ratio"] == float(fig["hara_tok_step_ratio"])
    steps = saved["steps"]
    assert {s["method"] for s in steps} == {"none", "hara_tok"} and len(steps) == 2 * 3
    # none runs no capture pass, hara_tok one forward per micro-batch (counted: the time of an empty phase is noise
    # under load, and a 1%-of-step bound on it failed in a loaded suite)
    micro_batches = 2 * 16 // 8  # the toy scale: 2 prompts x 16 rollouts, 8 rows per forward
    assert {(s["method"], s["capture_forwards"]) for s in steps} == {("none", 0), ("hara_tok", micro_batches)}
    assert all(s["w_std"] > 0 for s in steps if s["method"] == "hara_tok")
    assert [r["n"] for r in saved["novelty"]] == [64, 256] and all(r["groups"] == 2 for r in saved["novelty"])


def test_paper_shape_is_qwen3_1_7b():
    gc = load_benchmark("gpu_check")
    s = gc.SCALES["paper"]
    with torch.device("meta"):
        model = gc.Decoder(s)
    total, blocks = gc.parameter_count(s)
    assert sum(p.numel() for p in model.parameters()) == total == 1_720_574_976  # Qwen3-1.7B, tied embeddings
    assert blocks == 1_409_408_000  # "1.4B non-embedding parameters"
    assert s.completion_len == 3072 and s.group_size == 16 and max(s.novelty_lengths) == 8192
    assert s.novelty_d == s.arch.hidden == 2048 and s.novelty_rollouts == 16


def test_paper_scale_is_estimated_well_inside_eight_minutes():
    gc = load_benchmark("gpu_check")
    s = gc.SCALES["paper"]
    flops = gc.step_flops(s)
    seconds = (s.warmup_steps + s.steps) * (flops["none"] + flops["hara_tok"]) / 400e12
    assert seconds < 180  # GRPO steps at 400 TFLOP/s; the run adds init + novelty kernel and has a 360 s guard
    assert 1.0 < flops["hara_tok"] / flops["none"] < 1.3  # the capture forward is one no-grad pass


def test_chunked_logprobs_match_full_log_softmax():
    gc = load_benchmark("gpu_check")
    g = torch.Generator().manual_seed(0)
    h = torch.randn(3, 10, 8, generator=g, requires_grad=True)
    w = torch.randn(17, 8, generator=g, requires_grad=True)
    t = torch.randint(0, 17, (3, 10), generator=g)
    chunked = gc.token_logprobs(h, w, t, chunk=4)
    full = torch.log_softmax(F.linear(h, w), -1).gather(-1, t[..., None]).squeeze(-1)
    torch.testing.assert_close(chunked, full)
    grads = torch.autograd.grad(chunked.sum(), (h, w))
    torch.testing.assert_close(grads, torch.autograd.grad(full.sum(), (h, w)))


def test_capture_takes_the_positions_that_predict_the_completion():
    gc = load_benchmark("gpu_check")
    s = gc.SCALES["toy"]
    torch.manual_seed(0)
    model = gc.Decoder(s).to(torch.bfloat16)
    batch = gc.make_batch(s, 0, torch.device("cpu"))
    hidden = gc.capture_hidden(model, batch, s)
    assert (
        hidden.shape == (s.prompts * s.group_size, s.completion_len, s.arch.hidden) and hidden.dtype == torch.bfloat16
    )
    with torch.no_grad():
        ref = model(torch.cat([batch.prompt[:2], batch.completion[:2]], 1))
    torch.testing.assert_close(hidden[:2, 0], ref[:, s.prompt_len - 1])
    torch.testing.assert_close(hidden[:2, -1], ref[:, -2])
    adv = gc.grpo_advantages(batch.rewards, s.group_size)
    assert torch.allclose(adv.view(-1, s.group_size).mean(1), torch.zeros(s.prompts), atol=1e-5)
    assert bool((adv.view(-1, s.group_size).std(1) > 0.9).all())  # both outcomes in every prompt


def test_backward_runs_outside_autocast_as_in_the_trainer(monkeypatch):
    """transformers' Trainer autocasts the forward only (accelerate wraps model.forward; accelerator.backward runs
    outside); the check measures what the trainer does. (On one H200 the peak was 38.0 GiB either way.) CPU bf16
    autocast stands in for the GPU's here."""
    gc = load_benchmark("gpu_check")
    monkeypatch.setattr(gc, "bf16_autocast", lambda like: torch.autocast("cpu", dtype=torch.bfloat16))
    s = gc.SCALES["toy"]
    torch.manual_seed(0)
    model = gc.Decoder(s)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
    batch = gc.make_batch(s, 0, torch.device("cpu"))
    autocast_in_backward = []
    model.norm.weight.register_hook(lambda grad: autocast_in_backward.append(torch.is_autocast_enabled("cpu")))
    record = gc.grpo_step(model, opt, batch, "none", s, sync=lambda: None)
    assert math.isfinite(record["loss"])
    assert autocast_in_backward and not any(autocast_in_backward)


def test_phase_figures_pin_the_peak_to_a_plan_phase():
    """On CUDA each step records its peak per phase; the figures take the max over steps and the phase's parts and
    set hara plan's resident + phase beside it (the plan's own numbers for the paper shape)."""
    gc = load_benchmark("gpu_check")
    plan, _ = gc.plan_prediction(gc.SCALES["paper"])
    for method in gc.METHODS:
        assert plan[method]["peak"] == max(plan[method][p] for p in gc.PLAN_PHASES)
        assert all(plan[method][p] >= plan[method]["resident"] > 0 for p in gc.PLAN_PHASES)
    records = [
        {"method": "none", "phase_peaks_gib": {"forward": 30.0, "backward": 38.0, "optimizer": 25.9}},
        {"method": "none", "phase_peaks_gib": {"forward": 31.0, "backward": 37.0, "optimizer": 26.0}},
        {"method": "hara_tok", "phase_peaks_gib": {"capture": 29.0, "weighting": 27.0, "backward": 50.0}},
    ]
    fig = gc.phase_figures(records, plan, "none")
    measured = tuple(fig[f"peak_gib_{phase}_none"] for phase in ("scoring", "training", "optimizer"))
    assert measured == (0.0, 38.0, 26.0)
    assert fig["plan_gib_training_none"] == round(plan["none"]["training"], 2)
    assert gc.phase_figures(records, plan, "hara_tok")["peak_gib_scoring_hara_tok"] == 29.0
    meter = gc.PhasePeaks(cuda=False)
    with meter.phase("forward"):
        torch.ones(4).sum()
    assert meter.peaks == {}  # no counters on the CPU: a phase records nothing
