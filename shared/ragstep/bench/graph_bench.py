"""Knowledge graph and parallel search figures (``python -m ragstep.bench.graph_bench``).

* Extraction throughput: :func:`ragstep.stages.ingest.graph.extract_graph` over the first ``--docs`` msmarco-5k
  passages (one chunk each) against a scripted OpenAI-compatible server on 127.0.0.1 that answers every chunk with
  its capitalised phrases as nodes and consecutive pairs as relations, after ``--model-latency-ms`` (0: the
  machinery's own cost; a real model's latency is what dominates). Response cache off, so every chunk is a call.
  Chunks/s at concurrency 1 and at the configured concurrency, median of ``--repeat`` runs.
* Parallel search: rag_stream's ``[chunk_search || entity_search]`` step against each branch alone, per query in
  turn (so the machine's noise hits all three alike), over the msmarco queries; the question's entities are the
  query's words and word pairs that name graph nodes. Reported: p50 of each branch, p50 of the slower branch per
  query, p50 of the Parallel step, and the added latency = p50(parallel) - p50(slower branch alone).
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from ragstep.bench.common import find_bench_dir, median, ms, percentile
from ragstep.retrieval.text import stopwords

_PHRASE = re.compile(r"\b[A-Z][\w-]+(?:\s+[A-Z][\w-]+)*")


def extraction_answer(text: str) -> str:
    # Capitalised phrases, less sentence-initial function words ("The", "In"): roughly what a model names.
    stop = stopwords()
    phrases = (m.group(0) for m in _PHRASE.finditer(text))
    names = list(dict.fromkeys(p for p in phrases if p.casefold() not in stop))[:12]
    relations = [{"source": a, "target": b, "type": "mentioned with"} for a, b in itertools.pairwise(names)]
    return json.dumps({"nodes": [{"name": n} for n in names], "relations": relations})


class ScriptedModelServer:
    """An OpenAI-compatible ``/chat/completions`` that extracts capitalised phrases, after a fixed latency."""

    def __init__(self, latency_s: float) -> None:
        latency = latency_s

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out as separate writes: without TCP_NODELAY, Nagle + delayed ACK add ~40 ms.
            disable_nagle_algorithm = True

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                text = body["messages"][-1]["content"].split("\n", 1)[-1]
                if latency:
                    time.sleep(latency)
                message = {"role": "assistant", "content": extraction_answer(text)}
                usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
                choices = [{"index": 0, "message": message, "finish_reason": "stop"}]
                payload = json.dumps({"object": "chat.completion", "choices": choices, "usage": usage}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet."""

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True).start()
        port = self._httpd.server_address[1]
        self.url = f"http://127.0.0.1:{port}/v1"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def run(args: argparse.Namespace) -> dict[str, Any]:
    from ragstep.app.knowledge_bases import create_knowledge_base
    from ragstep.app.search import new_state
    from ragstep.context import Clients
    from ragstep.models import Chunk, SearchRequest
    from ragstep.pipeline import get_pipeline, run_pipeline, run_stage
    from ragstep.pipeline.definitions import Parallel, Pipeline
    from ragstep.retrieval.graph_names import normalise_name
    from ragstep.settings import Settings
    from ragstep.stages.ingest.graph import extract_graph

    folder = find_bench_dir(args.bench_dir) / "msmarco-5k"
    docs = [json.loads(line) for line in (folder / "corpus.jsonl").open(encoding="utf-8")][: args.docs]
    queries = [json.loads(line)["text"] for line in (folder / "queries.jsonl").open(encoding="utf-8")]
    out: dict[str, Any] = {"docs": len(docs), "model_latency_ms": args.model_latency_ms}
    server = ScriptedModelServer(args.model_latency_ms / 1000.0)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            settings = Settings(data_dir=Path(tmp), chat_provider="openai", chat_model="scripted",
                                chat_base_url=server.url, chat_max_retries=0, cache_backend="none",
                                graph_extraction_concurrency=args.concurrency)  # fmt: skip
            clients = Clients(settings)
            ctx = clients.context()
            kb = create_knowledge_base(ctx, "bench", embedding_model="none", graph=True)
            chunks = [
                Chunk(id=f"c{i}", knowledge_id=f"k{i}", knowledge_base_id=kb.id,
                      content=f"{d.get('title', '')} {d['text']}".strip(), end_at=len(d["text"]))
                for i, d in enumerate(docs)
            ]  # fmt: skip
            for c in chunks:
                ctx.index.replace_knowledge(c.knowledge_id, [c], None, None)
            model = ctx.chat_model
            for workers in sorted({1, args.concurrency}):
                clients.settings.graph_extraction_concurrency = workers
                rates = []
                for _ in range(args.repeat):
                    started = time.perf_counter()
                    graph, stats = extract_graph(chunks, ctx, model)
                    rates.append(len(chunks) / (time.perf_counter() - started))
                    assert stats.failed == 0, stats.errors
                out[f"extract_chunks_per_s_concurrency_{workers}"] = round(median(rates), 1)
            out["graph_nodes"], out["graph_relations"] = len(graph.nodes), len(graph.relations)
            ctx.graph.replace_knowledge(kb.id, "bench", graph)

            names = set(ctx.graph.names([kb.id]))
            step = next(s for s in get_pipeline("rag_stream").steps if isinstance(s, Parallel) and s.name == "search")
            parallel = Pipeline("bench_search", (step,), deployed=False)
            timings: dict[str, list[float]] = {"chunk_search": [], "entity_search": [], "slower": [], "parallel": []}
            with_entities = 0
            for n in range(args.queries + 5):
                query = queries[n % len(queries)]
                words = query.split()
                grams = [*words, *(" ".join(p) for p in itertools.pairwise(words))]
                entities = [g for g in grams if normalise_name(g) in names][:5] or words[:2]
                base = new_state(SearchRequest(query=query, knowledge_base_ids=[kb.id]), ctx, pipeline="rag_stream")
                base = base.with_entities(entities)
                one: dict[str, float] = {}
                for name in ("chunk_search", "entity_search"):
                    started = time.perf_counter()
                    run_stage(name, base, ctx)
                    one[name] = time.perf_counter() - started
                started = time.perf_counter()
                joined = run_pipeline(parallel, base, ctx)
                one["parallel"] = time.perf_counter() - started
                if n < 5:  # warm-up
                    continue
                with_entities += any(r.match_type == "graph" for r in joined.results("search_results"))
                for name in ("chunk_search", "entity_search", "parallel"):
                    timings[name].append(one[name])
                timings["slower"].append(max(one["chunk_search"], one["entity_search"]))
            out["queries"] = args.queries
            out["queries_with_graph_results"] = with_entities
            for name, values in timings.items():
                out[f"{name}_p50_ms"] = ms(median(values))
                out[f"{name}_p95_ms"] = ms(percentile(values, 95))
            out["parallel_added_p50_ms"] = round(out["parallel_p50_ms"] - out["slower_p50_ms"], 3)
    finally:
        server.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ragstep.bench.graph_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--bench-dir")
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--model-latency-ms", type=float, default=0.0)
    parser.add_argument("--repeat", type=int, default=3)
    print(json.dumps(run(parser.parse_args(argv)), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
