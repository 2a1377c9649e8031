"""A cold open of a saved local index, timed in a new process: how long mapping the snapshot takes, the first keyword
and vector searches after it, and whether the process rebuilt the snapshot (it must not: ``ragstep bench latency``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

_COLD_OPEN = """
import json, sys, time
started = time.perf_counter()
from pathlib import Path
import numpy as np
from ragstep.adapters.index.local import LocalSearchIndex
from ragstep.ports import SearchFilter
from ragstep.retrieval.text import query_terms
imported = time.perf_counter()
root, query, model, vector = sys.argv[1], sys.argv[2], sys.argv[3], np.array(json.loads(sys.argv[4]), np.float32)
index = LocalSearchIndex(Path(root))
snap = index.snapshot()
opened = time.perf_counter()
index.keyword_search(query_terms(query), SearchFilter(), 150, 0.0)
keyword = time.perf_counter()
index.vector_search(vector, model, SearchFilter(), 150, 0.0)
vector_done = time.perf_counter()
print(json.dumps({
    "import_ms": (imported - started) * 1e3, "open_ms": (opened - imported) * 1e3,
    "first_keyword_ms": (keyword - opened) * 1e3, "first_vector_ms": (vector_done - keyword) * 1e3,
    "rebuilt": index.snapshot_builds > 0, "mapped": isinstance(snap.spaces[model].matrix, np.memmap),
}))
"""


def cold_open(root: Path, query: str, vector: np.ndarray, model: str) -> dict[str, Any]:
    """A new process opens the saved index (its files are in the page cache: they were just written) and runs one
    keyword and one vector search: how long the open takes, and that it maps the snapshot instead of rebuilding."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (_package_root(), os.environ.get("PYTHONPATH")) if p)}
    args = [sys.executable, "-c", _COLD_OPEN, str(root), query, model, json.dumps(vector.tolist())]
    done = subprocess.run(args, capture_output=True, text=True, env=env, check=False, timeout=600)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
    return {k: round(v, 1) if isinstance(v, float) else v for k, v in json.loads(done.stdout).items()}


def _package_root() -> str:
    import ragstep

    return str(Path(ragstep.__file__).resolve().parent.parent)
