"""The one registry API of the harness, open to other packages: a :class:`Registry` of objects by name, filled by
the harness, by any module that registers one, and by installed packages through a Python entry point group, and
``module:function`` references imported on first use. Used by the methods (hara.methods, group ``hara.methods``), the
analyses (hara.analysis.registry, group ``hara.analyses``), the benchmarks (hara.data.catalog) and the RLVR presets
(hara.rlvr.presets); a method's transform and knobs are references of its spec. Imports nothing heavy."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from importlib.metadata import entry_points
from typing import Any, Generic, TypeVar

from hara.errors import UnknownNameError

__all__ = ["Registry", "UnknownNameError", "load_reference"]

T = TypeVar("T")


def load_reference(reference: str | None, owner: str) -> Any:
    """The object named by ``"module:attribute"`` (imported now); ``owner`` names the declaration in the error."""
    module, _, attr = (reference or "").partition(":")
    if not module or not attr:
        raise ValueError(f"{owner}: expected 'module:function', got {reference!r}")
    return getattr(importlib.import_module(module), attr)


class Registry(Generic[T]):
    """Objects of one ``kind`` by name, in registration order.

    :meth:`register` adds one under ``name`` (default: its ``.name``): a different object under a taken name raises
    (a plug-in cannot replace a built-in), the same one again is a no-op, and no two objects may share a value (other
    than None) of an attribute named in ``unique``. :meth:`get` returns one, or raises :class:`UnknownNameError`
    (``unknown <kind> 'x' (valid: a, b, c)``, a KeyError and a ValueError); :meth:`names` and :meth:`entries` list them.

    ``group``: the entry point group where installed packages declare more (an entry point's object is one such object
    or a list of them, each of which ``accepts``, else a TypeError names the entry point and ``what`` it should be),
    read once, at the first lookup; ``scan`` finds the entry points (importlib.metadata's; tests replace it).
    """

    def __init__(
        self,
        kind: str,
        built_in: Iterable[T] | Mapping[str, T] = (),
        *,
        group: str | None = None,
        accepts: Callable[[Any], bool] | None = None,
        what: str = "",
        unique: tuple[str, ...] = (),
    ) -> None:
        self.kind, self.group, self.accepts, self.what = kind, group, accepts, what
        self.unique, self.scan = unique, entry_points
        self._items: dict[str, T] = {}
        self._loaded = group is None
        named = built_in.items() if isinstance(built_in, Mapping) else ((None, item) for item in built_in)
        for name, item in named:
            self.register(item, name)

    def register(self, item: T, name: str | None = None) -> T:
        """Add ``item`` under ``name`` (default ``item.name``) and return it."""
        name = item.name if name is None else name
        if name in self._items and self._items[name] != item:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        for attr in self.unique:
            value = getattr(item, attr)
            holder = next((k for k, v in self._items.items() if k != name and getattr(v, attr) == value), None)
            if value is not None and holder is not None:
                raise ValueError(f"{self.kind} {name!r}: {attr} {value!r} is already registered (by {holder!r})")
        self._items[name] = item
        return item

    def get(self, name: str) -> T:
        """The object registered under ``name``; an :class:`UnknownNameError` listing the valid names otherwise."""
        self._load()
        if name not in self._items:
            raise UnknownNameError.of(self.kind, name, self._items)
        return self._items[name]

    def names(self) -> list[str]:
        """Every registered name, in registration order (built-ins first, then the installed plug-ins)."""
        self._load()
        return list(self._items)

    def entries(self) -> dict[str, T]:
        """Name -> object of everything registered, in registration order (a copy)."""
        self._load()
        return dict(self._items)

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._items

    def _load(self) -> None:
        """Register what the installed packages declare in ``group`` (once)."""
        if self._loaded:
            return
        self._loaded = True
        for entry in self.scan(group=self.group):
            loaded = entry.load()
            items = loaded if isinstance(loaded, (list, tuple)) else [loaded]
            if not all(self.accepts is None or self.accepts(item) for item in items):
                raise TypeError(f"entry point {entry.name!r} ({entry.value}) of {self.group}: expected {self.what}")
            for item in items:
                self.register(item)
