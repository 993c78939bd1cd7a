"""The names of the metrics that one module writes to metrics.jsonl (and the MLflow run) and others read: one place,
so a renamed metric cannot leave a reader behind. The trainer maps TRL's log keys onto these
(hara.rlvr.metrics_sink.METRIC_KEYS); the phase times and peaks are named by hara.rlvr.phases; each method's own metrics
carry its registry namespace (hara.methods)."""

from __future__ import annotations

__all__ = ["ACCURACY", "CPU_S", "ENTROPY", "HARA_S", "RESPONSE_LENGTH", "REWARD", "STEP_S"]

#: Wall seconds of one optimizer step (TRL's step_time).
STEP_S = "time/step_s"
#: The process's CPU seconds of one step, all threads (hara.rlvr.metrics_sink.MetricsCallback): comparable across runs made
#: side by side, unlike the wall time.
CPU_S = "time/cpu_s"
#: Seconds of one step spent on novelty and reweighting (the method's overhead).
HARA_S = "time/hara_s"
#: Mean accuracy reward of the step's rollouts.
ACCURACY = "train/accuracy"
#: Mean total reward of the step's rollouts.
REWARD = "train/reward"
#: Mean token entropy of the step's rollouts.
ENTROPY = "train/entropy"
#: Mean completion length (tokens).
RESPONSE_LENGTH = "train/response_length"
