"""A method's knobs are declared once, in its params dataclass (hara/knobs.py: each field's type, default, description
and bounds). hara/schemas/config.yaml holds the block :func:`hara.knobs.knob_schema` writes from it for every built-in
section (the user-facing schema, read without importing a transform); this holds each block equal to it, node for
node, and prints the block to paste where they differ."""

from __future__ import annotations

import pytest
import yaml

from hara.config import load_schema
from hara.knobs import knob_schema
from hara.methods import methods

#: Keys of the config's hara section that are not a method's knobs.
NOT_METHOD_SECTIONS = {"plugins", "hidden_layer", "capture", "entropy_chunk"}


def section_params() -> dict[str, type]:
    """Each built-in method section and the one params dataclass of the methods that read it."""
    found: dict[str, set[type]] = {}
    for spec in methods().values():
        if spec.section:
            found.setdefault(spec.section, set()).add(spec.params_type())
    assert all(len(classes) == 1 for classes in found.values()), found  # methods sharing a section share its knobs
    return {section: classes.pop() for section, classes in found.items()}


def test_every_method_section_of_the_schema_belongs_to_a_method():
    schema = load_schema()["properties"]["hara"]["properties"]
    assert set(schema) - NOT_METHOD_SECTIONS == set(section_params())


@pytest.mark.parametrize("section", sorted(section_params()))
def test_the_schema_block_is_the_params_dataclass(section):
    block = load_schema()["properties"]["hara"]["properties"][section]
    expected = knob_schema(section_params()[section])
    paste = yaml.safe_dump({section: expected}, sort_keys=False, width=120)
    assert block["properties"] == expected["properties"], f"hara/schemas/config.yaml's hara.{section}:\n{paste}"
    assert block["type"] == "object" and block["additionalProperties"] is False
