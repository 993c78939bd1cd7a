"""Checkpoint manifests: xxh3-128 checksums (rank 0 writes one at every save of a multi-GB checkpoint), and the sha256
manifests of runs started before still verify, so a run resumes across the upgrade."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from hara.hashing import file_sha256
from hara.rlvr.checkpoints import MANIFEST, checkpoint_problem, write_manifest


def fake_checkpoint(folder: Path) -> Path:
    folder.mkdir(parents=True)
    save_file({"w": torch.arange(64, dtype=torch.float32)}, str(folder / "model.safetensors"))
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 2}))
    return folder


def flip_last_byte(file: Path) -> None:
    data = bytearray(file.read_bytes())
    data[-1] ^= 0xFF
    file.write_bytes(bytes(data))


def test_new_manifests_record_xxh3_and_catch_a_flipped_byte(tmp_path):
    checkpoint = fake_checkpoint(tmp_path / "checkpoint-2")
    write_manifest(checkpoint)
    files = json.loads((checkpoint / MANIFEST).read_text())["files"]
    assert set(files["model.safetensors"]) == {"bytes", "xxh3_128"}
    assert checkpoint_problem(checkpoint) is None
    flip_last_byte(checkpoint / "model.safetensors")
    assert checkpoint_problem(checkpoint) == "model.safetensors does not match its xxh3_128 (corrupted)"


def test_a_sha256_manifest_of_an_older_run_still_verifies(tmp_path):
    checkpoint = fake_checkpoint(tmp_path / "checkpoint-2")
    files = {p.name: {"bytes": p.stat().st_size, "sha256": file_sha256(p)} for p in sorted(checkpoint.iterdir())}
    (checkpoint / MANIFEST).write_text(json.dumps({"files": files}))
    assert checkpoint_problem(checkpoint) is None
    flip_last_byte(checkpoint / "model.safetensors")
    assert checkpoint_problem(checkpoint) == "model.safetensors does not match its sha256 (corrupted)"
