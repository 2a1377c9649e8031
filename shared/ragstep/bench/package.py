"""``ragstep bench package``: unzipped size of the Lambda layers, and their largest packages.

Sizes are the sum of file sizes (what Lambda counts against its 250 MB unzipped limit for a function and its layers),
in MiB. The layers are those of a ``sam build``, built into ``--layer-dir`` (default ``layers/build``):

* dependency layer: ``<layer-dir>/python``, built by ``layers/build.sh --out <layer-dir>`` (downloads Linux wheels
  from PyPI, about a minute);
* shared layer: ``<layer-dir>/shared/python``, built by ``make -C shared build-SharedLayer`` (the ``ragstep``
  package and its prebuilt jieba table);
* parser layer: ``<layer-dir>/parsers/python`` (``layers/parsers/requirements.txt``), which the ``ingest_parse``
  function has instead of the dependency layer: reported with the shared layer as that function's total;
* embedder layer: ``<layer-dir>/embedder/python`` (``make -C layers/embedder build-EmbedderLayer``: the local
  embedding model), which only the functions that embed have, on top of the other two: reported as their total.

An existing build is reused unless ``--rebuild``; one whose installed versions differ from
``layers/dependencies/requirements.txt`` is reported as stale. A package is a top-level folder or module together
with its ``*.dist-info`` and ``*.libs`` folders (numpy's bundled OpenBLAS lives in ``numpy.libs``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from ragstep.bench.common import repo_root
from ragstep.errors import InputError

MIB = 1024 * 1024
_DIST_INFO = re.compile(r"^(?P<name>.+?)-(?P<version>[^-]+)\.(dist|egg)-info$")
_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9_.\-]+)\s*==\s*([^\s;#]+)")


def tree_bytes(path: Path) -> int:
    if path.is_file() or path.is_symlink():
        return path.lstat().st_size
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            total += os.lstat(os.path.join(root, name)).st_size
    return total


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def package_sizes(layer_python: Path) -> dict[str, int]:
    """Bytes per package at the top of a layer's ``python/`` folder (``X``, ``X.py``, ``_X.<tag>.so``,
    ``X-*.dist-info``, ``X.libs``)."""
    sizes: dict[str, int] = defaultdict(int)
    for entry in sorted(layer_python.iterdir()):
        name = entry.name
        match = _DIST_INFO.match(name)
        if match:
            key = match.group("name")
        elif name.endswith(".libs"):
            key = name.removesuffix(".libs")
        elif entry.is_file() and name.endswith(".py"):
            key = name.removesuffix(".py")
        elif entry.is_file() and name.endswith((".so", ".pyd")):
            # A compiled module at the top (duckdb's _duckdb.cpython-312-x86_64-linux-gnu.so): its distribution's
            # package, named without the underscore and platform tag.
            key = name.split(".", 1)[0].lstrip("_")
        elif entry.is_file() or name == "__pycache__":
            sizes[name] += tree_bytes(entry)  # a data file at the top (jieba.pfdict.pkl), bytecode of a module
            continue
        else:
            key = name
        sizes[_canonical(key)] += tree_bytes(entry)
    return dict(sizes)


def installed_versions(layer_python: Path) -> dict[str, str]:
    out = {}
    for entry in layer_python.glob("*.dist-info"):
        match = _DIST_INFO.match(entry.name)
        if match:
            out[_canonical(match.group("name"))] = match.group("version")
    return out


def pinned_versions(requirements: Path) -> dict[str, str]:
    if not requirements.is_file():
        return {}
    out = {}
    for line in requirements.read_text(encoding="utf-8").splitlines():
        match = _REQUIREMENT.match(line)
        if match:
            out[_canonical(match.group(1))] = match.group(2)
    return out


def stale_packages(layer_python: Path, requirements: Path) -> list[str]:
    """Pins of requirements.txt that the built layer does not satisfy (``name: wanted, built``)."""
    built = installed_versions(layer_python)
    return [
        f"{name}: wants {want}, layer has {built.get(name, 'none')}"
        for name, want in sorted(pinned_versions(requirements).items())
        if built.get(name) != want
    ]


def build_dependency_layer(layer_dir: Path, requirements: Path | None = None) -> None:
    """``layers/build.sh --out layer_dir`` (the DependencyLayer, or the layer of ``requirements``)."""
    script = repo_root() / "layers" / "build.sh"
    if not script.is_file():
        raise InputError(f"cannot build the dependency layer: {script} not found (run from a ragstep checkout)")
    env = {**os.environ, "PYTHON": os.environ.get("PYTHON") or sys.executable}
    extra = ["--requirements", str(requirements)] if requirements else []
    proc = subprocess.run([str(script), *extra, "--out", str(layer_dir)], env=env, stdout=sys.stderr)
    if proc.returncode != 0:
        raise InputError(f"layers/build.sh failed (exit {proc.returncode}); see its output above")


def build_shared_layer(layer_dir: Path) -> None:
    shared = repo_root() / "shared"
    if not (shared / "Makefile").is_file():
        raise InputError(f"cannot build the shared layer: no {shared / 'Makefile'} (run from a ragstep checkout)")
    if shutil.which("make") is None:
        raise InputError("cannot build the shared layer: `make` is not installed")
    target = layer_dir / "shared"
    shutil.rmtree(target, ignore_errors=True)
    env = {**os.environ, "PYTHON": os.environ.get("PYTHON") or sys.executable}
    cmd = ["make", "--no-print-directory", "-C", str(shared), "build-SharedLayer", f"ARTIFACTS_DIR={target}"]
    proc = subprocess.run(cmd, env=env, stdout=sys.stderr)
    if proc.returncode != 0:
        raise InputError(f"`make build-SharedLayer` failed (exit {proc.returncode}); see its output above")


def build_embedder_layer(layer_dir: Path) -> None:
    """``make build-EmbedderLayer`` in ``layers/embedder`` into ``layer_dir/embedder`` (the local embedding model)."""
    folder = repo_root() / "layers" / "embedder"
    if shutil.which("make") is None:
        raise InputError("cannot build the embedder layer: `make` is not installed")
    env = {**os.environ, "PYTHON": os.environ.get("PYTHON") or sys.executable}
    cmd = ["make", "--no-print-directory", "-C", str(folder), "build-EmbedderLayer", f"ARTIFACTS_DIR={layer_dir}"]
    proc = subprocess.run(cmd, env=env, stdout=sys.stderr)
    if proc.returncode != 0:
        raise InputError(f"`make build-EmbedderLayer` failed (exit {proc.returncode}); see its output above")


def run_package(layer_dir: str | Path | None = None, *, rebuild: bool = False) -> dict[str, Any]:
    explicit = layer_dir is not None
    layers = Path(layer_dir) if layer_dir is not None else repo_root() / "layers" / "build"
    dep, shared = layers / "python", layers / "shared" / "python"
    built = []
    if rebuild or not dep.is_dir():
        if explicit and not rebuild:
            raise InputError(f"{layers}: no dependency layer (python/) here; pass --rebuild to build one")
        build_dependency_layer(layers)
        built.append("dependency")
    if rebuild or not shared.is_dir():
        if explicit and not rebuild:
            raise InputError(f"{layers}: no shared layer (shared/python/) here; pass --rebuild to build one")
        build_shared_layer(layers)
        built.append("shared")

    # The ParserLayer (only ingest_parse has it, with the shared layer): built with the others unless --layer-dir
    # names a tree without it, which is then reported without it.
    parsers = layers / "parsers" / "python"
    parser_requirements = repo_root() / "layers" / "parsers" / "requirements.txt"
    if (rebuild or not parsers.is_dir()) and not (explicit and not rebuild) and parser_requirements.is_file():
        build_dependency_layer(layers / "parsers", parser_requirements)
        built.append("parser")

    embedder = layers / "embedder" / "python"
    embedder_makefile = repo_root() / "layers" / "embedder" / "Makefile"
    if (rebuild or not embedder.is_dir()) and not (explicit and not rebuild) and embedder_makefile.is_file():
        build_embedder_layer(layers / "embedder")
        built.append("embedder")

    dep_sizes = package_sizes(dep)
    shared_sizes = package_sizes(shared)
    dep_bytes, shared_bytes = sum(dep_sizes.values()), sum(shared_sizes.values())
    entries = [(name, size, "dependency") for name, size in dep_sizes.items()]
    entries += [(name, size, "shared") for name, size in shared_sizes.items()]
    entries.sort(key=lambda e: -e[1])
    requirements = repo_root() / "layers" / "dependencies" / "requirements.txt"
    out: dict[str, Any] = {
        "dependency_layer_mb": round(dep_bytes / MIB, 1),
        "shared_layer_mb": round(shared_bytes / MIB, 1),
        "total_mb": round((dep_bytes + shared_bytes) / MIB, 1),
        "largest": [{"name": n, "mb": round(size / MIB, 1), "layer": layer} for n, size, layer in entries[:10]],
        "layer_dir": str(layers),
        "built_now": built,
        "bytecode_files": sum(1 for _ in dep.rglob("*.pyc")),
        "stale": [] if explicit else stale_packages(dep, requirements),
    }
    if parsers.is_dir():
        parser_sizes = package_sizes(parsers)
        parser_bytes = sum(parser_sizes.values())
        out["parser_layer_mb"] = round(parser_bytes / MIB, 1)
        out["ingest_parse_total_mb"] = round((parser_bytes + shared_bytes) / MIB, 1)
        out["parser_largest"] = [
            {"name": n, "mb": round(size / MIB, 1)} for n, size in sorted(parser_sizes.items(), key=lambda e: -e[1])[:5]
        ]
    if embedder.is_dir():
        embedder_bytes = sum(package_sizes(embedder).values())
        out["embedder_layer_mb"] = round(embedder_bytes / MIB, 1)
        out["embedding_functions_total_mb"] = round((dep_bytes + shared_bytes + embedder_bytes) / MIB, 1)
    return out


def render(r: dict[str, Any]) -> str:
    from ragstep.entry.cli.console import table

    lines = [
        f"Lambda layers in {r['layer_dir']} (unzipped, MiB; Lambda's limit: 250 for a function and its layers)",
        f"dependency layer {r['dependency_layer_mb']}  +  shared layer {r['shared_layer_mb']}  =  {r['total_mb']}"
        f"  ({r['bytecode_files']} bytecode files in the dependency layer)",
        "",
        table(("package", "MiB", "layer"), [(e["name"], e["mb"], e["layer"]) for e in r["largest"]]),
    ]
    if "parser_layer_mb" in r:
        largest = ", ".join(f"{e['name']} {e['mb']}" for e in r["parser_largest"])
        lines += [
            "",
            f"ingest_parse: parser layer {r['parser_layer_mb']}  +  shared layer {r['shared_layer_mb']}  =  "
            f"{r['ingest_parse_total_mb']}  (largest: {largest})",
        ]
    if "embedder_layer_mb" in r:
        lines += [
            "",
            f"functions that embed: dependency + shared + embedder layer {r['embedder_layer_mb']}  =  "
            f"{r['embedding_functions_total_mb']}",
        ]
    if r["built_now"]:
        lines.append(f"built now: {', '.join(r['built_now'])} layer")
    if r["stale"]:
        lines.append("stale build (rebuild with --rebuild): " + "; ".join(r["stale"]))
    return "\n".join(lines)
