"""The shape of the package, kept by tests: no import cycles, layers that only import downwards, small modules.

Imports are read from the source (every ``import``, including the lazy ones inside functions), so a cycle that only
shows at run time on one code path is caught here too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "shared" / "ragstep"
MAX_LINES = 500
# Modules allowed over MAX_LINES, each with the reason the README gives.
LONG_MODULES: dict[str, str] = {}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(path: Path, known: set[str]) -> set[str]:
    """The ragstep modules ``path`` imports (``from ragstep.x import y`` counts ``ragstep.x.y`` when it is a module)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("ragstep"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ragstep"):
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in known else node.module)
    return {m for m in found if m in known}


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports_of(path, known) - {name} for name, path in mods.items()}


def test_no_import_cycles() -> None:
    edges = graph()
    visiting: list[str] = []
    done: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        if node in done:
            return
        if node in visiting:
            cycles.append([*visiting[visiting.index(node) :], node])
            return
        visiting.append(node)
        for nxt in sorted(edges[node]):
            visit(nxt)
        visiting.pop()
        done.add(node)

    for name in sorted(edges):
        visit(name)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


# Which layer may import which: lower layers never reach up. (models and errors are the bottom; entry the top.)
FORBIDDEN = {
    "ragstep.models": ("ragstep.stages", "ragstep.adapters", "ragstep.app", "ragstep.entry", "ragstep.pipeline"),
    "ragstep.retrieval": ("ragstep.stages", "ragstep.adapters", "ragstep.app", "ragstep.entry", "ragstep.context"),
    "ragstep.stages": ("ragstep.adapters", "ragstep.app", "ragstep.entry", "ragstep.bench"),
    "ragstep.adapters": ("ragstep.stages", "ragstep.app", "ragstep.entry", "ragstep.pipeline", "ragstep.bench"),
    "ragstep.pipeline": ("ragstep.app", "ragstep.entry", "ragstep.bench"),
    "ragstep.app": ("ragstep.entry", "ragstep.bench"),
}


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layers_import_only_downwards(layer: str) -> None:
    wrong = sorted(
        f"{name} imports {target}"
        for name, targets in graph().items()
        if name == layer or name.startswith(layer + ".")
        for target in targets
        if target.startswith(FORBIDDEN[layer])
    )
    assert not wrong, "\n".join(wrong)


def test_lambda_code_never_imports_the_benchmarks() -> None:
    edges = graph()
    wrong = sorted(
        f"{name} imports {t}"
        for name, targets in edges.items()
        if not name.startswith("ragstep.bench") and not name.startswith("ragstep.entry.cli")
        for t in targets
        if t.startswith("ragstep.bench")
    )
    assert not wrong, "\n".join(wrong)


def test_modules_stay_small() -> None:
    long = {
        name: n
        for name, path in modules().items()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES and name not in LONG_MODULES
    }
    assert not long, f"modules over {MAX_LINES} lines (split them, or say why in README and LONG_MODULES): {long}"
