"""How the completions of an evaluation ended, and the Base models' sanity check before the grid trains.

Every benchmark entry of scores.json carries ``completion_stats``: how many completions stopped (a stop sequence or
the eos token) and how many ran into ``max_new_tokens`` (``length``), and the share with a complete ``\\boxed{}``
answer (:func:`hara.boxed_answer.last_boxed`, what the reward and the scores read). A Base model that never boxes its
answer or never stops scores zero and trains on noise, silently: :func:`base_sanity` turns the pooled shares of a
size's Base model into one verdict against ``evaluation.base_sanity``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hara.boxed_answer import last_boxed

__all__ = ["base_sanity", "completion_stats", "finish_reason", "pooled_stats"]


def finish_reason(output_tokens: Sequence[int], max_new_tokens: int) -> str:
    """``length`` for a completion that used its whole token budget, else ``stop`` (a stop sequence or eos ended it).

    Read from the token count both backends return (transformers' rows end at eos or the stop string, vLLM's at the
    stop), so it also holds for predictions answered from lighteval's cache. A stop string ending exactly on the
    last allowed token counts as ``length``: the check errs towards too few stops."""
    return "length" if len(output_tokens) >= max_new_tokens else "stop"


def completion_stats(predictions: Sequence[Mapping]) -> dict:
    """Counts of finish reasons and boxed answers over every completion of a benchmark's predictions."""
    completions = [c for row in predictions for c in row["completions"]]
    reasons = [r for row in predictions for r in row["finish_reasons"]]
    total = len(completions)
    stopped = reasons.count("stop")
    boxed = sum(last_boxed(c) is not None for c in completions)
    return {
        "completions": total,
        "finish_reasons": {"stop": stopped, "length": total - stopped},
        "boxed": boxed,
        "stop_rate": stopped / total if total else 0.0,
        "boxed_rate": boxed / total if total else 0.0,
    }


def pooled_stats(scores: Mapping) -> dict:
    """:func:`completion_stats` pooled over every benchmark of a scores.json (each completion counts once)."""
    entries = [entry["completion_stats"] for entry in scores["benchmarks"].values()]
    total = sum(e["completions"] for e in entries)
    stopped, boxed = sum(e["finish_reasons"]["stop"] for e in entries), sum(e["boxed"] for e in entries)
    return {
        "completions": total,
        "stop_rate": stopped / total if total else 0.0,
        "boxed_rate": boxed / total if total else 0.0,
    }


def base_sanity(scores: Mapping, settings: Mapping) -> tuple[dict, list[str]]:
    """The pooled shares of a Base model's scores.json and what falls short of ``settings`` (evaluation.base_sanity):
    (stats, problems), each problem naming the share, its minimum and the worst benchmark."""
    stats, problems = pooled_stats(scores), []
    for rate, key in (("boxed_rate", "min_boxed_rate"), ("stop_rate", "min_stop_rate")):
        minimum = settings[key]
        if minimum is not None and stats[rate] < minimum:
            by_benchmark = {name: e["completion_stats"][rate] for name, e in scores["benchmarks"].items()}
            worst = min(by_benchmark, key=by_benchmark.get)
            problems.append(
                f"{rate} {stats[rate]:.2f} < evaluation.base_sanity.{key} {minimum:g} "
                f"(lowest: {worst} {by_benchmark[worst]:.2f})"
            )
    return stats, problems
