"""Checkpoint selection on a validation split held out of the training problems (config ``selection``).

`hara data` moves ``selection.validation_problems`` training problems to ``validation.jsonl`` (the sweeps' mechanism,
:func:`hara.data.pipeline.hold_out_validation`), so no run trains on them and none is a test problem. Training keeps
the weights of the candidate checkpoints (:func:`hara.layout.candidate_steps`: spread over training, the
last one final/) as ``<run>/candidates/step-<k>``. :func:`select_checkpoint` then

1. scores every candidate on the validation split with the evaluation stage's own task, metric and sampling
   (pass@1 = avg@n), each score cached by (checkpoint content hash, evaluation fingerprint) under the cache folder,
   so no checkpoint is evaluated twice on the same split with the same settings;
2. selects the highest validation pass@1 (ties go to the later step, the one closer to the final model);
3. gives the selected checkpoint's test scores: the final's own evaluation when final/ wins, else a new evaluation
   on the config's benchmarks.

Only step 3 reads the test benchmarks, after the choice is made: their content cannot change the selection
(tests/evaluation/test_selection.py changes every test answer and gets the same choice).

With ``report.speed`` the same loop also scores each candidate on the speed benchmark (:mod:`hara.evaluation.speed`),
cached the same way, on the engine the candidate's validation loads: one engine start per candidate for both, none
for a candidate whose scores are all cached. It plays no part in the choice.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from pathlib import Path

from hara.data.embedded import VALIDATION
from hara.layout import FINAL_DIR, candidate_dir, candidate_steps
from hara.results.files import read_json

__all__ = ["SELECTION_RULE", "CandidateEngine", "cached_score", "candidates", "select_checkpoint", "write_selection"]

SELECTION_RULE = "highest validation pass@1; ties go to the later step"


def candidates(config: Mapping, run_dir: Path) -> list[tuple[int, Path]]:
    """(step, checkpoint folder) of each candidate the run kept, final/ last."""
    steps = candidate_steps(config)
    kept = [(step, candidate_dir(run_dir, step)) for step in steps[:-1]]
    missing = [str(path) for _, path in kept if not (path / "config.json").is_file()]
    if missing:
        raise FileNotFoundError(
            f"{missing[0]}: candidate checkpoint missing (was the run trained with "
            "selection.enabled and the same selection.candidates?)"
        )
    return [*kept, (steps[-1], run_dir / FINAL_DIR)]


class CandidateEngine:
    """One candidate's engine, loaded when a score of it is first missing from the cache (a candidate scored before
    loads none) and shared by its scores on the validation split and the speed benchmark; ``engine``: one already
    loaded (final/'s, from its test evaluation). :meth:`close` closes it, loaded or given."""

    def __init__(self, config: Mapping, checkpoint: Path, backend: str, cache_dir: Path, factory=None, engine=None):
        self.config, self.checkpoint, self.backend, self.cache_dir = config, checkpoint, backend, cache_dir
        self.factory, self.engine = factory, engine

    def __call__(self):
        if self.engine is None:
            from hara.evaluation.models import checkpoint_fingerprint, load_engine
            from hara.evaluation.runner import checkpoint_model_config

            settings = checkpoint_model_config(
                self.config,
                self.checkpoint,
                VALIDATION,
                self.backend,
                self.cache_dir / "lighteval",
                checkpoint_fingerprint(self.checkpoint),
            )
            self.engine = (self.factory or load_engine)(settings)
        return self.engine

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()


def cached_score(
    config: Mapping,
    checkpoint: Path,
    benchmark: str,
    records: list[dict],
    cache_dir: Path,
    backend: str,
    engine: CandidateEngine,
) -> dict:
    """The result entry of one checkpoint on ``records`` of ``benchmark`` (score, predictions, fingerprint), from the
    cache when this checkpoint was scored before on the same problems with the same evaluation settings; ``cached``
    says which."""
    from hara.data.format import prompt_format
    from hara.evaluation.models import checkpoint_fingerprint
    from hara.evaluation.runner import evaluate_checkpoint, evaluation_fingerprint, versions, write_result
    from hara.evaluation.settings import benchmark_settings
    from hara.evaluation.tasks import build_task

    settings, prompt = benchmark_settings(config, benchmark), prompt_format(config)
    fingerprint = evaluation_fingerprint(
        build_task(benchmark, records, settings, prompt), settings, prompt, backend, versions()
    )
    key = {"checkpoint": checkpoint_fingerprint(checkpoint), "evaluation": fingerprint}
    path = cache_dir / f"{hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()}.json"
    if path.is_file():
        return {**read_json(path, "hara evaluate (a cached score: delete it)"), "cached": True}
    result = evaluate_checkpoint(
        config,
        checkpoint,
        [benchmark],
        backend=backend,
        cache_dir=cache_dir / "lighteval",
        records={benchmark: records},
        fingerprint=key["checkpoint"],
        engine=engine(),
    )
    entry = {**result["benchmarks"][benchmark], "checkpoint_fingerprint": key["checkpoint"]}
    write_result(entry, path)
    return {**entry, "cached": False}


def select_checkpoint(
    config: Mapping,
    run_dir: str | Path,
    data_dir: str | Path,
    final_scores: str | Path,
    *,
    backend: str | None = None,
    cache_dir: str | Path | None = None,
    engine_factory: Callable | None = None,
    final_engine=None,
) -> tuple[dict, dict, dict | None]:
    """(selection, test result of the selected checkpoint, speed scores or None without report.speed) for one run;
    see the module docstring.

    ``final_scores``: the final checkpoint's `hara evaluate` result (the test scores when final/ is selected).
    ``cache_dir`` defaults to ``<results_dir>/selection_cache``; ``engine_factory`` as in evaluate_checkpoint;
    ``final_engine``: final/'s engine, still loaded from its test evaluation: it scores final/ first and is closed
    then (closing it again is harmless)."""
    from hara.data.pipeline import validation_records
    from hara.evaluation.models import evaluation_backend
    from hara.evaluation.runner import evaluate_checkpoint
    from hara.evaluation.speed import SpeedCurve

    run_dir, backend = Path(run_dir), evaluation_backend(config, backend)
    cache_dir = Path(cache_dir or Path(config["results_dir"]) / "selection_cache")
    records = validation_records(Path(data_dir))
    speed = SpeedCurve.from_config(config, data_dir)
    listed, by_step, final_dir = candidates(config, run_dir), {}, run_dir / FINAL_DIR
    # final/ first on its live engine, closed before another starts: one engine at a time (a GPU holds one engine's
    # memory share, and vLLM's parallel state is one per process: a second engine beside it failed on the CPU build)
    order = listed if final_engine is None else sorted(listed, key=lambda c: c[1] != final_dir)
    for step, checkpoint in order:
        engine = CandidateEngine(
            config, checkpoint, backend, cache_dir, engine_factory, final_engine if checkpoint == final_dir else None
        )
        try:
            entry = cached_score(config, checkpoint, VALIDATION, records, cache_dir, backend, engine)
            if speed is not None:
                scores = cached_score(config, checkpoint, speed.benchmark, speed.records, cache_dir, backend, engine)
                speed.add(step, checkpoint, scores)
        finally:
            engine.close()
        by_step[step] = {
            "step": step,
            "checkpoint": str(checkpoint),
            "fingerprint": entry["checkpoint_fingerprint"],
            "validation_pass_at_1": entry["score"],
            "cached": entry["cached"],
            "eval_fingerprint": entry.get("eval_fingerprint"),
        }
    scored = [by_step[step] for step, _ in listed]
    best = max(scored, key=lambda c: (c["validation_pass_at_1"], c["step"]))
    final = scored[-1]
    if best is final:
        test = read_json(final_scores)
    else:
        test = evaluate_checkpoint(
            config,
            Path(best["checkpoint"]),
            list(config["data"]["benchmarks"]),
            backend=backend,
            data_dir=data_dir,
            engine_factory=engine_factory,
        )
    test["selected_step"] = best["step"]
    selection = {
        "rule": SELECTION_RULE,
        "selected_step": best["step"],
        "final_step": final["step"],
        "validation": {"problems": len(records), "file": str(Path(data_dir) / f"{VALIDATION}.jsonl")},
        "candidates": scored,
    }
    return selection, test, None if speed is None else speed.document()


def write_selection(
    config: Mapping,
    run_dir: str | Path,
    data_dir: str | Path,
    final_scores: str | Path,
    out: str | Path,
    scores_out: str | Path,
    *,
    speed_out: str | Path | None = None,
    backend: str | None = None,
    cache_dir: str | Path | None = None,
    final_engine=None,
) -> dict:
    """:func:`select_checkpoint`, its files written (the selected checkpoint's test scores and the speed scores
    first, so a selection.json on disk always has them beside it); what the commands print. `hara evaluate
    --selection-out` (the workflow's evaluate job, one process for the final's evaluation and the selection) and `hara
    select-checkpoint` both come here, after checking selection.enabled and that ``speed_out`` is given exactly when
    report.speed names a benchmark (:func:`hara.evaluation.commands.check_speed_out`)."""
    from hara.evaluation.runner import write_result

    selection, test, speed = select_checkpoint(
        config, run_dir, data_dir, final_scores, backend=backend, cache_dir=cache_dir, final_engine=final_engine
    )
    write_result(test, scores_out)
    if speed is not None:
        write_result(speed, speed_out)
    write_result(selection, out)
    printed = {
        "selected_step": selection["selected_step"],
        "validation_pass_at_1": {c["step"]: round(c["validation_pass_at_1"], 4) for c in selection["candidates"]},
    }
    if speed is not None:
        printed["speed_pass_at_1"] = {c["step"]: round(c["pass_at_1"], 4) for c in speed["candidates"]}
    return printed
