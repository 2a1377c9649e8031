"""``ragstep chat`` and ``ragstep sessions``, in-process against a data dir with two small documents."""

from __future__ import annotations

import _thread
import argparse
import io
import json
import threading
from pathlib import Path

import pytest

from conftest import run_cli
from ragstep.adapters.chat.extractive import split_sentences
from ragstep.context import Clients
from ragstep.entry.cli.chat import EXTRACTIVE_NOTE, ask, interactive
from ragstep.entry.cli.common import context_of
from ragstep.settings import Settings
from support.llm_server import LLMServer, Reply, sse, streamed


@pytest.fixture
def data_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str], plain_environment: None) -> str:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "lambda.md").write_text(
        "# Lambda\n\nAWS Lambda runs code without servers. Cold starts happen\nwhen a new execution environment "
        "starts.\n\n- Provisioned concurrency keeps environments warm.\n",
        encoding="utf-8",
    )
    (folder / "北京.md").write_text("北京是中华人民共和国的首都，\n也是全国的政治和文化中心。", encoding="utf-8")
    data = str(tmp_path / "data")
    assert run_cli(capsys, "--data-dir", data, "kb", "create", "docs")[0] == 0
    assert run_cli(capsys, "--data-dir", data, "ingest", str(folder), "--kb", "docs")[0] == 0
    return data


def test_chat_prints_the_answer_the_sources_and_the_session(data_dir: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "--data-dir", data_dir, "chat", "When do cold starts happen?", "--kb", "docs")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "Cold starts happen when a new execution environment starts. [1]"
    assert f"({EXTRACTIVE_NOTE})" in lines
    sources = lines.index("Sources:")
    assert lines[sources + 1].split() == ["#", "file", "chunk", "score", "cited"]
    assert lines[sources + 3].split()[:3] == ["1", "lambda.md", "0"] and lines[sources + 3].split()[-1] == "yes"
    assert lines[-1].startswith("session: ")
    assert "stage" not in out  # no trace without --trace


def test_chat_trace_and_json(data_dir: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "--data-dir", data_dir, "chat", "北京是哪国的首都？", "--kb", "docs", "--trace")
    assert code == 0 and "北京是中华人民共和国的首都，也是全国的政治和文化中心。 [1]" in out
    assert "chat_completion_stream" in out and "stream_filter" in out
    code, out, _ = run_cli(
        capsys,
        "--data-dir",
        data_dir,
        "chat",
        "When do cold starts happen?",
        "--kb",
        "docs",
        "--json",
        "--pipeline",
        "rag",
    )
    body = json.loads(out)
    assert code == 0 and body["pipeline"] == "rag" and body["model"] == "extractive"
    assert body["answer"].endswith("[1]") and body["references"][0]["knowledge_filename"] == "lambda.md"
    assert {t["stage"] for t in body["trace"]} >= {"chunk_search", "into_chat_message", "chat_completion"}


def test_a_session_continues_and_sessions_list_show_delete(data_dir: str, capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run_cli(capsys, "--data-dir", data_dir, "chat", "When do cold starts happen?", "--kb", "docs")
    session = out.splitlines()[-1].removeprefix("session: ")
    code, out, err = run_cli(capsys, "--data-dir", data_dir, "chat", "北京？", "--kb", "docs", "--session", session)
    assert code == 0, err
    assert out.splitlines()[-1] == f"session: {session}"
    code, out, _ = run_cli(capsys, "--data-dir", data_dir, "sessions", "list")
    assert code == 0 and session in out and "When do cold starts happen?" in out
    code, out, _ = run_cli(capsys, "--data-dir", data_dir, "sessions", "show", session, "--json")
    turns = json.loads(out)
    assert [t["query"] for t in turns] == ["When do cold starts happen?", "北京？"]
    assert turns[0]["model"] == "extractive" and turns[0]["references"]
    code, out, _ = run_cli(capsys, "--data-dir", data_dir, "sessions", "show", session)
    assert "[1] Q: When do cold starts happen?" in out and "A (extractive):" in out
    assert run_cli(capsys, "--data-dir", data_dir, "sessions", "delete", session)[1] == (
        f"deleted session {session} (2 turns)\n"
    )
    code, out, _ = run_cli(capsys, "--data-dir", data_dir, "sessions", "list")
    assert "no chat sessions yet" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["chat", "q?", "--kb", "docs", "--session", "nope"], "unknown session 'nope'"),
        (["chat", "   ", "--kb", "docs"], "query is empty"),
        (["chat", "q?", "--kb", "missing"], "unknown knowledge base 'missing'"),
        (["sessions", "show", "nope"], "unknown session 'nope'"),
        (["sessions", "delete", "nope"], "unknown session 'nope'"),
    ],
)
def test_bad_input_is_one_line_and_status_2(
    data_dir: str, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    code, _, err = run_cli(capsys, "--data-dir", data_dir, *args)
    assert code == 2 and err.startswith("ragstep: error: ") and message in err and err.count("\n") == 1


def test_an_unreachable_model_is_one_line(
    data_dir: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGSTEP_CHAT_PROVIDER", "openai")
    monkeypatch.setenv("RAGSTEP_CHAT_MODEL", "qwen-plus")
    monkeypatch.setenv("RAGSTEP_CHAT_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("RAGSTEP_CHAT_MAX_RETRIES", "0")
    code, _, err = run_cli(capsys, "--data-dir", data_dir, "chat", "When do cold starts happen?", "--kb", "docs")
    assert code == 2 and err.count("\n") == 1
    assert "chat model openai:qwen-plus" in err and "unreachable" in err and "RAGSTEP_CHAT_BASE_URL" in err
    assert "127.0.0.1:9" not in err  # the provider's address is the log's, not the user's


def test_interactive_session_keeps_history_and_knows_its_commands(data_dir: str) -> None:
    args = argparse.Namespace(data_dir=data_dir, kb=["docs"], session=None, pipeline="rag_stream", trace=False)
    ctx = context_of(args)
    script = iter(
        ["When do cold starts happen?", "/sources", "/what", "北京？", "/new", "<script>x</script>?", "/exit"]
    )
    out = io.StringIO()
    assert interactive(args, ctx, input_fn=lambda _prompt: next(script), out=out) == 0
    text = out.getvalue()
    assert "Cold starts happen when a new execution environment starts. [1]" in text
    assert "lambda.md" in text  # /sources
    assert "unknown command /what" in text and "new session" in text
    assert "ragstep: error: query contains HTML or script markup" in text
    (session,) = [s for s in ctx.history.sessions() if s.turns == 2]
    assert session.first_query == "When do cold starts happen?"


def test_markdown_is_read_as_sentences_not_lines() -> None:
    text = "# Title\n\nOne sentence\nwrapped here. Two.\n\n- item one\n- item two\n\n```\ncode.\n```\n| a | b |"
    assert split_sentences(text) == ["One sentence wrapped here.", "Two.", "item one", "item two"]
    assert split_sentences("北京是首都，\n也是中心。") == ["北京是首都，也是中心。"]


def test_ctrl_c_while_an_answer_streams_stops_it_and_keeps_the_part_shown(tmp_path: Path, data_dir: str) -> None:

    # 40 s of stream: the interrupt must land while it flows even when a busy machine runs this process slowly.
    chunks = [sse(f"w{i} ") for i in range(2000)] + streamed("")
    with LLMServer(Reply(chunks=chunks, chunk_delay_s=0.02)) as server:
        settings = Settings(
            data_dir=Path(data_dir),
            chat_provider="openai",
            chat_model="m",
            chat_base_url=server.url,
            chat_max_retries=0,
        )
        ctx = Clients(settings).context()
        args = argparse.Namespace(kb=["docs"], pipeline="rag_stream")

        class Out(io.StringIO):
            def write(self, text: str) -> int:
                if text.startswith("w5 "):  # the sixth word is on screen: press Ctrl-C
                    threading.Timer(0.01, _thread.interrupt_main).start()
                return super().write(text)

        out = Out()
        assert ask(args, ctx, "When do cold starts happen?", None, out) is None
        assert server.hung_up.wait(120)  # the server sees the hang-up on its next write; generous on a busy machine
    assert out.getvalue().endswith("\n[interrupted]\n")
    (session,) = ctx.history.sessions()
    (turn,) = ctx.history.recent(session.session_id)
    shown = out.getvalue().removesuffix("\n[interrupted]\n")
    assert turn.interrupted and turn.answer.startswith("w0 w1 w2 w3 w4 w5 ")
    # The saved part is what the terminal got (give or take the one delta in flight when Ctrl-C landed).
    assert abs(len(turn.answer.split()) - len(shown.split())) <= 1 and len(turn.answer.split()) < 2000


def test_set_overrides_retrieval_and_chat_settings(data_dir: str, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--data-dir", data_dir, "chat", "When do cold starts happen?", "--kb", "docs", "--json"]
    settings = ["--set", "RAGSTEP_CHAT_EXTRACTIVE_MAX_CHARS=50", "--set", "rerank_top_k=1", "--set", "max_rounds=0"]
    code, out, err = run_cli(capsys, *args, *settings)
    body = json.loads(out)
    assert code == 0, err
    assert len(body["references"]) == 1 and len(body["answer"]) <= 60
    code, _, err = run_cli(capsys, *args, "--set", "temperature=7")
    assert code == 2 and "temperature" in err


def test_interactive_mode_checks_its_knowledge_bases_first(data_dir: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "--data-dir", data_dir, "chat", "--kb", "missing")
    assert code == 2 and out == "" and "unknown knowledge base 'missing'" in err
