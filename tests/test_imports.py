"""No import cycles inside hara/: every import (module level or inside a function) of every module, walked."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "hara"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, modules: set[str]) -> set[str]:
    """The hara modules a file imports anywhere in it (``from a import b`` counts a.b when b is a module);
    imports under ``if TYPE_CHECKING:`` never run and are left out."""
    name, found = module_name(path), set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.update([base, *(f"{base}.{alias.name}" for alias in node.names)])
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return {m for m in found if m in modules and m != name}


def import_graph() -> dict[str, set[str]]:
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: imported(path, set(paths)) for name, path in paths.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def test_hara_has_no_import_cycles():
    assert cycles(import_graph()) == []


def test_the_walk_sees_function_level_imports_and_finds_a_planted_cycle():
    graph = import_graph()
    assert "hara.errors" in graph["hara.evaluation.commands"]  # imported inside a function there
    graph["hara.errors"] = {"hara.evaluation.commands"}
    # the planted edge closes a cycle through every module between them (evaluation.commands -> ... -> hara.device ->
    # hara.errors): one strongly connected component holding both
    assert any({"hara.errors", "hara.evaluation.commands"} <= set(component) for component in cycles(graph))


#: Layers (issue 18): the scoring rule (hara.boxed_answer) sits below data, models and evaluation, which never reach into
#: the RL package; capturing hidden states is a model concern that the trainer and the analyses share.
LOWER_LAYERS = ("hara.data", "hara.models", "hara.evaluation")


def test_data_models_and_evaluation_never_import_the_rl_package():
    graph = import_graph()
    crossing = {
        name: sorted(m for m in deps if m.startswith("hara.rlvr"))
        for name, deps in graph.items()
        if name.startswith(LOWER_LAYERS)
    }
    assert {name: deps for name, deps in crossing.items() if deps} == {}


def test_config_validation_imports_no_transform():
    """Validating a config (every built-in method's knobs included) and a study reads the methods' declarations, not
    their transforms: no torch, so every `hara` command and Snakemake's parse stay fast (the built-ins' schema blocks
    are in hara/schemas/config.yaml; tests/test_method_knobs.py holds them equal to the dataclasses)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from hara.config import load_config\n"
        "from hara.sweeps.study import load_study\n"
        "config = load_config('config/default.yaml')\n"
        "load_study('sweeps/alpha.yaml')\n"
        "print(len(config['grid']['methods']), 'torch' in sys.modules)\n"
    )
    root = PACKAGE.parent
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root)
    assert result.stdout.split()[1] == "False" and int(result.stdout.split()[0]) > 1
