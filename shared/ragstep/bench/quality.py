"""``ragstep bench quality --set DIR``: retrieval quality on a BEIR-layout set.

The corpus goes through the ingest stages (parse, chunk, embed, index) into a fresh temporary data dir. When the
set ships precomputed embeddings (``corpus.emb.npy`` / ``queries.emb.npy``), a precomputed embedder serves them, so
no model is needed: every chunk of a document gets its document's vector (the set embeds whole documents). The
e5 files (``--vectors e5``) are served with the local e5 adapter's declared score scale, so every threshold reads
them as it reads a knowledge base of the default model; ``--undeclared-scale`` serves them as a model that declares
no scale (a provider's ``openai:`` / ``bedrock:`` model). A qrels line of a query that queries.jsonl does not hold is
left out (and counted in the report), not scored as a query that found nothing. Each run
retrieves 100 chunks per query; documents rank by their best chunk.

Runs: ``bm25`` (the keyword retriever alone, no threshold), ``dense`` (the vector retriever alone, no threshold),
``hybrid`` (the chunk_search stage with its default settings) and ``pipeline`` (the whole knowledge_search pipeline).
``hybrid`` and ``pipeline`` keep their thresholds; only their result counts are raised to 100 so Recall@100 can be
measured. ``default`` is exactly what ``ragstep search --top-k 10`` returns (every threshold as configured, at most
10 results); it also reports the mean number of results, overall and over the queries with several relevant
documents (a user's chat model should see more than one passage there).
The merge stage folds duplicate passages into one result and records the sources it folded; ``pipeline``
credits a result with those sources (at its rank), ``pipeline_strict`` counts only the kept result's own document.

The local reranker against RAGFlow's original (RAGFlow issues #11759, #12013: its token similarity counts each query
term's presence only, so term frequency, the x2/x5 field weights and exact phrases change nothing):
``pipeline_ragflow_rerank`` is ``pipeline`` with the rerank stage's local reranker scoring by RAGFlow's presence-only
formula (``TokenVectorReranker(formula="ragflow")``, fixed tk 0.3 / vt 0.7); it compares with ``pipeline`` when
``RAGSTEP_RERANKER`` is ``none`` (the default). ``rerank_ragstep`` and ``rerank_ragflow`` isolate the reranker: the
``hybrid`` candidates (100 chunks) sorted by the local reranker's score alone, ours and RAGFlow's formula (no
composite score, threshold, MMR or merge; equal scores keep the search order).
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import json
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ragstep.adapters.embedders import PrecomputedEmbedder
from ragstep.adapters.embedders.local import E5_SCORE_SCALE
from ragstep.adapters.rerankers import TokenVectorReranker
from ragstep.app.ingest import new_ingest_state
from ragstep.app.search import new_state
from ragstep.bench.metrics import evaluate
from ragstep.context import Clients, Context
from ragstep.errors import InputError
from ragstep.models import IngestState, KnowledgeBase, SearchRequest, check_query
from ragstep.models.scale import COMMON_SCALE, ScoreScale
from ragstep.pipeline import run_pipeline, run_stage
from ragstep.ports import SearchFilter
from ragstep.retrieval.text import query_terms
from ragstep.settings import Settings
from ragstep.stages.ingest.products import get_chunks, source_blob_key
from ragstep.stages.search.chunk_rerank import model_scores, rerank_text

DEPTH = 100
#: The `default` run's `ragstep search --top-k`.
DEFAULT_TOP_K = 10
#: The precomputed vectors a set is read with unless told otherwise (``corpus.emb.npy``, ``queries.emb.npy``).
DEFAULT_VECTORS = "emb"
#: ``--vectors none``: keyword search only, as a knowledge base without an embedding model.
NO_VECTORS = "none"
#: Vector files made by a model whose cosines are off the common scale: the scale its adapter declares.
VECTOR_SCALES = {"e5": E5_SCORE_SCALE}


class ScaledPrecomputedEmbedder(PrecomputedEmbedder):
    """Precomputed vectors that declare their model's score scale (:class:`ragstep.ports.ScaledEmbedder`)."""

    def __init__(self, model_id: str, vectors_by_text: dict[str, np.ndarray], scale: ScoreScale) -> None:
        super().__init__(model_id, vectors_by_text)
        self.score_scale = scale


@dataclass
class BeirSet:
    name: str
    corpus: list[tuple[str, str, str]]  # (id, title, text)
    queries: list[tuple[str, str]]  # (id, text)
    qrels: dict[str, dict[str, int]]
    corpus_emb: np.ndarray | None
    query_emb: np.ndarray | None
    #: The declared score scale of the model that made the vectors (the local e5's for ``e5``): the bench searches
    #: them as a knowledge base of that model is searched, thresholds read on the common scale.
    #: None: served as a model that declares no scale (``--undeclared-scale``, a provider's model).
    scale: ScoreScale | None = COMMON_SCALE
    #: Judged queries of the qrels that queries.jsonl does not hold: left out of every average.
    unasked_judged: int = 0


def _jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def load_beir(folder: Path, vectors: str = DEFAULT_VECTORS, *, declared_scale: bool = True) -> BeirSet:
    """A BEIR-layout set; ``vectors`` picks its precomputed embeddings (``corpus.<vectors>.npy`` and
    ``queries.<vectors>.npy``: ``emb`` all-MiniLM-L6-v2, ``e5`` multilingual-e5-small in shared/bench; ``none``
    ignores them: keyword search only). ``declared_scale=False`` serves them without their model's declared score
    scale, as the vectors of a provider's model (``openai:``, ``bedrock:``) that declares none."""
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"{folder}: not a folder; expected a BEIR-layout set (corpus.jsonl, queries.jsonl, qrels.tsv)")
    for required in ("corpus.jsonl", "queries.jsonl"):
        if not (folder / required).is_file():
            raise InputError(f"{folder}: missing {required}; expected a BEIR-layout folder")
    if qrels_file(folder) is None:
        raise InputError(f"{folder}: missing qrels.tsv (or BEIR's qrels/test.tsv); expected a BEIR-layout folder")
    try:
        bench = _read_beir(folder, vectors)
    except (ValueError, KeyError, TypeError) as exc:  # bad JSON, a missing field, a bad score, bad UTF-8 ...
        detail = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc).splitlines()[0]
        raise InputError(f"{folder}: not a valid BEIR set ({type(exc).__name__}: {detail})") from exc
    if not declared_scale and bench.corpus_emb is not None:
        bench.scale = None
        bench.name = f"{bench.name}-undeclared"
    return bench


def qrels_file(folder: Path) -> Path | None:
    """The set's judgements: ``qrels.tsv``, or the test split of BEIR's own layout (``qrels/test.tsv``)."""
    return next((p for p in (folder / "qrels.tsv", folder / "qrels" / "test.tsv") if p.is_file()), None)


def _read_beir(folder: Path, vectors: str) -> BeirSet:
    corpus = [(str(d["_id"]), d.get("title") or "", d.get("text") or "") for d in _jsonl(folder / "corpus.jsonl")]
    queries = [(str(q["_id"]), q["text"]) for q in _jsonl(folder / "queries.jsonl")]
    judged: dict[str, dict[str, int]] = {}
    with (qrels_file(folder) or folder / "qrels.tsv").open(encoding="utf-8") as fh:
        reader = csv.reader(fh, delimiter="\t")
        next(reader, None)  # header
        for row in reader:
            if len(row) >= 3:
                judged.setdefault(row[0], {})[row[1]] = int(float(row[2]))
    # Only the queries the set asks are scored: judgements of a query queries.jsonl does not hold (a public set's
    # qrels often cover a larger split) would count as zeros. How many were left out is reported.
    asked = {qid for qid, _ in queries}
    qrels = {qid: j for qid, j in judged.items() if qid in asked}
    unasked = sum(1 for qid, j in judged.items() if qid not in asked and any(r > 0 for r in j.values()))
    corpus_emb = query_emb = None
    corpus_file, queries_file = folder / f"corpus.{vectors}.npy", folder / f"queries.{vectors}.npy"
    present = corpus_file.is_file() and queries_file.is_file()
    if vectors not in (DEFAULT_VECTORS, NO_VECTORS) and not present:
        raise InputError(f"{folder}: no {corpus_file.name} / {queries_file.name} for --vectors {vectors}")
    if present and vectors != NO_VECTORS:
        corpus_emb = np.load(corpus_file).astype(np.float32)
        query_emb = np.load(queries_file).astype(np.float32)
        if corpus_emb.shape[0] != len(corpus) or query_emb.shape[0] != len(queries):
            raise InputError(f"{folder}: embedding rows do not match corpus/query lines")
    # The set is named after its vectors too: "msmarco-5k-e5" is another experiment than "msmarco-5k".
    name = folder.name if vectors == DEFAULT_VECTORS else f"{folder.name}-{vectors}"
    return BeirSet(
        name, corpus, queries, qrels, corpus_emb, query_emb, VECTOR_SCALES.get(vectors, COMMON_SCALE), unasked
    )


def document_text(title: str, text: str) -> str:
    return f"{title} {text}".strip() if title else text


def build_index(bench: BeirSet, ctx: Context, embedding_model: str = "none") -> tuple[KnowledgeBase, float]:
    """Ingest the corpus through the ingest stages; returns the knowledge base and the ingest time in seconds.

    A set with precomputed vectors is searched with those; one without is embedded by ``embedding_model`` ("none":
    keyword search only, ``ragstep bench quality``'s way; ``ragstep bench answer`` embeds with the configured model,
    as a user's knowledge base is).

    Every document is a ``.txt`` file in the blob store (its BEIR id is its knowledge id, its title its title). The
    stages run corpus-wide, one stage at a time: every document is parsed and chunked first, so the precomputed
    embedder can be given each chunk's document vector before ``ingest_embed`` asks for it. A side effect that
    matters: no document is indexed when the others are parsed, so a passage the corpus holds twice is indexed twice
    (as BEIR scores it) instead of being skipped as a duplicate.
    """
    model = f"precomputed:{bench.name}" if bench.corpus_emb is not None else embedding_model
    kb = ctx.catalog.create_kb(
        KnowledgeBase(id=uuid.uuid4().hex, name=f"bench-{bench.name}", embedding_model=model, created_at=time.time())
    )
    started = time.perf_counter()
    states: list[IngestState] = []
    rows: list[int] = []
    for i, (doc_id, title, text) in enumerate(bench.corpus):
        body = document_text(title, text)
        if not body.strip():
            continue
        data = body.encode("utf-8")
        digest = hashlib.sha256(data).hexdigest()
        filename = f"{doc_id}.txt"
        key = source_blob_key(kb.id, doc_id, digest, filename)
        ctx.blobs.put(key, data, "text/plain; charset=utf-8")
        state = new_ingest_state(
            kb, knowledge_id=doc_id, blob_key=key, filename=filename, title=title, content_hash=digest, size=len(data)
        )
        states.append(run_stage("ingest_chunk", run_stage("ingest_parse", state, ctx), ctx))
        rows.append(i)
    if bench.corpus_emb is not None and bench.query_emb is not None:
        vectors_by_text: dict[str, np.ndarray] = {}
        for state, i in zip(states, rows, strict=True):
            for c in get_chunks(ctx.blobs, state.products.chunks or ""):
                vectors_by_text.setdefault(c.embed_text or c.content, bench.corpus_emb[i])
        for (_, qtext), vec in zip(bench.queries, bench.query_emb, strict=True):
            vectors_by_text.setdefault(qtext, vec)
            # The search embeds the query as the API accepted it, stripped (check_query): a question the set
            # writes with a trailing space ("... century? ") would otherwise find no vector and run on keywords only.
            vectors_by_text.setdefault(qtext.strip(), vec)
        ctx.register_embedder(
            PrecomputedEmbedder(model, vectors_by_text)
            if bench.scale is None
            else ScaledPrecomputedEmbedder(model, vectors_by_text, bench.scale)
        )
    for state in states:
        run_stage("ingest_index", run_stage("ingest_embed", state, ctx), ctx)
    ctx.index.keyword_search(["warm"], SearchFilter(), 1, 0.0)  # build the snapshot: part of indexing
    return kb, time.perf_counter() - started


def sources(results: list[Any]) -> list[str]:
    """Document ranking of pipeline results, counting the sources the merge stage folded into a result.

    A result stands for its own document and for the documents whose identical (or near-identical) text was folded
    into it (``metadata["duplicates"]``); each source ranks by its own score, ties keeping the pipeline's order.
    """
    entries: list[tuple[float, int, str]] = []
    for i, r in enumerate(results):
        entries.append((r.score, i, r.knowledge_id))
        entries.extend((d.get("score", r.score), i, d["knowledge_id"]) for d in r.metadata.get("duplicates", []))
    return [kid for _, _, kid in sorted(entries, key=lambda e: (-e[0], e[1]))]


def _acceptable(text: str) -> bool:
    try:
        check_query(text)
    except ValueError:
        return False
    return True


def _docs(chunk_ids: list[str]) -> list[str]:
    # Chunk ids are "<knowledge id>-<chunk index>" and the benchmark's knowledge ids are the BEIR document ids.
    return [cid.rsplit("-", 1)[0] for cid in chunk_ids]


@contextlib.contextmanager
def _reranker(ctx: Context, reranker: Any) -> Iterator[None]:
    """``ctx.reranker`` (the clients' cached property: the context is frozen) replaced by ``reranker`` for the
    duration."""
    previous = ctx.clients.reranker
    ctx.clients.reranker = reranker
    try:
        yield
    finally:
        ctx.clients.reranker = previous


ALL_RUNS = (
    "bm25",
    "dense",
    "hybrid",
    "rerank_ragstep",
    "rerank_ragflow",
    "pipeline",
    "pipeline_strict",
    "pipeline_ragflow_rerank",
    "default",
)


def run_quality(
    folder: Path,
    *,
    runs: tuple[str, ...] = ALL_RUNS,
    vectors: str = DEFAULT_VECTORS,
    settings: dict[str, Any] | None = None,
    declared_scale: bool = True,
) -> dict[str, Any]:
    """Every run of ``runs`` on the set in ``folder`` (read with its ``vectors``); ``settings`` are ``Settings``
    fields (``RAGSTEP_*`` without the prefix) the runs share, e.g. ``{"fusion": "rrf"}`` for another experiment."""
    from ragstep.entry.cli.search import top_k_overrides  # the very overrides `ragstep search --top-k` sends

    bench = load_beir(folder, vectors, declared_scale=declared_scale)
    with tempfile.TemporaryDirectory(prefix="ragstep-bench-") as tmp:
        ctx = Clients(Settings(data_dir=Path(tmp), **(settings or {}))).context()
        kb, ingest_s = build_index(bench, ctx)
        flt = SearchFilter(knowledge_base_ids=(kb.id,))
        qvec = (
            dict(zip((q for q, _ in bench.queries), bench.query_emb, strict=True))
            if bench.query_emb is not None
            else {}
        )

        def bm25(qid: str, text: str) -> list[str]:
            return _docs([h.chunk_id for h in ctx.index.keyword_search(query_terms(text), flt, DEPTH, 0.0)])

        def dense(qid: str, text: str) -> list[str]:
            hits = ctx.index.vector_search(qvec[qid], kb.embedding_model, flt, DEPTH, -1.0)
            return _docs([h.chunk_id for h in hits])

        def search_state(text: str) -> Any:
            req = SearchRequest(query=text, knowledge_base_ids=[kb.id], overrides={"embedding_top_k": DEPTH})
            return run_stage("chunk_search", new_state(req, ctx), ctx)

        def hybrid(qid: str, text: str) -> list[str]:
            return [r.knowledge_id for r in search_state(text).results("search_results")]

        def rerank_only(reranker: TokenVectorReranker) -> Callable[[str, str], list[str]]:
            def run(qid: str, text: str) -> list[str]:
                state = search_state(text)
                candidates = state.results("search_results")
                if not candidates:
                    return []
                # What the rerank stage hands its reranker: cleaned texts, titles, keywords, vectors, the query.
                with _reranker(ctx, reranker):
                    scores = model_scores(state, ctx, [rerank_text(r) for r in candidates])
                order = sorted(range(len(candidates)), key=lambda i: -scores[i])  # stable: ties keep search order
                return [candidates[i].knowledge_id for i in order]

            return run

        def pipeline(qid: str, text: str) -> list[str]:
            req = SearchRequest(
                query=text,
                knowledge_base_ids=[kb.id],
                overrides={"embedding_top_k": DEPTH, "rerank_top_k": DEPTH},
            )
            state = run_pipeline("knowledge_search", new_state(req, ctx), ctx)
            return sources(state.results("final_results"))

        ragflow = TokenVectorReranker(formula="ragflow")
        counts: list[int] = []

        def default(qid: str, text: str) -> list[str]:
            # What `ragstep search --top-k 10` returns: every threshold as configured, ten results at most. Folded
            # duplicates are credited as in `pipeline`: the result lists them (metadata.duplicates) for the user.
            req = SearchRequest(query=text, knowledge_base_ids=[kb.id], overrides=top_k_overrides(DEFAULT_TOP_K))
            state = run_pipeline("knowledge_search", new_state(req, ctx), ctx)
            counts.append(len(state.results("final_results")))
            return sources(state.results("final_results"))

        def pipeline_ragflow_rerank(qid: str, text: str) -> list[str]:
            with _reranker(ctx, ragflow):
                return pipeline(qid, text)

        def pipeline_strict(qid: str, text: str) -> list[str]:
            req = SearchRequest(
                query=text, knowledge_base_ids=[kb.id], overrides={"embedding_top_k": DEPTH, "rerank_top_k": DEPTH}
            )
            state = run_pipeline("knowledge_search", new_state(req, ctx), ctx)
            return [r.knowledge_id for r in state.results("final_results")]

        available: dict[str, Callable[[str, str], list[str]]] = {
            "bm25": bm25,
            "hybrid": hybrid,
            "rerank_ragstep": rerank_only(TokenVectorReranker()),
            "rerank_ragflow": rerank_only(ragflow),
            "pipeline": pipeline,
            "pipeline_strict": pipeline_strict,
            "pipeline_ragflow_rerank": pipeline_ragflow_rerank,
            "default": default,
        }
        if qvec:
            available["dense"] = dense
        # A query the API refuses (e.g. empty text) scores as an empty ranking, and the report counts it.
        refused = {qid for qid, text in bench.queries if not _acceptable(text)}
        results: dict[str, Any] = {}
        timings: dict[str, float] = {}
        for name in runs:
            if name not in available:
                continue  # e.g. dense without vectors
            started = time.perf_counter()
            rankings = {qid: available[name](qid, text) for qid, text in bench.queries if qid not in refused}
            timings[name] = round((time.perf_counter() - started) * 1000 / max(1, len(bench.queries)), 3)
            results[name] = evaluate(rankings, bench.qrels)
        if counts:
            results["default"]["mean_results"] = round(sum(counts) / len(counts), 2)
            results["default"].update(_multi_relevant_counts(bench, counts, refused))
        chunks = ctx.index.stats().chunks
    judged = sum(1 for j in bench.qrels.values() if any(r > 0 for r in j.values()))
    return {
        "set": bench.name,
        "queries": judged,
        "runs": results,
        "documents": len(bench.corpus),
        "chunks": chunks,
        "refused_queries": len(refused),
        "unasked_judged_queries": bench.unasked_judged,
        "ingest_s": round(ingest_s, 2),
        "ms_per_query": timings,
    }


def _multi_relevant_counts(bench: BeirSet, counts: list[int], refused: set[str]) -> dict[str, float]:
    """Over the queries with more than one relevant document: the mean number of results of the `default` run and
    the share of those queries that got a single result (or none)."""
    asked = [qid for qid, _ in bench.queries if qid not in refused]
    multi = [
        n
        for qid, n in zip(asked, counts, strict=True)
        if sum(1 for r in bench.qrels.get(qid, {}).values() if r > 0) > 1
    ]
    if not multi:
        return {}
    return {
        "multi_relevant_queries": len(multi),
        "multi_mean_results": round(sum(multi) / len(multi), 2),
        "multi_at_most_one": round(sum(1 for n in multi if n <= 1) / len(multi), 4),
    }


RUN_LABELS = {
    "bm25": "bm25 (keyword retriever alone)",
    "dense": "dense (vector retriever alone)",
    "hybrid": "hybrid (chunk_search stage)",
    "rerank_ragstep": "rerank_ragstep (hybrid candidates by local reranker score)",
    "rerank_ragflow": "rerank_ragflow (same, RAGFlow's presence-only formula)",
    "pipeline": "pipeline (folded sources credited)",
    "pipeline_strict": "pipeline_strict (kept results only)",
    "pipeline_ragflow_rerank": "pipeline_ragflow_rerank (pipeline, RAGFlow's formula)",
    "default": "default (`ragstep search --top-k 10`, thresholds as configured)",
}


def render(r: dict[str, Any]) -> str:
    from ragstep.entry.cli.console import table

    rows = [
        (
            RUN_LABELS.get(name, name),
            f"{m['ndcg@10']:.4f}",
            f"{m['recall@10']:.4f}",
            f"{m['recall@100']:.4f}",
            r["ms_per_query"].get(name, ""),
        )
        for name, m in r["runs"].items()
    ]
    head = (
        f"{r['set']}: {r['queries']} judged queries, {r['documents']:,} documents -> {r['chunks']:,} chunks "
        f"(ingest {r['ingest_s']} s)"
    )
    lines = [head, "", table(("run", "nDCG@10", "Recall@10", "Recall@100", "ms/query"), rows)]
    d = r["runs"].get("default")
    if d and "mean_results" in d:
        more = (
            f"; {d['multi_relevant_queries']} queries with several relevant documents: {d['multi_mean_results']} "
            f"results, {d['multi_at_most_one']:.0%} got at most one"
            if "multi_relevant_queries" in d
            else ""
        )
        lines.append(f"default: {d['mean_results']} results per query{more}")
    if "dense" not in r["runs"]:
        lines.append("no precomputed embeddings (corpus.emb.npy, queries.emb.npy): dense run omitted, BM25 only")
    if r.get("unasked_judged_queries"):
        lines.append(
            f"{r['unasked_judged_queries']} judged queries of the qrels are not in queries.jsonl: left out, not "
            "scored as zeros"
        )
    if r["refused_queries"]:
        lines.append(f"{r['refused_queries']} queries refused by the API (scored as empty rankings)")
    return "\n".join(lines)
