"""Citations: marker repair and buffering, inserted citations (pieces, thresholds, the cap), and references out
through the chat stages (prompted markers from a scripted model, inserted ones, the extractive answerer)."""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragstep.app.chat import chat_response, run_chat, stream_chat
from ragstep.app.ingest import ingest_file
from ragstep.context import Clients, Context
from ragstep.models import ChatRequest, KnowledgeBase, StreamEvent
from ragstep.retrieval.citations import (
    MAX_CITATIONS,
    MarkerRepair,
    choose_citations,
    citable,
    cited_positions,
    insert_citations,
    repair_markers,
    similarity_matrix,
    split_pieces,
)
from ragstep.settings import Settings
from ragstep.stages.chat import prompts
from support.llm_server import LLMServer, Reply, completion, sse, streamed

# -- repair ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("written", "repaired"),
    [
        ("A fact [ID:3].", "A fact [3]."),
        ("A fact (ID:3).", "A fact [3]."),
        ("A fact (ID：２).", "A fact [2]."),
        ("事实【3】。", "事实[3]。"),
        ("A fact [^3].", "A fact [3]."),
        ("A fact ref3.", "A fact [3]."),
        ("A fact [ref 2].", "A fact [2]."),
        ("事实［３］。", "事实[3]。"),
        ("A fact [ID:1, 3].", "A fact [1][3]."),
        ("A fact [1，2].", "A fact [1][2]."),
        ("A fact [3].", "A fact [3]."),
    ],
)
def test_malformed_markers_are_repaired(written: str, repaired: str) -> None:
    assert repair_markers(written, 3)[0] == repaired


def test_markers_to_missing_passages_are_dropped_with_their_space() -> None:
    text, repair = repair_markers("One [0]. Two [4]. Three [2][9].", 3)
    assert text == "One. Two. Three [2]."
    assert repair.dropped == 3


def test_duplicates_in_a_run_of_markers_collapse() -> None:
    text, repair = repair_markers("Fact [1] [1][2][1], again [1].", 3)
    assert text == "Fact [1][2], again [1]."  # a later sentence may cite the same passage again
    assert repair.collapsed == 2


def test_code_is_never_touched() -> None:
    text = "Use `arr[9]` and ref3 [ID:1].\n```python\nx = a[7]  # ref2\n```\nDone [5]."
    assert repair_markers(text, 3)[0] == "Use `arr[9]` and [3][1].\n```python\nx = a[7]  # ref2\n```\nDone."


def test_faq_layout_labels_become_reference_numbers() -> None:
    text, _ = repair_markers("Reset it [FAQ-1], see the guide [DOC-1][FAQ-7].", 2, {"FAQ-1": 2, "DOC-1": 1})
    assert text == "Reset it [2], see the guide [1]."


def test_words_that_look_like_markers_stay() -> None:
    text = "See the reference, ref, refs3 and [a link](http://x) or (3) items."
    assert repair_markers(text, 5)[0] == text


SAMPLE = "Cold starts [ID:1] happen (ID:2) often [9] and `a[5]` ok ref2. 北京【１】。\n```\nx[3]\n```\nend [1, 2] [2]"


def _spacing(text: str) -> str:
    """``text`` with runs of spaces collapsed and none before punctuation or a line end."""
    return re.sub(r" +(?=[.,。\n]|$)", "", re.sub(r" {2,}", " ", text))


@pytest.mark.parametrize("size", [1, 2, 3, 5, 8, 13])
def test_streamed_repair_equals_the_whole_text_and_never_shows_half_a_marker(size: int) -> None:
    whole, _ = repair_markers(SAMPLE, 3)
    repair = MarkerRepair(3)
    shown = [repair.feed(SAMPLE[i : i + size]) for i in range(0, len(SAMPLE), size)] + [repair.flush()]
    # Chunks keep their boundaries: a space that ended a chunk has been shown when the marker after it is dropped,
    # so the streamed text may differ from the whole text in such spaces only.
    assert _spacing("".join(shown)) == _spacing(whole)
    so_far = ""
    for piece in shown:
        so_far += piece
        # Everything shown so far is final: a marker-like bracket is never left open at the end of what was sent.
        assert not so_far.rstrip().endswith(("[", "[I", "[ID", "[ID:", "(ID:", "【", "re", "ref"))


def test_a_run_of_markers_continues_across_chunks() -> None:
    repair = MarkerRepair(3)
    shown = repair.feed("end [1, 2]") + repair.feed(" ") + repair.feed("[2][3]") + repair.flush()
    assert shown == "end [1][2] [3]"


def test_a_marker_split_across_chunks_is_held_back_until_it_is_complete() -> None:
    repair = MarkerRepair(2)
    assert repair.feed("Cold starts happen [") == "Cold starts happen"
    assert repair.feed("ID") == ""
    assert repair.feed(":2") == ""
    assert repair.feed("] often.") == " [2] often."
    assert repair.flush() == ""


def test_positions_are_the_offsets_of_markers_outside_code() -> None:
    answer = "A [1]. B [2][1]. `c[1]`"
    assert cited_positions(answer) == {1: [2, 12], 2: [9]}


# -- inserted citations ------------------------------------------------------------------------------------------


def test_pieces_keep_code_blocks_whole_and_split_at_sentence_ends() -> None:
    answer = "第一句。第二句！第三句？第四；Version 2.5 is out. Next one?\n```py\nx = 1. y = 2\n```\nlast"
    pieces = split_pieces(answer)
    assert "".join(pieces) == answer
    assert pieces[:4] == ["第一句。", "第二句！", "第三句？", "第四；"]
    assert "Version 2.5 is out." in pieces and " Next one?" in pieces
    assert "```py\nx = 1. y = 2\n```" in pieces


def test_pieces_under_five_characters_get_no_citation() -> None:
    assert not citable("Yes.")
    assert not citable("\n")
    assert citable("Yes, it is.")
    assert not citable("Already cited [1].")


def test_the_threshold_starts_at_0_63_and_is_lowered_x0_8_down_to_0_3() -> None:
    assert choose_citations(np.array([[0.7]])) == ({0: [0]}, 0.63)
    cites, threshold = choose_citations(np.array([[0.62]]))
    assert cites == {0: [0]} and threshold == pytest.approx(0.63 * 0.8)
    cites, threshold = choose_citations(np.array([[0.33]]))  # 0.99 x 0.33 reaches the fourth round, 0.3226
    assert cites == {0: [0]} and threshold == pytest.approx(0.63 * 0.8**3)
    assert choose_citations(np.array([[0.31]]))[0] == {}  # the next round (0.258) is below 0.3: never tried


def test_lowering_stops_once_a_piece_is_cited() -> None:
    cites, threshold = choose_citations(np.array([[0.7, 0.0], [0.0, 0.55]]))
    assert cites == {0: [0]} and threshold == 0.63  # the second piece would pass at 0.504, but nothing goes lower


def test_a_piece_cites_the_passages_within_0_99_of_its_best_four_at_most() -> None:
    row = [0.9, 0.895, 0.80, 0.9, 0.9, 0.9, 0.892]
    cites, _ = choose_citations(np.array([row]))
    assert len(cites[0]) == MAX_CITATIONS == 4
    assert cites[0] == [0, 3, 4, 5]  # the best four (ties in passage order); 0.80 is far below 0.99 x 0.9


def test_hybrid_similarity_weighs_tokens_0_1_and_vectors_0_9() -> None:
    vectors = np.eye(2, dtype=np.float32)
    sims = similarity_matrix(["alpha beta"], ["alpha beta", "gamma"], vectors[:1], vectors)
    assert sims[0].tolist() == pytest.approx([0.1 * 1.0 + 0.9 * 1.0, 0.1 * 0.0 + 0.9 * 0.0])
    sims = similarity_matrix(["alpha beta"], ["alpha gamma"], vectors[1:], vectors[:1])
    assert sims[0, 0] == pytest.approx(0.1 * 0.5)
    assert similarity_matrix(["alpha beta"], ["alpha gamma"])[0, 0] == pytest.approx(0.5)  # no vectors: tokens


def test_cosines_are_read_on_the_embedders_declared_scale() -> None:
    # A model whose unrelated text scores 0.77 (e5): raw, 0.9 x 0.77 alone clears the 0.63 start; on the common
    # scale an unrelated passage adds nothing and a near copy (0.97) counts fully.
    from ragstep.models.scale import ScoreScale

    piece = np.array([[1.0, 0.0]])
    passages = np.array([[0.77, np.sqrt(1 - 0.77**2)], [0.97, np.sqrt(1 - 0.97**2)]])
    raw = similarity_matrix(["alpha"], ["gamma", "delta"], piece, passages)
    scaled = similarity_matrix(["alpha"], ["gamma", "delta"], piece, passages, ScoreScale(zero=0.77, span=0.2))
    assert raw[0].tolist() == pytest.approx([0.9 * 0.77, 0.9 * 0.97])
    assert scaled[0].tolist() == pytest.approx([0.0, 0.9 * 1.0])
    assert choose_citations(raw)[0] == {0: [1]} and choose_citations(scaled)[0] == {0: [1]}
    unrelated = np.array([[0.77, np.sqrt(1 - 0.77**2)]])
    assert choose_citations(similarity_matrix(["alpha"], ["gamma"], piece, unrelated))[0] == {0: [0]}
    assert choose_citations(similarity_matrix(["alpha"], ["gamma"], piece, unrelated, ScoreScale(0.77, 0.2)))[0] == {}


PASSAGES = [
    "AWS Lambda runs code without servers and bills per request.",
    "Provisioned concurrency keeps execution environments warm.",
    "BM25 ranks documents by term frequency and inverse document frequency.",
]


def test_insert_citations_with_token_similarity_alone() -> None:
    answer = "Lambda runs code without servers.\nBM25 ranks documents by term frequency.\nOk."
    out = insert_citations(answer, PASSAGES)
    assert out.answer == "Lambda runs code without servers. [1]\nBM25 ranks documents by term frequency. [3]\nOk."
    assert out.cites == {0: [1], 2: [3]}


def test_insert_citations_embeds_the_pieces_in_one_batch() -> None:
    calls: list[list[str]] = []
    topics = ("lambda", "concurrency", "bm25")

    def embed(texts: Any) -> np.ndarray:  # a topic indicator: one batch per call, rows L2-normalised
        calls.append(list(texts))
        rows = np.array([[float(t in s.lower()) for t in topics] for s in texts], dtype=np.float32) + 1e-6
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)

    answer = "Warm environments come from provisioned concurrency. 北京很大。"
    out = insert_citations(answer, PASSAGES, embed=embed, passage_vectors=embed(PASSAGES))
    assert len(calls) == 2 and calls[1] == ["Warm environments come from provisioned concurrency.", " 北京很大。"]
    assert out.answer.startswith("Warm environments come from provisioned concurrency. [2]")


def test_chinese_pieces_get_markers_without_a_space() -> None:
    out = insert_citations("北京是中国的首都。", ["北京是中华人民共和国的首都，也是全国的政治和文化中心。"])
    assert out.answer == "北京是中国的首都。[1]"


# -- through the chat stages -------------------------------------------------------------------------------------

DOCS = {
    "lambda.md": "AWS Lambda runs code without servers. Cold starts happen when a new execution environment starts.",
    "bm25.md": "BM25 ranks documents by term frequency and inverse document frequency.",
}


def make_ctx(tmp_path: Path, **settings: Any) -> tuple[Context, KnowledgeBase]:
    ctx = Clients(Settings(data_dir=tmp_path / "data", **settings)).context()
    kb = KnowledgeBase(id=uuid.uuid4().hex, name="docs", embedding_model="none", created_at=time.time())
    ctx.catalog.create_kb(kb)
    for name, text in DOCS.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
        assert ingest_file(tmp_path / name, kb, ctx).status == "indexed"
    return ctx, kb


def llm(server: LLMServer) -> dict[str, Any]:
    return {"chat_provider": "openai", "chat_model": "m", "chat_base_url": server.url, "chat_max_retries": 0}


def drain(gen: Any) -> tuple[list[StreamEvent], Any]:
    events: list[StreamEvent] = []
    while True:
        try:
            events.append(next(gen))
        except StopIteration as stop:
            return events, stop.value


def test_prompted_markers_are_repaired_while_streaming_and_flag_the_references(tmp_path: Path) -> None:
    chunks = streamed("Cold starts happen when an environment starts [", "ID:1", "]. Also [7] and [ID", ":1].")
    with LLMServer(Reply(chunks=chunks)) as server:
        ctx, kb = make_ctx(tmp_path, **llm(server))
        events, state = drain(
            stream_chat(ChatRequest(query="When do cold starts happen?", knowledge_base_ids=[kb.id]), ctx)
        )
    system = server.requests[0].json["messages"][0]["content"]
    assert system.endswith(prompts.CITATION_PROMPT["en"])
    deltas = [e.data["delta"] for e in events if e.event == "answer"]
    assert not any(d.endswith(("[", "[ID", "ID:1")) for d in deltas)
    answer = "Cold starts happen when an environment starts [1]. Also and [1]."
    assert "".join(deltas) == answer == state.chat.answer
    assert state.chat.citation_mode == "model"
    refs = state.chat.references
    first = next(r for r in refs if r.knowledge_filename == "lambda.md")
    assert refs[0] is first or refs.index(first) == 0
    assert first.cited and first.positions == [answer.index("[1]"), answer.rindex("[1]")]
    assert all(not r.cited for r in refs[1:])  # uncited passages stay listed
    done = events[-1].data
    assert done["citation_mode"] == "model" and done["references"][0]["cited"] is True
    assert {a["name"]: (a["count"], a["cited"]) for a in done["doc_aggs"]}["lambda.md"] == (1, 1)


def test_an_answer_without_markers_gets_inserted_citations(tmp_path: Path) -> None:
    reply = Reply(body=completion("Cold starts happen when a new execution environment starts."))
    with LLMServer(reply) as server:
        ctx, kb = make_ctx(tmp_path, **llm(server))
        state = run_chat(
            ChatRequest(query="When do cold starts happen?", knowledge_base_ids=[kb.id], pipeline="rag"), ctx
        )
    assert state.chat.citation_mode == "inserted"
    assert state.chat.answer == "Cold starts happen when a new execution environment starts. [1]"
    row = next(t for t in state.trace if t.stage == "citations")
    assert row.detail["mode"] == "inserted" and row.detail["space"] == "none" and row.counts["cited"] == 1
    body = chat_response(state)
    assert body["citation_mode"] == "inserted" and body["references"][0]["cited"] is True


def test_the_extractive_answer_keeps_its_exact_quotes_citations(tmp_path: Path) -> None:
    ctx, kb = make_ctx(tmp_path)
    state = run_chat(ChatRequest(query="What ranks documents by term frequency?", knowledge_base_ids=[kb.id]), ctx)
    assert state.chat.citation_mode == "extractive"
    cited = [r.knowledge_filename for r in state.chat.references if r.cited]
    assert cited == ["bm25.md"]


def test_citations_off_sends_no_citation_prompt_and_inserts_nothing(tmp_path: Path) -> None:
    with LLMServer(Reply(body=completion("Cold starts happen when a new execution environment starts."))) as server:
        ctx, kb = make_ctx(tmp_path, **llm(server))
        request = ChatRequest(
            query="When do cold starts happen?", knowledge_base_ids=[kb.id], pipeline="rag", chat={"citations": False}
        )
        state = run_chat(request, ctx)
    assert prompts.CITATION_PROMPT["en"] not in server.requests[0].json["messages"][0]["content"]
    assert state.chat.citation_mode == "none" and "[" not in state.chat.answer
    assert [(t.action, t.reason) for t in state.trace if t.stage == "citations"] == [("skip", "citations_disabled")]


def test_a_fallback_answer_cites_nothing(tmp_path: Path) -> None:
    with LLMServer(Reply(chunks=streamed("NO_MATCH")), Reply(chunks=[sse("I think so [1]."), *streamed("")])) as server:
        ctx, kb = make_ctx(tmp_path, **llm(server))
        _, state = drain(stream_chat(ChatRequest(query="When do cold starts happen?", knowledge_base_ids=[kb.id]), ctx))
    assert state.chat.fallback == "model" and state.chat.citation_mode == "none"
    assert not any(r.cited for r in state.chat.references)
