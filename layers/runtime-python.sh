#!/usr/bin/env bash
# Print a Python of the Lambda runtime's version (default 3.12), or nothing (exit 1) when there is none:
# RAGSTEP_LAYER_PYTHON, python3.12 on PATH, then the newest pyenv-installed 3.12 (pyenv's shim on PATH fails unless
# that version is selected). The layer builds compile bytecode with it and check that the layer imports.
PYVER="${1:-3.12}"
for candidate in "${RAGSTEP_LAYER_PYTHON:-}" "python$PYVER" \
  $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}/versions/$PYVER".*/bin/python"$PYVER" 2>/dev/null | sort -V -r); do
  [ -n "$candidate" ] || continue
  if "$candidate" -c "import sys; assert sys.version.startswith('$PYVER.')" >/dev/null 2>&1; then
    echo "$candidate"
    exit 0
  fi
done
exit 1
