"""hara/knobs.py: a params dataclass's fields are its knobs, typed once; the schema block and the reading of a flat
mapping come from them, nested groups included."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from hara.knobs import NoKnobs, fixed, knob, knob_group, knob_names, knob_schema, read_knobs


@dataclass(frozen=True)
class Inner:
    size: int = knob(4, "Supports.", minimum=2)
    solver: str = knob("fast", "Solver.", enum=["fast", "slow"])


@dataclass(frozen=True)
class Outer:
    inner: Inner = knob_group(Inner)
    scale: float = knob(0.5, "Scale.", exclusiveMinimum=0, maximum=1)
    plain: bool = False  # a field without metadata is a knob too (type and default only)
    backend: str = fixed("linear")


def test_the_schema_block_is_written_from_the_fields_groups_flattened():
    assert knob_schema(Outer) == {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "size": {"type": "integer", "description": "Supports.", "default": 4, "minimum": 2},
            "solver": {"type": "string", "description": "Solver.", "default": "fast", "enum": ["fast", "slow"]},
            "scale": {"type": "number", "description": "Scale.", "default": 0.5, "exclusiveMinimum": 0, "maximum": 1},
            "plain": {"type": "boolean", "default": False},
        },
    }
    assert knob_names(Outer) == ["size", "solver", "scale", "plain"]
    assert knob_names(NoKnobs) == [] and knob_schema(NoKnobs)["properties"] == {}


def test_a_flat_mapping_is_read_into_the_nested_dataclass():
    assert read_knobs(Outer, {"size": 8, "scale": 0.2}, "weighting 'x'") == Outer(Inner(size=8), scale=0.2)
    assert read_knobs(Outer, {}, "x") == Outer()
    given = Outer(scale=0.3)
    assert read_knobs(Outer, given, "x") is given
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['backend', 'sise'\] for weighting 'x'; known: "):
        read_knobs(Outer, {"sise": 8, "backend": "exact"}, "weighting 'x'")  # a fixed field is no knob


def test_a_knob_declared_twice_or_of_another_type_or_without_default_is_refused():
    @dataclass(frozen=True)
    class Twice:
        inner: Inner = knob_group(Inner)
        size: int = knob(3, "Again.")

    @dataclass(frozen=True)
    class Listed:
        sizes: tuple = knob((1, 2), "Not a scalar.")

    @dataclass(frozen=True)
    class Required:
        size: int

    with pytest.raises(TypeError, match="knob 'size' is declared twice"):
        knob_schema(Twice)
    with pytest.raises(TypeError, match="a knob is a bool, int, float or str"):
        knob_schema(Listed)
    with pytest.raises(TypeError, match="needs a default"):
        knob_schema(Required)
