"""``ragstep bench mcp``: what a ``search`` tool call over MCP adds to the same search over the HTTP route.

The app ``ragstep serve`` runs is served under uvicorn on 127.0.0.1 (:func:`~ragstep.bench.chat_http.serving`) over
a keyword-only knowledge base of the bundled demo documents, with no API key (open local mode). Each question is
asked in pairs, the order alternating: ``POST /v1/knowledge-search`` and ``POST /mcp`` with a JSON-RPC
``tools/call`` of ``search`` (the stateless Streamable HTTP transport, as an MCP client of the 2025 revisions sends
it after its handshake), both with httpx and one connection each. ``added`` is the median over pairs of (MCP -
HTTP): the MCP layer's own cost (the SDK's transport and dispatch, the tool's text rendering). A third loop times the
same calls through the official SDK's client (``mcp.Client``, the protocol revision it negotiates), which adds the
client's own work: what an agent sees end to end.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from ragstep.bench.common import median, ms, percentile

QUESTIONS = (
    "What is hybrid search?",
    "When do cold starts happen?",
    "How are keyword and vector results fused?",
    "冷启动是怎么回事",
    "Where does DynamoDB keep chat history?",
    "中文分词怎么做",
)
MCP_HEADERS = {
    "Accept": "application/json, text/event-stream",
    "Content-Type": "application/json",
    "MCP-Protocol-Version": "2025-06-18",
}


def _knowledge_base(data_dir: Path) -> Any:
    """A keyword-only knowledge base of the demo documents: the search is the same on both paths, so the
    embedder would only add noise to the difference."""
    from ragstep.app.ingest import ingest_file
    from ragstep.app.knowledge_bases import create_knowledge_base
    from ragstep.context import Clients
    from ragstep.settings import Settings

    clients = Clients(Settings(data_dir=data_dir))
    ctx = clients.context()
    kb = create_knowledge_base(ctx, "bench-mcp", "document", "none")
    demo = Path(__file__).resolve().parents[1] / "data" / "demo" / "docs"
    for path in sorted(demo.iterdir()):
        if path.is_file():
            ingest_file(path, kb, ctx)
    return clients


def run_mcp(rounds: int = 30) -> dict[str, Any]:
    import httpx

    from ragstep.bench.chat_http import serving

    with tempfile.TemporaryDirectory(prefix="ragstep-bench-mcp-") as tmp:
        clients = _knowledge_base(Path(tmp))
        with serving(clients) as base, httpx.Client(base_url=base, timeout=60) as http:

            def via_http(question: str) -> float:
                started = time.perf_counter()
                body = {"query": question, "knowledge_base_ids": ["bench-mcp"], "overrides": {"rerank_top_k": 5}}
                response = http.post("/v1/knowledge-search", json=body)
                response.raise_for_status()
                assert response.json()["results"], question
                return time.perf_counter() - started

            def via_mcp(question: str, n: int) -> float:
                started = time.perf_counter()
                arguments = {"query": question, "knowledge_bases": ["bench-mcp"], "top_k": 5}
                call = {"jsonrpc": "2.0", "id": n, "method": "tools/call"}
                call["params"] = {"name": "search", "arguments": arguments}
                response = http.post("/mcp", json=call, headers=MCP_HEADERS)
                response.raise_for_status()
                assert response.json()["result"]["isError"] is False, response.text
                return time.perf_counter() - started

            for question in QUESTIONS:  # warm both paths (the MCP SDK is imported on the first /mcp request)
                via_http(question)
                via_mcp(question, 0)
            http_s: list[float] = []
            mcp_s: list[float] = []
            added: list[float] = []
            for n in range(rounds):
                question = QUESTIONS[n % len(QUESTIONS)]
                if n % 2:
                    a, b = via_http(question), via_mcp(question, n)
                else:
                    b, a = via_mcp(question, n), via_http(question)
                http_s.append(a)
                mcp_s.append(b)
                added.append(b - a)
            sdk_s = asyncio.run(_through_sdk(base, rounds))
    return {
        "rounds": rounds,
        "knowledge_base": "the demo documents, keyword-only",
        "http_search_p50_ms": ms(median(http_s)),
        "http_search_p95_ms": ms(percentile(http_s, 95)),
        "mcp_search_p50_ms": ms(median(mcp_s)),
        "mcp_search_p95_ms": ms(percentile(mcp_s, 95)),
        "mcp_added_p50_ms": ms(median(added)),
        "sdk_client_search_p50_ms": ms(median(sdk_s)),
        "sdk_client_search_p95_ms": ms(percentile(sdk_s, 95)),
    }


async def _through_sdk(base: str, rounds: int) -> list[float]:
    from mcp import Client

    times: list[float] = []
    async with Client(f"{base}/mcp") as client:
        for n in range(rounds):
            started = time.perf_counter()
            arguments = {"query": QUESTIONS[n % len(QUESTIONS)], "knowledge_bases": ["bench-mcp"], "top_k": 5}
            result = await client.call_tool("search", arguments)
            assert not result.is_error
            times.append(time.perf_counter() - started)
    return times


def render(result: dict[str, Any]) -> str:
    rows = [
        ("POST /v1/knowledge-search", result["http_search_p50_ms"], result["http_search_p95_ms"]),
        ("POST /mcp tools/call search", result["mcp_search_p50_ms"], result["mcp_search_p95_ms"]),
        ("mcp.Client.call_tool('search')", result["sdk_client_search_p50_ms"], result["sdk_client_search_p95_ms"]),
    ]
    lines = [f"search over HTTP vs MCP, {result['rounds']} paired rounds ({result['knowledge_base']})"]
    lines += [f"  {name:<34} p50 {p50:8.2f} ms   p95 {p95:8.2f} ms" for name, p50, p95 in rows]
    lines.append(f"  MCP adds (median of paired differences): {result['mcp_added_p50_ms']:.2f} ms")
    return "\n".join(lines)
