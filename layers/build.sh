#!/usr/bin/env bash
# Build the dependency layer (layers/dependencies/requirements.txt) for Lambda, on any machine: pip downloads the
# Linux wheels of the chosen architecture and Python version, so neither Docker nor Python 3.12 is needed.
#
#   layers/build.sh [--arch x86_64|arm64] [--python-version 3.12] [--out DIR] [--no-compile]
#
# The layer lands in DIR/python (default layers/build/python), which Lambda mounts as /opt/python. `sam build` runs
# this script through layers/dependencies/Makefile with --out "$ARTIFACTS_DIR". See layers/README.md.
# When a Python of the runtime's version is at hand (python3.12 on PATH, or RAGSTEP_LAYER_PYTHON), the layer also
# gets its bytecode, which roughly halves the first invocation after a cold start.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
ARCH="${RAGSTEP_LAYER_ARCH:-x86_64}"
PYVER="3.12"
OUT="$ROOT/layers/build"
PY="${PYTHON:-python3}"
COMPILE=1

while [ $# -gt 0 ]; do
  case "$1" in
    --arch) ARCH="$2"; shift 2 ;;
    --python-version) PYVER="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --no-compile) COMPILE=0; shift ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "layers/build.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

case "$ARCH" in
  x86_64) MACHINE=x86_64 ;;
  arm64|aarch64) ARCH=arm64; MACHINE=aarch64 ;;
  *) echo "layers/build.sh: --arch must be x86_64 or arm64, not $ARCH" >&2; exit 2 ;;
esac

REQS="$ROOT/layers/dependencies/requirements.txt"
TARGET="$OUT/python"
WHEELS="$(mktemp -d "${TMPDIR:-/tmp}/ragstep-layer-wheels.XXXXXX")"
trap 'rm -rf "$WHEELS"' EXIT

rm -rf "$TARGET"
mkdir -p "$TARGET"

# jieba is published as a source distribution only; it is pure Python, so build its wheel here and offer it to the
# platform-restricted install below, which accepts wheels only.
"$PY" -m pip wheel --quiet --no-deps --wheel-dir "$WHEELS" \
  "$(grep -iE '^jieba([=<>~! ;]|$)' "$REQS" | head -n1)"

# The python3.12 runtime runs on Amazon Linux 2023 (glibc 2.34): manylinux_2_28 wheels (numpy 2.4 ships only those)
# work there as well as manylinux2014 ones.
"$PY" -m pip install --quiet --no-compile --upgrade \
  --target "$TARGET" \
  --platform "manylinux2014_$MACHINE" --platform "manylinux_2_28_$MACHINE" \
  --implementation cp --python-version "$PYVER" --only-binary=:all: \
  --find-links "$WHEELS" \
  -r "$REQS"

# jieba's prefix-frequency table, prebuilt: the functions load it with one pickle.load (RAGSTEP_JIEBA_CACHE in
# template.yaml) instead of parsing dict.txt on every cold start. Built by ragstep itself, with the layer's jieba.
PYTHONPATH="$ROOT/shared:$TARGET" "$PY" -c '
import sys
from pathlib import Path
from ragstep.text import build_jieba_cache
build_jieba_cache(Path(sys.argv[1]))
' "$TARGET/jieba.pfdict.pkl"

# Prune what the functions never load.
#   tests, type stubs, console scripts, bytecode compiled for the build machine's Python (not the runtime's);
#   jieba's part-of-speech tagger, keyword extraction and paddle model: ragstep only calls
#   Tokenizer.cut_for_search (which needs dict.txt as a fallback and finalseg for unknown words, both kept).
rm -rf "$TARGET/bin" "$TARGET/jieba/posseg" "$TARGET/jieba/analyse" "$TARGET/jieba/lac_small" "$TARGET/jieba/__main__.py"
find "$TARGET" -depth -type d \( -name __pycache__ -o -name tests \) -exec rm -rf {} +
find "$TARGET" -type f -name '*.pyi' -delete

# Bytecode for the runtime's Python: /opt is read-only, so without it every cold start compiles the dependencies
# again. unchecked-hash: the .pyc files are used as they are, whatever the file times in the zip.
if [ "$COMPILE" = 1 ]; then
  RUNTIME_PY="${RAGSTEP_LAYER_PYTHON:-python$PYVER}"
  if "$RUNTIME_PY" -c "import sys; assert sys.version.startswith('$PYVER.')" 2>/dev/null; then
    "$RUNTIME_PY" -W ignore -m compileall -q -j 0 --invalidation-mode unchecked-hash "$TARGET" >/dev/null
    echo "bytecode: compiled with $("$RUNTIME_PY" -V 2>&1)"
  else
    echo "bytecode: none ($RUNTIME_PY not found; set RAGSTEP_LAYER_PYTHON to a Python $PYVER): cold starts compile instead"
  fi
fi

# Smoke test: the tokenizer works from the pruned layer with the prebuilt table (jieba is pure Python, so the build
# machine's Python can load it whatever the target architecture).
PYTHONPATH="$ROOT/shared:$TARGET" RAGSTEP_JIEBA_CACHE="$TARGET/jieba.pfdict.pkl" "$PY" -B -c '
from ragstep.text import tokenize
tokens = tokenize("混合检索 combines BM25 and vectors")
assert "检索" in tokens and "bm25" in tokens, tokens
'

echo "dependency layer for python$PYVER/$ARCH in $TARGET"
du -sk "$TARGET" | awk '{printf "unzipped size: %.1f MB\n", $1 / 1024}'
echo "largest packages:"
du -sk "$TARGET"/* | sort -rn | head -n 8 | awk '{n = split($2, p, "/"); printf "  %6.1f MB  %s\n", $1 / 1024, p[n]}'
