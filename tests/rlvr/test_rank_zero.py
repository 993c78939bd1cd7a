"""Work that every rank needs the result of, done once: a resume's checkpoint check (it reads every byte of the
newest checkpoint) runs in rank 0 and is broadcast (hara.rlvr.checkpoints.on_rank_zero), and an evaluate job hashes
a checkpoint once however often it asks for its fingerprint (hara.evaluation.models.checkpoint_fingerprint)."""

from __future__ import annotations

import os
from pathlib import Path

import torch.distributed as dist
import torch.multiprocessing as mp


def _rank(rank: int, world: int, folder: str, port: int) -> None:
    from hara.rlvr.checkpoints import on_rank_zero

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:

        def check() -> str:
            (Path(folder) / f"checked-by-{rank}").touch()
            return f"checkpoint-{rank}"

        (Path(folder) / f"got-{rank}").write_text(on_rank_zero(check))
    finally:
        dist.destroy_process_group()


def test_the_resume_check_runs_in_rank_zero_and_every_rank_gets_its_answer(tmp_path):
    """Before: every rank of an 8-GPU job checked the newest checkpoint itself, ~1 TB read at each resume."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    mp.spawn(_rank, args=(3, str(tmp_path), port), nprocs=3, join=True)
    assert sorted(p.name for p in tmp_path.glob("checked-by-*")) == ["checked-by-0"]
    assert [(tmp_path / f"got-{r}").read_text() for r in range(3)] == ["checkpoint-0"] * 3


def test_a_checkpoint_is_hashed_once_per_process_until_a_file_changes(tmp_path, monkeypatch):
    from hara.evaluation import models

    hashed = []
    real = models._hash_files
    monkeypatch.setattr(models, "_hash_files", lambda files: hashed.append(len(files)) or real(files))
    monkeypatch.setattr(models, "_FINGERPRINTS", {})
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    first = models.checkpoint_fingerprint(tmp_path)
    assert models.checkpoint_fingerprint(tmp_path) == first and len(hashed) == 1
    (tmp_path / "model.safetensors").write_bytes(b"other weights")
    assert models.checkpoint_fingerprint(tmp_path) != first and len(hashed) == 2
