"""Sampling settings of one benchmark: the config's evaluation defaults with that benchmark's overrides.

``evaluation.benchmarks.<name>`` may override ``n``, ``temperature``, ``top_p``, ``max_new_tokens`` and ``seed``;
anything missing (or null) there takes the evaluation-wide value. pass@1 is then the mean over ``n`` samples per
problem (avg@n), never a single sample unless the config says ``n: 1``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

__all__ = ["SETTING_KEYS", "SamplingSettings", "benchmark_settings"]

SETTING_KEYS = ("n", "temperature", "top_p", "max_new_tokens", "seed")


@dataclass(frozen=True)
class SamplingSettings:
    """How completions are sampled for one benchmark; ``temperature == 0`` means greedy decoding."""

    n: int
    temperature: float
    top_p: float
    max_new_tokens: int
    seed: int

    @property
    def greedy(self) -> bool:
        """Greedy decoding: every one of the n samples is the same arg-max completion."""
        return self.temperature == 0

    def as_dict(self) -> dict:
        """Plain dict, as written into result JSON files and cache keys."""
        return asdict(self)


def benchmark_settings(config: Mapping, benchmark: str) -> SamplingSettings:
    """The resolved sampling settings of ``benchmark`` under ``config`` (a resolved config)."""
    evaluation = config["evaluation"]
    overrides = (evaluation.get("benchmarks") or {}).get(benchmark) or {}
    values = {key: overrides.get(key) if overrides.get(key) is not None else evaluation[key] for key in SETTING_KEYS}
    return SamplingSettings(
        n=int(values["n"]),
        temperature=float(values["temperature"]),
        top_p=float(values["top_p"]),
        max_new_tokens=int(values["max_new_tokens"]),
        seed=int(values["seed"]),
    )
