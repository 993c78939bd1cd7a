"""Which checkpoint a training run resumes from, and whether the run may be resumed at all.

A preempted job can die while it writes a checkpoint, and a disk can corrupt one later. So every checkpoint gets a
manifest (``hara_manifest.json``: size and xxh3-128 checksum of each file; manifests of older runs hold sha256,
still verified) written last, after TRL/HF has saved everything;
resuming picks the newest checkpoint that passes :func:`checkpoint_problem` and warns about every newer one it skips
(moved aside to ``corrupt-checkpoint-<step>``, so HF's rotation and the next save never mistake it for a good one and
nothing written is deleted). Checkpoints are also loaded the way the resume will load them: tensors through
safetensors, pickles with ``torch.load(weights_only=True)`` (as HF's Trainer does on resume), so a pickle that
would run code is rejected like a corrupt file.

A run folder whose saved resolved config differs from the new one is never resumed: :func:`refuse_changed_config`
names the keys (resuming would mix two experiments under one run id; restarting would silently delete work).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from hara.errors import ConfigError
from hara.hashing import file_sha256, file_xxh3
from hara.layout import CANDIDATE, CHECKPOINTS_DIR, FINAL_DIR, RESOLVED_CONFIG

__all__ = [
    "FINISHED_CHECKPOINTS",
    "MANIFEST",
    "RESUME_IGNORED",
    "CandidateCallback",
    "CheckpointWarning",
    "ManifestCallback",
    "changed_keys",
    "checkpoint_problem",
    "collective_timeout_s",
    "final_restored",
    "last_valid_checkpoint",
    "link_candidates",
    "on_rank_zero",
    "prune_finished_checkpoints",
    "refuse_changed_config",
    "restore_final",
    "resume_point",
    "save_final",
    "write_manifest",
]

MANIFEST = "hara_manifest.json"
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
_PICKLES = (".pt", ".pth", ".bin")
#: Written by HF as a full pickle for humans and never read back on resume: covered by the manifest, not loaded.
_NOT_LOADED_ON_RESUME = frozenset({"training_args.bin"})

#: Config keys (and sections) that do not change what a training run computes (other cells, other stages, where
#: things are stored or tracked, resources): editing them between a crash and the rerun is fine. Everything else
#: must match the run folder's resolved_config.yaml.
RESUME_IGNORED = (
    "grid",
    "evaluation",
    "analyses",
    "sweeps",
    "tracking",
    "threads",
    "resources",
    "plan",
    "models.sizes",
    "models.hub_ids",
    "models.local_dir",
    "models.train_gpus",
    "data.benchmarks",
    "data.benchmark_size",
    "data.benchmark_sizes",
    "data.local_dir",
    "training.progress",
    "training.vllm.gpu_memory_utilization",
    "training.vllm.max_model_len",
    "training.finished_checkpoints",
    "training.checkpoint_write_mb_s",
    "selection.candidates",
)


class CheckpointWarning(UserWarning):
    """A checkpoint was skipped because it is incomplete or corrupt."""


def _files(checkpoint: Path) -> list[Path]:
    return sorted(p for p in checkpoint.rglob("*") if p.is_file() and p.name != MANIFEST)


#: checksum name in a manifest -> its function; the first is what new manifests record. A checksum, not a signature:
#: it guards against truncation and corruption, and xxh3 reads a checkpoint 4.5x faster than sha256 (rank 0 hashes a
#: 131 GB 8B checkpoint at every save while the other ranks wait).
CHECKSUMS = {"xxh3_128": file_xxh3, "sha256": file_sha256}


def write_manifest(checkpoint: str | Path, resumable: bool = True) -> Path:
    """Record size and checksum of every file of a fully written checkpoint (written aside, then renamed), and
    whether a run resumes from it (False once it is pruned to its weights)."""
    checkpoint = Path(checkpoint)
    name, checksum = next(iter(CHECKSUMS.items()))
    files = {str(p.relative_to(checkpoint)): {"bytes": p.stat().st_size, name: checksum(p)} for p in _files(checkpoint)}
    partial = checkpoint / f"{MANIFEST}.partial"
    found = {"files": files, "resumable": resumable}
    partial.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(partial, checkpoint / MANIFEST)
    return checkpoint / MANIFEST


class ManifestCallback(TrainerCallback):
    """Writes the manifest of each checkpoint right after HF's Trainer has saved it (main process only)."""

    def on_save(self, args, state, control, **kwargs):
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if state.is_world_process_zero and folder.is_dir():
            write_manifest(folder)


def _link_model(checkpoint: Path, target: Path, partial: Path) -> None:
    """The model files of ``checkpoint`` (not what only a resume reads, nor the manifest) as ``target``, written in
    ``partial`` and renamed. Hard links: no extra disk, and HF's rotation of old checkpoints
    cannot take them away (a copy across devices)."""
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    for path in checkpoint.iterdir():
        if path.is_file() and path.name != MANIFEST and not _RESUME_ONLY.match(path.name):  # a model, not a resume
            try:
                os.link(path, partial / path.name)
            except OSError:
                shutil.copy2(path, partial / path.name)
    partial.rename(target)


def link_candidates(checkpoints: Path, candidates: Path, steps: list[int]) -> None:
    """Keep the model files of ``checkpoints/checkpoint-<step>`` for each of ``steps`` as ``candidates/step-<step>``
    (:func:`_link_model`). Idempotent, so a run resumed after a kill links what the kill left out."""
    for step in steps:
        source, target = checkpoints / f"checkpoint-{step}", candidates / CANDIDATE.format(step=step)
        if target.is_dir() or not (source / MANIFEST).is_file():  # a checkpoint without its manifest is unfinished
            continue
        _link_model(source, target, candidates / f".step-{step}.partial")


def restore_final(checkpoints: Path, final: Path, steps: int) -> bool:
    """Rebuild ``final`` from ``checkpoints/checkpoint-<steps>`` (the save at the last step holds the final weights;
    resumable or pruned to its weights) where that checkpoint is whole: True when done. A checkpoint that is not
    (:func:`checkpoint_problem`'s checks) is set aside with a warning (False: the run resumes from an earlier one). A finished run whose final/
    was lost after its checkpoints were pruned (Snakemake deletes the output of a job that exits non-zero) finishes
    again this way, with no step trained; an FSDP resume from the pruned checkpoint would fail on every retry."""
    checkpoint = checkpoints / f"checkpoint-{steps}"
    if not checkpoint.is_dir():
        return False
    problem = _saved_problem(checkpoint)
    if problem is not None:
        _discard(checkpoint, problem)
        return False
    _link_model(checkpoint, final, final.with_name(f"{final.name}.partial"))
    return True


class CandidateCallback(TrainerCallback):
    """After each save (and the manifest): keep the candidate checkpoints of checkpoint selection (main process)."""

    def __init__(self, candidates: Path, steps: list[int]) -> None:
        self.candidates, self.steps = candidates, steps

    def on_save(self, args, state, control, **kwargs):
        if state.is_world_process_zero and state.global_step in self.steps:
            link_candidates(Path(args.output_dir), self.candidates, [state.global_step])


def _manifest(checkpoint: Path) -> dict:
    """The manifest's content (manifests written before the ``resumable`` flag lack it: they were not pruned)."""
    return json.loads((checkpoint / MANIFEST).read_text(encoding="utf-8"))


def _manifest_problem(checkpoint: Path) -> str | None:
    try:
        files = _manifest(checkpoint)["files"]
    except (ValueError, KeyError, TypeError):
        return f"{MANIFEST} is not valid JSON"
    for name, expected in sorted(files.items()):
        file = checkpoint / name
        if not file.is_file():
            return f"{name} is missing"
        if file.stat().st_size != expected["bytes"]:
            return f"{name} has {file.stat().st_size} bytes, {expected['bytes']} were written (truncated)"
        kind = next((kind for kind in CHECKSUMS if kind in expected), None)
        if kind is None:
            return f"{MANIFEST}: {name} has no checksum"
        if CHECKSUMS[kind](file) != expected[kind]:
            return f"{name} does not match its {kind} (corrupted)"
    return None


def _load_problem(file: Path, every_tensor: bool) -> str | None:
    """Load ``file`` the way a resume does (tensors only when ``every_tensor``: the manifest already vouches for
    the bytes); the problem, or None."""
    import torch
    from safetensors import safe_open
    from transformers.trainer_pt_utils import (
        safe_globals,  # the numpy types HF allowlists for its RNG states
    )

    try:
        if file.suffix == ".safetensors":
            with safe_open(str(file), framework="pt") as handle:
                for key in handle.keys() if every_tensor else ():
                    handle.get_tensor(key)
        elif file.suffix in _PICKLES and file.name not in _NOT_LOADED_ON_RESUME:
            with safe_globals():
                torch.load(file, map_location="cpu", weights_only=True, mmap=True)
        elif file.suffix == ".json":
            json.loads(file.read_text(encoding="utf-8"))
    except Exception as error:  # noqa: BLE001 - any failure to load means the checkpoint cannot be resumed
        return f"{file.name} does not load ({type(error).__name__}: {' '.join(str(error).split())[:200]})"
    return None


def checkpoint_problem(checkpoint: str | Path) -> str | None:
    """Why ``checkpoint`` cannot be resumed from (incomplete, truncated, corrupted, unsafe pickle), or None.

    HF writes trainer_state.json after everything else, so without it the save did not finish. Without a manifest
    (a checkpoint from before manifests, or a kill in the instant between the two writes) every tensor is read.
    """
    checkpoint = Path(checkpoint)
    problem = _saved_problem(checkpoint)
    if problem is None and (checkpoint / MANIFEST).is_file() and not _manifest(checkpoint).get("resumable", True):
        return "pruned to its weights once the run finished (training.finished_checkpoints): it does not resume"
    return problem


def _saved_problem(checkpoint: Path) -> str | None:
    """Why what ``checkpoint`` holds is not what was saved, or would not load safely (None: it is whole)."""
    if not (checkpoint / "trainer_state.json").is_file():
        return "no trainer_state.json (the save did not finish)"
    has_manifest = (checkpoint / MANIFEST).is_file()
    problem = _manifest_problem(checkpoint) if has_manifest else None
    for file in _files(checkpoint):
        problem = problem or _load_problem(file, every_tensor=not has_manifest)
    return problem


def _set_aside(checkpoint: Path) -> Path:
    """Move a bad checkpoint out of HF's ``checkpoint-<step>`` namespace without deleting anything."""
    target = checkpoint.with_name(f"corrupt-{checkpoint.name}")
    if target.exists():
        target = checkpoint.with_name(f"corrupt-{checkpoint.name}-{time.strftime('%Y%m%dT%H%M%S')}")
    checkpoint.rename(target)
    return target


def last_valid_checkpoint(folder: str | Path) -> str | None:
    """The newest ``checkpoint-<step>`` under ``folder`` that can be resumed from (None: start from scratch).

    Every newer checkpoint that fails :func:`checkpoint_problem` is reported with a :class:`CheckpointWarning` and
    moved aside, so the run falls back to the previous one.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return None
    found = sorted((int(m.group(1)), p) for p in folder.iterdir() if p.is_dir() and (m := _CHECKPOINT.match(p.name)))
    for _, checkpoint in reversed(found):
        problem = checkpoint_problem(checkpoint)
        if problem is None:
            return str(checkpoint)
        _discard(checkpoint, problem)
    return None


def _discard(checkpoint: Path, problem: str) -> None:
    """Warn about a checkpoint a run cannot use and move it aside. Under `accelerate launch` every rank may select;
    only the main one moves (the others may see it vanish, which they read as "no trainer_state.json" and skip the
    same way)."""
    moved = _set_aside(checkpoint).name if os.environ.get("RANK", "0") == "0" else "(left to rank 0)"
    warnings.warn(
        f"{checkpoint}: {problem}; moved to {moved}, falling back to the previous checkpoint",
        CheckpointWarning,
        stacklevel=3,
    )


def on_rank_zero(compute: Callable[[], Any]) -> Any:
    """``compute()`` in rank 0 only, its result broadcast to every rank (one process: ``compute()``). A resume's
    checkpoint check reads every byte of the newest checkpoint (a 131 GB 8B checkpoint under FSDP): once per job,
    not once per rank on the shared file system."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return compute()
    box = [compute() if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def resume_point(folder: str | Path) -> str | None:
    """:func:`last_valid_checkpoint`, checked by rank 0 and agreed by every rank."""
    return on_rank_zero(lambda: last_valid_checkpoint(folder))


#: What only a resume reads (optimizer, scheduler and RNG states; FSDP writes its sharded optimizer state as a
#: folder ``optimizer_<i>``, and with FULL_STATE_DICT a second, fp32 copy of the model, ``pytorch_model_fsdp.bin``,
#: which transformers' FSDP resume loads beside the ``model.safetensors`` evaluation reads): dropped by
#: ``training.finished_checkpoints: weights`` once final/ exists, never linked into a selection candidate.
_RESUME_ONLY = re.compile(r"^(optimizer.*|scheduler\.pt|rng_state.*\.pth|pytorch_model_fsdp.*)$")


def _keep_weights_only(checkpoint: Path) -> None:
    for path in checkpoint.iterdir():
        if _RESUME_ONLY.match(path.name):
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    write_manifest(checkpoint, resumable=False)  # the manifest vouches for what is left, and that it cannot resume


#: training.finished_checkpoints: what becomes of checkpoints/checkpoint-<step>/ once a run's final/ is written.
FINISHED_CHECKPOINTS = {
    "keep": lambda checkpoint: None,  # everything, resumable (the optimizer states are ~2x the weights)
    "weights": _keep_weights_only,  # model, config and trainer state: evaluable, not resumable
    "delete": shutil.rmtree,  # final/ only
}


def prune_finished_checkpoints(folder: str | Path, mode: str) -> None:
    """Apply ``mode`` (:data:`FINISHED_CHECKPOINTS`) to every ``checkpoint-<step>`` of a finished run's ``folder``.

    A finished run is never resumed (``hara train`` returns at once when final/ exists), so what only a resume reads
    is dead weight: for an 8B run in bf16 the AdamW states are 33 GB per checkpoint. Idempotent, so a kill during
    the pruning is mended by the rerun; other files of ``folder`` (mlflow_run.json) stay.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return
    for checkpoint in sorted(p for p in folder.iterdir() if p.is_dir() and _CHECKPOINT.match(p.name)):
        FINISHED_CHECKPOINTS[mode](checkpoint)


#: Bytes per parameter that rank 0 of an FSDP run writes at a FULL_STATE_DICT checkpoint: model.safetensors and
#: FSDP's own pytorch_model_fsdp.bin in the fp32 master dtype, and both fp32 AdamW moments (hara.planning counts the
#: same checkpoint on disk).
FULL_STATE_BYTES_PER_PARAM = 16
#: torch's default process-group timeout (torch.distributed.constants.default_pg_timeout), the floor.
DEFAULT_COLLECTIVE_TIMEOUT_S = 1800
#: Margin on the planned save: the file system's rate is stated, not measured, and other jobs write beside it.
SAVE_TIMEOUT_MARGIN = 2


def collective_timeout_s(params: int, write_mb_s: float) -> int:
    """The process group's timeout (GRPOConfig.ddp_timeout, and accelerate's PartialState where it starts the group
    first): while rank 0 gathers, writes and then reads back (the manifest's checksums) a FULL_STATE_DICT checkpoint,
    the other ranks wait in their next collective, and a timeout there kills the job mid-save. At 200 MB/s an 8B
    checkpoint (131 GB) takes 11 minutes to write and as long to read: past torch's 30 minutes with the margin."""
    checkpoint = FULL_STATE_BYTES_PER_PARAM * params
    seconds = SAVE_TIMEOUT_MARGIN * 2 * checkpoint / (write_mb_s * 1e6)  # written, then read back
    return max(DEFAULT_COLLECTIVE_TIMEOUT_S, math.ceil(seconds))


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, Mapping) and tree:
        return {k: v for key, value in tree.items() for k, v in _flatten(value, f"{prefix}{key}.").items()}
    return {prefix.rstrip("."): tree}


def _ignored(key: str) -> bool:
    return any(key == prefix or key.startswith(prefix + ".") for prefix in RESUME_IGNORED)


def changed_keys(saved: Mapping, new: Mapping) -> list[str]:
    """Key paths whose values differ between two resolved configs (keys in :data:`RESUME_IGNORED` excepted)."""
    before, after = _flatten(saved), _flatten(new)
    return sorted(k for k in before.keys() | after.keys() if not _ignored(k) and before.get(k) != after.get(k))


def refuse_changed_config(run_dir: str | Path, config: Mapping) -> None:
    """Raise ConfigError naming the differing keys if ``run_dir`` was made with another resolved config."""
    import yaml

    saved_path = Path(run_dir) / RESOLVED_CONFIG
    if not saved_path.is_file():
        return
    saved = yaml.safe_load(saved_path.read_text(encoding="utf-8")) or {}
    changed = changed_keys(saved, json.loads(json.dumps(config, default=str)))
    if changed:
        shown = ", ".join(changed[:8]) + (f" and {len(changed) - 8} more" if len(changed) > 8 else "")
        raise ConfigError(
            f"{run_dir}: the config differs from the run's saved resolved_config.yaml at {shown}; "
            "refusing to resume (restore the config or use a new --out)"
        )


def final_restored(out: Path, config: Mapping) -> bool:
    """Rank 0 rebuilds final/ from the checkpoint saved at ``training.steps`` and prunes the run's checkpoints
    (:func:`hara.rlvr.checkpoints.restore_final`), every rank learns whether it did: True = the run is finished,
    with no step trained."""

    def restore() -> bool:
        if not restore_final(out / CHECKPOINTS_DIR, out / FINAL_DIR, config["training"]["steps"]):
            return False
        prune_finished_checkpoints(out / CHECKPOINTS_DIR, config["training"]["finished_checkpoints"])
        return True

    return on_rank_zero(restore)


def save_final(trainer: Any, tokenizer: Any, out: Path) -> None:
    """Write final/ aside and rename it, so a crash mid-save never leaves a final/ that looks finished. Every
    process takes part in ``save_model`` (FSDP gathers the shards), the main process writes."""
    partial, main = out / f"{FINAL_DIR}.partial", trainer.accelerator.is_main_process
    if main:
        shutil.rmtree(partial, ignore_errors=True)
    trainer.accelerator.wait_for_everyone()
    trainer.save_model(str(partial))
    if main:
        tokenizer.save_pretrained(str(partial))
        partial.rename(out / FINAL_DIR)
    trainer.accelerator.wait_for_everyone()
