"""A method's knobs, typed once: its params dataclass. Each field carries its config schema (description, bounds,
choices) as field metadata, :func:`knob_schema` writes the JSON-schema block of the config from those fields, and
:func:`read_knobs` builds the dataclass from the config's flat mapping of knobs.

A field is a knob unless declared with :func:`fixed` (set by the method itself, e.g. HarA's barycenter backend); a
field declared with :func:`knob_group` holds a nested params dataclass whose knobs sit at the same level of the config
(HarA's one flat section ``hara.hara`` fills its novelty, barycenter and reweighting knobs). Knob names are unique
across a dataclass and its groups. Imports nothing of hara and nothing heavy: the maths core declares its knobs with
it, and config validation reads them.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

__all__ = ["NoKnobs", "fixed", "knob", "knob_group", "knob_names", "knob_schema", "read_knobs"]

T = TypeVar("T")

#: A knob's Python type -> its JSON-schema type.
SCHEMA_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string"}


def knob(default: Any, description: str, **schema: Any) -> Any:
    """A knob with its ``default``, ``description`` and JSON-schema keywords (``minimum``, ``maximum``,
    ``exclusiveMinimum``, ``enum``, ...), as they appear in the config schema."""
    return dataclasses.field(default=default, metadata={"schema": {"description": description, **schema}})


def knob_group(cls: type) -> Any:
    """A nested params dataclass (default: its defaults) whose knobs sit at this dataclass's level of the config."""
    return dataclasses.field(default_factory=cls, metadata={"group": cls})


def fixed(default: Any) -> Any:
    """A field that is not a knob: the method sets it (the config cannot)."""
    return dataclasses.field(default=default, metadata={"fixed": True})


@dataclasses.dataclass(frozen=True)
class NoKnobs:
    """The params of a method without knobs."""


def _leaves(cls: type) -> dict[str, tuple[dataclasses.Field, type]]:
    """Every knob of ``cls`` and its groups, by name, in declaration order, with its Python type."""
    hints = typing.get_type_hints(cls)
    found: dict[str, tuple[dataclasses.Field, type]] = {}
    for f in dataclasses.fields(cls):
        if f.metadata.get("fixed"):
            continue
        inner = _leaves(f.metadata["group"]) if "group" in f.metadata else {f.name: (f, hints[f.name])}
        for name, leaf in inner.items():
            if name in found:
                raise TypeError(f"{cls.__name__}: knob {name!r} is declared twice (names are flat in the config)")
            found[name] = leaf
    return found


def knob_names(cls: type) -> list[str]:
    """The config keys of ``cls``'s knobs (its groups' included), in declaration order."""
    return list(_leaves(cls))


def knob_schema(cls: type) -> dict[str, Any]:
    """The config schema's block of ``cls``: an object of its knobs, each with its type, description, default and
    bounds, no other key allowed. hara/schemas/config.yaml holds this block for every built-in method's section
    (tests/test_method_knobs.py checks it); config validation adds it for a registered method the file lacks."""
    properties = {}
    for name, (f, kind) in _leaves(cls).items():
        if kind not in SCHEMA_TYPES:
            raise TypeError(f"{cls.__name__}.{name}: a knob is a bool, int, float or str, not {kind}")
        if f.default is dataclasses.MISSING:
            raise TypeError(f"{cls.__name__}.{name}: a knob needs a default (the config's)")
        schema = dict(f.metadata.get("schema", {}))
        described = {"description": schema.pop("description")} if "description" in schema else {}
        properties[name] = {"type": SCHEMA_TYPES[kind], **described, "default": f.default, **schema}
    return {"type": "object", "additionalProperties": False, "properties": properties}


def read_knobs(cls: type[T], values: Mapping[str, Any] | T, owner: str) -> T:
    """``cls`` from a flat mapping of knobs (missing ones take their defaults; an unknown key raises a ValueError
    naming it and ``owner``); an instance of ``cls`` is returned as is."""
    if isinstance(values, cls):
        return values
    known = knob_names(cls)
    unknown = set(values) - set(known)
    if unknown:
        raise ValueError(f"unknown parameter(s) {sorted(unknown)} for {owner}; known: {sorted(known)}")
    return _build(cls, values)


def _build(cls: type[T], values: Mapping[str, Any]) -> T:
    kwargs = {}
    for f in dataclasses.fields(cls):
        if "group" in f.metadata:
            kwargs[f.name] = _build(f.metadata["group"], values)
        elif not f.metadata.get("fixed") and f.name in values:
            kwargs[f.name] = values[f.name]
    return cls(**kwargs)
