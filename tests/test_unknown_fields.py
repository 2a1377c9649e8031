"""An unknown key names what its object accepts, wherever it sits in the request (pydantic said "Extra inputs are
not permitted", naming neither the mistake nor what to write instead)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ragstep.entry.cli.common import validation_message
from ragstep.entry.http.conversations import StatelessChatBody
from ragstep.models import SearchRequest
from ragstep.models.unknown_fields import accepted_fields, explain_unknown_fields


def _errors(body: dict[str, object]) -> list[dict[str, object]]:
    with pytest.raises(ValidationError) as caught:
        StatelessChatBody.model_validate(body)
    return explain_unknown_fields(caught.value.errors(), StatelessChatBody)


def test_a_key_inside_a_list_item_names_the_items_fields() -> None:
    errors = _errors({"query": "q", "history": [{"query": "a", "answer": "b"}, {"query": "c", "anwser": "d"}]})
    (err,) = [e for e in errors if e["type"] == "extra_forbidden"]
    assert err["loc"] == ("history", 1, "anwser")
    assert err["msg"] == "unknown field (did you mean answer?); history accepts query, answer"


def test_a_top_level_key_names_the_requests_fields_and_the_closest() -> None:
    (err,) = _errors({"query": "q", "knowledge_base_id": ["kb"]})
    assert err["msg"].startswith("unknown field (did you mean knowledge_base_ids?); the request accepts query, ")


def test_the_command_lines_message_reads_the_model_from_the_error() -> None:
    with pytest.raises(ValidationError) as caught:
        SearchRequest(query="q", knowledge_base_ids=["kb"], overrides={"fusoin": "rrf"})
    message = validation_message(caught.value)
    assert message.startswith("overrides.fusoin: unknown field (did you mean fusion?); overrides accepts ")
    assert "Extra inputs" not in message


def test_a_path_that_leads_to_no_model_accepts_nothing_said() -> None:
    assert accepted_fields(StatelessChatBody, ["chat"]) is None  # a free-form dict: nothing to list
    assert (
        explain_unknown_fields([{"type": "missing", "loc": ("query",), "msg": "Field required"}], None)[0]["msg"]
        == "Field required"
    )


def test_upload_options_and_webhook_messages_say_it_too() -> None:
    from ragstep.app.channels.webhooks import WebhookMessage
    from ragstep.models.ingest import IngestOptions
    from ragstep.models.unknown_fields import first_problem

    with pytest.raises(ValidationError) as caught:
        IngestOptions.model_validate({"chunk_sise": 256})
    assert first_problem(caught.value, IngestOptions) == (
        "chunk_sise: unknown field (did you mean chunk_size?); the request accepts chunk_size, chunk_overlap,"
        " parent_child, parent_size"
    )
    with pytest.raises(ValidationError) as caught:
        WebhookMessage.model_validate({"conversation_id": "c", "message_id": "m", "text": "hi", "usr": "u"})
    assert first_problem(caught.value, WebhookMessage).startswith("usr: unknown field (did you mean user?); ")
