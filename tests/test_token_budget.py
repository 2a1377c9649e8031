"""Token budgets (the estimator, knowledge at 97 %, messages at 95 %, max_tokens lowered, the trace of what was
dropped) and the empty response that skips the model when retrieval found nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragstep.context import Context
from ragstep.errors import InputError
from ragstep.models import ChatSettings, ChatState, HistoryRound, PipelineState, SearchRequest, SearchResult
from ragstep.pipeline.executor import drain, run_stage, stream_stage
from ragstep.retrieval.tokens import MESSAGE_OVERHEAD, count_messages, count_tokens, truncate_to_tokens
from ragstep.stages.chat import budget
from ragstep.stages.chat.citing import system_prompt
from support.llm_server import LLMServer, Reply, completion

# -- the estimator -----------------------------------------------------------------------------------------------


def test_cjk_characters_count_one_each() -> None:
    assert count_tokens("北京是首都") == 5
    assert count_tokens("北京，首都。") == 6  # CJK punctuation too


def test_other_text_is_counted_like_a_bpe_vocabulary() -> None:
    assert count_tokens("the cat sat") == 3  # short words: one token each, spaces free
    assert count_tokens("internationalization") == 5  # one token per started 4 letters
    assert count_tokens("1234567") == 3  # digits in groups of three
    assert count_tokens("a, b!") == 4  # punctuation is a token of its own
    assert count_tokens("") == 0


def test_messages_cost_their_framing() -> None:
    assert count_messages(["the cat", "北京"]) == 2 + 2 + 2 * MESSAGE_OVERHEAD


def test_truncation_cuts_between_tokens() -> None:
    assert truncate_to_tokens("one two three four", 2) == "one two"
    assert count_tokens(truncate_to_tokens("北京是中华人民共和国的首都", 4)) == 4
    assert truncate_to_tokens("anything", 0) == ""


# -- knowledge: 97 % of what the window leaves ---------------------------------------------------------------------


def test_knowledge_budget_is_97_percent_of_what_is_left() -> None:
    settings = ChatSettings(context_window=4096, max_tokens=1000)
    used = count_messages(["system words", "q", "a", "frame"])
    expected = int(0.97 * (4096 - 1000 - used))
    assert budget.knowledge_budget(settings, "system words", [HistoryRound(query="q", answer="a")], "frame") == expected


def test_the_answer_share_is_at_most_half_the_window() -> None:
    assert budget.output_reserve(ChatSettings(context_window=1000, max_tokens=900)) == 500


def test_lowest_ranked_passages_are_dropped_whole() -> None:
    passages = ["one two three", "four five six", "seven eight nine"]
    cost = count_tokens(passages[0]) + budget.PASSAGE_OVERHEAD
    fitted = budget.fit_passages(passages, 2 * cost + 1)
    assert fitted.passages == passages[:2] and fitted.dropped == 1 and not fitted.truncated


def test_a_lower_passage_that_would_fit_is_not_taken_after_one_that_did_not() -> None:
    fitted = budget.fit_passages(["short", "a much longer passage " * 20, "tiny"], 30)
    assert fitted.passages == ["short"] and fitted.dropped == 2


def test_only_a_single_passage_over_the_budget_is_cut() -> None:
    fitted = budget.fit_passages(["word " * 100, "next"], 20)
    assert fitted.truncated and len(fitted.passages) == 1 and fitted.dropped == 1
    assert count_tokens(fitted.passages[0]) + budget.PASSAGE_OVERHEAD <= 20


# -- messages: 95 % of the window --------------------------------------------------------------------------------


def rounds(n: int, words: int = 50) -> list[HistoryRound]:
    return [HistoryRound(query=f"question {i} " + "w " * words, answer="answer " * words) for i in range(n)]


def test_oldest_rounds_go_first_then_the_knowledge() -> None:
    settings = ChatSettings(context_window=600, max_tokens=50)
    fit = budget.fit_messages(settings, "sys", rounds(6), "frame", [40, 40, 40])
    assert fit.dropped_rounds > 0 and fit.drop_passages == 0
    assert [r.query.split()[1] for r in fit.history] == [str(i) for i in range(fit.dropped_rounds, 6)]
    assert fit.prompt_tokens <= 0.95 * 600
    fit = budget.fit_messages(settings, "sys", rounds(6), "frame", [520, 60, 50])
    assert fit.history == [] and fit.drop_passages == 2  # every round, then the lowest-ranked passages


def test_max_tokens_is_lowered_to_what_the_window_has_left() -> None:
    settings = ChatSettings(context_window=1000, max_tokens=500)
    fit = budget.fit_messages(settings, "sys", [], "frame", [700])
    assert fit.max_tokens == 1000 - fit.prompt_tokens < 500


def test_the_system_prompt_and_question_are_never_dropped() -> None:
    with pytest.raises(InputError, match="RAGSTEP_CHAT_CONTEXT_WINDOW"):
        budget.fit_messages(ChatSettings(context_window=256, max_tokens=10), "sys " * 300, rounds(2), "q", [10])


# -- through into_chat_message and the completion ------------------------------------------------------------------


def result(n: int, content: str) -> SearchResult:
    return SearchResult(id=f"c{n}", content=content, knowledge_id=f"k{n}", knowledge_base_id="kb", score=1 - n / 10)


def chat_state(results: list[SearchResult], **settings: object) -> PipelineState:
    return PipelineState(
        request=SearchRequest(query="What happens?", knowledge_base_ids=["kb"]),
        final_results=results,
        chat=ChatState(settings=ChatSettings(**settings), history=rounds(3, 20)),
    )


def test_into_chat_message_keeps_what_fits_and_traces_what_was_dropped(ctx: Context) -> None:
    results = [result(i, f"passage {i} " + "text " * 150) for i in range(1, 6)]
    out = run_stage("into_chat_message", chat_state(results, context_window=1500, max_tokens=300), ctx)
    kept = [r.id for r in out.chat.references]
    assert 0 < len(kept) < 5 and kept == [r.id for r in results[: len(kept)]]  # the best ones, in order
    assert len(out.chat.passages) == len(kept) and f"[{len(kept) + 1}]" not in out.chat.user_content
    (row,) = [t for t in out.trace if t.stage == "token_budget"]
    assert row.action == "degrade" and row.reason == "context_window"
    assert row.detail["dropped_passage_ids"] == [r.id for r in results[len(kept) :]]
    system = system_prompt(out)
    contents = [system, *budget.history_contents(out.chat.history), out.chat.user_content]
    assert count_messages(contents) <= 0.95 * 1500
    assert out.chat.settings.max_tokens <= 300


def test_into_chat_message_with_room_drops_nothing(ctx: Context) -> None:
    out = run_stage("into_chat_message", chat_state([result(1, "short passage")]), ctx)
    assert not [t for t in out.trace if t.stage == "token_budget"]
    assert out.chat.settings.max_tokens == 2048 and len(out.chat.history) == 3


def test_the_completion_sends_the_fitted_history_and_lowered_max_tokens(tmp_path: Path, ctx: Context) -> None:
    from ragstep.context import Clients
    from ragstep.settings import Settings

    st = PipelineState(
        request=SearchRequest(query="And then?", knowledge_base_ids=["kb"]),
        chat=ChatState(settings=ChatSettings(context_window=700, max_tokens=400), history=rounds(8, 30)),
    )
    with LLMServer(Reply(body=completion("Then more."))) as server:
        settings = Settings(
            data_dir=tmp_path / "d",
            chat_provider="openai",
            chat_model="m",
            chat_base_url=server.url,
            chat_max_retries=0,
        )
        out = run_stage("chat_completion", st, Clients(settings).context())
    sent = server.requests[0].json
    assert len(sent["messages"]) < 2 + 2 * 8 and sent["messages"][-1]["content"] == "And then?"
    assert sent["messages"][0]["role"] == "system"
    (row,) = [t for t in out.trace if t.stage == "token_budget"]
    assert row.counts["dropped_rounds"] == 8 - (len(sent["messages"]) - 2) // 2
    assert sent["max_tokens"] == row.counts["max_tokens"] <= 400


# -- empty retrieval -----------------------------------------------------------------------------------------------


def empty_state(**settings: object) -> PipelineState:
    return PipelineState(
        request=SearchRequest(query="Anything about llamas?", knowledge_base_ids=["kb"]),
        chat=ChatState(settings=ChatSettings(**settings), user_content="contexts: none"),
    )


def test_the_empty_response_answers_without_calling_the_model(tmp_path: Path) -> None:
    from ragstep.context import Clients
    from ragstep.settings import Settings

    with LLMServer() as server:  # no reply scripted: any call would fail the test
        settings = Settings(
            data_dir=tmp_path / "d",
            chat_provider="openai",
            chat_model="m",
            chat_base_url=server.url,
            chat_max_retries=0,
        )
        c = Clients(settings).context()
        out = run_stage("chat_completion", empty_state(empty_response="Nothing found."), c)
        streamed_out = drain(stream_stage("chat_completion_stream", empty_state(empty_response="Nothing found."), c))
    assert server.requests == []
    for st in (out, streamed_out):
        assert st.chat.answer == "Nothing found." and st.chat.fallback is None
        assert ("skip", "empty_retrieval") in [(t.action, t.reason) for t in st.trace if t.stage.startswith("chat_")]


def test_without_a_configured_empty_response_the_shipped_one_answers_and_no_model_is_called(tmp_path: Path) -> None:
    from ragstep.context import Clients
    from ragstep.settings import Settings
    from ragstep.stages.chat.prompts import EMPTY_RESPONSE

    with LLMServer() as server:  # no reply scripted: any call would fail the test
        settings = Settings(
            data_dir=tmp_path / "d",
            chat_provider="openai",
            chat_model="m",
            chat_base_url=server.url,
            chat_max_retries=0,
        )
        c = Clients(settings).context()
        out = run_stage("chat_completion", empty_state(), c)
        streamed_out = drain(stream_stage("chat_completion_stream", empty_state(), c))
        zh = run_stage(
            "chat_completion",
            empty_state().model_copy(update={"chat": empty_state().chat.model_copy(update={"language": "zh"})}),
            c,
        )
    assert server.requests == []  # no passage, no model call: it would answer from what it believes
    for st in (out, streamed_out):
        assert st.chat.answer == EMPTY_RESPONSE["en"] and st.chat.usage.total_tokens == 0
    assert zh.chat.answer == EMPTY_RESPONSE["zh"]
