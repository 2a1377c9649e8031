"""The chat model adapters: the OpenAI-compatible client against a real server on 127.0.0.1, and the extractive
answerer."""

from __future__ import annotations

import time

import pytest

from ragstep.adapters.chat import make_chat_model
from ragstep.adapters.chat.extractive import NO_ANSWER, NO_CONTEXT, ExtractiveChatModel, split_sentences
from ragstep.adapters.chat.openai import OpenAIChatModel, delta_of, parse_sse_line
from ragstep.errors import InputError, ProviderError
from ragstep.ports import ChatGrounding, ChatMessage, ChatModel, ChatOptions
from ragstep.settings import Settings
from support.llm_server import (
    DONE,
    INTERNAL_URL,
    LLMServer,
    Reply,
    completion,
    context_overflow,
    hang,
    quote_credentials,
    sse,
    streamed,
)

MESSAGES = [ChatMessage("system", "be brief"), ChatMessage("user", "hello")]
OPTS = ChatOptions(temperature=0.2, max_tokens=64, top_p=0.9, stop=("END",))


def model(server: LLMServer, **kw: object) -> OpenAIChatModel:
    options: dict[str, object] = {"api_key": "sk-test", "timeout_s": 2.0, "max_retries": 2, "backoff_base_s": 0.01}
    options.update(kw)
    return OpenAIChatModel(server.url, "gpt-test", **options)  # type: ignore[arg-type]


# -- OpenAI-compatible: whole answers ----------------------------------------------------------------------------


def test_complete_sends_the_options_and_reads_answer_reasoning_and_usage() -> None:
    with LLMServer(Reply(body=completion("Hi there", reasoning="short"))) as server:
        m = model(server)
        response = m.complete(MESSAGES, OPTS)
    assert (response.content, response.reasoning, response.model) == ("Hi there", "short", "scripted")
    assert response.usage is not None and response.usage.total_tokens == 18
    sent = server.requests[0]
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == "Bearer sk-test"
    assert sent.json == {
        "model": "gpt-test",
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}],
        "stream": False,
        "temperature": 0.2,
        "max_tokens": 64,
        "top_p": 0.9,
        "stop": ["END"],
    }
    assert isinstance(m, ChatModel) and m.name == "openai:gpt-test" and m.generative


def test_429_then_success_is_retried_honouring_retry_after() -> None:
    replies = (Reply(429, {"error": "slow down"}, headers={"Retry-After": "0"}), Reply(body=completion("ok")))
    with LLMServer(*replies) as server:
        assert model(server).complete(MESSAGES, OPTS).content == "ok"
    assert len(server.requests) == 2


def test_5xx_until_the_budget_is_spent_names_provider_and_status_and_logs_the_body(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with LLMServer(fallback=Reply(503, {"error": "overloaded"})) as server, pytest.raises(ProviderError) as err:
        model(server, max_retries=1).complete(MESSAGES, OPTS)
    assert len(server.requests) == 2
    message = err.value.message
    assert message == "chat model openai:gpt-test failed after 2 attempts: HTTP 503 (failed on its side)"
    assert "overloaded" in caplog.text and "127.0.0.1" in caplog.text and "/v1/chat/completions" in caplog.text


def test_a_401_quoting_the_key_shows_the_user_neither_key_nor_body_and_masks_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with LLMServer(quote_credentials()) as server, pytest.raises(ProviderError) as err:
        model(server, api_key="sk-live-secret-0123456789").complete(MESSAGES, OPTS)
    message = err.value.message
    assert message == "chat model openai:gpt-test refused the credentials (HTTP 401) (check RAGSTEP_CHAT_API_KEY)"
    assert err.value.to_dict()["message"] == message
    # The operator's log has the body, the key masked, and the provider's URL.
    assert "Invalid credentials" in caplog.text and INTERNAL_URL in caplog.text and server.url in caplog.text
    assert "sk-live-secret" not in caplog.text and "0123456789" not in caplog.text


def test_a_context_size_400_from_llama_server_names_the_setting() -> None:
    with LLMServer(context_overflow()) as server, pytest.raises(ProviderError) as err:
        model(server).complete(MESSAGES, OPTS)
    message = err.value.message
    assert "RAGSTEP_CHAT_CONTEXT_WINDOW" in message and "context window" in message
    assert "3008" not in message and len(server.requests) == 1


def test_a_hung_model_is_given_up_after_the_total_wait_not_timeout_times_attempts() -> None:
    # Today's behaviour: 4 attempts of the whole timeout each. With a total wait of 1.5 s and a 1 s timeout, the
    # second attempt gets what is left and no third one starts.
    with LLMServer(fallback=hang()) as server:
        m = model(server, timeout_s=1.0, max_retries=3, max_wait_s=1.5)
        started = time.monotonic()
        with pytest.raises(ProviderError, match="RAGSTEP_CHAT_MAX_WAIT_S") as err:
            m.complete(MESSAGES, OPTS)
        waited = time.monotonic() - started
        assert len(server.requests) <= 2
        with pytest.raises(ProviderError, match="RAGSTEP_CHAT_MAX_WAIT_S"):
            list(m.stream(MESSAGES, OPTS))
        assert len(server.requests) <= 4
    assert "no answer within 1.5s" in err.value.message
    assert waited < 4 * 1.0  # below what 4 attempts of the timeout cost (the bound is 1.5 s)


def test_a_4xx_is_not_retried_and_a_401_points_at_the_key() -> None:
    with LLMServer(Reply(401, {"error": "bad key"})) as server, pytest.raises(ProviderError, match="RAGSTEP_CHAT"):
        model(server).complete(MESSAGES, OPTS)
    assert len(server.requests) == 1


def test_a_context_window_overflow_says_what_to_lower() -> None:
    body = {"error": {"message": "This model's maximum context length is 8192 tokens"}}
    with LLMServer(Reply(400, body)) as server, pytest.raises(ProviderError, match="context window"):
        model(server).complete(MESSAGES, OPTS)


def test_an_unreachable_model_is_one_line_naming_provider_and_setting() -> None:
    with LLMServer() as server:
        url = server.url
    m = OpenAIChatModel(url, "gpt-test", timeout_s=1.0, max_retries=1, backoff_base_s=0.01)
    with pytest.raises(ProviderError) as err:
        m.complete(MESSAGES, OPTS)
    assert "openai:gpt-test" in err.value.message and url.removeprefix("http://") not in err.value.message
    assert "unreachable" in err.value.message and "RAGSTEP_CHAT_BASE_URL" in err.value.message
    assert "\n" not in err.value.message


def test_a_model_name_is_required() -> None:
    with pytest.raises(ProviderError, match="RAGSTEP_CHAT_MODEL"):
        OpenAIChatModel("http://127.0.0.1:1/v1", "")


# -- OpenAI-compatible: streams ----------------------------------------------------------------------------------


def test_stream_yields_content_and_reasoning_deltas_then_usage() -> None:
    chunks = [
        sse(reasoning="thinking"),
        sse("Hel"),
        sse("lo"),
        sse(finish="stop"),
        sse(usage={"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}),
        DONE,
    ]
    with LLMServer(Reply(chunks=chunks)) as server:
        deltas = list(model(server).stream(MESSAGES, OPTS))
    assert "".join(d.content for d in deltas) == "Hello"
    assert "".join(d.reasoning for d in deltas) == "thinking"
    assert [d.usage.total_tokens for d in deltas if d.usage] == [5]
    sent = server.requests[0].json
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}


def test_malformed_lines_comments_and_other_fields_are_skipped() -> None:
    chunks = [
        ": keep-alive\n\n",
        "event: message\nid: 1\n",
        "data: {not json\n\n",
        "data: [1, 2]\n\n",
        sse("ok"),
        "data: {}\n\n",
        *streamed("!"),
    ]
    with LLMServer(Reply(chunks=chunks)) as server:
        assert "".join(d.content for d in model(server).stream(MESSAGES, OPTS)) == "ok!"


def test_slow_first_token_within_the_timeout_is_awaited() -> None:
    with LLMServer(Reply(chunks=streamed("late"), first_delay_s=0.3)) as server:
        assert "".join(d.content for d in model(server, timeout_s=2.0).stream(MESSAGES, OPTS)) == "late"


def test_a_first_token_slower_than_the_timeout_is_retried() -> None:
    replies = (Reply(chunks=streamed("never"), first_delay_s=1.0), Reply(chunks=streamed("second")))
    with LLMServer(*replies) as server:
        text = "".join(d.content for d in model(server, timeout_s=0.3).stream(MESSAGES, OPTS))
    assert text == "second" and len(server.requests) == 2


def test_stream_retries_429_before_the_first_token() -> None:
    replies = (Reply(429, {"error": "busy"}, headers={"retry-after-ms": "10"}), Reply(chunks=streamed("ok")))
    with LLMServer(*replies) as server:
        assert "".join(d.content for d in model(server).stream(MESSAGES, OPTS)) == "ok"
    assert len(server.requests) == 2


def test_a_stream_cut_before_any_token_is_retried() -> None:
    replies = (Reply(chunks=[": opening\n\n"], cut=True), Reply(chunks=streamed("whole")))
    with LLMServer(*replies) as server:
        assert "".join(d.content for d in model(server).stream(MESSAGES, OPTS)) == "whole"
    assert len(server.requests) == 2


def test_a_stream_cut_mid_answer_is_never_replayed() -> None:
    with LLMServer(Reply(chunks=[sse("half an ")], cut=True), fallback=Reply(chunks=streamed("again"))) as server:
        got: list[str] = []
        with pytest.raises(ProviderError, match=r"broke off|ended before"):
            for delta in model(server).stream(MESSAGES, OPTS):
                got.append(delta.content)
    assert got == ["half an "] and len(server.requests) == 1


def test_a_stream_without_done_or_finish_is_an_error() -> None:
    server = LLMServer(Reply(chunks=[sse("partial")]))
    with server, pytest.raises(ProviderError, match="ended before the answer was complete"):
        list(model(server).stream(MESSAGES, OPTS))


def test_closing_the_stream_hangs_up_on_the_provider() -> None:
    chunks = [sse(f"w{i} ") for i in range(400)] + streamed("")
    with LLMServer(Reply(chunks=chunks, chunk_delay_s=0.005)) as server:
        stream = model(server).stream(MESSAGES, OPTS)
        first = [next(stream).content, next(stream).content]
        stream.close()  # the reader went away
        assert server.hung_up.wait(5), "the provider kept streaming to nobody"
        written = server.chunks_written
    assert first == ["w0 ", "w1 "] and written < len(chunks)


def test_sse_line_parsing() -> None:
    assert parse_sse_line("data: [DONE]") is True
    assert parse_sse_line("data:[DONE]") is True
    assert parse_sse_line("") is None and parse_sse_line(": ping") is None
    assert parse_sse_line('data: {"a": 1}') == {"a": 1}
    delta = delta_of({"choices": [{"delta": {"content": None, "reasoning": "r"}, "finish_reason": None}]})
    assert (delta.content, delta.reasoning) == ("", "r")


# -- extractive --------------------------------------------------------------------------------------------------

PASSAGES = (
    "AWS Lambda runs code without servers. Cold starts happen when a new execution environment starts.",
    "Provisioned concurrency keeps environments warm. It removes cold starts for steady traffic.",
    "BM25 ranks documents by term frequency.",
)


def test_extractive_quotes_relevant_sentences_in_context_order_with_citations() -> None:
    m = ExtractiveChatModel(max_chars=600)
    grounding = ChatGrounding("When do cold starts happen?", PASSAGES)
    answer = m.complete([], ChatOptions(), grounding).content
    assert answer.endswith("Cold starts happen when a new execution environment starts. [1]")
    # Two passages close to each other: both quoted, in context order.
    answer = m.complete([], ChatOptions(), ChatGrounding("Why does Lambda have cold starts?", PASSAGES)).content
    assert answer.index("environment starts. [1]") < answer.index("steady traffic. [2]")
    assert "BM25" not in answer and "[3]" not in answer
    assert m.name == "extractive" and not m.generative and isinstance(m, ChatModel)


def test_extractive_is_capped_and_keeps_the_best_sentence() -> None:
    long_passages = tuple(f"Cold starts variant {i} happen for reason {i} in Lambda." for i in range(30))
    answer = ExtractiveChatModel(max_chars=120).complete([], ChatOptions(), ChatGrounding("cold starts", long_passages))
    assert len(answer.content) <= 130 and "[1]" in answer.content


def test_extractive_says_plainly_when_the_context_does_not_answer() -> None:
    m = ExtractiveChatModel()
    assert m.complete([], ChatOptions(), ChatGrounding("quantum chromodynamics?", PASSAGES)).content == NO_ANSWER["en"]
    assert m.complete([], ChatOptions(), ChatGrounding("北京在哪里？", ())).content == NO_CONTEXT["zh"]


def test_extractive_answers_chinese_with_chinese_sentences() -> None:
    passages = ("北京是中华人民共和国的首都。北京也是全国的文化中心。", "上海是经济中心。")
    answer = ExtractiveChatModel().complete([], ChatOptions(), ChatGrounding("北京是哪个国家的首都？", passages))
    assert answer.content.startswith("北京是中华人民共和国的首都。") and answer.content.endswith(" [1]")
    assert "上海" not in answer.content


def test_extractive_streams_the_same_answer() -> None:
    m = ExtractiveChatModel()
    grounding = ChatGrounding("Why does Lambda have cold starts?", PASSAGES)
    deltas = list(m.stream([], ChatOptions(), grounding))
    assert "".join(d.content for d in deltas) == m.complete([], ChatOptions(), grounding).content
    assert len([d for d in deltas if d.content]) >= 2 and deltas[-1].finish_reason == "stop"


def test_sentence_split_keeps_urls_and_decimals() -> None:
    assert split_sentences("Version 2.5 is out. See ![x](http://a.b/c.png) now!\n第一句。第二句！") == [
        "Version 2.5 is out.",
        "See ![x](http://a.b/c.png) now!",
        "第一句。",
        "第二句！",
    ]


def test_a_names_initials_and_e_g_do_not_end_a_sentence() -> None:
    text = "GNU ed was written by Andrew L. Moore. See P. J. Plauger's book, e.g. its second part. It ends here."
    assert split_sentences(text) == [
        "GNU ed was written by Andrew L. Moore.",
        "See P. J. Plauger's book, e.g. its second part.",
        "It ends here.",
    ]


# -- the factory -------------------------------------------------------------------------------------------------


def test_factory_builds_the_configured_model(tmp_path: object) -> None:
    assert make_chat_model(Settings(chat_provider="extractive", chat_extractive_max_chars=99)).max_chars == 99  # type: ignore[attr-defined]
    m = make_chat_model(
        Settings(chat_provider="openai", chat_model="qwen", chat_base_url="http://127.0.0.1:9/v1/", chat_api_key="k")
    )
    assert m.name == "openai:qwen" and m.url == "http://127.0.0.1:9/v1/chat/completions"  # type: ignore[attr-defined]


def test_factory_refuses_an_unknown_provider() -> None:
    settings = Settings()
    object.__setattr__(settings, "chat_provider", "palm")
    with pytest.raises(InputError, match="chat provider 'palm'"):
        make_chat_model(settings)


def test_time_is_not_spent_in_retries_of_a_client_error() -> None:
    with LLMServer(Reply(404, {"error": "no such model"})) as server:
        started = time.perf_counter()
        with pytest.raises(ProviderError, match="HTTP 404"):
            list(model(server, backoff_base_s=1.0).stream(MESSAGES, OPTS))
    assert time.perf_counter() - started < 0.5
