"""Fixtures of the training tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from hara.models.tiny import build_tiny_model
from hara.models.tokenizer import build_tokenizer


@pytest.fixture(scope="session")
def tiny_base(tmp_path_factory) -> Path:
    """A random tiny-s model + char tokenizer saved like `hara base-model` does (no warm-up: seconds)."""
    folder = tmp_path_factory.mktemp("base")
    tokenizer = build_tokenizer("char")
    build_tiny_model("tiny-s", tokenizer, seed=0).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
