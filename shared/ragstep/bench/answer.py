"""``ragstep bench answer --set DIR``: answers and their citations on a BEIR-layout set.

The corpus is ingested as ``ragstep bench quality`` does it (:func:`ragstep.bench.quality.build_index`), then every
question goes through the ``rag`` pipeline with the configured chat model (the model-free ``extractive`` answerer by
default; any real model when ``RAGSTEP_CHAT_PROVIDER`` names one). The corpus is searched with the set's
precomputed multilingual-e5-small vectors (``corpus.e5.npy``) when it has them, else embedded by the configured
embedding model, as a user's knowledge base is. Per set:

* **answered correctly** (``answer_recall``, sets with ``answers.jsonl``): share of the answerable questions whose
  answer contains a reference answer, both normalised (NFKC, lower case, no spaces or punctuation); and the same
  share among the questions whose relevant document was among the passages (``answer_recall_retrieved``: what the
  answerer made of what retrieval gave it);
* **declined although the source was retrieved**: of the questions whose relevant document was given, the share the
  answerer declined (the passages held the answer; saying they do not is the answerer's miss);
* **declined on unanswerable**: with ``unanswerable.txt`` (query ids, one a line; such questions have no qrels) the
  share of those questions declined; every set also gets the **abstention** figure below;
* **citation precision**: cited passages that belong to a relevant document (qrels > 0) / all cited passages,
  over every answer;
* **citation recall**: answers citing at least one relevant document / answers;
* **abstention**: for a sample of questions, the question's relevant documents are taken out of the index, the
  question asked again, and the documents put back; an abstention is the fallback or the empty response (the
  extractive answerer's "the passages do not answer" counts too: it is its way of not answering), anything else is
  an invented answer;
* **attribution without an LLM**: a relevant document's sentence closest to the question (most question terms)
  stands in for an answer; :func:`ragstep.retrieval.citations.insert_citations` cites it among the passages the
  pipeline gave the model, and a hit is a citation of a relevant document. The document is the best-graded relevant
  one the model was given (a grounded answer comes from its context); ``attribution_best_relevant`` takes the
  best-graded relevant document of the qrels instead, given or not (only a paraphrase can be cited when it was not).
  RAGFlow's parameters are used unchanged (token 0.1 / vector 0.9, threshold 0.63 x0.8 down to 0.3, 0.99 x best,
  4 at most); the answer pieces have no vectors here (the sets' vectors cover documents and queries only), so token
  similarity decides;
* **time per question**: median and p95 of the whole ``rag`` pipeline, in ms.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ragstep.adapters.chat.extractive import NO_ANSWER, NO_CONTEXT
from ragstep.app.chat import run_chat
from ragstep.bench import answer_curve
from ragstep.bench.answer_curve import contains_answer
from ragstep.bench.answer_curve import normalise as normalise  # the bench's comparison, kept importable here
from ragstep.bench.common import median, percentile
from ragstep.bench.quality import DEFAULT_VECTORS, BeirSet, build_index, load_beir
from ragstep.context import Clients, Context
from ragstep.errors import InputError, RagstepError
from ragstep.models import ChatRequest, Chunk, KnowledgeBase, PipelineState, check_query
from ragstep.retrieval import citations
from ragstep.retrieval.text import query_terms, token_set
from ragstep.settings import Settings

#: Questions asked again without their relevant documents.
ABSTENTION_SAMPLE = 50
#: The set's file of questions it does not answer (query ids, one a line).
UNANSWERABLE_FILE = "unanswerable.txt"
_NOT_ANSWERING = frozenset(NO_ANSWER.values()) | frozenset(NO_CONTEXT.values())


def load_answers(folder: Path) -> dict[str, list[str]] | None:
    path = Path(folder) / "answers.jsonl"
    if not path.is_file():
        return None
    answers: dict[str, list[str]] = {}
    try:
        with path.open(encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    row = json.loads(line)
                    answers[str(row["_id"])] = [str(a) for a in row["answers"] if str(a).strip()]
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(
            f"{path}: not a valid answers file ({type(exc).__name__}: {exc}); expected lines "
            '{"_id": query id, "answers": [strings]}'
        ) from exc
    return answers


def load_unanswerable(folder: Path) -> list[str]:
    """The ids of the questions the set's corpus does not answer (none without the file)."""
    path = Path(folder) / UNANSWERABLE_FILE
    if not path.is_file():
        return []
    return [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def closest_sentence(question: str, document: str) -> str:
    """The sentence of ``document`` holding the most of the question's terms (the first of equals)."""
    terms = frozenset(query_terms(question))
    best, best_score = "", -1.0
    for piece in citations.split_pieces(document):
        if not citations.citable(piece):
            continue
        score = len(terms & token_set(piece)) / max(1, len(terms))
        if score > best_score:
            best, best_score = piece.strip(), score
    return best or document.strip()


def abstained(state: PipelineState) -> bool:
    if state.chat.fallback is not None:
        return True
    if any(t.reason == "empty_retrieval" for t in state.trace):
        return True
    return state.chat.answer.strip() in _NOT_ANSWERING


class _Removed:
    """The relevant documents of one question taken out of the index, then put back as they were."""

    def __init__(self, ctx: Context, kb: KnowledgeBase, doc_ids: list[str]) -> None:
        self.ctx, self.kb, self.doc_ids = ctx, kb, doc_ids
        self.saved: list[tuple[str, list[Chunk], Any]] = []

    def __enter__(self) -> _Removed:
        import numpy as np

        index = self.ctx.index
        for doc in self.doc_ids:
            chunks = index.knowledge_chunks(doc, 100_000)
            if not chunks:
                continue
            vectors = None
            if self.kb.embedding_model != "none":
                stored = index.vectors([c.id for c in chunks], self.kb.embedding_model)
                if len(stored) == len(chunks):
                    vectors = np.vstack([stored[c.id] for c in chunks])
            self.saved.append((doc, chunks, vectors))
        index.delete_knowledge([doc for doc, _, _ in self.saved])
        return self

    def __exit__(self, *exc: object) -> None:
        space = self.kb.embedding_model if self.kb.embedding_model != "none" else None
        for doc, chunks, vectors in self.saved:
            self.ctx.index.replace_knowledge(doc, chunks, vectors, space if vectors is not None else None)


def run_answer(
    folder: Path,
    *,
    abstention_sample: int = ABSTENTION_SAMPLE,
    questions: int | None = None,
    progress: Callable[[str], None] | None = None,
    curve: bool = False,
) -> dict[str, Any]:
    """The figures of the module docstring for the set in ``folder``; ``questions`` asks only the first N answerable
    questions (in the set's order; every unanswerable one is still asked). ``curve``: also the answerer's trade-off
    curve over its threshold (:mod:`ragstep.bench.answer_curve`; the extractive answerer only)."""
    bench = load_beir(folder, _vectors(Path(folder)))
    answers = load_answers(folder)
    unanswerable = load_unanswerable(folder)
    known = {q for q, _ in bench.queries}
    unknown = [q for q in unanswerable if q not in known]
    if unknown:
        raise InputError(f"{folder / UNANSWERABLE_FILE}: ids not in queries.jsonl: {', '.join(unknown[:5])}")
    with tempfile.TemporaryDirectory(prefix="ragstep-bench-answer-") as tmp:
        ctx = Clients(Settings(data_dir=Path(tmp))).context()
        kb, ingest_s = build_index(bench, ctx, ctx.clients.default_embedding_model())
        if progress:
            progress(f"{bench.name}: {len(bench.corpus)} documents indexed in {ingest_s:.1f} s")
        samples: list[Any] | None = [] if curve else None
        result = _evaluate(bench, answers, ctx, kb, abstention_sample, progress, questions, samples)
        result |= _unanswerable(bench, unanswerable, ctx, kb, samples)
        if samples is not None:
            result |= answer_curve.report(samples, answer_curve.assessor(ctx))
        result |= {"documents": len(bench.corpus), "chunks": ctx.index.stats().chunks, "ingest_s": round(ingest_s, 2)}
    return result


def _vectors(folder: Path) -> str:
    """The set's precomputed vectors of the default embedding model (e5) when it has them: the corpus is then searched
    as the default setup searches it without embedding thousands of chunks first; else the set's default ones (a set
    without any is embedded by the configured model)."""
    present = (folder / "corpus.e5.npy").is_file() and (folder / "queries.e5.npy").is_file()
    return "e5" if present else DEFAULT_VECTORS


def _unanswerable(
    bench: BeirSet, ids: list[str], ctx: Context, kb: KnowledgeBase, samples: list[Any] | None = None
) -> dict[str, Any]:
    """The share of the set's unanswerable questions declined (None without any); each one's sample is added to
    ``samples`` when given (the curve)."""
    texts = dict(bench.queries)
    asked = [texts[q] for q in ids if _acceptable(texts[q])]
    declined = 0
    for text in asked:
        state = _ask(ctx, kb, text)
        declined += abstained(state)
        if samples is not None:
            samples.append(_sample(state, set(), None))
    return {
        "declined_unanswerable": round(declined / len(asked), 4) if asked else None,
        "unanswerable_questions": len(asked),
    }


def _ask(ctx: Context, kb: KnowledgeBase, text: str) -> PipelineState:
    return run_chat(ChatRequest(query=text, knowledge_base_ids=[kb.id], pipeline="rag"), ctx)


def _evaluate(
    bench: BeirSet,
    answers: dict[str, list[str]] | None,
    ctx: Context,
    kb: KnowledgeBase,
    abstention_sample: int,
    progress: Callable[[str], None] | None,
    limit: int | None = None,
    samples: list[Any] | None = None,
) -> dict[str, Any]:
    documents = {doc_id: f"{title} {text}".strip() for doc_id, title, text in bench.corpus}
    relevant = {q: {d for d, rel in judged.items() if rel > 0} for q, judged in bench.qrels.items()}
    asked = [(q, text) for q, text in bench.queries if relevant.get(q) and _acceptable(text)][:limit]
    times: list[float] = []
    found = cited_total = cited_relevant = citing_relevant = with_citations = 0
    found_retrieved = declined_retrieved = 0
    attributed = attributed_strict = attribution_cited = attribution_relevant = retrieved_relevant = 0
    model = ""
    for n, (qid, text) in enumerate(asked, start=1):
        started = time.perf_counter()
        state = _ask(ctx, kb, text)
        times.append((time.perf_counter() - started) * 1000)
        model = state.chat.model
        rel = relevant[qid]
        if samples is not None:
            samples.append(_sample(state, rel, (answers or {}).get(qid, [])))
        given = any(r.knowledge_id in rel for r in state.chat.references)
        correct = answers is not None and contains_answer(state.chat.answer, answers.get(qid, []))
        found += correct
        found_retrieved += correct and given
        declined_retrieved += given and abstained(state)
        cited = [r for r in state.chat.references if r.cited]
        cited_total += len(cited)
        cited_relevant += sum(r.knowledge_id in rel for r in cited)
        citing_relevant += any(r.knowledge_id in rel for r in cited)
        with_citations += bool(cited)
        # Attribution: a relevant document's sentence closest to the question, cited among the same passages.
        retrieved_relevant += given
        attribution = _attribute(text, state, bench.qrels[qid], documents, given_only=True)
        if attribution is not None:
            attributed += bool(attribution)
            attribution_cited += len(attribution)
            attribution_relevant += sum(attribution)
        strict = _attribute(text, state, bench.qrels[qid], documents, given_only=False)
        attributed_strict += bool(strict and any(strict))
        if progress and n % 200 == 0:
            progress(f"{bench.name}: {n}/{len(asked)} questions")
    abstentions = 0
    sample = asked[:: max(1, len(asked) // abstention_sample)][:abstention_sample] if abstention_sample else []
    for qid, text in sample:
        with _Removed(ctx, kb, sorted(relevant[qid])):
            abstentions += abstained(_ask(ctx, kb, text))
    total = max(1, len(asked))
    return {
        "set": bench.name,
        "questions": len(asked),
        "chat_model": model,
        "answer_recall": round(found / total, 4) if answers is not None else None,
        "answer_recall_retrieved": (
            round(found_retrieved / retrieved_relevant, 4) if answers is not None and retrieved_relevant else None
        ),
        "declined_retrieved": round(declined_retrieved / retrieved_relevant, 4) if retrieved_relevant else None,
        "citation_precision": round(cited_relevant / cited_total, 4) if cited_total else None,
        "citation_recall": round(citing_relevant / total, 4),
        "answers_with_citations": round(with_citations / total, 4),
        "abstention": round(abstentions / len(sample), 4) if sample else None,
        "abstention_questions": len(sample),
        "attribution": round(attributed / total, 4),
        "attribution_best_relevant": round(attributed_strict / total, 4),
        "attribution_precision": round(attribution_relevant / attribution_cited, 4) if attribution_cited else None,
        "relevant_passage_given": round(retrieved_relevant / total, 4),
        "ms_per_question": round(median(times), 1) if times else None,
        "p95_ms_per_question": round(percentile(times, 95), 1) if times else None,
        "citation_parameters": {
            "token_weight": citations.TOKEN_WEIGHT,
            "vector_weight": citations.VECTOR_WEIGHT,
            "threshold": citations.START_THRESHOLD,
            "decay": citations.THRESHOLD_DECAY,
            "min_threshold": citations.MIN_THRESHOLD,
            "near_best": citations.NEAR_BEST,
            "max_citations": citations.MAX_CITATIONS,
        },
    }


def _sample(state: PipelineState, relevant: set[str], references: list[str] | None) -> Any:
    return answer_curve.sample_of(state, relevant, references)


def _attribute(
    question: str, state: PipelineState, judged: dict[str, int], documents: dict[str, str], *, given_only: bool
) -> list[bool] | None:
    """For each passage ``insert_citations`` cites for the stand-in answer, whether it is relevant (None when there
    is nothing to attribute). The answer is the question's closest sentence of the best-graded relevant document:
    among the passages the model was given (``given_only``: a grounded answer comes from its context; the best
    overall when none was given), or of the whole qrels (the stricter figure: that document may not have been
    retrieved, and then only a paraphrase in another relevant passage can be cited)."""
    refs = state.chat.references
    relevant = [d for d, grade in judged.items() if grade > 0 and d in documents]
    if not refs or not relevant:
        return None
    pool = relevant
    if given_only:
        pool = [d for d in relevant if any(r.knowledge_id == d for r in refs)] or relevant
    source = max(pool, key=lambda d: judged[d])  # the first of the best grade, in qrels order
    inserted = citations.insert_citations(closest_sentence(question, documents[source]), [r.content for r in refs])
    numbers = sorted({n for ns in inserted.cites.values() for n in ns})
    return [judged.get(refs[n - 1].knowledge_id, 0) > 0 for n in numbers]


def _acceptable(text: str) -> bool:
    try:
        check_query(text)
    except (ValueError, RagstepError):
        return False
    return True


def render(r: dict[str, Any]) -> str:
    from ragstep.entry.cli.console import table

    def show(value: Any) -> str:
        return "-" if value is None else f"{value:.4f}" if isinstance(value, float) else str(value)

    rows = [
        ("answered correctly", show(r["answer_recall"])),
        ("answered correctly, source retrieved", show(r["answer_recall_retrieved"])),
        ("declined although the source was retrieved", show(r["declined_retrieved"])),
        (f"declined on unanswerable ({r['unanswerable_questions']} questions)", show(r["declined_unanswerable"])),
        ("citation precision", show(r["citation_precision"])),
        ("citation recall", show(r["citation_recall"])),
        ("answers with citations", show(r["answers_with_citations"])),
        (f"abstention ({r['abstention_questions']} questions)", show(r["abstention"])),
        ("attribution (insert_citations, no LLM)", show(r["attribution"])),
        ("attribution, best relevant document", show(r["attribution_best_relevant"])),
        ("attribution precision", show(r["attribution_precision"])),
        ("relevant passage given to the model", show(r["relevant_passage_given"])),
        ("ms per question (median / p95)", f"{show(r['ms_per_question'])} / {show(r['p95_ms_per_question'])}"),
    ]
    head = (
        f"{r['set']}: {r['questions']} questions, {r['documents']:,} documents -> {r['chunks']:,} chunks "
        f"(ingest {r['ingest_s']} s), chat model {r['chat_model']}"
    )
    out = [head, "", table(("metric", "value"), rows)]
    if r.get("curve"):
        out += [
            "",
            f"trade-off curve (threshold in use {r['curve_threshold_in_use']}, lowest declining >= 0.8 of "
            f"the unanswerable: {r['curve_suggested']})",
            answer_curve.render_curve(r["curve"]),
        ]
    return "\n".join(out)
