"""The one registry API (hara/plugins.py): register, get, names, the conflict check, entry point plug-ins read once,
the one unknown-name error; and the five registries built on it."""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import EntryPoint

import pytest

from hara.analysis.registry import ANALYSES
from hara.cli import main
from hara.data.catalog import BENCHMARKS
from hara.errors import HaraError, UnknownNameError
from hara.methods import METHODS, MethodSpec
from hara.plugins import Registry, load_reference
from hara.rlvr.presets import PRESETS
from tests.helpers import SMOKE
from tests.method_plugin import SPEC


@dataclass(frozen=True)
class Thing:
    name: str
    colour: str | None = None


def test_register_get_and_names_keep_registration_order():
    things = Registry("thing", [Thing("b"), Thing("a")])
    assert things.register(Thing("c", "red")) == Thing("c", "red")
    assert things.names() == ["b", "a", "c"] and list(things.entries()) == ["b", "a", "c"]
    assert things.get("c") == Thing("c", "red") and "a" in things and "z" not in things
    assert Registry("preset", {"x": 1, "y": 2}).entries() == {"x": 1, "y": 2}  # objects without a name: by key
    fns = Registry("fn")
    assert fns.register(len, "size") is len and fns.get("size") is len


def test_a_different_object_under_a_taken_name_raises_and_the_same_again_is_a_no_op():
    things = Registry("thing", [Thing("a", "red")], unique=("colour",))
    assert things.register(Thing("a", "red")) == Thing("a", "red")
    with pytest.raises(ValueError, match="thing 'a' is already registered"):
        things.register(Thing("a", "blue"))
    with pytest.raises(ValueError, match="thing 'b': colour 'red' is already registered \\(by 'a'\\)"):
        things.register(Thing("b", "red"))
    things.register(Thing("c"))
    things.register(Thing("d"))  # None is no value: two without a colour do not clash
    assert things.names() == ["a", "c", "d"] and things.get("a").colour == "red"


def test_an_unknown_name_is_one_error_type_with_one_message():
    things = Registry("thing", [Thing("a"), Thing("b")])
    with pytest.raises(UnknownNameError) as info:
        things.get("x")
    assert str(info.value) == "unknown thing 'x' (valid: a, b)"  # unquoted, though a KeyError
    assert isinstance(info.value, KeyError) and isinstance(info.value, ValueError) and isinstance(info.value, HaraError)
    for registry, kind in (
        (METHODS, "method"),
        (ANALYSES, "analysis"),
        (BENCHMARKS, "benchmark"),
        (PRESETS, "preset"),
    ):
        with pytest.raises(UnknownNameError, match=f"^unknown {kind} 'nope' \\(valid: {registry.names()[0]}, "):
            registry.get("nope")


def test_the_cli_prints_an_unknown_name_in_one_line(capsys):
    assert main(["config", "--config", str(SMOKE), "--set", "grid.methods=[none, hara_fast]"]) == 2
    err = capsys.readouterr().err.strip()
    assert "unknown method 'hara_fast' (valid: none, hara_tok" in err and "\n" not in err and "Traceback" not in err


def point(name: str, value: str) -> EntryPoint:
    return EntryPoint(name=name, value=value, group="test.things")


def test_entry_points_are_read_once_at_the_first_lookup_and_checked():
    scans = []

    def scan(group):
        scans.append(group)
        return [point("flip_late", "tests.method_plugin:SPEC")]

    methods = Registry("method", [MethodSpec("none", "none")], group="test.things", accepts=lambda o: o.weighting)
    methods.scan = scan
    assert scans == []  # nothing imported before the first lookup
    assert methods.names() == ["none", "flip_late"] and methods.get("flip_late") is SPEC
    assert methods.get("none") and len(methods.entries()) == 2 and "x" not in methods
    assert scans == ["test.things"]  # one scan for all those reads

    lists = Registry("method", group="test.things", accepts=lambda o: isinstance(o, MethodSpec))
    lists.scan = lambda group: [point("two", "tests.test_plugins:TWO")]
    assert lists.names() == ["p", "q"]

    bad = Registry("method", group="test.things", accepts=lambda o: isinstance(o, MethodSpec), what="MethodSpec(s)")
    bad.scan = lambda group: [point("broken", "tests.method_plugin:NOT_A_SPEC")]
    with pytest.raises(TypeError, match=r"entry point 'broken' \(tests.method_plugin:NOT_A_SPEC\) of test.things: "):
        bad.names()


def test_a_plugin_cannot_replace_a_built_in():
    things = Registry("method", [MethodSpec("none", "none")], group="test.things")
    things.scan = lambda group: [point("none", "tests.test_plugins:IMPOSTOR")]
    with pytest.raises(ValueError, match="method 'none' is already registered"):
        things.get("none")


def test_a_reference_is_imported_on_use_and_a_malformed_one_names_its_owner():
    assert load_reference("tests.method_plugin:flip_late", "x").__name__ == "flip_late"
    with pytest.raises(ValueError, match="method 'm': weighting: expected 'module:function', got 'nocolon'"):
        load_reference("nocolon", "method 'm': weighting")


TWO = [MethodSpec("p", "baseline", weighting="m:p"), MethodSpec("q", "baseline", weighting="m:q")]
IMPOSTOR = MethodSpec("none", "baseline", weighting="m:f")
