"""Embedding adapters against a real HTTP server on 127.0.0.1: httpx and botocore send real requests.

Nothing of ours is mocked; the scripted server plays the provider (OpenAI-compatible or Bedrock runtime) and
records what arrived, so the tests check both the wire format and the behaviour on failures.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from ragstep.adapters.embedders import (
    BedrockEmbedder,
    OpenAIEmbedder,
    PrecomputedEmbedder,
    embedder_model_id,
    make_embedder,
)
from ragstep.errors import InputError, ProviderError
from ragstep.ports import Embedder
from ragstep.settings import Settings
from support.scripted_http import RecordedRequest, ScriptedHTTPServer, ScriptedResponse

TITAN = "amazon.titan-embed-text-v2:0"
COHERE = "cohere.embed-multilingual-v3"

MakeOpenAI = Callable[..., OpenAIEmbedder]
MakeBedrock = Callable[..., BedrockEmbedder]


def fake_vector(text: str) -> list[float]:
    """A deterministic, text-dependent, un-normalised 4-d vector."""
    return [float(len(text) + 1), float(sum(map(ord, text)) % 7), 1.0, 0.0]


def unit(vector: list[float]) -> np.ndarray:
    v = np.asarray(vector, dtype=np.float64)
    return (v / np.linalg.norm(v)).astype(np.float32)


def openai_echo(request: RecordedRequest) -> ScriptedResponse:
    """An OpenAI-style answer with one fake vector per input, deliberately listed in reverse order."""
    texts = request.json["input"]
    data = [{"object": "embedding", "index": i, "embedding": fake_vector(t)} for i, t in enumerate(texts)]
    return ScriptedResponse(200, {"object": "list", "data": data[::-1], "model": request.json["model"]})


def openai_rows(*rows: Any, indexes: list[int] | None = None) -> ScriptedResponse:
    order = indexes if indexes is not None else list(range(len(rows)))
    data = [{"index": i, "embedding": row} for i, row in zip(order, rows, strict=True)]
    return ScriptedResponse(200, {"data": data})


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def server() -> Iterator[ScriptedHTTPServer]:
    with ScriptedHTTPServer() as srv:
        yield srv


@pytest.fixture
def openai(server: ScriptedHTTPServer) -> Iterator[MakeOpenAI]:
    """Builds OpenAIEmbedders aimed at the scripted server with millisecond backoff; closes them after."""
    made: list[OpenAIEmbedder] = []

    def build(**kwargs: Any) -> OpenAIEmbedder:
        kwargs.setdefault("base_url", f"{server.url}/v1")
        kwargs.setdefault("backoff_base_s", 0.001)
        kwargs.setdefault("timeout_s", 5.0)
        embedder = OpenAIEmbedder(kwargs.pop("model", "text-embedding-3-small"), **kwargs)
        made.append(embedder)
        return embedder

    yield build
    for embedder in made:
        embedder.close()


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """Dummy credentials, and nothing from the developer's own AWS set-up (profiles, bearer tokens, IMDS)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_BEARER_TOKEN_BEDROCK", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def bedrock(server: ScriptedHTTPServer, aws_env: None) -> Iterator[MakeBedrock]:
    made: list[BedrockEmbedder] = []

    def build(model: str, **kwargs: Any) -> BedrockEmbedder:
        kwargs.setdefault("endpoint_url", server.url)
        kwargs.setdefault("region", "us-east-1")
        kwargs.setdefault("timeout_s", 5.0)
        embedder = BedrockEmbedder(model, **kwargs)
        made.append(embedder)
        return embedder

    yield build
    for embedder in made:
        embedder.close()


# ------------------------------------------------------------------------------------------ OpenAI-compatible


def test_openai_request_shape_auth_and_unit_rows(server: ScriptedHTTPServer, openai: MakeOpenAI):
    server.add(openai_echo)
    embedder = openai(api_key="sk-test", dimensions=4)

    vectors = embedder.embed(["alpha", "beta"])

    assert embedder.model_id == "openai:text-embedding-3-small"
    assert vectors.dtype == np.float32 and vectors.shape == (2, 4)
    np.testing.assert_allclose(vectors, np.stack([unit(fake_vector("alpha")), unit(fake_vector("beta"))]), rtol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-6)
    (request,) = server.requests
    assert request.method == "POST" and request.path == "/v1/embeddings"
    assert request.headers["authorization"] == "Bearer sk-test"
    assert request.json == {
        "model": "text-embedding-3-small",
        "input": ["alpha", "beta"],
        "encoding_format": "float",
        "dimensions": 4,
    }


def test_openai_without_key_or_dimensions_sends_neither(server: ScriptedHTTPServer, openai: MakeOpenAI):
    server.add(openai_echo)
    openai(base_url=f"{server.url}/v1/").embed(["x"])  # a trailing slash does not double up
    (request,) = server.requests
    assert request.path == "/v1/embeddings"
    assert "authorization" not in request.headers
    assert "dimensions" not in request.json


def test_openai_batches_of_64(server: ScriptedHTTPServer, openai: MakeOpenAI):
    server.add(openai_echo, openai_echo, openai_echo)
    texts = [f"text number {i}" for i in range(130)]

    vectors = openai().embed(texts)

    assert [len(r.json["input"]) for r in server.requests] == [64, 64, 2]
    assert [t for r in server.requests for t in r.json["input"]] == texts
    np.testing.assert_allclose(vectors, np.stack([unit(fake_vector(t)) for t in texts]), rtol=1e-6)


def test_openai_orders_rows_by_index_not_response_order(server: ScriptedHTTPServer, openai: MakeOpenAI):
    server.add(openai_rows([0, 0, 1], [1, 0, 0], [0, 1, 0], indexes=[2, 0, 1]))
    vectors = openai().embed(["a", "b", "c"])
    np.testing.assert_array_equal(vectors, np.eye(3, dtype=np.float32))


def test_openai_normalises_and_keeps_zero_vectors(server: ScriptedHTTPServer, openai: MakeOpenAI):
    server.add(openai_rows([3, 4], [0, 0]))
    vectors = openai().embed(["a", "b"])
    np.testing.assert_allclose(vectors, [[0.6, 0.8], [0.0, 0.0]], rtol=1e-6)


def test_openai_embed_query_is_one_vector(server: ScriptedHTTPServer, openai: MakeOpenAI):
    server.add(openai_echo)
    vector = openai().embed_query("what is ragstep?")
    assert vector.shape == (4,) and vector.dtype == np.float32


def test_openai_empty_input_makes_no_call(server: ScriptedHTTPServer, openai: MakeOpenAI):
    assert openai(dimensions=8).embed([]).shape == (0, 8)
    assert openai().embed([]).shape == (0, 0)
    assert server.requests == []


def test_openai_rejects_a_bare_string(openai: MakeOpenAI):
    with pytest.raises(InputError, match="embed_query"):
        openai().embed("not a list")


def test_openai_retries_429_honouring_retry_after(server: ScriptedHTTPServer, openai: MakeOpenAI):
    server.add(
        ScriptedResponse(429, {"error": {"message": "rate limited"}}, headers={"Retry-After": "0"}),
        openai_echo,
    )
    # A long exponential backoff shows Retry-After is what decided the wait.
    embedder = openai(backoff_base_s=10.0)

    started = time.monotonic()
    vectors = embedder.embed(["a"])

    assert time.monotonic() - started < 2.0
    assert len(server.requests) == 2 and vectors.shape == (1, 4)


def test_openai_caps_a_long_retry_after(server: ScriptedHTTPServer, openai: MakeOpenAI):
    server.add(ScriptedResponse(429, {"error": "slow"}, headers={"Retry-After": "3600"}), openai_echo)
    started = time.monotonic()
    openai(backoff_max_s=0.05).embed(["a"])
    assert time.monotonic() - started < 2.0
    assert len(server.requests) == 2


def test_openai_5xx_exhausted_gives_one_line_error(
    server: ScriptedHTTPServer, openai: MakeOpenAI, caplog: pytest.LogCaptureFixture
):
    server.set_fallback(ScriptedResponse(500, "<html>\n  <h1>upstream model crashed\n  badly</h1>\n</html>"))

    with pytest.raises(ProviderError) as caught:
        openai(max_retries=2).embed(["a"])

    message = caught.value.message
    assert len(server.requests) == 3
    assert "failed after 3 attempts" in message and "HTTP 500" in message and "text-embedding-3-small" in message
    # The provider's body and URL are the operator's (the log), never the user's (the message).
    assert "upstream model crashed" not in message and server.url not in message
    assert "upstream model crashed badly" in caplog.text and f"{server.url}/v1/embeddings" in caplog.text
    assert "\n" not in message


def test_openai_retries_a_timeout(server: ScriptedHTTPServer, openai: MakeOpenAI):
    server.add(ScriptedResponse(200, {"data": []}, delay_s=3.0), openai_echo)
    vectors = openai(timeout_s=0.3).embed(["a", "b"])
    assert len(server.requests) == 2 and vectors.shape == (2, 4)


def test_openai_timeouts_exhausted(server: ScriptedHTTPServer, openai: MakeOpenAI):
    server.set_fallback(ScriptedResponse(200, {"data": []}, delay_s=3.0))
    with pytest.raises(ProviderError, match=r"failed after 2 attempts: timed out after 0\.2s"):
        openai(timeout_s=0.2, max_retries=1).embed(["a"])


def test_openai_connection_refused_is_retried_then_reported(openai: MakeOpenAI):
    url = f"http://127.0.0.1:{closed_port()}/v1"
    with pytest.raises(ProviderError, match="failed after 3 attempts: connection failed") as caught:
        openai(base_url=url, max_retries=2).embed(["a"])
    assert url not in caught.value.message


def test_openai_400_fails_at_once(server: ScriptedHTTPServer, openai: MakeOpenAI):
    server.set_fallback(ScriptedResponse(400, {"error": {"message": "'input' is too long"}}))
    with pytest.raises(ProviderError, match=r"rejected the request \(HTTP 400\)$"):
        openai(max_retries=4).embed(["a"])
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        (openai_rows([1, 0, 0], [1, 0]), "different dimensions"),
        (openai_rows([1, 0], [float("nan"), 1]), "non-finite values .* for input 1"),
        (openai_rows([1, 0]), "returned 1 embeddings for 2 inputs"),
        (openai_rows([1, 0], [0, 1], indexes=[0, 0]), "indexes that do not cover"),
        (openai_rows([1, 0], []), "empty or malformed vector for input 1"),
        (openai_rows([1, 0], ["x", 1]), "non-numeric"),
        (ScriptedResponse(200, {"error": "model not loaded"}), "without a 'data' list: .*model not loaded"),
        (ScriptedResponse(200, "<html>gateway</html>"), "with a body that is not JSON$"),
    ],
)
def test_openai_rejects_bad_answers(
    server: ScriptedHTTPServer,
    openai: MakeOpenAI,
    response: ScriptedResponse,
    expected: str,
):
    server.add(response)
    with pytest.raises(ProviderError, match=expected):
        openai().embed(["a", "b"])
    assert len(server.requests) == 1  # a malformed success is not retried


def test_openai_dimensions_must_match_configuration_and_stay_constant(server: ScriptedHTTPServer, openai: MakeOpenAI):
    server.add(openai_rows([1, 0, 0]))
    with pytest.raises(ProviderError, match="3-dimensional vectors, expected 4"):
        openai(dimensions=4).embed(["a"])

    server.add(openai_rows([1, 0]), openai_rows([1, 0, 0]))
    embedder = openai()
    embedder.embed(["a"])
    with pytest.raises(ProviderError, match="3-dimensional vectors, expected 2"):
        embedder.embed(["b"])


def test_openai_tolerates_servers_that_omit_index(server: ScriptedHTTPServer, openai: MakeOpenAI):
    server.add(ScriptedResponse(200, {"data": [{"embedding": [1, 0]}, {"embedding": [0, 2]}]}))
    np.testing.assert_array_equal(openai().embed(["a", "b"]), [[1, 0], [0, 1]])


def test_openai_reuses_one_client(server: ScriptedHTTPServer, openai: MakeOpenAI):
    server.add(openai_echo, openai_echo)
    embedder = openai()
    embedder.embed(["a"])
    client = embedder._client
    embedder.embed(["b"])
    assert client is not None and embedder._client is client


# ------------------------------------------------------------------------------------------------- Bedrock


def titan_echo(request: RecordedRequest) -> ScriptedResponse:
    """Titan's answer: a one-hot vector (scaled by 2) at the position named by the text, e.g. "t5" -> 5."""
    vector = [0.0] * request.json["dimensions"]
    vector[int(request.json["inputText"][1:])] = 2.0
    return ScriptedResponse(200, {"embedding": vector, "inputTextTokenCount": 2})


def cohere_echo(request: RecordedRequest) -> ScriptedResponse:
    texts = request.json["texts"]
    return ScriptedResponse(
        200,
        {
            "id": "r1",
            "response_type": "embeddings_floats",
            "texts": texts,
            "embeddings": [fake_vector(t) for t in texts],
        },
    )


def test_titan_one_signed_call_per_text_in_input_order(server: ScriptedHTTPServer, bedrock: MakeBedrock):
    texts = [f"t{i}" for i in range(20)]
    server.set_fallback(titan_echo)
    embedder = bedrock(TITAN, dimensions=256)

    vectors = embedder.embed(texts)

    assert embedder.model_id == f"bedrock:{TITAN}"
    assert vectors.shape == (20, 256) and vectors.dtype == np.float32
    np.testing.assert_array_equal(vectors, np.eye(256, dtype=np.float32)[:20])
    requests = server.requests
    assert len(requests) == 20
    assert sorted(r.json["inputText"] for r in requests) == sorted(texts)
    for request in requests:
        assert request.json == {"inputText": request.json["inputText"], "dimensions": 256, "normalize": True}
        assert request.path == f"/model/{TITAN}/invoke"
        assert request.headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=testing/")
        assert "/us-east-1/bedrock/aws4_request" in request.headers["authorization"]


def test_titan_runs_calls_concurrently_but_bounded(server: ScriptedHTTPServer, bedrock: MakeBedrock):
    lock = threading.Lock()
    in_flight = [0, 0]  # current, peak

    def slow_titan(request: RecordedRequest) -> ScriptedResponse:
        with lock:
            in_flight[0] += 1
            in_flight[1] = max(in_flight[1], in_flight[0])
        time.sleep(0.05)
        with lock:
            in_flight[0] -= 1
        return titan_echo(request)

    server.set_fallback(slow_titan)
    bedrock(TITAN, dimensions=256, max_workers=3).embed([f"t{i}" for i in range(12)])
    assert 1 < in_flight[1] <= 3


def test_titan_defaults_to_1024_and_validates_dimensions(server: ScriptedHTTPServer, bedrock: MakeBedrock):
    server.add(titan_echo)
    assert bedrock(TITAN).embed_query("t3").shape == (1024,)
    assert server.requests[0].json["dimensions"] == 1024
    assert bedrock(TITAN).embed([]).shape == (0, 1024)
    with pytest.raises(InputError, match="256, 512, 1024"):
        bedrock(TITAN, dimensions=300)


def test_titan_wrong_dimension_from_model(server: ScriptedHTTPServer, bedrock: MakeBedrock):
    server.add(ScriptedResponse(200, {"embedding": [1.0, 0.0, 0.0]}))
    with pytest.raises(ProviderError, match="3-dimensional vectors, expected 256"):
        bedrock(TITAN, dimensions=256).embed(["t1"])


def test_cohere_batches_of_96_as_documents_and_clips_long_texts(server: ScriptedHTTPServer, bedrock: MakeBedrock):
    server.add(cohere_echo, cohere_echo)
    texts = [f"doc {i}" for i in range(99)] + ["x" * 3000]

    vectors = bedrock(COHERE).embed(texts)

    first, second = server.requests
    assert first.path == f"/model/{COHERE}/invoke"
    assert first.json == {"texts": texts[:96], "input_type": "search_document", "truncate": "END"}
    assert second.json["texts"][:3] == texts[96:99] and second.json["texts"][3] == "x" * 2048
    assert vectors.shape == (100, 4)
    np.testing.assert_allclose(vectors[:99], np.stack([unit(fake_vector(t)) for t in texts[:99]]), rtol=1e-6)


def test_cohere_query_uses_search_query(server: ScriptedHTTPServer, bedrock: MakeBedrock):
    server.add(cohere_echo)
    vector = bedrock(COHERE).embed_query("where is the manual?")
    assert vector.shape == (4,)
    assert server.requests[0].json == {
        "texts": ["where is the manual?"],
        "input_type": "search_query",
        "truncate": "END",
    }


def test_cohere_count_mismatch(server: ScriptedHTTPServer, bedrock: MakeBedrock):
    server.add(ScriptedResponse(200, {"embeddings": [[1.0, 0.0]]}))
    with pytest.raises(ProviderError, match="returned 1 embeddings for 2 texts"):
        bedrock(COHERE).embed(["a", "b"])


def bedrock_error(status: int, code: str, message: str) -> ScriptedResponse:
    return ScriptedResponse(status, {"message": message}, headers={"x-amzn-ErrorType": code})


def test_bedrock_validation_error_fails_at_once(server: ScriptedHTTPServer, bedrock: MakeBedrock):
    server.set_fallback(bedrock_error(400, "ValidationException", "Malformed input request: #: extraneous key"))
    with pytest.raises(ProviderError) as caught:
        bedrock(COHERE).embed(["a"])
    message = caught.value.message
    assert len(server.requests) == 1
    assert COHERE in message and server.url not in message  # the endpoint is internal: the region is named
    assert "ValidationException (HTTP 400)" in message and "Malformed" not in message  # the service's text: logged


def test_bedrock_access_denied_hints_at_model_access(server: ScriptedHTTPServer, bedrock: MakeBedrock):
    server.add(bedrock_error(403, "AccessDeniedException", "You don't have access to the model"))
    with pytest.raises(ProviderError, match="is access to this model enabled"):
        bedrock(TITAN).embed(["t1"])


def test_bedrock_retries_server_errors(server: ScriptedHTTPServer, bedrock: MakeBedrock):
    server.add(bedrock_error(500, "InternalServerException", "try again"), cohere_echo)
    vectors = bedrock(COHERE).embed(["a"])
    assert len(server.requests) == 2 and vectors.shape == (1, 4)


def test_bedrock_retries_exhausted(server: ScriptedHTTPServer, bedrock: MakeBedrock):
    server.set_fallback(bedrock_error(503, "ServiceUnavailableException", "Bedrock is unavailable"))
    with pytest.raises(ProviderError, match="failed after 2 retries: ServiceUnavailableException"):
        bedrock(COHERE, max_retries=2).embed(["a"])
    assert len(server.requests) == 3


def test_bedrock_unreachable_endpoint(aws_env: None):
    embedder = BedrockEmbedder(
        COHERE, region="us-east-1", max_retries=0, endpoint_url=f"http://127.0.0.1:{closed_port()}"
    )
    with pytest.raises(ProviderError, match=r"could not be called \(EndpointConnectionError\)"):
        embedder.embed(["a"])
    embedder.close()


def test_bedrock_rejects_unknown_models():
    with pytest.raises(InputError, match="unsupported Bedrock embedding model"):
        BedrockEmbedder("anthropic.claude-3-haiku")


# --------------------------------------------------------------------------------------------- precomputed


def test_precomputed_looks_up_and_normalises():
    embedder = PrecomputedEmbedder("bge-base", {"a": np.array([3.0, 4.0]), "b": [0.0, 2.0]})
    np.testing.assert_allclose(embedder.embed(["b", "a", "b"]), [[0, 1], [0.6, 0.8], [0, 1]], rtol=1e-6)
    assert embedder.embed_query("a").shape == (2,)
    assert embedder.embed([]).shape == (0, 2)
    assert embedder.model_id == "bge-base"


def test_precomputed_missing_text_names_it():
    embedder = PrecomputedEmbedder("bge-base", {"a": [1.0, 0.0]})
    long_text = "the quick brown fox jumps over the lazy dog " * 3
    with pytest.raises(ProviderError, match="no precomputed vector for text") as caught:
        embedder.embed(["a", long_text, "zzz"])
    assert repr(long_text[:60]) in caught.value.message and "(and 1 more)" in caught.value.message


def test_precomputed_validates_its_vectors():
    with pytest.raises(InputError, match="different dimensions"):
        PrecomputedEmbedder("m", {"a": [1.0, 0.0], "b": [1.0]})
    with pytest.raises(InputError, match="at least one"):
        PrecomputedEmbedder("m", {})


# ------------------------------------------------------------------------------------------------- factory


def test_make_embedder_from_settings_end_to_end(server: ScriptedHTTPServer):
    server.set_fallback(openai_echo)
    settings = Settings(
        embedder="openai",
        embedding_model="text-embedding-3-small",
        embedding_base_url=f"{server.url}/v1",
        embedding_api_key="sk-from-settings",
        embedding_dimensions=4,
        embedding_batch_size=2,
        provider_max_retries=0,
    )
    embedder = make_embedder(settings)

    assert isinstance(embedder, OpenAIEmbedder)
    assert embedder.model_id == embedder_model_id(settings) == "openai:text-embedding-3-small"
    assert embedder.embed(["a", "b", "c"]).shape == (3, 4)
    assert [len(r.json["input"]) for r in server.requests] == [2, 1]
    assert server.requests[0].headers["authorization"] == "Bearer sk-from-settings"
    assert server.requests[0].json["dimensions"] == 4
    embedder.close()


def test_make_embedder_parses_model_ids():
    settings = Settings(aws_region="eu-west-1")
    titan = make_embedder(settings, f"bedrock:{TITAN}")
    assert isinstance(titan, BedrockEmbedder)
    assert titan.model == TITAN and titan.model_id == f"bedrock:{TITAN}"
    cohere = make_embedder(settings, " Bedrock:cohere.embed-english-v3 ")
    assert isinstance(cohere, BedrockEmbedder) and cohere.model_id == "bedrock:cohere.embed-english-v3"
    openai_embedder = make_embedder(settings, "openai:bge-m3")
    assert isinstance(openai_embedder, OpenAIEmbedder) and openai_embedder.model == "bge-m3"
    for embedder in (titan, cohere, openai_embedder, PrecomputedEmbedder("m", {"a": [1.0]})):
        assert isinstance(embedder, Embedder)


def test_make_embedder_none():
    assert make_embedder(Settings(embedder="none")) is None
    assert make_embedder(Settings(embedder="openai", embedding_model="m"), "none") is None
    assert embedder_model_id(Settings(embedder="none")) == "none"


@pytest.mark.parametrize(
    ("model_id", "expected"),
    [
        (
            "cohere:embed-english-v3.0",
            r"unknown embedding provider 'cohere'.*supported: none, openai, bedrock",
        ),
        ("text-embedding-3-small", "unknown embedding provider"),
        ("openai:", "names no model"),
        ("precomputed:bge", "benchmark constructs PrecomputedEmbedder"),
    ],
)
def test_make_embedder_bad_model_ids(model_id: str, expected: str):
    with pytest.raises(InputError, match=expected):
        make_embedder(Settings(), model_id)


def test_settings_errors_name_the_variables():
    with pytest.raises(InputError, match="unknown embedding provider 'sentence-transformers'"):
        make_embedder(Settings(embedder="sentence-transformers", embedding_model="bge"))
    with pytest.raises(InputError, match="RAGSTEP_EMBEDDING_MODEL"):
        embedder_model_id(Settings(embedder="openai"))
