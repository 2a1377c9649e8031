"""Rerankers: providers against a real HTTP server on 127.0.0.1 (httpx and botocore send real requests), and the
local token/vector reranker on hand-built cases.

Nothing of ours is mocked; the scripted server plays Cohere, Jina, SiliconFlow, TEI or Bedrock and records what
arrived, so the tests check the wire format as well as the behaviour on failures.
"""

from __future__ import annotations

import math
import random
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import test_embedders
from ragstep.adapters.rerankers import (
    DEFAULT_URLS,
    BedrockReranker,
    HttpReranker,
    RerankCandidate,
    TokenVectorReranker,
    make_reranker,
    scale_scores,
)
from ragstep.context import Clients
from ragstep.errors import InputError, ProviderError
from ragstep.models import Chunk
from ragstep.ports import Reranker
from ragstep.retrieval.text import query_terms, tokenize
from ragstep.retrieval.token_vector import (
    _HAN_CHARS,
    _has_han,
    _is_han,
    _is_latin,
    _normalise,
    _QueryMatcher,
    relative_cosines,
)
from ragstep.settings import Settings
from support.scripted_http import RecordedRequest, ScriptedHTTPServer, ScriptedResponse

# The provider tests share the embedder tests' scripted server, AWS sandbox and closed port.
server = test_embedders.server
aws_env = test_embedders.aws_env
closed_port = test_embedders.closed_port

AMAZON = "amazon.rerank-v1:0"
COHERE = "cohere.rerank-v3-5:0"

MakeHttp = Callable[..., HttpReranker]
MakeBedrock = Callable[..., BedrockReranker]


def doc_score(text: str) -> float:
    """A deterministic relevance in (0, 1) that depends on the text, so misplaced results are visible."""
    return round(0.01 + (sum(map(ord, text)) % 97) / 100, 4)


def results_echo(request: RecordedRequest) -> ScriptedResponse:
    """A Cohere/Jina/SiliconFlow answer: every document scored, listed best first (not in input order)."""
    docs = request.json["documents"]
    results = [{"index": i, "relevance_score": doc_score(d), "document": {"text": d}} for i, d in enumerate(docs)]
    results.sort(key=lambda r: -r["relevance_score"])
    return ScriptedResponse(200, {"id": "r-1", "results": results[: request.json["top_n"]]})


def tei_echo(request: RecordedRequest) -> ScriptedResponse:
    texts = request.json["texts"]
    return ScriptedResponse(200, sorted(({"index": i, "score": doc_score(t)} for i, t in enumerate(texts)), key=str))


def bedrock_echo(request: RecordedRequest) -> ScriptedResponse:
    texts = [s["inlineDocumentSource"]["textDocument"]["text"] for s in request.json["sources"]]
    results = [{"index": i, "relevanceScore": doc_score(t)} for i, t in enumerate(texts)]
    return ScriptedResponse(200, {"results": results[::-1]})


@pytest.fixture
def http(server: ScriptedHTTPServer) -> Iterator[MakeHttp]:
    """Builds HttpRerankers aimed at the scripted server with millisecond backoff; closes them after."""
    made: list[HttpReranker] = []

    def build(**kwargs: Any) -> HttpReranker:
        kwargs.setdefault("flavour", "cohere")
        kwargs.setdefault("url", f"{server.url}/v2/rerank")
        kwargs.setdefault("backoff_base_s", 0.001)
        kwargs.setdefault("timeout_s", 5.0)
        reranker = HttpReranker(kwargs.pop("model", "rerank-v3.5"), **kwargs)
        made.append(reranker)
        return reranker

    yield build
    for reranker in made:
        reranker.close()


@pytest.fixture
def bedrock(server: ScriptedHTTPServer, aws_env: None) -> Iterator[MakeBedrock]:
    made: list[BedrockReranker] = []

    def build(model: str = AMAZON, **kwargs: Any) -> BedrockReranker:
        kwargs.setdefault("endpoint_url", server.url)
        kwargs.setdefault("region", "us-west-2")
        kwargs.setdefault("timeout_s", 5.0)
        reranker = BedrockReranker(model, **kwargs)
        made.append(reranker)
        return reranker

    yield build
    for reranker in made:
        reranker.close()


# ------------------------------------------------------------------------------------------------ HTTP /rerank


def test_cohere_request_shape_auth_and_results_placed_by_index(server: ScriptedHTTPServer, http: MakeHttp):
    server.add(results_echo)
    docs = ["alpha", "beta", "gamma"]
    reranker = http(api_key="co-test")

    scores = reranker.rerank("which letter?", docs)

    assert reranker.name == "cohere:rerank-v3.5"
    assert scores == [doc_score(d) for d in docs]
    (request,) = server.requests
    assert request.method == "POST" and request.path == "/v2/rerank"
    assert request.headers["authorization"] == "Bearer co-test"
    assert request.json == {"model": "rerank-v3.5", "query": "which letter?", "documents": docs, "top_n": 3}


@pytest.mark.parametrize("flavour", ["jina", "siliconflow", "xinference"])
def test_flavours_that_can_skip_returning_documents_ask_for_scores_only(
    server: ScriptedHTTPServer, http: MakeHttp, flavour: str
):
    server.add(results_echo)
    scores = http(flavour=flavour, model="bge-reranker-v2-m3", url=f"{server.url}/v1/rerank").rerank("q", ["a", "b"])
    assert scores == [doc_score("a"), doc_score("b")]
    assert server.requests[0].json == {
        "model": "bge-reranker-v2-m3",
        "query": "q",
        "documents": ["a", "b"],
        "top_n": 2,
        "return_documents": False,
    }


def test_vllm_sends_the_plain_shape_without_a_key(server: ScriptedHTTPServer, http: MakeHttp):
    server.add(results_echo)
    http(flavour="vllm", model="BAAI/bge-reranker-base", url=f"{server.url}/v1/rerank").rerank("q", ["a"])
    (request,) = server.requests
    assert request.path == "/v1/rerank" and "authorization" not in request.headers
    assert set(request.json) == {"model", "query", "documents", "top_n"}


def test_tei_takes_texts_and_answers_a_bare_list(server: ScriptedHTTPServer, http: MakeHttp):
    server.add(tei_echo)
    reranker = http(flavour="tei", model="", url=f"{server.url}/rerank")

    scores = reranker.rerank("q", ["one", "two", "three"])

    assert reranker.name == "tei"
    assert scores == [doc_score("one"), doc_score("two"), doc_score("three")]
    assert server.requests[0].path == "/rerank"
    assert server.requests[0].json == {
        "query": "q",
        "texts": ["one", "two", "three"],
        "raw_scores": False,
        "return_text": False,
        "truncate": True,
    }


def test_logit_scores_are_min_max_scaled_over_the_whole_call(server: ScriptedHTTPServer, http: MakeHttp):
    # Two batches of logits: the scaling spans both, so scores stay comparable across batches.
    server.add(
        ScriptedResponse(200, {"results": [{"index": 0, "relevance_score": -3.0}, {"index": 1, "relevance_score": 1}]}),
        ScriptedResponse(200, {"results": [{"index": 0, "relevance_score": 5.0}]}),
    )
    scores = http(max_documents_per_call=2).rerank("q", ["a", "b", "c"])
    assert scores == [0.0, 0.5, 1.0]


def test_scale_scores_follows_ragflows_rule():
    assert scale_scores([0.2, 0.9, 1.0, 0.0]) == [0.2, 0.9, 1.0, 0.0]  # already probabilities: kept
    assert scale_scores([-2.0, 0.0, 2.0]) == [0.0, 0.5, 1.0]
    assert scale_scores([3.0, 3.0]) == [1.0, 1.0]  # all equal and positive
    assert scale_scores([-1.5, -1.5]) == [0.0, 0.0]  # all equal and not positive
    assert scale_scores([]) == []


def test_fewer_results_than_documents_score_zero(server: ScriptedHTTPServer, http: MakeHttp):
    # A server that caps top_n below what was asked answers only its best few.
    server.add(
        ScriptedResponse(200, {"results": [{"index": 3, "relevance_score": 0.9}, {"index": 1, "relevance_score": 0.4}]})
    )
    assert http().rerank("q", ["a", "b", "c", "d"]) == [0.0, 0.4, 0.0, 0.9]


def test_batches_of_64_by_default(server: ScriptedHTTPServer, http: MakeHttp):
    server.set_fallback(results_echo)
    docs = [f"document number {i}" for i in range(150)]

    scores = http().rerank("q", docs)

    assert [len(r.json["documents"]) for r in server.requests] == [64, 64, 22]
    assert [r.json["top_n"] for r in server.requests] == [64, 64, 22]
    assert [d for r in server.requests for d in r.json["documents"]] == docs
    assert scores == [doc_score(d) for d in docs]


def test_tei_batches_of_32_by_default_and_the_limit_is_configurable(server: ScriptedHTTPServer, http: MakeHttp):
    server.set_fallback(tei_echo)
    http(flavour="tei", model="", url=f"{server.url}/rerank").rerank("q", [f"t{i}" for i in range(40)])
    http(flavour="tei", model="", url=f"{server.url}/rerank", max_documents_per_call=7).rerank("q", ["x"] * 10)
    assert [len(r.json["texts"]) for r in server.requests] == [32, 8, 7, 3]


def test_long_documents_are_cut_and_empty_ones_not_sent(server: ScriptedHTTPServer, http: MakeHttp):
    server.add(results_echo)
    scores = http(max_chars=10).rerank("q", ["x" * 50, "", "   ", "short"])
    (request,) = server.requests
    assert request.json["documents"] == ["x" * 10, "short"]
    assert scores == [doc_score("x" * 10), 0.0, 0.0, doc_score("short")]


def test_nothing_to_rank_makes_no_call(server: ScriptedHTTPServer, http: MakeHttp):
    reranker = http()
    assert reranker.rerank("q", []) == []
    assert reranker.rerank("  ", ["a", "b"]) == [0.0, 0.0]
    assert reranker.rerank("q", ["", " "]) == [0.0, 0.0]
    assert server.requests == []
    with pytest.raises(InputError, match="list of documents"):
        reranker.rerank("q", "a single string")


def test_retries_429_then_succeeds(server: ScriptedHTTPServer, http: MakeHttp):
    server.add(ScriptedResponse(429, {"message": "rate limited"}, headers={"Retry-After": "0"}), results_echo)
    started = time.monotonic()
    # A long exponential backoff shows Retry-After is what decided the wait.
    scores = http(backoff_base_s=10.0).rerank("q", ["a"])
    assert time.monotonic() - started < 2.0
    assert len(server.requests) == 2 and scores == [doc_score("a")]


def test_5xx_exhausted_gives_one_clear_line(
    server: ScriptedHTTPServer, http: MakeHttp, caplog: pytest.LogCaptureFixture
):
    server.set_fallback(ScriptedResponse(500, "<html>\n <h1>reranker\n crashed</h1></html>"))
    with pytest.raises(ProviderError) as caught:
        http(max_retries=2).rerank("q", ["a"])
    message = caught.value.message
    assert len(server.requests) == 3
    assert (
        message == "rerank provider cohere (model rerank-v3.5) failed after 3 attempts: HTTP 500 (failed on its side)"
    )
    # The body and URL go to the log only.
    assert "<h1>reranker crashed</h1>" in caplog.text and f"{server.url}/v2/rerank" in caplog.text


def test_timeout_is_retried(server: ScriptedHTTPServer, http: MakeHttp):
    server.add(ScriptedResponse(200, {"results": []}, delay_s=3.0), results_echo)
    scores = http(timeout_s=0.3).rerank("q", ["a", "b"])
    assert len(server.requests) == 2 and scores == [doc_score("a"), doc_score("b")]


def test_timeouts_exhausted(server: ScriptedHTTPServer, http: MakeHttp):
    server.set_fallback(ScriptedResponse(200, {"results": []}, delay_s=3.0))
    with pytest.raises(ProviderError, match=r"failed after 2 attempts: timed out after 0\.2s"):
        http(timeout_s=0.2, max_retries=1).rerank("q", ["a"])


def test_connection_refused_is_reported(http: MakeHttp):
    url = f"http://127.0.0.1:{closed_port()}/v1/rerank"
    with pytest.raises(ProviderError, match="failed after 2 attempts: connection failed") as caught:
        http(url=url, max_retries=1).rerank("q", ["a"])
    assert url not in caught.value.message


def test_400_fails_at_once(server: ScriptedHTTPServer, http: MakeHttp):
    server.set_fallback(ScriptedResponse(400, {"message": "invalid model"}))
    with pytest.raises(ProviderError, match=r"rejected the request \(HTTP 400\)$"):
        http(max_retries=4).rerank("q", ["a"])
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"results": [{"index": 2, "relevance_score": 0.5}]}, r"result index 2: not in 0\.\.1 or repeated"),
        ({"results": [{"index": 0, "relevance_score": 0.5}] * 2}, "result index 0: not in 0..1 or repeated"),
        ({"results": [{"index": "0", "relevance_score": 0.5}]}, "result index '0'"),
        ({"results": [{"index": 0, "relevance_score": "high"}]}, "no finite relevance_score for document 0"),
        ({"results": [{"index": 0, "relevance_score": None}]}, "no finite relevance_score for document 0"),
        ({"results": [{"index": 0}]}, "no finite relevance_score"),
        ({"results": ["0.5"]}, "a result that is not an object"),
        ({"error": "model not loaded"}, "without a 'results' list: .*model not loaded"),
        ("<html>gateway</html>", "with a body that is not JSON$"),
    ],
)
def test_bad_answers_fail_without_retry(server: ScriptedHTTPServer, http: MakeHttp, body: Any, expected: str):
    server.add(ScriptedResponse(200, body))
    with pytest.raises(ProviderError, match=expected):
        http().rerank("q", ["a", "b"])
    assert len(server.requests) == 1


def test_nan_scores_are_refused(server: ScriptedHTTPServer, http: MakeHttp):
    # json.dumps writes NaN as a bare token; httpx's JSON decoder accepts it, so the check has to be ours.
    server.add(ScriptedResponse(200, b'{"results": [{"index": 0, "relevance_score": NaN}]}'))
    with pytest.raises(ProviderError, match="no finite relevance_score"):
        http().rerank("q", ["a"])


def test_default_urls_and_configuration_errors():
    assert HttpReranker("m", flavour="Cohere").url == "https://api.cohere.com/v2/rerank"
    assert HttpReranker("m", flavour="jina").url == DEFAULT_URLS["jina"] == "https://api.jina.ai/v1/rerank"
    assert HttpReranker(flavour="tei").url == "http://localhost:8080/rerank"
    assert HttpReranker("m", flavour="vllm", url="  ").url.endswith(":8000/v1/rerank")
    with pytest.raises(InputError, match="unknown rerank API flavour 'openai'"):
        HttpReranker("m", flavour="openai")
    with pytest.raises(InputError, match="jina rerank API needs a model name"):
        HttpReranker(" ", flavour="jina")
    with pytest.raises(InputError, match="max_chars must be >= 1"):
        HttpReranker("m", max_chars=0)


def test_reuses_one_client(server: ScriptedHTTPServer, http: MakeHttp):
    server.set_fallback(results_echo)
    reranker = http()
    reranker.rerank("q", ["a"])
    client = reranker._endpoint.client
    reranker.rerank("q", ["b"])
    assert client is not None and reranker._endpoint.client is client


# ------------------------------------------------------------------------------------------------- Bedrock


def test_bedrock_request_shape_arn_and_signature(server: ScriptedHTTPServer, bedrock: MakeBedrock):
    server.add(bedrock_echo)
    reranker = bedrock()

    scores = reranker.rerank("what is ragstep?", ["first doc", "second doc"])

    assert reranker.name == f"bedrock:{AMAZON}"
    assert scores == [doc_score("first doc"), doc_score("second doc")]
    (request,) = server.requests
    assert request.method == "POST" and request.path == "/rerank"
    assert request.headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=testing/")
    assert "/us-west-2/bedrock/aws4_request" in request.headers["authorization"]
    assert request.json == {
        "queries": [{"type": "TEXT", "textQuery": {"text": "what is ragstep?"}}],
        "sources": [
            {"type": "INLINE", "inlineDocumentSource": {"type": "TEXT", "textDocument": {"text": "first doc"}}},
            {"type": "INLINE", "inlineDocumentSource": {"type": "TEXT", "textDocument": {"text": "second doc"}}},
        ],
        "rerankingConfiguration": {
            "type": "BEDROCK_RERANKING_MODEL",
            "bedrockRerankingConfiguration": {
                "numberOfResults": 2,
                "modelConfiguration": {"modelArn": f"arn:aws:bedrock:us-west-2::foundation-model/{AMAZON}"},
            },
        },
    }


def test_bedrock_cohere_model_and_explicit_arn(server: ScriptedHTTPServer, bedrock: MakeBedrock):
    server.set_fallback(bedrock_echo)
    bedrock(COHERE, region="eu-central-1").rerank("q", ["a"])
    arn = "arn:aws:bedrock:ca-central-1::foundation-model/amazon.rerank-v1:0"
    bedrock(arn).rerank("q", ["a"])
    configs = [r.json["rerankingConfiguration"]["bedrockRerankingConfiguration"] for r in server.requests]
    arns = [c["modelConfiguration"]["modelArn"] for c in configs]
    assert arns == [f"arn:aws:bedrock:eu-central-1::foundation-model/{COHERE}", arn]


def test_bedrock_batches_at_the_api_limit_of_1000(server: ScriptedHTTPServer, bedrock: MakeBedrock):
    server.set_fallback(bedrock_echo)
    docs = [f"d{i}" for i in range(1001)]

    scores = bedrock(max_documents_per_call=5000).rerank("q", docs)

    assert [len(r.json["sources"]) for r in server.requests] == [1000, 1]
    assert [
        r.json["rerankingConfiguration"]["bedrockRerankingConfiguration"]["numberOfResults"] for r in server.requests
    ] == [1000, 1]
    assert scores == [doc_score(d) for d in docs]


def test_bedrock_smaller_batches_cut_texts_and_skip_empty_ones(server: ScriptedHTTPServer, bedrock: MakeBedrock):
    server.set_fallback(bedrock_echo)
    scores = bedrock(max_documents_per_call=2, max_chars=5).rerank("q", ["abcdefgh", "", "b", "c"])
    sent = [[s["inlineDocumentSource"]["textDocument"]["text"] for s in r.json["sources"]] for r in server.requests]
    assert sent == [["abcde", "b"], ["c"]]
    assert scores == [doc_score("abcde"), 0.0, doc_score("b"), doc_score("c")]


def test_bedrock_follows_next_token(server: ScriptedHTTPServer, bedrock: MakeBedrock):
    server.add(
        ScriptedResponse(200, {"results": [{"index": 2, "relevanceScore": 0.9}], "nextToken": "page-2"}),
        ScriptedResponse(200, {"results": [{"index": 0, "relevanceScore": 0.5}, {"index": 1, "relevanceScore": 0.1}]}),
    )
    assert bedrock().rerank("q", ["a", "b", "c"]) == [0.5, 0.1, 0.9]
    first, second = server.requests
    assert "nextToken" not in first.json and second.json["nextToken"] == "page-2"
    assert second.json["sources"] == first.json["sources"]


def bedrock_error(status: int, code: str, message: str) -> ScriptedResponse:
    return ScriptedResponse(status, {"message": message}, headers={"x-amzn-ErrorType": code})


def test_bedrock_validation_error_fails_at_once(server: ScriptedHTTPServer, bedrock: MakeBedrock):
    server.set_fallback(bedrock_error(400, "ValidationException", "numberOfResults is too large"))
    with pytest.raises(ProviderError) as caught:
        bedrock().rerank("q", ["a"])
    message = caught.value.message
    assert len(server.requests) == 1
    assert f"Bedrock rerank model {AMAZON} in " in message and server.url not in message
    assert "ValidationException (HTTP 400)" in message and "numberOfResults" not in message  # the text: logged


def test_bedrock_access_denied_hints_at_model_access(server: ScriptedHTTPServer, bedrock: MakeBedrock):
    server.add(bedrock_error(403, "AccessDeniedException", "not authorized"))
    with pytest.raises(ProviderError, match="is access to this model enabled"):
        bedrock().rerank("q", ["a"])


def test_bedrock_retries_throttling_then_succeeds(server: ScriptedHTTPServer, bedrock: MakeBedrock):
    server.add(bedrock_error(429, "ThrottlingException", "slow down"), bedrock_echo)
    assert bedrock().rerank("q", ["a"]) == [doc_score("a")]
    assert len(server.requests) == 2


def test_bedrock_retries_exhausted(server: ScriptedHTTPServer, bedrock: MakeBedrock):
    server.set_fallback(bedrock_error(503, "ServiceUnavailableException", "try later"))
    with pytest.raises(ProviderError, match="failed after 2 retries: ServiceUnavailableException"):
        bedrock(max_retries=2).rerank("q", ["a"])
    assert len(server.requests) == 3


def test_bedrock_bad_answer(server: ScriptedHTTPServer, bedrock: MakeBedrock):
    server.add(ScriptedResponse(200, {"results": [{"index": 5, "relevanceScore": 0.5}]}))
    with pytest.raises(ProviderError, match=r"result index 5: not in 0\.\.1"):
        bedrock().rerank("q", ["a", "b"])


def test_bedrock_unreachable_endpoint_and_client_reuse(aws_env: None):
    reranker = BedrockReranker(
        AMAZON, region="us-west-2", max_retries=0, endpoint_url=f"http://127.0.0.1:{closed_port()}"
    )
    with pytest.raises(ProviderError, match=r"could not be called \(EndpointConnectionError\)"):
        reranker.rerank("q", ["a"])
    client = reranker._boto.get()
    assert reranker._boto.get() is client
    reranker.close()


def test_bedrock_needs_a_model():
    with pytest.raises(InputError, match=r"amazon\.rerank-v1:0 or cohere\.rerank-v3-5:0"):
        BedrockReranker(" ")


# ------------------------------------------------------------------------------------- local token / vector


def ragflow_token_similarity(query: str, items: list[RerankCandidate]) -> list[float]:
    """RAGFlow's original token similarity (rag/nlp/query.py ``similarity``), written out for comparison.

    The chunk's tokens are its de-duplicated content tokens + title tokens x2 + important keywords x5, but only
    membership is checked: ``sum of w(t) for query terms t in the chunk / sum of w(t)``. RAGFlow takes w(t)
    from its term-weight dictionary; any weights show the ties, so the candidate-set IDF stands in for them.
    """
    terms = query_terms(query)
    bags = [
        set(dict.fromkeys(tokenize(it.content)))
        | set(tokenize(it.title))
        | {t for keyword in it.important_keywords for t in tokenize(keyword)}
        for it in items
    ]
    n = len(items)
    weights = {}
    for t in terms:
        df = max(1, sum(t in bag for bag in bags))
        weights[t] = math.log1p((n - df + 0.5) / (df + 0.5))
    total = sum(weights.values())
    return [sum(w for t, w in weights.items() if t in bag) / total for bag in bags]


def test_exact_phrase_breaks_ragflows_tie():
    query = "reset password"
    items = [
        RerankCandidate("Enter your password first; an administrator can reset it later."),
        RerankCandidate("An administrator can reset password settings for every user."),
    ]
    original = ragflow_token_similarity(query, items)
    assert original[0] == original[1] == pytest.approx(1.0)  # both contain both words: a tie

    scores = TokenVectorReranker().rerank_candidates(query, items)

    assert scores[1] > scores[0]


def test_term_frequency_breaks_ragflows_tie():
    # RAGFlow issue #11759: "What need to do in DVT" -- the chunk about DVT ties with one that mentions it once.
    query = "What need to do in DVT"
    items = [
        RerankCandidate("Schedule: EVT in spring, DVT in summer, then the launch."),
        RerankCandidate("DVT checklist. During DVT, run the DVT reliability tests and log every DVT failure."),
        RerankCandidate("Nothing about the topic at all."),
    ]
    original = ragflow_token_similarity(query, items)
    assert original[0] == original[1] > original[2]

    scores = TokenVectorReranker().rerank(query, [it.content for it in items])

    assert scores[1] > scores[0] > scores[2] == 0.0


def test_important_keyword_typed_in_full_wins():
    # RAGFlow issue #12013: the chunk whose important keyword is the whole query ranked below one that merely
    # repeats a word of it.
    query = "产品维度 指标口径"
    items = [
        RerankCandidate("本文介绍维度建模：维度表、维度属性和维度层级。", important_keywords=["数据仓库"]),
        RerankCandidate("销售报表的说明。", important_keywords=["产品维度 指标口径", "销售"]),
    ]
    scores = TokenVectorReranker().rerank_candidates(query, items)
    assert scores[1] > scores[0]


def test_chinese_phrase_after_question_words():
    query = "如何重置密码"
    items = [RerankCandidate("密码可以在设置页面里重置。"), RerankCandidate("重置密码的步骤如下：打开设置。")]
    original = ragflow_token_similarity(query, items)
    assert original[0] == original[1]
    scores = TokenVectorReranker().rerank_candidates(query, items)
    assert scores[1] > scores[0]


def test_title_counts_twice_and_important_keywords_five_times():
    reranker = TokenVectorReranker()
    filler = "some unrelated words"
    items = [
        RerankCandidate(f"{filler} password"),
        RerankCandidate(filler, title="Password"),
        RerankCandidate(f"{filler} password password"),
        RerankCandidate(filler, important_keywords=["password"]),
        RerankCandidate(f"{filler} " + "password " * 5),
    ]
    once, title, twice, keyword, five = reranker.token_similarity("password", items)
    assert title == pytest.approx(twice) and title > once
    assert keyword == pytest.approx(five) and keyword > twice
    # One term, present everywhere: token = 0.5 + 0.5 f / (f + 1.2).
    assert once == pytest.approx(0.5 + 0.5 / 2.2)
    assert keyword == pytest.approx(0.5 + 0.5 * 5 / 6.2)


def test_coverage_beats_repetition_and_rare_terms_weigh_more():
    items = [
        RerankCandidate("kubernetes kubernetes kubernetes kubernetes"),
        RerankCandidate("kubernetes operator"),
        RerankCandidate("kubernetes"),
    ]
    scores = TokenVectorReranker().rerank_candidates("kubernetes operator", items)
    # Covering both terms beats repeating one; "operator" (1 candidate of 3) outweighs "kubernetes" (3 of 3).
    assert scores[1] > scores[0] > scores[2]


def test_quoted_phrase_is_the_phrase():
    docs = ["the password reset page", "reset the password page"]
    reranker = TokenVectorReranker()
    with_phrase, without = reranker.rerank('"password reset" page', docs)
    assert with_phrase > without
    # Only the quoted words form the phrase; both documents have each term once: 0.8 x (0.5 + 0.5 x 1/2.2) + 0.2.
    assert reranker.rerank("“reset the password”", docs) == pytest.approx(
        [0.8 * (0.5 + 0.5 / 2.2), 0.8 * (0.5 + 0.5 / 2.2) + 0.2]
    )


def test_words_match_as_tokenize_cuts_them():
    reranker = TokenVectorReranker()
    docs = ["the api文档 is here", "rapid progress", "ＡＰＩ reference", "apis"]
    assert [s > 0 for s in reranker.rerank("api", docs)] == [True, False, True, False]


# Matching, pinned against the regular expressions it replaced: a non-Han term or phrase end may not touch a
# letter or digit that is not Han. As a regex class that is LATIN below, which takes ``re`` ~2 ms to compile, so
# _QueryMatcher checks the two neighbouring characters of each occurrence instead.
LATIN = "[^\\W_\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]"
HAN = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


def reference_counts(matcher: _QueryMatcher, text: str) -> list[int]:
    """Han terms as substrings, others by ``re.findall`` with boundary lookarounds (the previous implementation)."""
    return [
        text.count(term) if HAN.search(term) else len(re.findall(f"(?<!{LATIN}){re.escape(term)}(?!{LATIN})", text))
        for term in matcher.terms
    ]


def reference_found(matcher: _QueryMatcher, text: str) -> list[bool]:
    """Each phrase's words and separators with the lookarounds inside the pattern (the previous implementation)."""
    return [
        re.search(
            (f"(?<!{LATIN})" if p.check_start else "") + p.core.pattern + (f"(?!{LATIN})" if p.check_end else ""), text
        )
        is not None
        for p in matcher.phrases
    ]


def match(query: str, text: str) -> tuple[list[int], list[bool]]:
    """Term counts and phrase hits of ``query`` in ``text`` (normalised as the reranker does), checked against the
    reference on the way."""
    matcher = _QueryMatcher(query)
    normalised = _normalise(text, matcher.fold_case)
    counts, found = matcher.counts(normalised), matcher.found([normalised])
    assert counts == reference_counts(matcher, normalised), (query, text)
    assert found == reference_found(matcher, normalised), (query, text)
    return counts, found


def test_the_latin_test_is_the_regex_class_for_every_code_point():
    latin = re.compile(LATIN).match
    assert [cp for cp in range(0x110000) if _is_latin(chr(cp)) != (latin(chr(cp)) is not None)] == []


def test_the_han_test_is_the_regex_class_for_every_code_point():
    han = re.compile(f"[{_HAN_CHARS}]").match
    assert [cp for cp in range(0x110000) if _is_han(chr(cp)) != (han(chr(cp)) is not None)] == []
    assert _has_han("api文档") and not _has_han("api") and not _has_han("café") and not _has_han("")


def test_ascii_text_skips_nfkc_because_nfkc_leaves_it_unchanged():
    import unicodedata

    ascii_text = "".join(map(chr, range(128)))
    assert unicodedata.normalize("NFKC", ascii_text) == ascii_text
    assert _normalise(ascii_text) == ascii_text.lower()
    assert _normalise("Ｆｕｌｌ－ｗｉｄｔｈ ＡＰＩ") == "full-width api"  # non-ASCII still goes through NFKC


def test_nfkc_is_skipped_where_it_changes_nothing_and_its_class_compiled_only_then():
    import unicodedata

    from ragstep.retrieval.latin_fold import fold_text
    from ragstep.retrieval.token_vector import _nfkc_matters

    def before(text: str) -> str:  # the test as it was: the class for any non-ASCII text (then Latin accents folded)
        changes = not text.isascii() and _nfkc_matters().search(text) is not None
        return fold_text((unicodedata.normalize("NFKC", text) if changes else text).lower())

    english = "“Café” au lait — a naïve résumé, 5°C ± 2"
    _nfkc_matters.cache_clear()
    assert _normalise(english) == "“cafe” au lait — a naive resume, 5°c ± 2"
    assert _nfkc_matters.cache_info().misses == 0  # already NFKC: the class is not compiled for it
    texts = [english, "ﬁle ² Ｒｅｓｅｔ", "e\u0301t\u00e9", "重置密码，请稍候。", "api文档 ＡＰＩ", "Ω Å K", ""]
    for text in texts:
        assert _normalise(text) == before(text), text


@pytest.mark.parametrize(
    ("query", "text", "counts", "found"),
    [
        # Latin words next to Han characters are whole words (tokenize() cuts at Han); inside longer words not.
        ("api", "the api文档, 文档api文档 and 文档 api", [3], []),
        ("api", "rapid apis api2 2api apié ǅapi", [0], []),
        # An underscore separates words, as it does for tokenize().
        ("api", "api_key _api_ __api", [3], []),
        ("reset password", "reset_password", [1, 1], [True]),
        # Digits are word characters: "3" is not inside "33" or "31", but "3.0" holds "3" and "0".
        ("version 3.0", "version 3.0 of 33 and 3.01", [1, 2, 1], [True]),
        ("version 3.0", "version 3.01", [1, 1, 0], [False]),
        # An occurrence inside a word is skipped and the scan goes on from the next character.
        ("ana", "banana ana", [1], []),
        ("ana", "bananas", [0], []),
        # Case and width fold as in tokenize(): NFKC, then lower case.
        ("API", "ＡＰＩ and Api", [2], []),
        ("Reset PASSWORD", "RESET-Password now", [1, 1], [True]),
        ("reset password", "RESET-Password now", [1, 1], [True]),
        # Phrase ends on word boundaries; a rejected start is followed by later ones.
        ("reset password", "preset password; reset passwords", [1, 1], [False]),
        ("reset password", "preset password; reset passwords; reset, password.", [2, 2], [True]),
        ("how to reset the password", "To reset the password, open settings.", [1, 1], [True]),
        # Han terms count as substrings; between Han words a separator is optional, between Latin and Han not.
        ("重置密码", "请重置密码后再登录，密码重置", [2, 2], [True]),
        ("如何重置密码", "密码可以在设置页面里重置。", [1, 1], [False]),
        ("api 文档", "api文档", [1, 1], [False]),
        ("api 文档", "xapi 文档 and api-文档", [1, 2], [True]),
        ("文档 api", "文档api2 and 文档 apis", [2, 0], [False]),
        ("文档 api", "文档 api2, 文档_api", [2, 1], [True]),
        ('"reset password" page', "the password reset page", [1, 1, 1], [False]),
        ('"reset password" page', "reset  password page", [1, 1, 1], [True]),
    ],
)
def test_matching_is_unchanged_on_tricky_cases(query: str, text: str, counts: list[int], found: list[bool]):
    assert match(query, text) == (counts, found)


def test_matching_is_unchanged_on_random_texts():
    rng = random.Random(11)
    pieces = [
        "api", "API", "ＡＰＩ", "rapid", "reset", "password", "the", "ana", "3", "0", "x2", "é", "ß", "_", "__", " ",
        "  ", ",", "-", ".", "\n", "文档", "重置", "密码", "的", "²", "١", "Ω", "\u3400", "\uf900", "\U00020000", "《",
    ]  # fmt: skip
    inside_words = phrase_hits = 0
    for _ in range(600):
        query = "".join(rng.choices(pieces, k=rng.randint(1, 6)))
        if rng.random() < 0.2:
            query = f'"{query}" ' + "".join(rng.choices(pieces, k=3))
        terms = query_terms(query)
        for _ in range(5):
            text = "".join(rng.choices(pieces, k=rng.randint(0, 20)))
            if rng.random() < 0.5:  # the query itself, its separators changed: phrases have a chance
                text += re.sub(r'[\s"]+', lambda _m: rng.choice([" ", "", "_", ", ", "x"]), query)
            counts, found = match(query, text)
            normalised = _normalise(text, _QueryMatcher(query).fold_case)
            inside_words += counts != [normalised.count(t) for t in terms]
            phrase_hits += any(found)
    # The texts exercised both rules: occurrences inside longer words, and phrases found.
    assert inside_words > 100 and phrase_hits > 100


def test_a_new_query_compiles_no_pattern_per_term(monkeypatch: pytest.MonkeyPatch):
    query_terms("重置密码")  # jieba loaded before the spy
    compiled: list[str] = []
    real = re.compile

    def spy(pattern: Any, flags: int = 0) -> re.Pattern[str]:
        compiled.append(pattern)
        return real(pattern, flags)

    monkeypatch.setattr(re, "compile", spy)
    items = [RerankCandidate("Reset the admin password in the account settings; api 文档 重置密码.")] * 3
    TokenVectorReranker().rerank_candidates("reset admin password api 文档 重置密码", items)
    # One pattern for the phrase (the whole query), none with the big character class.
    assert len(compiled) == 1 and "\u3400" not in compiled[0]


# RAGFlow's formula, for comparison (``formula="ragflow"``; ``ragstep bench quality`` runs both).


@pytest.mark.parametrize(
    ("query", "items"),
    [
        ("reset password", [RerankCandidate("reset it: the password"), RerankCandidate("reset password")]),
        ("dvt", [RerankCandidate("EVT, DVT, launch"), RerankCandidate("DVT checklist: DVT tests, DVT log")]),
        ("password", [RerankCandidate("x password"), RerankCandidate("x", title="Password"), RerankCandidate("x")]),
        ("password", [RerankCandidate("x", important_keywords=["password"]), RerankCandidate("password password")]),
        ("如何重置密码", [RerankCandidate("密码可以在设置页面里重置。"), RerankCandidate("重置密码的步骤如下。")]),
        ("alpha beta gamma", [RerankCandidate("alpha"), RerankCandidate("beta gamma"), RerankCandidate("delta")]),
    ],
)
def test_ragflow_formula_is_presence_only(query: str, items: list[RerankCandidate]):
    ragflow = TokenVectorReranker(formula="ragflow")
    assert ragflow.token_similarity(query, items) == pytest.approx(ragflow_token_similarity(query, items))


def test_ragflow_formula_ties_where_ours_does_not():
    query = "reset password"
    items = [
        RerankCandidate("Enter your password first; an administrator can reset it later."),
        RerankCandidate("An administrator can reset password settings for every user. Reset password again."),
    ]
    ours = TokenVectorReranker().rerank_candidates(query, items)
    theirs = TokenVectorReranker(formula="ragflow").rerank_candidates(query, items)
    assert theirs == pytest.approx([1.0, 1.0])
    assert ours[1] > ours[0]


def test_ragflow_formula_shares_the_vector_part_and_weights():
    ragflow = TokenVectorReranker(formula="ragflow")
    assert ragflow.name == "none:ragflow" and ragflow.formula == "ragflow"
    assert TokenVectorReranker().name == "none" and TokenVectorReranker().formula == "ragstep"
    items = [RerankCandidate("alpha gamma", vector=[0.6, 0.8]), RerankCandidate("beta", vector=[1.0, 0.0])]
    # Both terms present in one candidate each: df = 1 for both, equal weights.
    assert ragflow.rerank_candidates("alpha beta", items, query_vector=[1.0, 0.0]) == pytest.approx(
        [0.3 * 0.5 + 0.7 * 0.6, 0.3 * 0.5 + 0.7 * 1.0]
    )
    assert ragflow.rerank("the of", ["the of"]) == [0.0]  # no terms: nothing to score, as with ours
    with pytest.raises(InputError, match="unknown formula 'bm25'; supported: ragstep, ragflow"):
        TokenVectorReranker(formula="bm25")


def test_vector_weight_is_0_7_and_missing_vectors_fall_back_to_tokens():
    reranker = TokenVectorReranker()
    items = [
        RerankCandidate("alpha beta", vector=[0.6, 0.8]),  # cosine 0.6 with [1, 0]
        RerankCandidate("alpha beta"),  # no vector: tokens alone
        RerankCandidate("alpha beta", vector=[0.0, 0.0, 1.0]),  # another vector space: tokens alone
        RerankCandidate("alpha beta", vector=[-1.0, 0.0]),  # opposite: cosine clipped to 0
        RerankCandidate("gamma", vector=np.array([3.0, 0.0])),  # no shared term, same direction
    ]
    token = reranker.token_similarity("alpha beta", items)
    scores = reranker.rerank_candidates("alpha beta", items, query_vector=np.array([2.0, 0.0]))
    assert scores[0] == pytest.approx(0.3 * token[0] + 0.7 * 0.6)
    assert scores[1] == pytest.approx(token[1]) and scores[2] == pytest.approx(token[2])
    assert scores[3] == pytest.approx(0.3 * token[3])
    assert scores[4] == pytest.approx(0.7) and token[4] == 0.0
    # Without a query vector every candidate is scored on tokens.
    assert reranker.rerank_candidates("alpha beta", items) == pytest.approx(list(token))


def test_cosines_are_read_on_the_embedding_models_declared_scale():
    # e5-like cosines (unrelated ~0.77, a relevant passage ~0.88): on the common scale an unrelated chunk's vector
    # half adds nothing, so the 0.2 threshold is reached by matching terms, not by the model's cosine floor.
    from ragstep.models.scale import ScoreScale

    scale = ScoreScale(zero=0.77, span=0.2)
    reranker = TokenVectorReranker(vector_power=0)  # fixed 0.3 / 0.7: the scale alone (evidence: next test)
    q = np.array([1.0, 0.0])

    def at(cos: float) -> list[float]:
        return [cos, math.sqrt(1 - cos * cos)]

    items = [RerankCandidate("gamma", vector=at(0.77)), RerankCandidate("gamma", vector=at(0.88)),
             RerankCandidate("gamma", vector=at(0.995)), RerankCandidate("alpha beta")]  # fmt: skip
    raw = reranker.rerank_candidates("alpha beta", items, query_vector=q)
    scaled = reranker.rerank_candidates("alpha beta", items, query_vector=q, cosine_scale=scale)
    assert raw[:3] == pytest.approx([0.7 * 0.77, 0.7 * 0.88, 0.7 * 0.995])  # every one above 0.2 on raw cosines
    assert scaled[:3] == pytest.approx([0.0, 0.7 * 0.55, 0.7 * 1.0])  # below 0 and above 1 are clipped
    assert scaled[3] == raw[3]  # no vector: tokens alone, whatever the scale


def test_cosines_of_a_model_without_a_declared_scale_are_read_relative_to_one_another():
    # Issue 32: e5's cosines served by a model that declares no scale were read on MiniLM's: 0.80 and 0.86 differed
    # by 0.04 x 0.7 while the token part spread over 0-1, so the chunk that repeats the query's words outranked the
    # one the vectors found (the reranker's order: nDCG@10 0.345 on msmarco-5k). Relative: best 1, worst 0.
    q = np.array([1.0, 0.0])

    def at(cos: float) -> list[float]:
        return [cos, math.sqrt(1 - cos * cos)]

    reranker = TokenVectorReranker()
    items = [RerankCandidate("solar panels", vector=at(0.86)), RerankCandidate("wind wind turbines", vector=at(0.80)),
             RerankCandidate("wind turbines", vector=at(0.83)), RerankCandidate("wind turbines")]  # fmt: skip
    common = reranker.rerank_candidates("wind turbines", items, query_vector=q)
    relative = reranker.rerank_candidates("wind turbines", items, query_vector=q, cosine_scale=None)
    assert max(range(3), key=lambda i: common[i]) != 0  # the words decided on MiniLM's scale
    assert relative[0] == pytest.approx(0.7)  # the best cosine counts 1, with no matching word
    assert relative[1] == pytest.approx(0.3 * reranker.token_similarity("wind turbines", items[1:2])[0])
    assert relative[0] > relative[1] and relative[3] == common[3]  # no vector: tokens alone either way
    assert relative_cosines(np.array([0.5, np.nan, 0.5])).tolist()[::2] == [1.0, 1.0]  # equal: no order, full credit


def test_vector_half_weighs_by_the_querys_best_cosine():
    # Issue 17: the vector weight is 0.7 x top^1.5 (top: the best calibrated cosine among the candidates), as fusion
    # weighs the vector list, renormalised with the token weight so scores stay in 0-1.
    q = [1.0, 0.0]

    def at(cos: float) -> list[float]:
        return [cos, math.sqrt(1 - cos * cos)]

    def scored(top: float, reranker: TokenVectorReranker | None = None) -> list[float]:
        # The same two candidates (cosine 0.3 with the terms, and 0.3 without) next to a best one at ``top``.
        items = [RerankCandidate("alpha beta", vector=at(0.3)), RerankCandidate("gamma", vector=at(0.3)),
                 RerankCandidate("gamma", vector=at(top))]  # fmt: skip
        return (reranker or TokenVectorReranker()).rerank_candidates("alpha beta", items, q)

    reranker = TokenVectorReranker()
    token = reranker.token_similarity("alpha beta", [RerankCandidate("alpha beta"), RerankCandidate("gamma")])
    # Full evidence: RAGFlow's fixed 0.3 / 0.7.
    assert scored(1.0)[:2] == pytest.approx([0.3 * token[0] + 0.7 * 0.3, 0.7 * 0.3])
    # Weak evidence: the vector weight 0.7 x 0.5^1.5 against the token weight 0.3.
    wv = 0.7 * 0.5**1.5
    assert scored(0.5)[:2] == pytest.approx([(0.3 * token[0] + wv * 0.3) / (0.3 + wv), wv * 0.3 / (0.3 + wv)])
    # Monotonic: the weaker the vector evidence, the more the terms count (the term-matching candidate's lead
    # over the one matched by its vector only grows), and every score stays in 0-1.
    leads = [a - b for a, b, _ in map(scored, (1.0, 0.9, 0.7, 0.5, 0.3))]
    assert leads == sorted(leads) and leads[0] < leads[-1]
    assert all(0.0 <= s <= 1.0 for top in (1.0, 0.5, 0.3) for s in scored(top))
    # Power 0, and RAGFlow's formula by default, keep the fixed weights whatever the evidence.
    fixed = scored(0.5, TokenVectorReranker(vector_power=0))
    assert fixed[:2] == pytest.approx([0.3 * token[0] + 0.7 * 0.3, 0.7 * 0.3])
    ragflow = TokenVectorReranker(formula="ragflow")
    assert scored(0.5, ragflow) == pytest.approx(scored(0.5, TokenVectorReranker(formula="ragflow", vector_power=0)))
    with pytest.raises(InputError, match="vector_power must be in"):
        TokenVectorReranker(vector_power=-1)


def test_scores_stay_in_unit_interval():
    rng = random.Random(7)
    words = ["alpha", "beta", "gamma", "delta", "密码", "重置", "the", "of"]
    items = [
        RerankCandidate(
            " ".join(rng.choices(words, k=rng.randint(0, 30))),
            title=" ".join(rng.choices(words, k=3)),
            important_keywords=rng.choices(words, k=2),
            vector=[rng.uniform(-1, 1) for _ in range(4)],
        )
        for _ in range(200)
    ]
    for query in ["alpha beta", "重置密码", '"gamma delta" alpha', "the of", "alpha"]:
        scores = TokenVectorReranker().rerank_candidates(query, items, query_vector=[1.0, 0.5, -0.2, 0.1])
        assert len(scores) == len(items) and all(0.0 <= s <= 1.0 for s in scores)


def test_empty_inputs():
    reranker = TokenVectorReranker()
    assert reranker.rerank("alpha", []) == []
    assert reranker.rerank("", ["alpha", ""]) == [0.0, 0.0]
    assert reranker.rerank("the of and", ["the of and"]) == [0.0]  # stopwords only: no terms
    assert reranker.rerank("alpha", ["", "alpha"])[0] == 0.0
    one_string = reranker.rerank_candidates("word", [RerankCandidate("x", important_keywords="word")])
    assert one_string == pytest.approx([0.5 + 0.5 * 5 / 6.2])  # a bare string is one keyword, not letters
    assert reranker.rerank_candidates("", [RerankCandidate("x", vector=[1.0])], query_vector=[1.0]) == [0.7]
    with pytest.raises(InputError, match="list of documents"):
        reranker.rerank("alpha", "alpha")


def test_candidate_from_chunk():
    chunk = Chunk(
        id="c1",
        knowledge_id="k1",
        knowledge_base_id="kb",
        content="body",
        knowledge_title="Title",
        metadata={"important_keywords": "one keyword"},
    )
    candidate = RerankCandidate.from_chunk(chunk, vector=[1.0, 0.0])
    assert candidate == RerankCandidate("body", "Title", ("one keyword",), [1.0, 0.0])
    assert RerankCandidate.from_chunk(chunk.model_copy(update={"metadata": {}})).important_keywords == ()


def test_100_candidates_rerank_in_about_a_millisecond():
    rng = random.Random(1)
    vocabulary = [f"word{i}" for i in range(300)] + ["reset", "password", "重置", "密码", "设置"]
    items = [
        RerankCandidate(
            " ".join(rng.choices(vocabulary, k=80)) + "，重置密码。",
            title="Account settings",
            important_keywords=["password", "安全"],
            vector=np.asarray([rng.random() for _ in range(384)]),
        )
        for _ in range(100)
    ]
    reranker = TokenVectorReranker()
    query_vector = np.ones(384)
    reranker.rerank_candidates("how to reset the password 重置密码", items, query_vector)  # query jieba warm-up
    best = min(
        _timed(lambda: reranker.rerank_candidates("how to reset the password 重置密码", items, query_vector))
        for _ in range(5)
    )
    # ~1 ms on a laptop; the bound only catches an accidental per-candidate tokenization (~30 ms with jieba).
    assert best < 0.015


def _timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


# ------------------------------------------------------------------------------------------------- factory


def test_make_reranker_default_is_local():
    reranker = make_reranker(Settings())
    assert isinstance(reranker, TokenVectorReranker) and reranker.name == "none"
    for made in (reranker, HttpReranker("m"), BedrockReranker(AMAZON)):
        assert isinstance(made, Reranker)


def test_make_http_reranker_from_settings_end_to_end(server: ScriptedHTTPServer):
    server.set_fallback(results_echo)
    settings = Settings(
        reranker="http",
        rerank_model="jina-reranker-v2-base-multilingual",
        rerank_flavour="jina",
        rerank_url=f"{server.url}/v1/rerank",
        rerank_api_key="jina-key",
        rerank_max_documents_per_call=2,
        rerank_max_chars=3,
        provider_max_retries=0,
    )
    reranker = make_reranker(settings)
    assert isinstance(reranker, HttpReranker) and reranker.name == "jina:jina-reranker-v2-base-multilingual"
    assert reranker.rerank("q", ["aaaa", "b", "c"]) == [doc_score("aaa"), doc_score("b"), doc_score("c")]
    assert [r.json["documents"] for r in server.requests] == [["aaa", "b"], ["c"]]
    assert server.requests[0].headers["authorization"] == "Bearer jina-key"
    reranker.close()


def test_make_bedrock_reranker_from_settings(server: ScriptedHTTPServer, aws_env: None):
    settings = Settings(reranker="bedrock", rerank_model=COHERE, aws_region="ap-northeast-1")
    reranker = make_reranker(settings)
    assert isinstance(reranker, BedrockReranker) and reranker.name == f"bedrock:{COHERE}"
    assert reranker.model_arn == f"arn:aws:bedrock:ap-northeast-1::foundation-model/{COHERE}"
    reranker.close()


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        (Settings(reranker="cohere"), "unknown reranker 'cohere'.*none, http, bedrock"),
        (Settings(reranker="bedrock"), "RAGSTEP_RERANK_MODEL"),
        (Settings(reranker="http", rerank_flavour="jina"), r"needs a model name \(RAGSTEP_RERANK_MODEL\)"),
        (Settings(reranker="http", rerank_model="m", rerank_flavour="bge"), "unknown rerank API flavour 'bge'"),
    ],
)
def test_make_reranker_errors_name_the_settings(settings: Settings, expected: str):
    with pytest.raises(InputError, match=expected):
        make_reranker(settings)


def test_services_build_the_reranker_once(tmp_path: Any):
    ctx = Clients(Settings(data_dir=tmp_path)).context()
    assert isinstance(ctx.reranker, TokenVectorReranker)
    assert ctx.reranker is ctx.reranker


def test_tei_model_only_names_the_reranker(server: ScriptedHTTPServer, http: MakeHttp):
    server.add(tei_echo)
    reranker = http(flavour="tei", model="BAAI/bge-reranker-large", url=f"{server.url}/rerank")
    reranker.rerank("q", ["a"])
    assert reranker.name == "tei:BAAI/bge-reranker-large"
    assert "model" not in server.requests[0].json
