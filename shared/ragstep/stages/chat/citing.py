"""Citations in the chat stages: the citation prompt, repair of the model's markers as it streams, inserted
citations when it wrote none, and the references that go out with every answer.

Where the final answer's markers come from (``ChatState.citation_mode``):

* ``model`` -- a language model was asked to cite (:data:`prompts.CITATION_PROMPT`) and did; its markers are
  repaired (:class:`ragstep.retrieval.citations.MarkerRepair`), while streaming too.
* ``inserted`` -- it wrote none: :func:`ragstep.retrieval.citations.insert_citations` cites the answer's pieces by
  similarity to the passages, with the knowledge base's embedder and the passages' stored vectors (token similarity
  alone when there is no embedder, or embedding fails). A whole answer gets the markers in its text. A streamed
  answer was shown without them, and its final text stays exactly what was shown (the ``done`` event, the history
  and ``--json`` agree with the stream): the references are flagged cited, their ``positions`` the ends of the
  sentences that cite them.
* ``extractive`` -- the extractive answerer quotes sentences and cites the passage it quoted: exact provenance, kept
  as it is (inserting by similarity could only be less exact; an answer without quotes cites nothing).
* ``none`` -- citations off, no passages, a fallback answer (it is not grounded), or nothing similar enough.

Markers cite this turn's passages only: an answer with no passages of its own (a plain chat pipeline, a fallback
answer) has its ``[n]`` removed -- in the stream too -- since there is nothing they could point at, and the history
the model is shown carries no markers (they pointed at an earlier turn's passages, which it no longer sees).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ragstep.errors import RagstepError
from ragstep.index_capabilities import scoped_reads
from ragstep.models import CitationMode, DocAggregate, PipelineState, Reference, TraceEvent
from ragstep.models.scale import COMMON_SCALE
from ragstep.ports import score_scale
from ragstep.retrieval.citations import (
    Embed,
    MarkerRepair,
    cited_positions,
    insert_citations,
    repair_markers,
    split_pieces,
)
from ragstep.stages.chat import prompts

if TYPE_CHECKING:
    from ragstep.context import Context
    from ragstep.ports import ChatModel

STAGE = "citations"


def enabled(state: PipelineState) -> bool:
    return state.chat.settings.citations and bool(state.chat.references)


def system_prompt(state: PipelineState, *, grounded: bool | None = None) -> str:
    """The configured (or shipped) system prompt, with the citation rules when the answer has passages to cite."""
    settings = state.chat.settings
    base = prompts.fill(
        settings.system_prompt or prompts.SYSTEM_PROMPT[state.chat.language], assistant_name=settings.assistant_name
    )
    grounded = enabled(state) if grounded is None else grounded and state.chat.settings.citations
    return base + prompts.CITATION_PROMPT[state.chat.language] if grounded else base


def stream_repair(state: PipelineState) -> MarkerRepair | None:
    """The marker repair for a streamed answer: this turn's passages, or none at all when it has none (every marker
    is removed: it would point at an earlier turn's); None when citations are off."""
    if not state.chat.settings.citations:
        return None
    # The passages stand in for the references in a state made without them (an older stage event).
    passages = len(state.chat.references) or len(state.chat.passages)
    return MarkerRepair(passages, dict(state.chat.labels))


def without_markers(text: str) -> str:
    """``text`` with its ``[n]`` markers removed (code left as it is)."""
    return repair_markers(text, 0)[0]


def _sentence_ends(answer: str, cites: dict[int, list[int]]) -> dict[int, list[int]]:
    """Passage number -> the offsets in ``answer`` where the pieces citing it end (``cites``: piece -> numbers)."""
    found: dict[int, list[int]] = {}
    offset = 0
    for i, piece in enumerate(split_pieces(answer)):
        end = offset + len(piece.rstrip())
        for n in cites.get(i, []):
            found.setdefault(n, []).append(end)
        offset += len(piece)
    return found


def _embedding(state: PipelineState, ctx: Context) -> tuple[Embed | None, np.ndarray | None, str]:
    """The embedder of the references' vector space and their stored vectors (None, None when there is none)."""
    spaces = {kb.embedding_model for kb in state.knowledge_bases if kb.embedding_model != "none"}
    if len(spaces) != 1:  # no vectors, or passages from different spaces: token similarity alone
        return None, None, "none" if not spaces else "mixed_spaces"
    space = spaces.pop()
    embedder = ctx.embedder(space)
    if embedder is None:
        return None, None, "no_embedder"
    refs = state.chat.references
    stored = scoped_reads(ctx.index, (r.knowledge_base_id for r in refs)).vectors([r.id for r in refs], space)
    missing = [i for i, r in enumerate(refs) if r.id not in stored]
    rows: list[np.ndarray | None] = [stored.get(r.id) for r in refs]
    if missing:
        fresh = embedder.embed([refs[i].content for i in missing])
        for i, row in zip(missing, fresh, strict=True):
            rows[i] = row
    return embedder.embed, np.vstack([np.asarray(r, dtype=np.float32) for r in rows]), space


def references_of(
    state: PipelineState, answer: str, positions: dict[int, list[int]] | None = None
) -> tuple[list[Reference], list[DocAggregate]]:
    """The references flagged with the markers of ``answer`` that cite them (or ``positions``: passage number ->
    offsets), and the per-document aggregate."""
    positions = cited_positions(answer) if positions is None else positions
    refs = [r.cited_at(positions.get(n, [])) for n, r in enumerate(state.chat.references, start=1)]
    aggs: dict[str, DocAggregate] = {}
    for r in refs:
        agg = aggs.get(r.knowledge_id)
        if agg is None:
            name = r.knowledge_filename or r.knowledge_title or r.knowledge_id
            agg = aggs[r.knowledge_id] = DocAggregate(
                knowledge_id=r.knowledge_id, knowledge_base_id=r.knowledge_base_id, name=name
            )
        agg.count += 1
        agg.cited += r.cited
    return refs, sorted(aggs.values(), key=lambda a: (-a.cited, -a.count))


def cite(
    state: PipelineState,
    ctx: Context,
    model: ChatModel,
    answer: str,
    *,
    repaired: bool = False,
    streamed: bool = False,
) -> tuple[PipelineState, TraceEvent | None]:
    """The state with the final answer's citations: markers repaired (unless the stream did it: ``repaired``),
    inserted when a grounded generative answer has none (into the text, or for a ``streamed`` answer, whose text was
    shown, as the references' flags), and the references flagged. No trace row when the answer had no passages at
    all (the plain chat pipelines), whose markers are removed."""
    chat = state.chat
    if not chat.references:
        grounded = bool(chat.passages)  # a state made without references (an older stage event) still has passages
        if not grounded and chat.settings.citations and not repaired and answer != (bare := without_markers(answer)):
            cleared = chat.model_copy()
            cleared.answer = bare
            return state.with_chat(cleared), None
        return state, None
    positions: dict[int, list[int]] | None = None
    mode: CitationMode = "none"
    detail: dict[str, object] = {}
    counts: dict[str, int] = {}
    if enabled(state) and chat.fallback is None:
        if not repaired:
            answer, repair = repair_markers(answer, len(chat.references), chat.labels)
            counts |= {"repaired": repair.repaired, "dropped": repair.dropped, "collapsed": repair.collapsed}
        if cited_positions(answer):
            mode = "model" if model.generative else "extractive"
        elif model.generative:
            embed, vectors, space, scale = None, None, "none", COMMON_SCALE
            try:
                embed, vectors, space = _embedding(state, ctx)
                if embed is not None:  # the model's cosines read on the common scale the thresholds are written in
                    scale = score_scale(ctx.embedder(space))
            except RagstepError as exc:  # the citations are worth less than the answer: token similarity alone
                detail["embedding_error"] = exc.message
            passages = [r.content for r in chat.references]
            try:
                inserted = insert_citations(answer, passages, embed=embed, passage_vectors=vectors, cosine_scale=scale)
            except RagstepError as exc:  # embedding the answer's pieces failed: token similarity alone
                detail["embedding_error"] = exc.message
                inserted = insert_citations(answer, passages)
            detail |= {"space": space, "threshold": round(inserted.threshold, 4)}
            counts |= {"pieces": inserted.pieces, "cited_pieces": len(inserted.cites)}
            if inserted.cites:
                mode = "inserted"
                if streamed:  # the text was shown as it is: the citations are the references' flags
                    positions = _sentence_ends(answer, inserted.cites)
                else:
                    answer = inserted.answer
    if chat.fallback is not None and chat.settings.citations and not repaired:
        answer = without_markers(answer)  # a fallback answer is not grounded: its brackets cite nothing
    # A fallback answer is not grounded: whatever it brackets cites none of the passages.
    refs, aggs = references_of(state, "" if chat.fallback is not None else answer, positions)
    counts["cited"] = sum(r.cited for r in refs)
    counts["references"] = len(refs)
    cited = chat.model_copy()
    cited.answer, cited.references, cited.doc_aggs, cited.citation_mode = answer, refs, aggs, mode
    event = TraceEvent(
        stage=STAGE,
        action="run" if mode != "none" else "skip",
        reason=None if mode != "none" else _why_none(state),
        counts=counts,
        detail={"mode": mode, **detail},
    )
    return state.with_chat(cited), event


def _why_none(state: PipelineState) -> str:
    if not state.chat.settings.citations:
        return "citations_disabled"
    if state.chat.fallback is not None:
        return "fallback_answer"
    return "nothing_cited"
