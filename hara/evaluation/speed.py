"""Speed as an endpoint (config ``report.speed``): every candidate checkpoint of checkpoint selection scored per
problem on one benchmark, so the report can pair the in-distribution curve by seed and problem at each candidate step.

Credit-assignment effects show mostly as learning speed (docs/analyses.md, "Speed as an endpoint"), which a final-only
comparison on a plateau does not see. The candidates are the checkpoints a run keeps anyway
(:func:`hara.layout.candidate_steps`, final/ last); :func:`hara.evaluation.selection.select_checkpoint` scores them
here in the loop that scores their validation, on the same engine and through the same cache (checkpoint content
hash and evaluation fingerprint), so a candidate scored before costs nothing.

Every candidate of every run is scored on the same problems: all of the benchmark's, or ``report.speed.problems`` of
them drawn with ``random.Random("speed:<config seed>:<benchmark>")`` and kept in the benchmark's order (generation is
the cost: problems x n samples per candidate). The run's speed.json (:data:`hara.layout.SPEED_SCORES`)::

    {"benchmark": NAME, "problems": P scored, "available": problems the benchmark has, "sample": how they were chosen,
     "candidates": [{"step": k, "checkpoint": PATH, "fingerprint": checkpoint sha256, "pass_at_1": mean,
                     "cached": bool, "eval_fingerprint": {...}, "problems": {problem id: pass@1}}, ...]}

with the candidates in step order; the report reads it (:func:`hara.results.collect.read_run`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from hara.data.pipeline import seeded_choice
from hara.results.collect import problem_scores

__all__ = ["SpeedCurve", "sample_problems"]


def sample_problems(records: list[dict], count: int | None, salt: str) -> list[dict]:
    """``count`` of ``records`` drawn with ``random.Random(salt)``, kept in their order; all of them for None or a
    count at least their number."""
    if count is None or count >= len(records):
        return list(records)
    kept = set(seeded_choice(len(records), count, salt))
    return [record for i, record in enumerate(records) if i in kept]


@dataclass
class SpeedCurve:
    """The speed benchmark's problems a run's candidates are scored on, and each candidate's scores as they come."""

    benchmark: str
    records: list[dict]
    available: int
    sample: str
    candidates: list[dict] = field(default_factory=list)

    @classmethod
    def from_config(cls, config: Mapping, data_dir: str | Path) -> SpeedCurve | None:
        """The curve to fill for ``report.speed`` from the data folder's copy of its benchmark; None when off."""
        from hara.evaluation.tasks import benchmark_records

        speed = config["report"]["speed"]
        if speed["benchmark"] is None:
            return None
        everything = benchmark_records(config, speed["benchmark"], data_dir)
        salt = f"speed:{config['seed']}:{speed['benchmark']}"
        records = sample_problems(everything, speed["problems"], salt)
        sample = "all" if len(records) == len(everything) else f"seeded sample, random.Random({salt!r})"
        return cls(speed["benchmark"], records, len(everything), sample)

    def add(self, step: int, checkpoint: Path, entry: Mapping) -> None:
        """One candidate's result entry (:func:`hara.evaluation.selection.cached_score`), per problem."""
        self.candidates.append(
            {
                "step": step,
                "checkpoint": str(checkpoint),
                "fingerprint": entry["checkpoint_fingerprint"],
                "pass_at_1": entry["score"],
                "cached": entry["cached"],
                "eval_fingerprint": entry.get("eval_fingerprint"),
                "problems": problem_scores({self.benchmark: entry})[self.benchmark],
            }
        )

    def document(self) -> dict:
        """speed.json's content (see the module docstring)."""
        return {
            "benchmark": self.benchmark,
            "problems": len(self.records),
            "available": self.available,
            "sample": self.sample,
            "candidates": sorted(self.candidates, key=lambda c: c["step"]),
        }
