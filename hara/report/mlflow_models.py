"""MLflow 3's own concepts for what a training run used and produced, logged by `hara report` beside the run summary
(hara.report.mlflow_runs): the data the run trained on as dataset inputs, and each checkpoint candidate of checkpoint
selection as an external logged model (metadata only, nothing uploaded) with its scores linked to it and to their
dataset, so the UI's Models tab shows the selection.

- dataset inputs: the training set and the validation split (``data/manifest.json``: content hash and row count)
  and the size's RL prompts (``rl_prompts/<size>/prompts.jsonl``, hashed), contexts ``training`` / ``validation``;
- logged models: ``<run name>-step<k>`` per candidate (:func:`model_name`) (params: step, checkpoint folder, content fingerprint; tag
  ``hara.selected``), its validation pass@1 linked to the validation dataset, and for the selected and the final
  checkpoint their benchmark pass@1 linked to each benchmark. The run's tag ``hara.logged_models`` remembers them,
  so a second report adds none.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from pathlib import Path

from hara import layout
from hara.results.collect import Run
from hara.results.files import read_json

__all__ = ["data_inputs", "log_candidate_models", "model_name"]

MODELS_TAG = "hara.logged_models"
VALIDATION_METRIC = "eval/validation/pass_at_1"  # in the eval/ namespace of every evaluation score
DIGEST_CHARS = 16  # as the benchmarks' dataset digests (hara.evaluation.tracking.DIGEST_CHARS)


def _dataset_input(name: str, sha: str, rows: int | None, context: str):
    from mlflow.entities import Dataset, DatasetInput, InputTag

    profile = json.dumps({"num_rows": rows}) if rows is not None else None
    dataset = Dataset(
        name=name,
        digest=sha[:DIGEST_CHARS],
        source_type="code",
        source=json.dumps({"tags": {"dataset": name, "sha256": sha}}),
        profile=profile,
    )
    return DatasetInput(dataset, tags=[InputTag("mlflow.data.context", context)])


def data_inputs(results: Path, size: str) -> list:
    """Dataset inputs of a run of ``size``: train and validation from the data manifest, the size's RL prompts."""
    from hara.hashing import file_sha256

    inputs = []
    manifest_path = Path(layout.manifest_path(str(results)))  # the data stage's manifest (workflows/data.smk)
    if manifest_path.is_file():
        manifest = read_json(manifest_path)
        for key, context in (("train", "training"), ("validation", "validation")):
            entry = manifest.get("files", {}).get(manifest.get(key) or "")
            if entry:
                inputs.append(_dataset_input(key, entry["sha256"], entry.get("count"), context))
    # the RL prompts of the size (workflows/models.smk)
    prompts = layout.prompts_dir(results, size) / layout.PROMPTS_FILE
    if prompts.is_file():
        rows = sum(1 for line in prompts.read_text(encoding="utf-8").splitlines() if line.strip())
        inputs.append(_dataset_input(f"rl_prompts/{size}", file_sha256(prompts), rows, "training"))
    return inputs


def _benchmark_metrics(
    problems: Mapping[str, Mapping[str, float]], fingerprints: Mapping[str, Mapping], model_id: str, now: int, step: int
) -> list:
    from mlflow.entities import Metric

    return [
        Metric(
            f"eval/{name}/pass_at_1",
            sum(outcomes.values()) / len(outcomes),
            now,
            step,
            model_id=model_id,
            dataset_name=name,
            dataset_digest=fingerprints[name]["benchmark_sha256"][:DIGEST_CHARS],
        )
        for name, outcomes in problems.items()
        if outcomes and (fingerprints.get(name) or {}).get("benchmark_sha256")
    ]


def model_name(run_name: str, step: int) -> str:
    """``<run name>-step<k>`` spelled as MLflow accepts a logged model's name: none of ``/ : . % " '`` (a hub size
    such as qwen3-1.7b has a dot; MLflow refuses the name)."""
    return re.sub(r"[/:.%\"']", "_", f"{run_name}-step{step}")


def log_candidate_models(
    client, run_id: str, experiment_id: str, name: str, run: Run, validation_sha: str | None
) -> dict[str, str]:
    """One external logged model per checkpoint candidate of the run's selection; returns {step: model id}."""
    from mlflow.entities import LoggedModelOutput, Metric

    logged = client.get_run(run_id).data.tags.get(MODELS_TAG)
    if logged or not run.selection:
        return json.loads(logged) if logged else {}
    selected, final = run.selection["selected_step"], run.selection["final_step"]
    now, models, metrics = int(time.time() * 1000), {}, []
    for candidate in run.selection["candidates"]:
        step = int(candidate["step"])
        model = client.create_logged_model(
            experiment_id,
            name=model_name(name, step),
            source_run_id=run_id,
            model_type="checkpoint",
            params={
                "step": str(step),
                "checkpoint": str(candidate["checkpoint"]),
                "fingerprint": str(candidate.get("fingerprint")),
            },
            tags={"hara.selected": str(step == selected).lower(), "hara.final": str(step == final).lower()},
        )
        client.finalize_logged_model(model.model_id, "READY")
        metrics.append(
            Metric(
                VALIDATION_METRIC,
                float(candidate["validation_pass_at_1"]),
                now,
                step,
                model_id=model.model_id,
                **(
                    {"dataset_name": "validation", "dataset_digest": validation_sha[:DIGEST_CHARS]}
                    if validation_sha
                    else {}
                ),
            )
        )
        if step == selected and run.selected_problems:
            metrics += _benchmark_metrics(run.selected_problems, run.fingerprints, model.model_id, now, step)
        elif step == final and run.problems:
            metrics += _benchmark_metrics(run.problems, run.fingerprints, model.model_id, now, step)
        models[str(step)] = model.model_id
    # one request each for every candidate's scores and outputs (a tracking server answers each in ~0.3 s)
    client.log_batch(run_id, metrics=metrics)
    client.log_outputs(run_id, [LoggedModelOutput(model_id, int(step)) for step, model_id in models.items()])
    client.set_tag(run_id, MODELS_TAG, json.dumps(models))
    return models
