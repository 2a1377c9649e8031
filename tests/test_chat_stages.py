"""The chat stages one by one: history, rewrite, the chat message, the answer filter and the completions."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path

import pytest

from ragstep.context import Clients, Context
from ragstep.errors import InputError
from ragstep.models import (
    ChatSettings,
    ChatState,
    ChunkType,
    ImageInfo,
    PipelineState,
    Reference,
    RetrievalSettings,
    SearchRequest,
    SearchResult,
    StreamEvent,
    Turn,
)
from ragstep.pipeline.executor import drain, run_stage, stream_stage
from ragstep.settings import Settings
from ragstep.stages.chat import prompts
from ragstep.stages.chat.into_chat_message import enrich
from ragstep.stages.chat.rewrite_query import clean_rewrite
from ragstep.stages.chat.stream_filter import AnswerFilter
from support.llm_server import LLMServer, Reply, completion, echo_prompt, sse, streamed


def state(query: str = "When do cold starts happen?", session: str | None = None, **chat: object) -> PipelineState:
    return PipelineState(
        request=SearchRequest(query=query, knowledge_base_ids=["kb"], session_id=session),
        chat=ChatState(**chat),  # type: ignore[arg-type]
    )


def llm_ctx(tmp_path: Path, server: LLMServer, **settings: object) -> Context:
    values: dict[str, object] = {
        "data_dir": tmp_path / "data",
        "chat_provider": "openai",
        "chat_model": "m",
        "chat_base_url": server.url,
        "chat_max_retries": 0,
        "chat_timeout_s": 5.0,
    }
    values.update(settings)
    return Clients(Settings(**values)).context()  # type: ignore[arg-type]


def result(n: int, content: str, **kw: object) -> SearchResult:
    return SearchResult(id=f"c{n}", content=content, knowledge_id=f"k{n}", knowledge_base_id="kb", **kw)  # type: ignore[arg-type]


def trace_of(st: PipelineState, stage: str) -> list[tuple[str, str | None]]:
    """What the stage decided (skip, degrade, fallback): its rows other than the executor's timing row."""
    return [(t.action, t.reason) for t in st.trace if t.stage == stage and t.action != "run"]


# -- load_history ------------------------------------------------------------------------------------------------


def test_load_history_groups_drops_strips_and_keeps_the_newest_rounds(ctx: Context) -> None:
    now = time.time()
    turns = [
        Turn(session_id="s", created_at=now + i, query=f"q{i}", answer=f"<think>hmm</think>a{i}", request_id=f"r{i}")
        for i in range(8)
    ]
    turns.append(Turn(session_id="s", created_at=now + 8, query="q8", answer="<think>only thinking</think>"))
    turns.append(Turn(session_id="s", created_at=now + 9, query="q7 again", answer="a7 again", request_id="r7"))
    for turn in turns:
        ctx.history.append(turn)
    out = run_stage("load_history", state(session="s"), ctx)
    assert [(r.query, r.answer) for r in out.chat.history] == [
        ("q3", "a3"),
        ("q4", "a4"),
        ("q5", "a5"),
        ("q6", "a6"),
        ("q7 again", "a7 again"),
    ]
    row = next(t for t in out.trace if t.stage == "load_history")
    assert row.counts == {"messages": 20, "rounds": 5}


def test_load_history_reads_at_most_history_messages(ctx: Context) -> None:
    for i in range(30):
        ctx.history.append(Turn(session_id="s", created_at=1000.0 + i, query=f"q{i}", answer=f"a{i}"))
    out = run_stage("load_history", state(session="s", settings=ChatSettings(max_rounds=50, history_messages=6)), ctx)
    assert [r.query for r in out.chat.history] == ["q27", "q28", "q29"]


def test_load_history_skips_without_a_session(ctx: Context) -> None:
    assert trace_of(run_stage("load_history", state(), ctx), "load_history") == [("skip", "no_session")]


# -- rewrite_query -----------------------------------------------------------------------------------------------

HISTORY = [{"query": "What is AWS Lambda?", "answer": "A serverless compute service."}]


def test_rewrite_is_skipped_when_disabled_or_without_history(ctx: Context) -> None:
    off = state(settings=ChatSettings(enable_rewrite=False), history=HISTORY)
    assert trace_of(run_stage("rewrite_query", off, ctx), "rewrite_query") == [("skip", "rewrite_disabled")]
    assert trace_of(run_stage("rewrite_query", state(), ctx), "rewrite_query") == [("skip", "empty_history")]
    # The extractive default cannot rewrite: a question that stands alone is searched as asked.
    assert trace_of(run_stage("rewrite_query", state(history=HISTORY), ctx), "rewrite_query") == [
        ("skip", "standalone_question")
    ]


@pytest.mark.parametrize(
    ("history", "question", "subject"),
    [
        ([{"query": "青海湖在哪里？", "answer": "青海湖位于青海省。"}], "它的面积有多大？", "青海湖"),
        (
            [{"query": "How does bzip2 compress files?", "answer": "With the Burrows-Wheeler transform."}],
            "and how much memory does it need to decompress?",
            "bzip2",
        ),
        ([{"query": "北京到上海的高铁票价是多少？", "answer": "二等座约553元。"}], "时间呢？", "上海"),
        (
            [
                {"query": "Where is Lake Titicaca?", "answer": "Between Peru and Bolivia."},
                {"query": "How deep is it?", "answer": "About 280 m."},
            ],
            "What about its area?",
            "titicaca",
        ),
        # French, German and Spanish follow-ups: openers, pronouns, and function words shared that name nothing.
        ([{"query": "À quoi sert l'option -f de rm ?", "answer": "..."}], "et -r ?", "rm"),
        (
            [{"query": "Où est la crontab de chaque utilisateur ?", "answer": "..."}],
            "Quelle est sa taille ?",
            "crontab",
        ),
        ([{"query": "Wie kopiere ich ein Verzeichnis rekursiv?", "answer": "..."}], "und mit ln?", "verzeichnis"),
        ([{"query": "Wie erstelle ich einen symbolischen Link?", "answer": "..."}], "Was macht diese Option?", "link"),
        ([{"query": "¿Cómo se comprime un archivo con tar?", "answer": "..."}], "¿y para descomprimir?", "tar"),
        ([{"query": "¿Cómo envío la señal KILL a un proceso?", "answer": "..."}], "¿Qué hace esta opción?", "kill"),
        ([{"query": "¿Qué señal envía kill por defecto?", "answer": "..."}], "¿Quién lo escribió?", "kill"),
        ([{"query": "How do I compress a file with gzip?", "answer": "..."}], "How do I undo that?", "gzip"),
    ],
)
def test_a_follow_up_is_resolved_without_a_model(
    ctx: Context, history: list[dict[str, str]], question: str, subject: str
) -> None:
    out = run_stage("rewrite_query", state(question, history=history), ctx)
    assert out.search_query.startswith(question) and subject in out.search_query.lower()
    assert out.request.query == question
    (row,) = [t for t in out.trace if t.stage == "rewrite_query" and t.detail]
    assert row.action == "run" and row.detail["method"] == "history_terms" and subject in row.detail["added_terms"]


@pytest.mark.parametrize(
    ("earlier", "question"),
    [
        ("How does bzip2 compress files?", "How much memory does bzip2 need to decompress?"),
        ("How does bzip2 compress files?", "What is the GPL licence about?"),
        ("How does bzip2 compress files?", "Which command lists the packages installed on a system?"),
        ("How does bzip2 compress files?", "gzip 的压缩率是多少？"),
        ("青海湖在哪里？", "那曲在哪里？"),  # 那 starts a place name here, not a follow-up
        ("青海湖在哪里？", "再生纸怎么做？"),
        ("Comment supprimer un répertoire ?", "Combien de temps faut-il pour compiler ?"),  # an impersonal "il"
        ("Wie kopiere ich ein Verzeichnis rekursiv?", "Gibt es eine Option für Sicherungskopien?"),  # "gibt es"
        ("¿Cómo envío la señal KILL a un proceso?", "¿Qué es cron?"),  # "es": a verb
        ("What does the MIT license allow?", "How do I read a man page?"),  # man, mit: English words here
        ("How does bzip2 compress files?", "Is there a flag that keeps the original file?"),  # a relative "that"
        ("¿Qué señal envía kill por defecto?", "¿Qué es lo que hace tar?"),  # "lo que": not "it"
        (
            "How do I compress a file with gzip?",
            "Why does my daemon keep restarting when the parent dies?",
        ),  # English "dies"
        ("How do I compress a file with gzip?", "How can my son log in as root with su?"),  # English "son", "su"
    ],
)
def test_a_question_that_stands_alone_is_searched_as_asked_without_a_model(
    ctx: Context, earlier: str, question: str
) -> None:
    history = [{"query": earlier, "answer": "..."}]
    out = run_stage("rewrite_query", state(question, history=history), ctx)
    assert out.rewritten_query is None and out.search_query == question


def test_rewrite_resolves_the_question_with_the_english_prompts(tmp_path: Path) -> None:
    with LLMServer(Reply(body=completion("<think>x</think>\nRewritten: How much does AWS Lambda cost?"))) as server:
        out = run_stage("rewrite_query", state("How much does it cost?", history=HISTORY), llm_ctx(tmp_path, server))
    assert out.rewritten_query == "How much does AWS Lambda cost?"
    assert out.request.query == "How much does it cost?" and out.search_query == out.rewritten_query
    sent = server.requests[0].json["messages"]
    assert sent[0]["content"].startswith("You are an assistant focused on coreference resolution")
    assert "Example 5:" in sent[0]["content"]
    assert "User: What is AWS Lambda?\nAssistant: A serverless compute service." in sent[1]["content"]
    assert sent[1]["content"].rstrip().endswith("## Rewritten question")
    assert "How much does it cost?" in sent[1]["content"]


def test_rewrite_uses_weknoras_chinese_prompts_for_a_chinese_question(tmp_path: Path) -> None:
    history = [{"query": "微信支付有哪些功能？", "answer": "转账、付款码、收款。"}]
    with LLMServer(Reply(body=completion("微信支付的安全性"))) as server:
        out = run_stage("rewrite_query", state("它的安全性", history=history, language="zh"), llm_ctx(tmp_path, server))
    assert out.rewritten_query == "微信支付的安全性"
    system, user = (m["content"] for m in server.requests[0].json["messages"])
    assert "示例5" in system and "改写后的问题字数控制在30字以内" in system
    assert "用户: 微信支付有哪些功能？" in user and "## 需要改写的用户问题\n它的安全性" in user


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (Reply(500, {"error": "down"}), "rewrite_failed"),
        (Reply(body=completion("   ")), "empty_rewrite"),
        (Reply(body=completion(" ".join(["word"] * 80))), "rewrite_too_long"),
        # A small model answers its instructions back: the whole system prompt's first line (37 words) ...
        (echo_prompt(), "rewrite_too_long"),
        # ... or a short piece of them.
        (Reply(body=completion("Output only the rewritten question, no explanation")), "echoed_prompt"),
        (Reply(body=completion("What is the capital of France?")), "unrelated_rewrite"),
        (
            Reply(
                body=completion(
                    "How much does the AWS Lambda service cost per request for users in Europe, Asia and America?"
                )
            ),
            "rewrite_too_long",
        ),
    ],
)
def test_a_failed_rewrite_keeps_the_original(tmp_path: Path, reply: Reply, reason: str) -> None:
    with LLMServer(reply) as server:
        out = run_stage("rewrite_query", state("How much?", history=HISTORY), llm_ctx(tmp_path, server))
    assert out.rewritten_query is None and out.search_query == "How much?"
    assert trace_of(out, "rewrite_query") == [("degrade", reason)]


def test_rewrite_prompts_are_overridable(tmp_path: Path) -> None:
    settings = ChatSettings(rewrite_system_prompt="SYS {{conversation}}", rewrite_user_prompt="Q={{query}}")
    with LLMServer(Reply(body=completion("Lambda price?"))) as server:
        run_stage("rewrite_query", state("price?", settings=settings, history=HISTORY), llm_ctx(tmp_path, server))
    system, user = (m["content"] for m in server.requests[0].json["messages"])
    assert system.startswith("SYS User: What is AWS Lambda?") and user == "Q=price?"


def test_clean_rewrite() -> None:
    assert clean_rewrite("改写后：“北京到上海的高铁时长”\n解释……") == "北京到上海的高铁时长"
    assert clean_rewrite("<think>a\nb</think>") == ""


# -- into_chat_message -------------------------------------------------------------------------------------------


def test_context_blocks_are_numbered_and_the_template_filled(ctx: Context) -> None:
    st = state(settings=ChatSettings(context_template="{{contexts}}|{{query}}|{{current_time}}|{{current_week}}"))
    st = st.model_copy(update={"final_results": [result(1, "Cold starts happen."), result(2, "Warm is fast.")]})
    out = run_stage("into_chat_message", st, ctx)
    contexts, query, when, week = out.chat.user_content.split("|")
    assert contexts == "[1] Cold starts happen.\n\n[2] Warm is fast."
    assert query == "When do cold starts happen?"
    assert abs(datetime.strptime(when, "%Y-%m-%d %H:%M:%S").timestamp() - time.time()) < 5
    assert week == prompts.WEEKDAYS["en"][datetime.now().weekday()]
    assert out.chat.passages == ["Cold starts happen.", "Warm is fast."]


def test_the_default_chinese_template_and_weekday(ctx: Context) -> None:
    st = state("冷启动是什么？", language="zh").model_copy(update={"merge_results": [result(1, "冷启动很慢。")]})
    content = run_stage("into_chat_message", st, ctx).chat.user_content
    assert "## 检索到的信息如下：" in content and "[1] 冷启动很慢。" in content and "冷启动是什么？" in content
    assert prompts.WEEKDAYS["zh"][datetime.now().weekday()] in content


def test_faq_priority_uses_the_two_section_layout(ctx: Context) -> None:
    results = [
        result(1, "Q: reset password? A: use the link.", chunk_type=ChunkType.FAQ, score=0.95),
        result(2, "The account guide.", score=0.8),
        result(3, "Q: change email? A: settings.", chunk_type=ChunkType.FAQ, score=0.7),
    ]
    retrieval = RetrievalSettings(faq_priority_enabled=True, faq_direct_answer_threshold=0.9)
    st = state("如何重置密码？", language="zh", settings=ChatSettings(context_template="{{contexts}}"))
    st = st.model_copy(update={"final_results": results, "retrieval": retrieval})
    out = run_stage("into_chat_message", st, ctx)
    assert out.chat.user_content == (
        "### 资料来源 1：标准问答库 (FAQ)\n【高置信度 - 请优先参考】\n"
        "[FAQ-1] ⭐ 精准匹配: Q: reset password? A: use the link.\n"
        "[FAQ-2] Q: change email? A: settings.\n"
        "\n### 资料来源 2：参考文档\n【补充资料 - 仅在FAQ无法解答时参考】\n"
        "[DOC-1] The account guide."
    )
    assert next(t for t in out.trace if t.stage == "into_chat_message").detail["layout"] == "faq_priority"


def test_passages_are_enriched_with_image_captions_and_ocr() -> None:
    r = result(
        1,
        "See ![arch](http://img/a.png) here.",
        image_info=[
            ImageInfo(url="http://img/a.png", caption="an architecture diagram", ocr_text="API -> Lambda"),
            ImageInfo(url="http://img/b.png", caption="a chart"),
        ],
    )
    assert enrich(r, "en") == (
        "See ![arch](http://img/a.png)\nImage description: an architecture diagram\nImage text: API -> Lambda here."
        "\n\nAdditional image information:\nhttp://img/b.png Image description: a chart"
    )
    assert "图片描述: an architecture diagram" in enrich(r, "zh")


@pytest.mark.parametrize(
    "query", ["<script>alert(1)</script> hi", "see javascript:alert(1)", "<img src=x onerror=alert(1)>", "a\x07b"]
)
def test_unsafe_queries_are_refused(ctx: Context, query: str) -> None:
    st = state().model_copy(update={"request": SearchRequest.model_construct(query=query, knowledge_base_ids=["kb"])})
    with pytest.raises(InputError):
        run_stage("into_chat_message", st, ctx)


# -- the answer filter -------------------------------------------------------------------------------------------


def feed_all(flt: AnswerFilter, pieces: list[str]) -> tuple[str, str]:
    shown, thought = [], []
    for piece in pieces:
        a, r = flt.feed(piece)
        shown.append(a)
        thought.append(r)
    a, r = flt.flush()
    return "".join([*shown, a]), "".join([*thought, r])


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 100])
def test_think_is_removed_whatever_the_chunking(size: int) -> None:
    text = "<think>step one\nstep two</think>\n\nThe answer is <b>42</b>. <think>more</think>Done <thi"
    pieces = [text[i : i + size] for i in range(0, len(text), size)]
    answer, reasoning = feed_all(AnswerFilter(), pieces)
    assert answer == "The answer is <b>42</b>. Done <thi"
    assert reasoning == "step one\nstep twomore"


@pytest.mark.parametrize("size", [1, 2, 4, 50])
def test_a_no_match_prefix_is_recognised_across_chunks(size: int) -> None:
    text = "<think>\n</think>\nNO_MATCH and nothing else"
    flt = AnswerFilter("NO_MATCH")
    answer, _ = feed_all(flt, [text[i : i + size] for i in range(0, len(text), size)])
    assert answer == "" and flt.no_match and not flt.usable


def test_text_that_only_starts_like_the_prefix_is_shown() -> None:
    flt = AnswerFilter("NO_MATCH")
    assert feed_all(flt, ["NO", "T", " really"])[0] == "NOT really" and flt.usable
    flt = AnswerFilter("NO_MATCH")
    assert feed_all(flt, ["NO_"])[0] == "NO_"


def test_held_text_is_released_as_soon_as_it_is_decided() -> None:
    flt = AnswerFilter("NO_MATCH")
    assert flt.feed("Hello") == ("Hello", "")
    assert flt.feed(" <thi") == (" ", "")
    assert flt.feed("nk>x</think>y") == ("y", "x")


# -- completions and the fallback --------------------------------------------------------------------------------


def grounded(st: PipelineState, *results: SearchResult) -> PipelineState:
    """``st`` as into_chat_message leaves it: ``results`` retrieved and given as the references."""
    chat = st.chat.model_copy(update={"references": [Reference.model_validate(r.model_dump()) for r in results]})
    return st.model_copy(update={"final_results": list(results), "chat": chat})


def events_and_state(st: PipelineState, ctx: Context) -> tuple[list[StreamEvent], PipelineState]:
    events: list[StreamEvent] = []
    gen = stream_stage("chat_completion_stream", st, ctx)
    while True:
        try:
            events.append(next(gen))
        except StopIteration as stop:
            return events, stop.value


def test_stream_sends_system_history_and_user_and_relays_filtered_deltas(tmp_path: Path) -> None:
    chunks = [sse(reasoning="r1"), sse("<think>t</think>"), sse("Cold starts "), sse("happen [1]."), *streamed("")]
    st = grounded(state(history=HISTORY, user_content="CONTEXT + QUESTION"), result(1, "Cold starts happen."))
    with LLMServer(Reply(chunks=chunks)) as server:
        events, out = events_and_state(st, llm_ctx(tmp_path, server))
    sent = server.requests[0].json
    assert [m["role"] for m in sent["messages"]] == ["system", "user", "assistant", "user"]
    system = sent["messages"][0]["content"]
    assert system.startswith(prompts.fill(prompts.SYSTEM_PROMPT["en"], assistant_name="ragstep"))
    assert "named ragstep." in system and "WeKnora" not in system
    assert sent["messages"][3]["content"] == "CONTEXT + QUESTION"
    assert (sent["temperature"], sent["max_tokens"]) == (0.3, 2048)
    kinds = [e.event for e in events]
    assert kinds[0] == "references" and kinds[-1] == "done"
    assert events[0].data["results"][0]["id"] == "c1"
    assert "".join(e.data["delta"] for e in events if e.event == "answer") == "Cold starts happen [1]."
    assert "".join(e.data["delta"] for e in events if e.event == "reasoning") == "r1t"
    assert out.chat.answer == "Cold starts happen [1]." and out.chat.model == "openai:m" and out.chat.fallback is None
    assert [t.stage for t in out.trace] == ["stream_filter", "citations", "chat_completion_stream"]


def test_no_match_falls_back_to_the_model_with_the_fallback_prompt(tmp_path: Path) -> None:
    replies = (Reply(chunks=streamed("<think></think>", "NO_MATCH")), Reply(chunks=streamed("From general knowledge.")))
    with LLMServer(*replies) as server:
        events, out = events_and_state(state("Who won?"), llm_ctx(tmp_path, server))
    assert out.chat.answer == "From general knowledge." and out.chat.fallback == "model"
    fallback_prompt = server.requests[1].json["messages"]
    assert len(fallback_prompt) == 1 and fallback_prompt[0]["content"].endswith("## User's question:\nWho won?")
    assert trace_of(out, "stream_filter") == [("fallback", "no_match")]
    assert events[-1].data["fallback"] == "model"


def test_an_empty_answer_gets_the_fixed_response_when_configured(tmp_path: Path) -> None:
    with LLMServer(Reply(chunks=streamed(""))) as server:
        st = state("冷启动？", language="zh", settings=ChatSettings(fallback_strategy="fixed"))
        _, out = events_and_state(st, llm_ctx(tmp_path, server))
    assert out.chat.answer == "抱歉，我无法回答这个问题。" and out.chat.fallback == "fixed"
    assert trace_of(out, "stream_filter") == [("fallback", "empty_answer")]


def test_a_silent_fallback_model_still_gives_the_fixed_response(tmp_path: Path) -> None:
    with LLMServer(Reply(body=completion("NO_MATCH")), Reply(body=completion(""))) as server:
        out = run_stage("chat_completion", state(), llm_ctx(tmp_path, server))
    assert out.chat.answer == "Sorry, I cannot answer this question." and out.chat.fallback == "model"


def test_chat_completion_filters_the_whole_answer_and_keeps_usage(tmp_path: Path) -> None:
    with LLMServer(Reply(body=completion("<think>hm</think>\n\n**Yes** [1]"))) as server:
        st = grounded(state(user_content="X"), result(1, "Yes."))
        out = run_stage("chat_completion", st, llm_ctx(tmp_path, server))
    assert (out.chat.answer, out.chat.reasoning) == ("**Yes** [1]", "hm")
    assert out.chat.usage.total_tokens == 18 and out.chat.model == "openai:m"


def test_extractive_answers_from_the_passages_and_names_itself(ctx: Context) -> None:
    st = state(passages=["Cold starts happen when a new environment starts.", "BM25 ranks."], user_content="X")
    st = grounded(st, result(1, "Cold starts happen when a new environment starts."), result(2, "BM25 ranks."))
    out = drain(stream_stage("chat_completion_stream", st, ctx))
    assert out.chat.answer == "Cold starts happen when a new environment starts. [1]"
    assert out.chat.model == "extractive" and out.chat.fallback is None
    assert next(t for t in out.trace if t.stage == "chat_completion_stream").detail["model"] == "extractive"


def test_extractive_without_an_answer_says_so_and_needs_no_fallback(ctx: Context) -> None:
    st = state("What is quantum chromodynamics?", passages=["Cold starts happen."])
    out = run_stage("chat_completion", st, ctx)
    assert out.chat.answer == "The retrieved passages do not answer this question." and out.chat.fallback is None
