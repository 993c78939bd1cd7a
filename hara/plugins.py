"""Registries open to other packages: objects declared under a Python entry point group, and ``module:function``
references imported on first use. Used by the method registry (hara.methods, group ``hara.methods``) and the analysis
registry (hara.analysis.registry, group ``hara.analyses``). Imports nothing heavy."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

__all__ = ["add_unique", "declared", "load_reference"]


def load_reference(reference: str | None, owner: str) -> Any:
    """The object named by ``"module:attribute"`` (imported now); ``owner`` names the declaration in the error."""
    module, _, attr = (reference or "").partition(":")
    if not module or not attr:
        raise ValueError(f"{owner}: expected 'module:function', got {reference!r}")
    return getattr(importlib.import_module(module), attr)


def declared(group: str, kind: type, what: str, scan: Callable[..., Any] = entry_points) -> list[Any]:
    """Every ``kind`` object that installed packages declare in entry point ``group`` (an entry point may hold one or
    a list); anything else raises a TypeError naming the entry point and ``what`` it should be. ``scan``: how entry
    points are found (importlib.metadata's, or a registry's own name for it, which tests replace)."""
    found = []
    for entry in scan(group=group):
        loaded = entry.load()
        items = loaded if isinstance(loaded, (list, tuple)) else [loaded]
        if not all(isinstance(item, kind) for item in items):
            raise TypeError(f"entry point {entry.name!r} ({entry.value}) of {group}: expected {what}")
        found.extend(items)
    return found


def add_unique(registry: dict[str, Any], spec: Any, kind: str) -> Any:
    """Put ``spec`` into ``registry`` under ``spec.name``; a different spec under a taken name raises (a plug-in
    cannot replace a built-in), the same one again is a no-op."""
    if spec.name in registry and registry[spec.name] != spec:
        raise ValueError(f"{kind} {spec.name!r} is already registered")
    registry[spec.name] = spec
    return spec
