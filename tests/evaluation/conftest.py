"""Fixtures of the evaluation tests (helpers live in eval_helpers.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.evaluation.eval_helpers import make_tiny_checkpoint


@pytest.fixture
def fake_checkpoint(tmp_path) -> Path:
    """A folder that passes for a checkpoint (stand-in models need no weights)."""
    folder = tmp_path / "standin"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "standin"}))
    return folder


@pytest.fixture(scope="session")
def tiny_checkpoints(tmp_path_factory) -> tuple[Path, Path]:
    """Two tiny checkpoints that differ only in their initialization seed."""
    root = tmp_path_factory.mktemp("tiny")
    return make_tiny_checkpoint(root / "a", seed=1), make_tiny_checkpoint(root / "b", seed=2)
