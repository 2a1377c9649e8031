#!/usr/bin/env bash
# Build a dependency layer for Lambda, on any machine: pip downloads the Linux wheels of the chosen architecture and
# Python version, so neither Docker nor Python 3.12 is needed.
#
#   layers/build.sh [--requirements FILE] [--arch x86_64|arm64] [--python-version 3.12] [--out DIR] [--no-compile]
#
# FILE defaults to layers/dependencies/requirements.txt (the DependencyLayer); layers/parsers/requirements.txt is
# the ParserLayer. The layer lands in DIR/python (default layers/build/python), which Lambda mounts as /opt/python.
# `sam build` runs this script through layers/<layer>/Makefile with --out "$ARTIFACTS_DIR". See layers/README.md.
# When a Python of the runtime's version is at hand (python3.12 on PATH, or RAGSTEP_LAYER_PYTHON), the layer also
# gets its bytecode, which roughly halves the first invocation after a cold start.
set -euo pipefail

# Run through a layer folder's link to it too (layers/dependencies/build.sh: what `sam build --cached` sees).
ROOT="$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)"
ARCH="${RAGSTEP_LAYER_ARCH:-x86_64}"
PYVER="3.12"
OUT="$ROOT/layers/build"
PY="${PYTHON:-python3}"
COMPILE=1
REQS="$ROOT/layers/dependencies/requirements.txt"

while [ $# -gt 0 ]; do
  case "$1" in
    --requirements) REQS="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"; shift 2 ;;
    --arch) ARCH="$2"; shift 2 ;;
    --python-version) PYVER="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --no-compile) COMPILE=0; shift ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "layers/build.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

case "$ARCH" in
  x86_64) MACHINE=x86_64 ;;
  arm64|aarch64) ARCH=arm64; MACHINE=aarch64 ;;
  *) echo "layers/build.sh: --arch must be x86_64 or arm64, not $ARCH" >&2; exit 2 ;;
esac

[ -f "$REQS" ] || { echo "layers/build.sh: no requirements file $REQS" >&2; exit 2; }
TARGET="$OUT/python"
WHEELS="$(mktemp -d "${TMPDIR:-/tmp}/ragstep-layer-wheels.XXXXXX")"
trap 'rm -rf "$WHEELS"' EXIT

rm -rf "$TARGET"
mkdir -p "$TARGET"

# jieba is published as a source distribution only; it is pure Python, so build its wheel here and offer it to the
# platform-restricted install below, which accepts wheels only.
JIEBA="$(grep -iE '^jieba([=<>~! ;]|$)' "$REQS" | head -n1 || true)"
if [ -n "$JIEBA" ]; then
  "$PY" -m pip wheel --quiet --no-deps --wheel-dir "$WHEELS" "$JIEBA"
fi

# The python3.12 runtime runs on Amazon Linux 2023 (glibc 2.34): manylinux_2_28 wheels (numpy 2.4 ships only those)
# work there as well as manylinux2014 ones.
"$PY" -m pip install --quiet --no-compile --upgrade \
  --target "$TARGET" \
  --platform "manylinux2014_$MACHINE" --platform "manylinux_2_28_$MACHINE" \
  --implementation cp --python-version "$PYVER" --only-binary=:all: \
  --find-links "$WHEELS" \
  -r "$REQS"

# Distributions that must not ship, removed with every file their RECORD lists (and the folders that leaves empty):
#   boto3, botocore, s3transfer: provided by the python3.12 runtime (/var/runtime). A dependency may pull them in
#     (aws-xray-sdk requires botocore, 30 MB), but /opt/python comes first on sys.path, so a copy here would shadow
#     the runtime's matched boto3/botocore pair.
#   opensearch-protobufs, grpcio, protobuf: opensearch-py 3.x requires them (~19.5 MB) for a gRPC transport it does
#     not import; ragstep talks REST. The import smoke test below shows that opensearchpy loads without them.
"$PY" - "$TARGET" boto3 botocore s3transfer opensearch-protobufs grpcio protobuf <<'PRUNE'
import re, shutil, sys
from pathlib import Path
target = Path(sys.argv[1]).resolve()
for name in sys.argv[2:]:
    wanted = re.sub(r"[-_.]+", "_", name).lower()
    for info in target.glob("*.dist-info"):
        if re.sub(r"[-_.]+", "_", info.name.removesuffix(".dist-info").rsplit("-", 1)[0]).lower() != wanted:
            continue
        folders = set()
        for line in (info / "RECORD").read_text(encoding="utf-8").splitlines():
            path = (target / line.split(",")[0]).resolve()
            if target in path.parents and path.is_file():
                path.unlink()
                folders.update(p for p in path.parents if target in p.parents)
        shutil.rmtree(info, ignore_errors=True)
        for folder in sorted(folders, key=lambda p: len(p.parts), reverse=True):
            for cache in folder.glob("__pycache__"):
                shutil.rmtree(cache)
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
        print(f"removed {info.name.removesuffix('.dist-info')}")
PRUNE

# jieba's prefix-frequency table is not built here: shared/Makefile puts it in the SharedLayer, inside the package
# (ragstep/data/jieba-<version>.pfdict.pkl, for the jieba version pinned in layers/dependencies/requirements.txt),
# where ragstep.retrieval.text finds it without any setting.

# Prune what the functions never load.
#   tests, type stubs, console scripts, bytecode compiled for the build machine's Python (not the runtime's);
#   jieba's part-of-speech tagger, keyword extraction and paddle model: ragstep only calls
#   Tokenizer.cut_for_search (which needs finalseg for unknown words, kept; dict.txt goes after the smoke test below).
#   duckdb's ADBC driver (adbc_driver_duckdb: needs adbc_driver_manager, which ragstep never installs nor uses).
rm -rf "$TARGET/bin" "$TARGET/jieba/posseg" "$TARGET/jieba/analyse" "$TARGET/jieba/lac_small" "$TARGET/jieba/__main__.py"
rm -rf "$TARGET/adbc_driver_duckdb"
#   jieba's model pickles (finalseg/prob_*.p): read on Jython only; CPython imports the same tables from prob_*.py.
rm -f "$TARGET"/jieba/finalseg/prob_*.p
#   numpy's build and test kit: f2py (Fortran wrapper generator), the C headers, static libraries and Cython
#   declarations for compiling against numpy, PyInstaller hooks, the Cython/numba examples, and the extension modules
#   only its own tests load (_simd, _*_tests); and its polynomial classes (numpy.polynomial), which `import numpy`
#   loads only on first use and nothing in numpy or any layer uses. (numpy.ma stays: np.unique calls np.ma.)
rm -rf "$TARGET/numpy/f2py" "$TARGET/numpy/_core/include" "$TARGET/numpy/_core/lib" "$TARGET/numpy/random/lib" \
  "$TARGET/numpy/random/_examples" "$TARGET/numpy/_pyinstaller" "$TARGET/numpy/doc" "$TARGET/numpy/conftest.py" \
  "$TARGET/numpy/polynomial"
rm -f "$TARGET"/numpy/_core/_simd.*.so "$TARGET"/numpy/_core/_*_tests.*.so
[ ! -d "$TARGET/numpy" ] || find "$TARGET/numpy" -type f -name '*.pxd' -delete
#   Powertools' bundled Swagger UI (for its own event handler's enable_swagger; the API is FastAPI, whose /docs
#   page loads Swagger UI from a CDN), and pydantic.v1 (the Pydantic 1 API: ragstep's models are Pydantic 2, and
#   FastAPI only tries `from pydantic import v1` to recognise v1 models, and takes an ImportError as "none").
rm -rf "$TARGET/aws_lambda_powertools/event_handler/openapi/swagger_ui" "$TARGET/pydantic/v1"
find "$TARGET" -depth -type d \( -name __pycache__ -o -name tests \) -exec rm -rf {} +
find "$TARGET" -type f -name '*.pyi' -delete

# Bytecode for the runtime's Python: /opt is read-only, so without it every cold start compiles the dependencies
# again. unchecked-hash: the .pyc files are used as they are, whatever the file times in the zip.
HAVE_RUNTIME_PY=0
if RUNTIME_PY="$("$ROOT/layers/runtime-python.sh" "$PYVER")"; then HAVE_RUNTIME_PY=1; fi
if [ "$COMPILE" = 1 ]; then
  if [ "$HAVE_RUNTIME_PY" = 1 ]; then
    "$RUNTIME_PY" -W ignore -m compileall -q -j 0 --invalidation-mode unchecked-hash "$TARGET" >/dev/null
    echo "bytecode: compiled with $("$RUNTIME_PY" -V 2>&1)"
  else
    echo "bytecode: none (no Python $PYVER found; set RAGSTEP_LAYER_PYTHON to one): cold starts compile instead"
  fi
fi

# Smoke test, when the runtime's Python is at hand and the layer is for this machine: every top-level module of the
# layer imports in an isolated interpreter that sees nothing but the layer (wrong-platform wheels, missing
# dependencies). boto3/botocore are the runtime's, so a module that needs them is not held against the layer.
if [ "$HAVE_RUNTIME_PY" = 1 ] && [ "$(uname -m)" = "$MACHINE" ]; then
  "$RUNTIME_PY" -I -B -c '
import importlib, sys
from pathlib import Path
target = Path(sys.argv[1])
sys.path.insert(0, str(target))
names = sorted({p.name for p in target.iterdir() if (p / "__init__.py").is_file()} | {p.stem for p in target.glob("*.py")})
failed = []
for name in (n for n in names if not n.startswith("_")):
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in ("boto3", "botocore", "s3transfer"):
            failed.append(f"{name}: {exc}")
    except Exception as exc:
        failed.append(f"{name}: {type(exc).__name__}: {exc}")
if failed:
    sys.exit("layers/build.sh: cannot import from the layer:\n  " + "\n  ".join(failed))
print(f"imports: {len(names)} top-level modules load with {sys.version.split()[0]}")
' "$TARGET"
fi

# Smoke test: the tokenizer works from the pruned layer (jieba is pure Python, so the build machine's Python can load
# it whatever the target architecture; without the SharedLayer's prebuilt table it builds one, in a temporary cache).
if [ -n "$JIEBA" ]; then
  SMOKE_CACHE="$(mktemp -d "${TMPDIR:-/tmp}/ragstep-layer-smoke.XXXXXX")"
  PYTHONPATH="$ROOT/shared:$TARGET" XDG_CACHE_HOME="$SMOKE_CACHE" "$PY" -B -c '
from ragstep.retrieval.text import tokenize
tokens = tokenize("混合检索 combines BM25 and vectors")
assert "检索" in tokens and "bm25" in tokens, tokens
'
  rm -rf "$SMOKE_CACHE"
  # jieba's dict.txt (5 MB) only serves to build the prefix table, which the SharedLayer ships prebuilt for this
  # very jieba version (shared/Makefile): no function reads it, so it goes once the smoke test above has used it.
  # tests/test_aws_layer.py tokenizes Chinese with nothing but the built layers.
  rm -f "$TARGET/jieba/dict.txt"
fi

echo "layer of $(basename "$(dirname "$REQS")") for python$PYVER/$ARCH in $TARGET"
du -sk "$TARGET" | awk '{printf "unzipped size: %.1f MB\n", $1 / 1024}'
echo "largest packages:"
# awk reads the whole list (NR <= 8) rather than head closing the pipe early: with pipefail, sort killed by SIGPIPE
# would fail the build (exit 141).
du -sk "$TARGET"/* | sort -rn | awk 'NR <= 8 {n = split($2, p, "/"); printf "  %6.1f MB  %s\n", $1 / 1024, p[n]}'
