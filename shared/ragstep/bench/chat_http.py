"""``ragstep bench chat --http``: what the HTTP layer adds to the time to the first answer token, and the same
questions through LangChain's usual retrieval chain, in the same run against the same instant chat model.

* ``http``: the FastAPI app ``ragstep serve`` runs (:func:`~ragstep.entry.http.app.create_app` over the benchmark's
  clients: same data dir, index, settings), under uvicorn on 127.0.0.1 in a thread of this process. Each question is a
  streamed ``POST /v1/chat/completions`` as OpenAI clients send it (stateless, ``model: ragstep``), read with an httpx
  streaming client: the time from sending it to parsing the first chunk whose ``delta.content`` is not empty. In the
  same loop, the same question in-process through :func:`~ragstep.app.chat.stream_stateless_chat` -- the call the
  route makes for such a request -- to its first ``answer`` event; the two alternate which goes first, so neither
  always runs on caches the other warmed. ``added``: the median over questions of (HTTP - in-process). Client, server
  and chat model share one process and its GIL, so the client's own parsing is in the figure: an upper bound on what
  the server adds. ``added_cpu``: the same difference in the process's CPU time (all threads), which leaves out the
  waits for a CPU that other load on the machine puts on each of the HTTP path's thread hand-offs.
* ``langchain``: LangChain's usual hybrid chain over the same chunks -- ``BM25Retriever`` (rank_bm25, LangChain's
  default tokenizer) and a FAISS vector store (its default exact ``IndexFlatL2``; the vectors are unit length, so
  the order is cosine's) with an
  ``Embeddings`` that looks up the same precomputed vectors ragstep's embedder serves, in an ``EnsembleRetriever``
  (weights 0.5/0.5, its default), the passages formatted into a ``ChatPromptTemplate``, ``ChatOpenAI(streaming=True)``
  against the same server and ``StrOutputParser``: the time from ``chain.stream(question)`` to its first non-empty
  piece, in the same loop. Each retriever returns :data:`LANGCHAIN_K` passages, ragstep's rerank_top_k, so both
  prompts carry about as many.

Both indexes stay in the process, frozen out of the garbage collector's walks (``gc.freeze``) while this phase runs:
rank_bm25's per-chunk dicts would otherwise make every full collection, in ragstep's code as in LangChain's, pay for
LangChain's heap. In this phase the model's answer has no ``<think>`` block: LangChain hands the raw first token on,
ragstep filters the reasoning out first, and a reasoning prefix would time different tokens on the two sides.
"""

from __future__ import annotations

import gc
import importlib.util
import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from importlib import metadata
from typing import TYPE_CHECKING, Any

from ragstep.app.chat import stream_stateless_chat
from ragstep.bench.common import median, ms, percentile
from ragstep.errors import InputError, RagstepError
from ragstep.models import ChatRequest

if TYPE_CHECKING:
    import httpx
    import numpy as np

    from ragstep.adapters.embedders import PrecomputedEmbedder
    from ragstep.bench.instant_llm import InstantLLM
    from ragstep.context import Clients, Context

#: Time to first token the HTTP layer may add (p50 of the per-question difference) and how many times faster than
#: LangChain's chain ragstep's first token must come (the issue's targets).
TARGET_HTTP_ADDED_P50_MS = 10.0
TARGET_LANGCHAIN_RATIO = 3.0
#: Passages each LangChain retriever returns: ragstep's default rerank_top_k, the passages its prompt carries.
LANGCHAIN_K = 10
LANGCHAIN_WEIGHTS = (0.5, 0.5)
PROFILE = "ragstep"  # the model name clients send for the default RAG pipeline
SERVER_START_S = 30.0
LANGCHAIN_PACKAGES = (
    "langchain-core",
    "langchain-classic",
    "langchain-community",
    "langchain-openai",
    "rank-bm25",
    "faiss-cpu",
)


def require_peers() -> None:
    """Fail before any index is built when ``--http`` cannot run: uvicorn serves the API, LangChain is the peer."""
    for module, extra in (
        ("uvicorn", "serve"),
        ("langchain_core", "bench"),
        ("langchain_classic", "bench"),
        ("langchain_community", "bench"),
        ("langchain_openai", "bench"),
        ("rank_bm25", "bench"),
        ("faiss", "bench"),
    ):
        if importlib.util.find_spec(module) is None:  # found, not imported: the imports come with the phase
            raise InputError(f"`ragstep bench chat --http` needs {module}: pip install 'ragstep[{extra}]'")


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


# -- the API server --------------------------------------------------------------------------------------------------


@contextmanager
def serving(clients: Clients) -> Iterator[str]:
    """The app ``ragstep serve`` runs, over ``clients``, under uvicorn on 127.0.0.1 (a free port) in a thread; yields
    its base URL. The access log is off: ``ragstep serve`` writes one line per request to stderr, which ``--json``
    must keep clean (and a terminal would slow)."""
    import uvicorn

    from ragstep.entry.http.app import create_app

    config = uvicorn.Config(
        create_app(clients), host="127.0.0.1", port=0, log_level="warning", access_log=False, lifespan="on"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="bench-http-api", daemon=True)
    thread.start()
    deadline = time.monotonic() + SERVER_START_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RagstepError("bench chat --http: the API server did not start on 127.0.0.1")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


# -- one question, three ways ----------------------------------------------------------------------------------------


Timed = tuple[float, float]  # (wall-clock ms, process CPU ms over the same span)


def in_process_first_token(ctx: Context, request: ChatRequest) -> Timed:
    """From handing the stateless question to ragstep to its first ``answer`` event (the answer is then read to its
    end, untimed, as a caller would)."""
    started, started_cpu = time.perf_counter(), time.process_time()
    first = first_cpu = None
    for event in stream_stateless_chat(request, [], ctx):
        if first is None and event.event == "answer":
            first, first_cpu = time.perf_counter(), time.process_time()
    if first is None or first_cpu is None:
        raise RagstepError("bench chat --http: the in-process answer had no answer event")
    return ms(first - started), ms(first_cpu - started_cpu)


def http_body(request: ChatRequest) -> dict[str, Any]:
    """The Chat Completions request an OpenAI client sends for ``request`` (ragstep's options at the top level)."""
    return {
        "model": PROFILE,
        "messages": [{"role": "user", "content": request.query}],
        "stream": True,
        "knowledge_base_ids": request.knowledge_base_ids,
        "chat": request.chat,
    }


def http_first_token(http: httpx.Client, request: ChatRequest) -> Timed:
    """From sending the streamed request to parsing the first chunk with answer text (the stream is then read to its
    end, untimed, so the connection is reused as a client's is). The CPU time covers the server's threads too."""
    started, started_cpu = time.perf_counter(), time.process_time()
    first = first_cpu = None
    with http.stream("POST", "/v1/chat/completions", json=http_body(request)) as response:
        if response.status_code != 200:
            response.read()
            raise RagstepError(f"bench chat --http: HTTP {response.status_code}: {response.text[:300]}")
        for line in response.iter_lines():
            if first is not None or not line.startswith("data: {"):
                continue
            chunk = json.loads(line[len("data: ") :])
            if "error" in chunk:
                raise RagstepError(f"bench chat --http: the stream failed: {chunk['error'].get('message')}")
            choices = chunk.get("choices") or []
            if choices and choices[0].get("delta", {}).get("content"):
                first, first_cpu = time.perf_counter(), time.process_time()
    if first is None or first_cpu is None:
        raise RagstepError("bench chat --http: the HTTP stream had no answer text")
    return ms(first - started), ms(first_cpu - started_cpu)


def langchain_first_token(chain: Any, question: str) -> float:
    """ms from ``chain.stream(question)`` to its first non-empty piece (then read to its end, untimed)."""
    started = time.perf_counter()
    first = None
    for piece in chain.stream(question):
        if first is None and piece:
            first = time.perf_counter()
    if first is None:
        raise RagstepError("bench chat --http: LangChain's stream had no text")
    return ms(first - started)


# -- LangChain's chain -----------------------------------------------------------------------------------------------


def langchain_chain(
    texts: Sequence[str], vectors: np.ndarray, embedder: PrecomputedEmbedder, llm_url: str, model: str
) -> tuple[Any, float]:
    """LangChain's usual hybrid RAG chain over ``texts`` (row i of ``vectors`` is text i's vector), and the seconds
    its two indexes took to build (LangChain's imports, ~2-6 s, are not in them: ragstep's are not in its figure)."""
    from langchain_classic.retrievers import EnsembleRetriever
    from langchain_community.retrievers import BM25Retriever
    from langchain_community.vectorstores import FAISS
    from langchain_core.documents import Document
    from langchain_core.embeddings import Embeddings
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.runnables import RunnablePassthrough
    from langchain_openai import ChatOpenAI

    class Precomputed(Embeddings):
        """ragstep's precomputed lookup behind LangChain's interface: the query vectors both sides search with."""

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return [[float(x) for x in row] for row in embedder.embed(texts)]

        def embed_query(self, text: str) -> list[float]:
            return [float(x) for x in embedder.embed_query(text)]

    started = time.perf_counter()
    bm25 = BM25Retriever.from_texts(list(texts), k=LANGCHAIN_K)
    # The rows as they are (FAISS stacks them into one float32 matrix); .tolist() would cost a Python float each.
    store = FAISS.from_embeddings(zip(texts, vectors, strict=True), Precomputed())
    build_s = time.perf_counter() - started
    ensemble = EnsembleRetriever(
        retrievers=[bm25, store.as_retriever(search_kwargs={"k": LANGCHAIN_K})], weights=list(LANGCHAIN_WEIGHTS)
    )
    prompt = ChatPromptTemplate.from_messages(
        [
            ("system", "Answer the question from these passages and cite them.\n\n{context}"),
            ("human", "{question}"),
        ]
    )
    llm = ChatOpenAI(model=model, base_url=llm_url, api_key="bench", streaming=True, max_retries=0)

    def passages(docs: list[Document]) -> str:
        return "\n\n".join(f"[{n}] {d.page_content}" for n, d in enumerate(docs, 1))

    chain = {"context": ensemble | passages, "question": RunnablePassthrough()} | prompt | llm | StrOutputParser()
    return chain, build_s


# -- the comparison --------------------------------------------------------------------------------------------------


def compare(
    ctx: Context,
    server: InstantLLM,
    requests: Sequence[ChatRequest],
    warm_up: ChatRequest,
    texts: Sequence[str],
    vectors: np.ndarray,
    embedder: PrecomputedEmbedder,
    model: str,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """The ``http`` and ``langchain`` sections of the report, ``requests`` asked three ways each."""
    say(f"building LangChain's BM25 + vector ensemble over {len(texts):,} chunks ...")
    chain, langchain_index_s = langchain_chain(texts, vectors, embedder, server.url, model)
    # Both indexes are now millions of long-lived objects (rank_bm25 keeps a dict per chunk): frozen, the collector
    # stops walking them on every full pass, which would otherwise add LangChain's heap to ragstep's timings (and to
    # LangChain's own).
    gc.collect()
    gc.freeze()
    try:
        return _timed(ctx, requests, warm_up, chain, langchain_index_s, say)
    finally:
        gc.unfreeze()


def _timed(
    ctx: Context,
    requests: Sequence[ChatRequest],
    warm_up: ChatRequest,
    chain: Any,
    langchain_index_s: float,
    say: Callable[[str], None],
) -> dict[str, Any]:
    import httpx

    inproc, over_http, added, added_cpu, lc = [], [], [], [], []
    # trust_env off: the server is on 127.0.0.1, and a proxy from the environment must not carry the requests.
    with serving(ctx.clients) as base, httpx.Client(base_url=base, timeout=60, trust_env=False) as http:
        # Warm-up: the route's first request, the connections, the chain's first run.
        http_first_token(http, warm_up)
        in_process_first_token(ctx, warm_up)
        langchain_first_token(chain, warm_up.query)
        say(f"timing {len(requests)} questions in-process, over HTTP and through LangChain ...")
        for n, request in enumerate(requests):
            if n % 2:
                here = in_process_first_token(ctx, request)
                there = http_first_token(http, request)
            else:
                there = http_first_token(http, request)
                here = in_process_first_token(ctx, request)
            inproc.append(here[0])
            over_http.append(there[0])
            added.append(there[0] - here[0])
            added_cpu.append(there[1] - here[1])
            lc.append(langchain_first_token(chain, request.query))
    ragstep_p50, http_p50, lc_p50 = median(inproc), median(over_http), median(lc)
    return {
        "http": {
            "server": "uvicorn on 127.0.0.1, a thread of the benchmark's process",
            "first_token_p50_ms": round(http_p50, 3),
            "first_token_p95_ms": round(percentile(over_http, 95), 3),
            "in_process_first_token_p50_ms": round(ragstep_p50, 3),
            "in_process_first_token_p95_ms": round(percentile(inproc, 95), 3),
            "added_p50_ms": round(median(added), 3),
            "added_p95_ms": round(percentile(added, 95), 3),
            "added_cpu_p50_ms": round(median(added_cpu), 3),
        },
        "langchain": {
            "versions": {name: _version(name) for name in LANGCHAIN_PACKAGES},
            "vector_store": "FAISS (IndexFlatL2)",
            "k": LANGCHAIN_K,
            "weights": list(LANGCHAIN_WEIGHTS),
            "index_s": round(langchain_index_s, 2),
            "first_token_p50_ms": round(lc_p50, 3),
            "first_token_p95_ms": round(percentile(lc, 95), 3),
            "ratio_in_process": round(lc_p50 / ragstep_p50, 2),
            "ratio_http": round(lc_p50 / http_p50, 2),
        },
    }
