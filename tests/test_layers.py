"""The package layers: every import inside hara (function-local ones included) points down this order, so no
package loop can form. A new package or top-level module has to be placed here."""

from __future__ import annotations

import ast
from pathlib import Path

HARA = Path(__file__).resolve().parents[1] / "hara"

#: Bottom to top. A unit (a package, or a module directly in hara/) imports only from lower layers.
LAYERS = [
    {"errors", "hashing", "groups", "boxed_answer", "layout", "metric_keys", "knobs"},  # foundations
    {"plugins"},  # the registry API
    {"methods", "vllm_cpu", "ot", "results", "runinfo"},  # registries, transport, results reading, run provenance
    {"device", "tracking"},  # tracking (client, server, UI) reads mlflow_run.json through hara.results.files
    {"data", "novelty"},
    {"models", "weighting"},
    {"rlvr"},  # training
    {"config"},  # the config and its checks against the registries below
    {"evaluation"},
    {"planning", "analysis", "sweeps"},
    {"report"},
    {"power_plan", "preflight", "pilot"},
    {"cli"},
]
LEVEL = {unit: level for level, units in enumerate(LAYERS) for unit in units}


def unit_of(path: Path) -> str:
    relative = path.relative_to(HARA)
    return relative.parts[0] if len(relative.parts) > 1 else relative.stem


def imports(path: Path) -> set[str]:
    """The hara units a file imports, at any depth of its code."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{a.name}" for a in node.names]
        found |= {name.split(".")[1] for name in names if name.startswith("hara.")}
    return found


def edges() -> set[tuple[str, str, str]]:
    return {
        (unit_of(path), target, str(path.relative_to(HARA)))
        for path in HARA.rglob("*.py")
        for target in imports(path)
        if target != unit_of(path)
    }


def test_every_unit_has_a_layer():
    units = {unit_of(p) for p in HARA.rglob("*.py") if p.name != "__init__.py" or p.parent != HARA}
    assert units - set(LEVEL) == set(), "place the new unit in LAYERS"


def test_every_import_points_down_the_layers():
    upward = sorted(f"{file}: {unit} -> {target}" for unit, target, file in edges() if LEVEL[target] >= LEVEL[unit])
    assert upward == []


def test_the_check_sees_function_local_imports(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from hara.report.tables import x\n    import hara.cli\n", encoding="utf-8")
    assert imports(source) == {"report", "cli"}
