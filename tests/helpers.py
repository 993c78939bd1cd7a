"""What many test modules share: the repository's paths, its configs and Snakemake's merge of config files
(hara.config.merge_overlay, as ``merged``; the hub fixtures live beside it in tests/hub_assets.py)."""

from __future__ import annotations

from pathlib import Path

import yaml

from hara.config import merge_overlay as merged  # noqa: F401 (shared by the tests)

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "config"
SMOKE = CONFIGS / "smoke.yaml"
DEFAULT = CONFIGS / "default.yaml"


def fresh_registry(monkeypatch, registry, scan=None) -> None:
    """``registry`` (a hara.plugins.Registry) as a new process finds it, its installed plug-ins not read yet, and as
    it was again after the test (what the test registers goes with it); ``scan(group=...)``: the entry points it then
    finds (default: the installed ones)."""
    monkeypatch.setattr(registry, "_items", dict(registry._items))
    monkeypatch.setattr(registry, "_loaded", registry.group is None)
    if scan is not None:
        monkeypatch.setattr(registry, "scan", scan)


def read(path: Path) -> dict:
    """A YAML file's content."""
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def smoke_train_args(method: str = "none", seed: int = 0, rlvr: str = "grpo") -> list[str]:
    """`hara train`'s arguments (after the program) for one run of the smoke config's small size."""
    return [
        "train",
        "--config",
        str(SMOKE),
        "--size",
        "tiny-s",
        "--rlvr",
        rlvr,
        "--method",
        method,
        "--seed",
        str(seed),
    ]
