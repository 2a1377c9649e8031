"""Usage records on Lambda: the API function (Mangum) returns only once the invocation's usage record is stored, so
an execution environment frozen, then discarded, after the invocation holds no unwritten record."""

from __future__ import annotations

import copy
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from ragstep.context import Clients
from ragstep.settings import Settings
from test_handlers import LambdaContext, data_dir, function_handler, load_event

__all__ = ["data_dir"]  # the fixture, from the handler tests: a Lambda-like environment per test


def sessions_event() -> dict[str, Any]:
    event: dict[str, Any] = copy.deepcopy(load_event("api_healthz"))
    event["rawPath"] = event["requestContext"]["http"]["path"] = "/v1/sessions"
    event["pathParameters"] = {"proxy": "v1/sessions"}
    return event


def test_the_api_function_returns_after_its_usage_record_is_stored(data_dir: Path) -> None:
    store = Clients(Settings(data_dir=data_dir)).usage  # creates usage.sqlite
    handler = function_handler("api")
    returned = threading.Event()
    responses: list[Any] = []

    def invoke() -> None:
        responses.append(handler(sessions_event(), LambdaContext(function_name="ragstep-api")))
        returned.set()

    lock = sqlite3.connect(data_dir / "usage.sqlite", isolation_level=None)
    lock.execute("BEGIN IMMEDIATE")  # the usage write waits for this (SQLite's busy timeout)
    invocation = threading.Thread(target=invoke)
    invocation.start()
    try:
        assert not returned.wait(1.0), "the invocation ended before its usage record was stored"
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    assert returned.wait(10)
    invocation.join()
    assert responses[0]["statusCode"] == 200
    records = store.between("default", 0, time.time() + 1)
    assert [(r.method, r.route, r.status) for r in records] == [("GET", "/v1/sessions", 200)]
