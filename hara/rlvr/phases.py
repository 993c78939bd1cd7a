"""Time and peak device memory of each phase of an RL step, the phases of ``hara plan`` (hara/planning/
``training_memory``): generation, scoring (rewards, TRL's no-grad log-prob pass, the method's capture and weighting),
training (forward and backward of the step's micro-batches, gradient clipping) and optimizer (the AdamW step).

The phases follow each other, so each is closed by a mark: :meth:`StepPhases.end` charges the time and the peak
since the previous mark to the phase and resets the peak counter. The trainer marks the start of generation and the
ends of generation and scoring; :class:`StepPhasesCallback` marks the ends of training and of the optimizer step and
hands the step's figures to the trainer's metrics (``time/<phase>_s`` and ``memory/<phase>_peak_gib``: metrics.jsonl
and MLflow, beside the loss). A peak counts every tensor alive in the phase, the resident weights, gradients and
optimizer states included, as the plan's resident + phase does; it is read from CUDA's counters
(``max_memory_allocated``, so not the CUDA context or the allocator's cache). The CPU has no such counter: there only
the times are recorded. On CUDA a mark waits for the device, so a phase's time is its kernels', not their launch.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from transformers import TrainerCallback

GIB = 1024**3
PHASES = ("generation", "scoring", "training", "optimizer")


def memory_key(phase: str) -> str:
    return f"memory/{phase}_peak_gib"


def time_key(phase: str) -> str:
    return f"time/{phase}_s"


class PeakProbe(Protocol):
    def reset(self) -> None: ...

    def peak_bytes(self) -> int: ...


@dataclass(frozen=True)
class CudaPeakProbe:
    device: torch.device

    def reset(self) -> None:
        torch.cuda.synchronize(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)

    def peak_bytes(self) -> int:
        torch.cuda.synchronize(self.device)
        return torch.cuda.max_memory_allocated(self.device)


def probe_for(device: torch.device) -> PeakProbe | None:
    """The device's peak counter, or None where it has none (the CPU)."""
    return CudaPeakProbe(device) if device.type == "cuda" else None


@dataclass
class StepPhases:
    """Each phase's time (summed over its repeats within a step) and peak (GiB, the max over them) since the last
    report; ``probe`` None records times only."""

    probe: PeakProbe | None
    clock: Callable[[], float] = time.perf_counter
    seconds: dict[str, float] = field(default_factory=dict)
    peaks: dict[str, float] = field(default_factory=dict)
    mark: float | None = None

    def start(self) -> None:
        if self.probe is not None:
            self.probe.reset()
        self.mark = self.clock()

    def end(self, phase: str) -> None:
        """What happened since the previous mark belongs to ``phase``. A phase with no mark before it (a resumed
        run's first step) gets no time."""
        if self.probe is not None:
            self.peaks[phase] = max(self.peaks.get(phase, 0.0), self.probe.peak_bytes() / GIB)
            self.probe.reset()
        now = self.clock()
        if self.mark is not None:
            self.seconds[phase] = self.seconds.get(phase, 0.0) + now - self.mark
        self.mark = now

    def report(self) -> dict[str, float]:
        """The step's figures as metrics, then forgotten: the next step starts afresh."""
        out = {**{time_key(p): s for p, s in self.seconds.items()}, **{memory_key(p): g for p, g in self.peaks.items()}}
        self.seconds, self.peaks = {}, {}
        return out


class StepPhasesCallback(TrainerCallback):
    """Marks the ends of the training and optimizer phases and passes the step's figures to ``log`` (metric name,
    value: the trainer's own metric store), before transformers logs the step."""

    def __init__(self, phases: StepPhases, log: Callable[[str, float], Any]) -> None:
        self.phases, self.log = phases, log

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self.phases.end("training")

    def on_optimizer_step(self, args, state, control, **kwargs):
        self.phases.end("optimizer")
        for key, value in self.phases.report().items():
            self.log(key, value)
