"""Malformed input at every entry point: each Lambda handler (``functions/*/app.py``) invoked with envelopes of every
wrong shape, and each route of the HTTP API sent bodies of every wrong shape. Nothing may escape as an uncaught
exception or a 5xx: each answers with its documented error shape, and no answer carries a traceback, a file path or
a Python exception class name.

The shapes are generated, deterministically: a fixed list of hostile values (wrong JSON types, empty and huge
strings, deep nesting, invalid base64, ...) put in place of the whole event; one value of each kind in place of each
top-level field of the function's sample event (``events/<function>.json``); three in place of each field one level
down; and each field removed.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from ragstep.context import Clients
from ragstep.entry.http.app import create_app
from ragstep.errors import RagstepError
from ragstep.settings import Settings
from test_handlers import EVENTS, FUNCTIONS, LambdaContext, function_handler
from test_handlers import data_dir as data_dir  # the fixture

#: Functions whose documented answer to a bad event is raising a RagstepError (the Step Functions tasks: the
#: runtime reports the class name as the error type the state machine matches on).
RAISING = {p.name for p in FUNCTIONS.iterdir() if p.is_dir()} - {
    "api",
    "authorizer",
    "slack_webhook",
    "slack_worker",
    "retrieval_events",
}


def _deep(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"a": value}
    return value


#: Values no well-formed field holds (or holds only by chance).
HOSTILE: list[Any] = [
    None,
    True,
    0,
    -1,
    2**70,
    1.5e308,
    "",
    "x",
    "9" * 400,
    "\x00\ud7ff\ufffd",
    "A" * 100_000,
    "!!not-base64!!",
    [],
    [None],
    [{}],
    {},
    {"": None},
    _deep(300),
    ["a"] * 1000,
]

#: What each field of a sample event is replaced by: one of each kind of :data:`HOSTILE` value (the suite's time is
#: spent where a kind is new, not on a second value of the same kind).
FIELD_VALUES: list[Any] = [None, True, 2**70, "", "9" * 400, "A" * 100_000, [], [None], {}, _deep(300)]
#: The same for the fields of a stage's state, without the 100,000-character string: a state's text fields are
#: written by the stages before it (the user's own text is bounded when the request is made), and the extractive
#: answerer takes minutes over a rewritten query that long (the stage's own limit, not the envelope's).
STATE_FIELD_VALUES: list[Any] = [v for v in FIELD_VALUES if not (isinstance(v, str) and len(v) > 1000)]

#: Whole events that are no envelope at all.
WHOLE: list[Any] = [*HOSTILE, {"Records": None}, {"Records": [None]}, {"Records": [{}]}, {"body": {"a": 1}}]

_LEAKS = re.compile(r"Traceback|site-packages|File \"|\.py\b|\b[A-Z]\w*(Error|Exception)\b")


def mutations(sample: Any, values: list[Any] = FIELD_VALUES) -> Iterator[Any]:
    """Malformed variants of ``sample``: the whole event replaced by every hostile value, each field by each of
    ``values`` (and each field one level down by three), and each of those fields removed."""
    yield from WHOLE
    if isinstance(sample, list):
        for i in range(len(sample)):
            for bad in values:
                yield [*sample[:i], bad, *sample[i + 1 :]]
        return
    if not isinstance(sample, dict):
        return
    for key, value in sample.items():
        removed = copy.deepcopy(sample)
        del removed[key]
        yield removed
        for bad in values:
            yield {**sample, key: bad}
        if isinstance(value, dict):
            for inner in value:
                for bad in (None, [], "x"):
                    yield {**sample, key: {**value, inner: bad}}


def sample_event(name: str) -> Any:
    path = EVENTS / f"{name}.json"
    if name == "api":
        path = EVENTS / "api_search.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def text_of(answer: Any) -> str:
    return json.dumps(answer, default=str)


def check_answer(name: str, event: Any, answer: Any) -> None:
    """The documented answer of ``name`` to a bad event."""
    shown = text_of(answer)
    assert not _LEAKS.search(shown), (name, shown[:500])
    assert isinstance(answer, dict), (name, shown[:300])
    if name == "api":
        assert isinstance(answer.get("statusCode"), int) and answer["statusCode"] < 500, (name, shown[:500])
        if answer["statusCode"] >= 400:
            body = json.loads(answer["body"])
            assert set(body) >= {"error", "message"}, body
    elif name == "authorizer":
        assert isinstance(answer.get("isAuthorized"), bool), shown[:300]
    elif name == "slack_webhook":
        assert answer.get("statusCode") in (400, 401), shown[:300]
        assert set(json.loads(answer["body"])) >= {"error", "message"}
    elif name == "slack_worker":
        assert str(answer.get("outcome", "")).startswith(("refused", "failed", "answered")), shown[:300]
    elif name == "retrieval_events":
        assert isinstance(answer.get("batchItemFailures"), list), shown[:300]
    else:  # a stage: what it returns is a state (a mutation can leave the event a valid state)
        assert "pipeline" in answer or "request_id" in answer, shown[:300]


def invoke_malformed(name: str, event: Any) -> None:
    handler = function_handler(name)
    try:
        answer = handler(copy.deepcopy(event), LambdaContext(function_name=f"ragstep-{name}"))
    except RagstepError as exc:
        assert name in RAISING, f"{name} raised {type(exc).__name__}: {exc.message}"
        assert not _LEAKS.search(exc.message.replace(type(exc).__name__, "")), exc.message[:500]
        return
    check_answer(name, event, json.loads(json.dumps(answer, default=str)))


@pytest.mark.parametrize("name", sorted(p.name for p in FUNCTIONS.iterdir() if p.is_dir()))
def test_every_lambda_handler_answers_malformed_envelopes_with_its_error_shape(
    name: str, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGSTEP_SLACK_SIGNING_SECRET", "fuzz-secret")
    monkeypatch.setenv("RAGSTEP_SLACK_WORKER_FUNCTION", "ragstep-slack-worker")
    failures: list[str] = []
    count = 0
    for event in mutations(sample_event(name), STATE_FIELD_VALUES if name in RAISING else FIELD_VALUES):
        count += 1
        try:
            invoke_malformed(name, event)
        except AssertionError as exc:
            failures.append(f"{text_of(event)[:160]}: {str(exc)[:300]}")
        except Exception as exc:
            failures.append(f"{text_of(event)[:160]}: uncaught {type(exc).__name__}: {str(exc)[:200]}")
    assert count >= 30
    assert not failures, f"{len(failures)} of {count} malformed events mishandled:\n" + "\n".join(failures[:15])


def test_a_batch_whose_every_record_fails_is_reported_by_message_id_without_a_traceback(data_dir: Path) -> None:
    """Powertools raises when a whole batch fails, and the error the runtime reports then holds each record's
    traceback (site-packages paths and all); the handler reports every record by id instead."""
    event = {"Records": [{"messageId": f"m-{i}", "body": body} for i, body in enumerate(["not json", "[]", "{}"])]}
    answer = function_handler("retrieval_events")(event, LambdaContext(function_name="ragstep-retrieval_events"))
    assert answer == {"batchItemFailures": [{"itemIdentifier": f"m-{i}"} for i in range(3)]}


# -- the HTTP API ------------------------------------------------------------------------------------------------

#: Bodies no route takes: not JSON, not UTF-8, JSON of every wrong type, nested past any decoder, huge.
BAD_BODIES: list[bytes] = [
    b"",
    b"{",
    b"not json",
    b"\xff\xfe\x00garbage",
    b"null",
    b"0",
    b"-1e999",
    b'"x"',
    b"[]",
    b"[null]",
    b"{}",
    b'{"": null}',
    b'{"query": null, "knowledge_base_ids": "docs", "session_id": 7}',
    b'{"query": "' + b"A" * 200_000 + b'"}',
    b"[" * 100_000 + b"]" * 100_000,
    b'{"a":' * 5_000 + b"1" + b"}" * 5_000,
    json.dumps({"query": "x", "knowledge_base_ids": [{"a": 1}], "overrides": [], "chat": "x"}).encode(),
]
#: What a path parameter is replaced by.
BAD_PARAMS = ["x", "..%2F..%2Fetc", "%00", "A" * 300, "%F0%9F%92%A9", "-1"]


def _route_paths(path: str) -> list[str]:
    params = re.findall(r"\{[^}]+\}", path)
    if not params:
        return [path]
    return [re.sub(r"\{[^}]+\}", value, path) for value in BAD_PARAMS]


def _error_shaped(parsed: Any) -> bool:
    """The API's ``{error, message}``, or the shape of an error OpenAI's clients (``{"error": {message, ...}}``)
    and MCP's JSON-RPC (``{"jsonrpc", "error": {code, message}}``) read."""
    if not isinstance(parsed, dict):
        return False
    error = parsed.get("error")
    if isinstance(error, dict):
        return isinstance(error.get("message"), str)
    return isinstance(error, str) and isinstance(parsed.get("message"), str)


def test_every_http_route_answers_malformed_bodies_with_a_4xx_error_body(tmp_path: Path) -> None:
    clients = Clients(Settings(data_dir=tmp_path / "data"))
    app = create_app(clients)
    # Every route the API declares (the OpenAPI document lists each path and its methods), and the MCP endpoint.
    routes = {path: {m.upper() for m in spec} for path, spec in app.openapi()["paths"].items()}
    routes["/mcp"] = {"GET", "POST", "DELETE"}  # stateless: GET and DELETE are 405s, answered at once
    assert len(routes) >= 20
    failures: list[str] = []
    count = 0
    with TestClient(app, raise_server_exceptions=False) as client:
        for template, methods in sorted(routes.items()):
            for method in sorted(methods - {"HEAD"}):
                for path in _route_paths(template):
                    bodies = BAD_BODIES if method in ("POST", "PUT", "PATCH") else [b""]
                    for body in bodies:
                        count += 1
                        headers = {"content-type": "application/json"}
                        answer = client.request(method, path, content=body, headers=headers, params={"page": "x"})
                        shown = answer.text[:2000]
                        where = f"{method} {path[:60]} {body[:40]!r}"
                        if answer.status_code >= 500:
                            failures.append(f"{where}: {answer.status_code} {shown[:200]}")
                        elif _LEAKS.search(shown) and template != "/mcp":  # MCP: the SDK's JSON-RPC messages
                            failures.append(f"{where}: leaks {shown[:200]}")
                        elif answer.status_code >= 400:
                            try:
                                parsed = answer.json()
                            except ValueError:
                                failures.append(f"{where}: {answer.status_code} body is not JSON")
                                continue
                            if not _error_shaped(parsed):
                                failures.append(f"{where}: {answer.status_code} body {shown[:200]}")
    assert count >= 300
    assert not failures, f"{len(failures)} of {count} requests mishandled:\n" + "\n".join(failures[:20])
