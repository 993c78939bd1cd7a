"""Time and peak memory per phase of an RL step (hara/rlvr/phases.py): the marks' arithmetic, and the trainer marking
the four phases of `hara plan` in the order a step runs them (a fake probe and clock read them on the CPU)."""

from __future__ import annotations

import pytest
import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer

from hara.rlvr.metrics_sink import rename_metrics
from hara.rlvr.phases import GIB, PHASES, StepPhases, memory_key, probe_for, time_key
from hara.rlvr.session import build_trainer
from tests.rlvr.test_trainer import parity_reward, smoke_config


class Counter:
    """Reads 1, 2, 3, ... (GiB for the probe, seconds for the clock): every phase's value says when it was marked."""

    def __init__(self):
        self.reads, self.resets = 0, 0

    def __call__(self) -> float:
        self.reads += 1
        return float(self.reads)

    def reset(self):
        self.resets += 1

    def peak_bytes(self):
        return int(self() * GIB)


def test_a_phase_is_charged_what_happened_since_the_previous_mark():
    probe, clock = Counter(), iter([10.0, 13.0, 14.0, 16.5]).__next__
    phases = StepPhases(probe, clock=clock)
    phases.start()
    phases.end("generation")  # peak 1, 3 s
    phases.end("training")  # peak 2, 1 s
    phases.end("training")  # a second micro-batch: peak 3, 2.5 s more
    assert probe.resets == 4
    assert phases.report() == {
        time_key("generation"): 3.0,
        time_key("training"): 3.5,
        memory_key("generation"): 1.0,
        memory_key("training"): 3.0,
    }
    assert phases.report() == {}, "a report starts the next step afresh"


def test_the_cpu_has_no_peak_counter_and_records_times_only():
    assert probe_for(torch.device("cpu")) is None
    phases = StepPhases(None, clock=iter([1.0, 1.25]).__next__)
    phases.start()
    phases.end("scoring")
    assert phases.report() == {time_key("scoring"): 0.25}


def test_a_phase_without_a_mark_before_it_gets_no_time():
    phases = StepPhases(None, clock=iter([5.0, 7.0]).__next__)
    phases.end("training")  # a resumed run's first callback, before any generation
    phases.end("optimizer")
    assert phases.report() == {time_key("optimizer"): 2.0}


def test_the_trainer_marks_the_four_phases_of_the_plan_in_step_order(tiny_base, tmp_path):
    data = Dataset.from_list([{"prompt": f"Question: {a}+{a}?\nAnswer:", "answer": str(2 * a)} for a in (3, 5)])
    tokenizer = AutoTokenizer.from_pretrained(tiny_base, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(tiny_base, local_files_only=True)
    config = smoke_config()
    config["training"]["steps"] = 2
    trainer = build_trainer(
        config, "grpo", "hara_tok", 0, model, tokenizer, data, tmp_path, reward_funcs=[parity_reward]
    )
    probe = Counter()
    trainer.phases.probe = probe
    trainer.train()
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(logged) == 2
    for step, entry in enumerate(logged):
        marks = [entry[memory_key(phase)] for phase in PHASES]
        assert marks == [4 * step + 1 + k for k in range(4)], f"step {step}: {marks}"
        assert all(entry[time_key(phase)] >= 0 for phase in PHASES)
    assert set(rename_metrics(logged[0])) >= {memory_key(p) for p in PHASES} | {time_key(p) for p in PHASES}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA's peak counters")
def test_the_cuda_probe_sees_an_allocation():
    probe = probe_for(torch.device("cuda"))
    probe.reset()
    block = torch.empty(256 * 1024**2, dtype=torch.uint8, device="cuda")
    assert probe.peak_bytes() >= block.numel()
