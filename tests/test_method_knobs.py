"""Every method knob is declared twice, by design: its dataclass (the maths' default, used by code and tests that call
the transforms directly) and hara/schemas/config.yaml (the config's default, with its description and range). This holds
the two equal, key for key."""

from __future__ import annotations

import dataclasses

import pytest

from hara.config import load_schema
from hara.methods import methods
from hara.novelty import NoveltyParams
from hara.ot.barycenter import BarycenterConfig
from hara.weighting.baselines import EntropyShapingParams, ForkingParams, PositionParams, ShearParams
from hara.weighting.hara import ReweightParams
from hara.weighting.oracle import OracleParams

#: Each method section of the config and the dataclasses its transform builds from it (HarA: nested configs left out,
#: they are sections of their own or not knobs).
SECTION_CLASSES = {
    "hara": (ReweightParams, NoveltyParams, BarycenterConfig),
    "forking_tokens": (ForkingParams,),
    "entropy_shaping": (EntropyShapingParams,),
    "position": (PositionParams,),
    "shear": (ShearParams,),
    "oracle_steps": (OracleParams,),
}
NOT_KNOBS = {"barycenter", "backend"}  # NoveltyParams' nested BarycenterConfig; the solver backend is not a knob


def dataclass_defaults(classes) -> dict:
    defaults = {}
    for cls in classes:
        for f in dataclasses.fields(cls):
            if f.name in NOT_KNOBS:
                continue
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            defaults[f.name] = list(default) if isinstance(default, tuple) else default
    return defaults


def test_every_sectioned_method_has_its_classes_here():
    sections = {spec.section for spec in methods().values() if spec.section and spec.weighting is None}
    assert sections == set(SECTION_CLASSES)


@pytest.mark.parametrize("section", sorted(SECTION_CLASSES))
def test_schema_defaults_equal_the_dataclass_defaults(section):
    schema = load_schema()["properties"]["hara"]["properties"][section]["properties"]
    assert {key: node.get("default") for key, node in schema.items()} == dataclass_defaults(SECTION_CLASSES[section])
