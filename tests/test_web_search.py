"""Web search beside the knowledge bases: the engines' adapters against servers on 127.0.0.1 that answer like
DuckDuckGo (HTML page and Instant Answer API), Google Programmable Search and SearXNG -- including empty,
malformed and slow answers -- the blacklist, WeKnora's compression, and the branch inside ``chunk_search``."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import run_cli
from ragstep.adapters.web.duckduckgo import DuckDuckGoSearch, parse_html, target_url
from ragstep.adapters.web.google import GoogleSearch
from ragstep.adapters.web.searxng import SearxngSearch
from ragstep.app.chat import delete_session, run_chat
from ragstep.app.search import knowledge_search
from ragstep.app.sessions import open_session
from ragstep.context import Clients, Context
from ragstep.errors import InputError, ProviderError
from ragstep.models import ChatRequest, ChunkType, MatchType, SearchRequest
from ragstep.retrieval.web.blacklist import compile_blacklist
from ragstep.retrieval.web.compress import Passage, Scored, keyword_scores, round_robin
from ragstep.settings import Settings
from ragstep.stages.search.web_search import load_session
from support.scripted_http import ScriptedHTTPServer, ScriptedResponse
from support.web_servers import (
    ddg_html,
    ddg_instant_answer,
    ddg_no_results_html,
    google_items,
    malformed_json,
    searxng_results,
)

PAGES = [
    ("https://docs.example.org/lambda/cold-starts", "Lambda cold starts explained", "Cold starts add latency."),
    ("https://blog.example.net/posts/warm", "Keeping Lambda warm", "Provisioned concurrency avoids cold starts."),
    ("https://docs.example.org/lambda/limits", "Lambda limits", "Memory and timeout limits of Lambda."),
]


# -- adapters ------------------------------------------------------------------------------------------------------


def test_duckduckgo_html_page_is_read_defensively() -> None:
    with ScriptedHTTPServer(ddg_html(PAGES)) as server:
        engine = DuckDuckGoSearch(f"{server.url}/html/", f"{server.url}/api", timeout_s=5)
        pages = engine.search("lambda cold start", 5)
        assert server.requests[0].query["q"] == ["lambda cold start"]
    # The ad (y.js) is skipped, redirects are unwrapped, <b> highlights leave plain text.
    assert [p.url for p in pages] == [u for u, _, _ in PAGES]
    assert pages[0].title == "Lambda cold starts explained" and pages[0].snippet == "Cold starts add latency."
    assert target_url("/l/?uddg=https%3A%2F%2Fa.example%2Fx", "https://html.duckduckgo.com/html/") == (
        "https://a.example/x"
    )
    assert parse_html("<html><a class='result__a' href='javascript:alert(1)'>x</a><div") == []


def test_duckduckgo_falls_back_to_the_instant_answer_api() -> None:
    with ScriptedHTTPServer(ddg_no_results_html(), ddg_instant_answer(PAGES)) as server:
        engine = DuckDuckGoSearch(f"{server.url}/html/", f"{server.url}/api", timeout_s=5)
        pages = engine.search("lambda", 5)
        api = server.requests[1]
        assert api.path == "/api" and api.query["format"] == ["json"]
    assert [p.url for p in pages] == [u for u, _, _ in PAGES]  # abstract, a flat topic, a grouped topic
    assert pages[1].title == "Keeping Lambda warm"
    # The page fails, the API answers nothing: no results, no error.
    with ScriptedHTTPServer(ScriptedResponse(503, "busy"), ddg_instant_answer([])) as server:
        engine = DuckDuckGoSearch(f"{server.url}/html/", f"{server.url}/api", timeout_s=5)
        assert engine.search("lambda", 5) == []


def test_duckduckgo_both_failing_is_one_provider_error() -> None:
    with ScriptedHTTPServer(ScriptedResponse(500, "oops"), malformed_json()) as server:
        engine = DuckDuckGoSearch(f"{server.url}/html/", f"{server.url}/api", timeout_s=5)
        with pytest.raises(ProviderError) as err:
            engine.search("lambda", 5)
    assert "HTTP 500" in err.value.message and "not JSON" in err.value.message


def test_google_programmable_search() -> None:
    with ScriptedHTTPServer(google_items(PAGES), google_items([]), ScriptedResponse(403, {"error": {}})) as server:
        engine = GoogleSearch(f"{server.url}/customsearch/v1", "secret-key", "engine-1", timeout_s=5)
        pages = engine.search("lambda", 2)
        sent = server.requests[0].query
        assert sent["key"] == ["secret-key"] and sent["cx"] == ["engine-1"] and sent["num"] == ["2"]
        assert [p.url for p in pages] == [u for u, _, _ in PAGES[:2]]
        assert engine.search("nothing", 5) == []  # no "items" key
        with pytest.raises(ProviderError) as err:
            engine.search("lambda", 5)
    assert "HTTP 403" in err.value.message and "secret-key" not in err.value.message  # the key is in the query
    with pytest.raises(InputError, match="RAGSTEP_WEB_SEARCH_GOOGLE_API_KEY"):
        GoogleSearch("https://x", "", "engine-1", timeout_s=5)


def test_searxng_results_malformed_and_slow() -> None:
    slow = ScriptedResponse(200, {"results": []}, delay_s=2.0)
    with ScriptedHTTPServer(searxng_results([*PAGES, PAGES[0]]), malformed_json(), slow) as server:
        engine = SearxngSearch(server.url + "/", timeout_s=0.3)
        pages = engine.search("lambda", 10)
        assert server.requests[0].path == "/search" and server.requests[0].query["format"] == ["json"]
        assert [p.url for p in pages] == [u for u, _, _ in PAGES]  # the duplicate from a second engine folded
        with pytest.raises(ProviderError, match="not JSON"):
            engine.search("lambda", 5)
        with pytest.raises(ProviderError, match="timed out"):
            engine.search("lambda", 5)


# -- pure parts ------------------------------------------------------------------------------------------------------


def test_blacklist_rules() -> None:
    rules = compile_blacklist(("/ads?\\.example/", "*://*.spam.example/*", "/[unclosed/", "/no-end", " "))
    assert rules.blocks("https://ad.example/x") and rules.blocks("https://ADS.EXAMPLE/y")
    assert rules.blocks("http://www.spam.example/page") and not rules.blocks("http://spam.example.org/page")
    assert not rules.blocks("https://docs.example.org/lambda")
    assert [rule for rule, _ in rules.invalid] == ["/[unclosed/", "/no-end"]


def _scored(url: str, score: float) -> Scored:
    return Scored(Passage(url, url), score, score, None)


def test_round_robin_across_sites_and_one_result_per_url() -> None:
    scored = [
        _scored("https://a.example/1", 0.9),
        _scored("https://a.example/2", 0.8),
        _scored("https://www.a.example/3", 0.7),
        _scored("https://b.example/1", 0.6),
        _scored("https://a.example/1", 0.5),  # the same URL again: kept once, at its best
        _scored("https://c.example/1", 0.55),
    ]
    picked = [s.passage.url for s in round_robin(scored, 4)]
    assert picked == ["https://a.example/1", "https://b.example/1", "https://c.example/1", "https://a.example/2"]
    scores = keyword_scores("cold start", ["cold start latency", "warm pools", "a cold day"])
    assert scores[0] == 1.0 and scores[1] == 0.0 and 0 < scores[2] < 1


# -- the branch inside chunk_search ------------------------------------------------------------------------------------


@pytest.fixture
def data_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str], plain_environment: None) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "lambda.md").write_text(
        "# Lambda\n\nAWS Lambda runs code without servers. Cold starts happen when a new execution environment "
        "starts.\n",
        encoding="utf-8",
    )
    data = tmp_path / "data"
    assert run_cli(capsys, "--data-dir", str(data), "kb", "create", "docs")[0] == 0
    assert run_cli(capsys, "--data-dir", str(data), "ingest", str(folder), "--kb", "docs")[0] == 0
    return data


def _ctx(data: Path, server: ScriptedHTTPServer, **settings: object) -> Context:
    values: dict[str, object] = {
        "data_dir": data,
        "web_search_duckduckgo_url": f"{server.url}/html/",
        "web_search_duckduckgo_api_url": f"{server.url}/api",
        "web_search_timeout_s": 2.0,
        **settings,
    }
    return Clients(Settings.model_validate(values)).context()


def test_search_with_web_results_beside_the_knowledge_base(data_dir: Path) -> None:
    with ScriptedHTTPServer(ddg_html(PAGES)) as server:
        ctx = _ctx(data_dir, server, web_search_blacklist=["*://blog.example.net/*", "/[bad/"])
        request = SearchRequest(
            query="When do cold starts happen?", knowledge_base_ids=["docs"], overrides={"web_search": True}
        )
        state = knowledge_search(request, ctx)
    web = [r for r in state.search_results if r.match_type == MatchType.WEB]
    kb = [r for r in state.search_results if r.match_type != MatchType.WEB]
    assert kb and kb[0].knowledge_filename == "lambda.md"
    urls = [r.metadata["url"] for r in web]
    assert urls[0] == PAGES[0][0] and PAGES[1][0] not in urls  # the blog is blacklisted
    if len(urls) > 1:  # "limits" shares no keyword: only the knowledge base's embedder can find it close enough
        assert web[1].metadata["retrieval"]["keyword_score"] == 0.0
        assert web[1].metadata["retrieval"]["vector_score"] >= 0.5
    assert web[0].chunk_type == ChunkType.WEB_SEARCH and web[0].content.startswith(f"[sourceUrl]: {PAGES[0][0]}")
    assert any(r.match_type == MatchType.WEB for r in state.final_results)
    row = next(t for t in state.trace if t.reason == "web search")
    assert row.counts["pages"] == 3 and row.counts["blacklisted"] == 1 and row.counts["results"] == len(urls)
    assert row.detail["blacklist_invalid"] == ["/[bad/"]


def test_a_failing_or_slow_engine_degrades_the_search(data_dir: Path) -> None:
    slow = ScriptedResponse(200, "<html></html>", delay_s=3.0)
    with ScriptedHTTPServer(ScriptedResponse(500, "down"), malformed_json(), slow) as server:
        ctx = _ctx(data_dir, server, web_search_timeout_s=0.3)
        request = SearchRequest(query="cold starts", knowledge_base_ids=["docs"], overrides={"web_search": True})
        for expected in ("Instant Answer API too", "timed out"):
            state = knowledge_search(request, ctx)
            assert state.final_results and all(r.match_type != MatchType.WEB for r in state.final_results)
            degrade = [t for t in state.trace if t.action == "degrade"]
            assert len(degrade) == 1 and expected in (degrade[0].reason or "")


def test_web_only_request_and_a_request_without_any_source(data_dir: Path) -> None:
    with ScriptedHTTPServer(ddg_html(PAGES)) as server:
        ctx = _ctx(data_dir, server)
        state = knowledge_search(SearchRequest(query="lambda limits", overrides={"web_search": True}), ctx)
    assert [r.metadata["url"] for r in state.search_results][:1] == [PAGES[2][0]]
    with pytest.raises(ValueError, match="or turn web search on"):
        SearchRequest(query="lambda limits")


def test_session_keeps_each_url_once_and_forgets_on_delete(data_dir: Path) -> None:
    second = [PAGES[0], ("https://c.example.com/lambda", "Lambda cold start study", "Cold starts measured.")]
    with ScriptedHTTPServer(ddg_html(PAGES[:2]), ddg_html(second)) as server:
        ctx = _ctx(data_dir, server)
        session = open_session(ctx).session_id
        for _ in range(2):
            request = ChatRequest(
                query="cold starts", knowledge_base_ids=["docs"], session_id=session, overrides={"web_search": True}
            )
            state = run_chat(request, ctx)
        row = [t for t in state.trace if t.reason == "web search"][-1]
        assert row.counts["added"] == 1 and row.counts["session_passages"] == 3
        # Round-robin: three sites, so every one of them is among the references.
        assert {r.metadata["site"] for r in state.search_results if r.match_type == MatchType.WEB} == {
            "docs.example.org",
            "blog.example.net",
            "c.example.com",
        }
        assert len(load_session(ctx, session)) == 3
        delete_session(ctx, session)
        assert load_session(ctx, session) == []


def test_cli_chat_web_shows_both_kinds_of_sources(
    data_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with ScriptedHTTPServer(ddg_html(PAGES)) as server:
        monkeypatch.setenv("RAGSTEP_WEB_SEARCH_DUCKDUCKGO_URL", f"{server.url}/html/")
        monkeypatch.setenv("RAGSTEP_WEB_SEARCH_DUCKDUCKGO_API_URL", f"{server.url}/api")
        code, out, err = run_cli(
            capsys, "--data-dir", str(data_dir), "chat", "When do cold starts happen?", "--kb", "docs", "--web"
        )
    assert code == 0, err
    sources = out[out.index("Sources:") :]
    assert "lambda.md" in sources and "https://docs.example.org" in sources


def test_tavily_sends_its_key_as_a_bearer_token() -> None:
    from ragstep.adapters.web.tavily import TavilySearch

    body = {"results": [{"url": PAGES[0][0], "title": "T", "content": "snippet", "raw_content": " body "}, "junk"]}
    with ScriptedHTTPServer(ScriptedResponse(200, body), ScriptedResponse(401, {"detail": "bad key"})) as server:
        engine = TavilySearch(f"{server.url}/search", "tvly-secret", timeout_s=5)
        pages = engine.search("lambda", 3)
        sent = server.requests[0]
        assert sent.headers["authorization"] == "Bearer tvly-secret" and sent.json == {
            "query": "lambda",
            "max_results": 3,
        }
        with pytest.raises(ProviderError, match="HTTP 401") as err:
            engine.search("lambda", 3)
    assert [(p.url, p.snippet, p.content) for p in pages] == [(PAGES[0][0], "snippet", "body")]
    assert "tvly-secret" not in err.value.message


@pytest.mark.slow  # a uvicorn server and two chat requests: ~3-8 s on this machine
def test_http_chat_turns_web_search_on_per_request(tmp_path: Path, plain_environment: None) -> None:
    pytest.importorskip("openai")
    from support.api_server import serve

    with ScriptedHTTPServer(fallback=lambda _: ddg_html(PAGES)) as engine:
        urls = {"web_search_duckduckgo_url": f"{engine.url}/html/", "web_search_duckduckgo_api_url": engine.url}
        with serve(tmp_path, **urls) as app:
            extra = {"knowledge_base_ids": ["docs"], "reference": True}
            plain = app.sdk().chat.completions.create(
                model="ragstep", messages=[{"role": "user", "content": "When do cold starts happen?"}], extra_body=extra
            )
            web = app.sdk().chat.completions.create(
                model="ragstep",
                messages=[{"role": "user", "content": "When do cold starts happen?"}],
                extra_body={**extra, "overrides": {"web_search": True, "web_search_max_results": 1}},
            )
        assert len(engine.requests) == 1 and engine.requests[0].query["q"] == ["When do cold starts happen?"]
    assert all(r["match_type"] != "web" for r in plain.choices[0].message.reference)
    kinds = [(r["match_type"], r["knowledge_filename"]) for r in web.choices[0].message.reference]
    assert ("web", PAGES[0][0]) in kinds and any(f == "lambda.md" for _, f in kinds)
