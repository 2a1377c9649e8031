"""``ragstep bench chat``: the time ragstep itself adds to a chat answer, against an instant chat model.

The chat model is :class:`InstantLLM`, an OpenAI-compatible ``/v1/chat/completions`` on 127.0.0.1 in this process
that answers every request at once from a prepared body, so what is measured is ragstep's own work. Questions go in
through :func:`ragstep.app.chat.stream_chat`, as the HTTP API and the CLI hand them over.

* ``llm_request``: from the question handed to ``stream_chat`` to the server receiving the LLM request (its request
  line and headers parsed; both timestamps from the same clock in the same process), for the ``rag_stream`` pipeline
  with query rewrite off, each question in a new session. It covers the state (validation, knowledge base, settings),
  load_history, rewrite_query (skipped), the retrieval stages, into_chat_message, the references event, building the
  messages and sending the request. The index is the one ``ragstep bench latency`` builds (msmarco-5k passages
  replicated to ``--docs`` chunks, seeded random vectors, hybrid search on precomputed query vectors).
* ``references_to_request``: from the references event (retrieval and the chat message done) to the LLM request:
  the streaming stage's own work before the model is asked, and sending the request.
* ``first_token``: to the first answer event the caller receives (adds the server's reply and the SSE parsing).
* ``search_pipeline``: the ``knowledge_search`` pipeline (the same retrieval stages) on the same question, timed right
  after it in the same loop, and ``chat_overhead``: the median over questions of ``llm_request`` minus it -- what
  the chat machinery adds to retrieval, read apart from the machine's noise on the search itself.
* ``llm_request_cpu`` and ``search_pipeline_cpu``: the process's CPU time (all its threads) over the same spans: the
  work done, without the time spent waiting for a CPU, which is what other load on the machine adds to the wall
  clock. (Work on two threads at once counts twice; the figures are read against the wall-clock ones.)
* ``relay``: tokens per second of an answer streamed through the whole relay -- the HTTP response's lines, SSE
  parsing, stream_filter, the pipeline's events, ``stream_chat`` -- on the ``chat_stream`` pipeline (no retrieval)
  with answers of ``--tokens`` SSE events of one token each, as providers send them; timed from the references
  event (just before the request goes out) to the done event. The server shares the process (and its GIL), so this
  is a lower bound on the relay's own rate.
* ``filter``: stream_filter's :class:`~ragstep.stages.chat.stream_filter.AnswerFilter` alone on the same tokens.

Each answer opens with a ``<think>`` block split across events, so the filter's tag handling is in the figures.
"""

from __future__ import annotations

import os
import platform
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragstep.adapters.embedders import PrecomputedEmbedder
from ragstep.app.chat import stream_chat
from ragstep.app.search import new_state
from ragstep.bench.common import find_bench_dir, median, ms, peak_rss_mb, percentile
from ragstep.bench.instant_llm import MIN_ANSWER_TOKENS, MODEL, InstantLLM, answer_tokens, plain_answer
from ragstep.bench.latency import WARM_UP_QUERY, build_index, corpus_texts, query_texts, unit_vectors
from ragstep.context import Context
from ragstep.errors import InputError, RagstepError
from ragstep.models import ChatRequest, PipelineState, SearchRequest
from ragstep.pipeline import run_pipeline
from ragstep.stages.chat.stream_filter import AnswerFilter

TARGET_LLM_REQUEST_P50_MS = 25.0
TARGET_RELAY_TOKENS_PER_S = 5000.0
# -- measurements --------------------------------------------------------------------------------------------------


def _events(request: ChatRequest, ctx: Context) -> Iterator[tuple[float, str, PipelineState | None]]:
    """(perf_counter, event name, None) for each event of the answer, then (.., "end", final state)."""
    events = stream_chat(request, ctx)
    while True:
        try:
            event = next(events)
        except StopIteration as stop:
            yield time.perf_counter(), "end", stop.value
            return
        yield time.perf_counter(), event.event, None


@dataclass(frozen=True)
class Asked:
    """One timed question, in ms from the moment it was handed to ragstep."""

    references_ms: float  # the references event: retrieval and the chat message done
    llm_request_ms: float  # the server has the LLM request
    llm_request_cpu_ms: float  # the process's CPU time until then (all threads): the work, without the waiting
    first_token_ms: float  # the first answer event reached the caller
    state: PipelineState


def ask(ctx: Context, server: InstantLLM, request: ChatRequest) -> Asked:
    """One question, timed. Exactly one LLM request must be made (no rewrite, no fallback): anything else would time
    something other than the question."""
    before = len(server.received)
    started, started_cpu = time.perf_counter(), time.process_time()
    seen: dict[str, float] = {}
    final = None
    for at, name, state in _events(request, ctx):
        seen.setdefault(name, at)
        final = state or final
    made = len(server.received) - before
    if final is None or "answer" not in seen or made != 1:
        raise RagstepError(
            f"bench chat: expected one LLM request and a streamed answer per question, got {made} "
            f"requests and events {sorted(seen)}"
        )
    return Asked(
        references_ms=ms(seen["references"] - started),
        llm_request_ms=ms(server.received[before] - started),
        llm_request_cpu_ms=ms(server.received_cpu[before] - started_cpu),
        first_token_ms=ms(seen["answer"] - started),
        state=final,
    )


def relay(ctx: Context, request: ChatRequest, tokens: int) -> float:
    """Tokens/s of one streamed answer of ``tokens`` events, from the references event to the done event."""
    times = {name: at for at, name, _ in _events(request, ctx) if name in ("references", "done")}
    if len(times) != 2:
        raise RagstepError(
            f"bench chat: the relayed answer's stream had events {sorted(times)}, not references and done"
        )
    return tokens / (times["done"] - times["references"])


def filter_rate(tokens: Sequence[str]) -> float:
    """Tokens/s through :class:`AnswerFilter` alone."""
    flt = AnswerFilter()
    started = time.perf_counter()
    for token in tokens:
        flt.feed(token)
    flt.flush()
    return len(tokens) / (time.perf_counter() - started)


def machine() -> dict[str, Any]:
    cpu = None
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            cpu = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), None)
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu": cpu or platform.processor() or None, "python": platform.python_version()}


def run_chat_bench(
    docs: int = 100_000,
    questions: int = 100,
    *,
    tokens: int = 20_000,
    streams: int = 5,
    answer_len: int = 16,
    bench_dir: str | Path | None = None,
    batch: int = 1000,
    seed: int = 0,
    http: bool = False,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """The report; with ``http``, also the ``http`` and ``langchain`` sections (:mod:`ragstep.bench.chat_http`)."""
    if min(docs, questions, tokens, streams, batch) < 1:
        raise InputError("--docs, --questions, --tokens, --streams and --batch must be positive")
    if min(answer_len, tokens) < MIN_ANSWER_TOKENS:
        raise InputError(f"--answer-tokens and --tokens must be at least {MIN_ANSWER_TOKENS} (an answer cites)")
    if http:
        from ragstep.bench import chat_http

        chat_http.require_peers()
    import numpy as np

    from ragstep.context import Clients
    from ragstep.settings import Settings

    say = progress or (lambda _msg: None)
    folder = find_bench_dir(bench_dir)
    rng = np.random.default_rng(seed)
    texts = corpus_texts(folder, docs, seed)
    vectors = unit_vectors(rng, docs)
    qtexts = query_texts(folder, questions)
    distinct = [*dict.fromkeys(qtexts), WARM_UP_QUERY]
    model = "precomputed:bench-chat"
    out: dict[str, Any] = {
        "docs": docs,
        "questions": questions,
        "answer_tokens": answer_len,
        "machine": machine(),
        "targets": {"llm_request_p50_ms": TARGET_LLM_REQUEST_P50_MS, "relay_tokens_per_s": TARGET_RELAY_TOKENS_PER_S},
    }
    with InstantLLM(answer_tokens(answer_len)) as server, tempfile.TemporaryDirectory(prefix="ragstep-bench-") as tmp:
        settings = Settings(
            data_dir=Path(tmp), chat_provider="openai", chat_model=MODEL, chat_base_url=server.url, chat_max_retries=0
        )
        ctx = Clients(settings).context()
        qvecs = dict(zip(distinct, unit_vectors(rng, len(distinct)), strict=True))
        embedder = PrecomputedEmbedder(model, qvecs)
        ctx.register_embedder(embedder)
        say(f"indexing {docs:,} chunks in batches of {batch:,} ...")
        kb, write_s, snapshot_s = build_index(ctx, texts, vectors, model, batch)
        out["index_s"] = round(write_s + snapshot_s, 2)

        def request(text: str, pipeline: str = "rag_stream") -> ChatRequest:
            return ChatRequest(
                query=text, knowledge_base_ids=[kb.id], pipeline=pipeline, chat={"enable_rewrite": False}
            )

        ask(ctx, server, request(WARM_UP_QUERY))  # stage modules, the HTTP connection, the snapshot's lazy parts
        say(f"timing {questions} questions (rag_stream, no rewrite) ...")
        to_request, to_token, to_send, search, overhead, request_cpu, search_cpu = [], [], [], [], [], [], []
        stages: dict[str, list[float]] = {}
        for text in qtexts:
            asked = ask(ctx, server, request(text))
            started, started_cpu = time.perf_counter(), time.process_time()
            run_pipeline("knowledge_search", new_state(SearchRequest(query=text, knowledge_base_ids=[kb.id]), ctx), ctx)
            search.append(ms(time.perf_counter() - started))
            search_cpu.append(ms(time.process_time() - started_cpu))
            request_cpu.append(asked.llm_request_cpu_ms)
            overhead.append(asked.llm_request_ms - search[-1])
            to_request.append(asked.llm_request_ms)
            to_token.append(asked.first_token_ms)
            to_send.append(asked.llm_request_ms - asked.references_ms)
            for row in asked.state.trace:
                if row.action == "run":
                    stages.setdefault(row.stage, []).append(row.duration_ms)
        out["llm_request_p50_ms"] = round(median(to_request), 3)
        out["llm_request_p95_ms"] = round(percentile(to_request, 95), 3)
        out["first_token_p50_ms"] = round(median(to_token), 3)
        out["first_token_p95_ms"] = round(percentile(to_token, 95), 3)
        out["search_pipeline_p50_ms"] = round(median(search), 3)
        out["chat_overhead_p50_ms"] = round(median(overhead), 3)
        out["references_to_request_p50_ms"] = round(median(to_send), 3)
        out["llm_request_cpu_p50_ms"] = round(median(request_cpu), 3)
        out["search_pipeline_cpu_p50_ms"] = round(median(search_cpu), 3)
        # chat_completion_stream's row also covers the answer's stream.
        out["stage_p50_ms"] = {name: round(median(values), 3) for name, values in stages.items()}

        if http:
            server.answer(plain_answer(answer_len))
            requests = [request(text) for text in qtexts]
            args = (ctx, server, requests, request(WARM_UP_QUERY), texts, vectors, embedder, MODEL, say)
            out.update(chat_http.compare(*args))

        say(f"relaying {streams} answers of {tokens:,} tokens (chat_stream) ...")
        long_answer = answer_tokens(tokens)
        server.answer(long_answer)
        rates = [relay(ctx, request(WARM_UP_QUERY, "chat_stream"), tokens) for _ in range(streams)]
        out["relay_tokens"] = tokens
        out["relay_streams"] = streams
        out["relay_tokens_per_s"] = round(median(rates), 1)
        out["relay_tokens_per_s_min"] = round(min(rates), 1)
        out["filter_tokens_per_s"] = round(median([filter_rate(long_answer) for _ in range(streams)]), 1)
    out["meets_targets"] = {
        "llm_request_p50_ms": out["llm_request_p50_ms"] <= TARGET_LLM_REQUEST_P50_MS,
        "relay_tokens_per_s": out["relay_tokens_per_s"] >= TARGET_RELAY_TOKENS_PER_S,
    }
    if http:
        out["targets"]["http_added_p50_ms"] = chat_http.TARGET_HTTP_ADDED_P50_MS
        out["targets"]["langchain_ratio"] = chat_http.TARGET_LANGCHAIN_RATIO
        lc = out["langchain"]
        out["meets_targets"]["http_added_p50_ms"] = out["http"]["added_p50_ms"] <= chat_http.TARGET_HTTP_ADDED_P50_MS
        out["meets_targets"]["langchain_ratio_in_process"] = lc["ratio_in_process"] >= chat_http.TARGET_LANGCHAIN_RATIO
        out["meets_targets"]["langchain_ratio_http"] = lc["ratio_http"] >= chat_http.TARGET_LANGCHAIN_RATIO
    out["peak_rss_mb"] = peak_rss_mb()
    return out


def render(r: dict[str, Any]) -> str:
    from ragstep.bench.common import fmt

    m, targets = r["machine"], r["targets"]

    def verdict(key: str) -> str:
        return "met" if r["meets_targets"][key] else "missed"

    lines = [
        f"ragstep bench chat: {r['docs']:,} chunks, {r['questions']} questions, instant chat model on 127.0.0.1",
        f"machine: {m['nproc']} CPUs, {m['cpu'] or 'unknown CPU'}, Python {m['python']}",
        f"index built in {r['index_s']} s",
        "",
        f"time to the LLM request (rag_stream, no rewrite): p50 {fmt(r['llm_request_p50_ms'])} ms, "
        f"p95 {fmt(r['llm_request_p95_ms'])} ms (target p50 <= {fmt(targets['llm_request_p50_ms'], 0)} ms: "
        f"{verdict('llm_request_p50_ms')})",
        f"time to the first answer token: p50 {fmt(r['first_token_p50_ms'])} ms, p95 {fmt(r['first_token_p95_ms'])} ms",
        f"knowledge_search on the same questions: p50 {fmt(r['search_pipeline_p50_ms'])} ms; "
        f"chat on top of it: p50 {fmt(r['chat_overhead_p50_ms'])} ms, of which from the references event to the "
        f"request: {fmt(r['references_to_request_p50_ms'])} ms",
        f"CPU time (all threads), p50: to the LLM request {fmt(r['llm_request_cpu_p50_ms'])} ms, knowledge_search "
        f"{fmt(r['search_pipeline_cpu_p50_ms'])} ms",
        "stages, p50 ms: " + ", ".join(f"{k} {fmt(v)}" for k, v in r["stage_p50_ms"].items()),
        f"relay (chat_stream, {r['relay_streams']} x {r['relay_tokens']:,} tokens): "
        f"{fmt(r['relay_tokens_per_s'], 0)} tokens/s, slowest {fmt(r['relay_tokens_per_s_min'], 0)} "
        f"(target >= {fmt(targets['relay_tokens_per_s'], 0)}: {verdict('relay_tokens_per_s')})",
        f"stream_filter alone: {fmt(r['filter_tokens_per_s'], 0)} tokens/s",
    ]
    if "http" in r:
        h, lc = r["http"], r["langchain"]
        lines += [
            "",
            f"time to the first answer token, stateless, same questions and loop ({h['server']}):",
            f"  in-process (stream_stateless_chat): p50 {fmt(h['in_process_first_token_p50_ms'])} ms, "
            f"p95 {fmt(h['in_process_first_token_p95_ms'])} ms",
            f"  POST /v1/chat/completions (stream): p50 {fmt(h['first_token_p50_ms'])} ms, "
            f"p95 {fmt(h['first_token_p95_ms'])} ms",
            f"  added by HTTP, per question: p50 {fmt(h['added_p50_ms'])} ms, p95 {fmt(h['added_p95_ms'])} ms "
            f"(target p50 <= {fmt(targets['http_added_p50_ms'], 0)} ms: {verdict('http_added_p50_ms')}); "
            f"in CPU time (all threads): p50 {fmt(h['added_cpu_p50_ms'])} ms",
            f"  LangChain (BM25Retriever + {lc['vector_store']} in EnsembleRetriever, ChatOpenAI streaming): "
            f"p50 {fmt(lc['first_token_p50_ms'])} ms, p95 {fmt(lc['first_token_p95_ms'])} ms; "
            f"its index built in {lc['index_s']} s",
            f"  LangChain / ragstep, p50: {fmt(lc['ratio_in_process'])}x in-process "
            f"({verdict('langchain_ratio_in_process')}), {fmt(lc['ratio_http'])}x over HTTP "
            f"({verdict('langchain_ratio_http')}) (target >= {fmt(targets['langchain_ratio'], 0)}x)",
        ]
    lines.append(f"peak RSS {fmt(r['peak_rss_mb'], 1)} MiB")
    return "\n".join(lines)
