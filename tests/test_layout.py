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


#: The one runtime module that may import ragstep.bench: the command that runs the benchmarks (from a dev install;
#: the functions' SharedLayer is built without ragstep/bench, shared/Makefile).
BENCH_COMMAND = "ragstep.entry.cli.bench"


def test_runtime_code_never_imports_the_benchmarks() -> None:
    """ragstep.bench is not in the Lambda layer: no module shipped there may import it, lazily or not."""
    edges = graph()
    wrong = sorted(
        f"{name} imports {t}"
        for name, targets in edges.items()
        if not (name == "ragstep.bench" or name.startswith("ragstep.bench.")) and name != BENCH_COMMAND
        for t in targets
        if t == "ragstep.bench" or t.startswith("ragstep.bench.")
    )
    assert not wrong, "\n".join(wrong)
    assert any(t.startswith("ragstep.bench") for t in edges[BENCH_COMMAND]), f"{BENCH_COMMAND}: drop the exemption"


def test_modules_stay_small() -> None:
    long = {
        name: n
        for name, path in modules().items()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES and name not in LONG_MODULES
    }
    assert not long, f"modules over {MAX_LINES} lines (split them, or say why in README and LONG_MODULES): {long}"


# -- use cases in one place ----------------------------------------------------------------------------------------

# Entry points parse, call a use case (ragstep.app) and format: they reach a stage only through the pipeline registry
# (ragstep.pipeline.definitions loads the registered stage entry functions by name), never by importing its module.
# Each exception names its module and why it is one.
ENTRY_STAGE_IMPORTS: dict[str, str] = {}


def test_entry_points_reach_stages_only_through_the_pipeline() -> None:
    wrong = sorted(
        f"{name} imports {target}"
        for name, targets in graph().items()
        if name.startswith("ragstep.entry.") and name not in ENTRY_STAGE_IMPORTS
        for target in targets
        if target.startswith("ragstep.stages")
    )
    assert not wrong, "entry points call use cases in ragstep.app, not stages:\n" + "\n".join(wrong)


# The blob key layout (ragstep.models.blob_keys) is spelled once: no other module writes one of its prefixes.
LAYOUT_PREFIXES = ("sources/", "ingest/", "data/", "hashes/", "pending/", "uploads/", "tenants/")
# Modules with a layout of their own that shares a word with it (not ingestion's keys).
OTHER_LAYOUTS = {
    "ragstep.models.blob_keys": "the layout itself",
    "ragstep.adapters.index.s3snapshot": "the S3-snapshot index's own objects (tenants/<tenant>/index/...)",
    "ragstep.adapters.index._s3generations": "the S3-snapshot index's generations",
    "ragstep.stages.ingest.products": "re-exports the layout to the ingest stages",
    "ragstep.app.cost": "reads a price table from the package's own data/ folder, not a blob",
}


def _literals(path: Path) -> list[str]:
    """Every string literal of ``path`` (each constant part of an f-string too), docstrings left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def test_the_blob_key_layout_is_spelled_once() -> None:
    wrong = sorted(
        f"{name}: {text!r}"
        for name, path in modules().items()
        if name not in OTHER_LAYOUTS and not name.startswith("ragstep.bench")
        for text in _literals(path)
        if text.startswith(LAYOUT_PREFIXES)
    )
    assert not wrong, "use ragstep.models.blob_keys for blob keys:\n" + "\n".join(wrong)


def test_a_chat_run_is_started_and_stopped_in_one_place() -> None:
    """Registering a session's running answer (what ``POST /v1/sessions/{id}/stop`` stops) is the chat run's
    lifecycle: only :mod:`ragstep.app.chat_runs` does it."""
    registering = sorted(
        name
        for name, path in modules().items()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Attribute) and node.attr == "register"
        and isinstance(node.value, ast.Name) and node.value.id == "RUNNING"
    )  # fmt: skip
    assert registering == ["ragstep.app.chat_runs"], registering
