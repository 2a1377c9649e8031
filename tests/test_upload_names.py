"""Upload file names whose bytes are not UTF-8 are refused (the README's rule), not stored under the Latin-1
reading the form parser falls back to (``a\\xff\\xfeb.md`` as ``aÿþb.md``) -- over the wire, with raw multipart bodies
(clients such as httpx would escape the bytes before sending)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ragstep.context import Clients
from ragstep.settings import Settings
from test_http_knowledge import KBS, error, ok, serving

BOUNDARY = "b0undary"


@pytest.fixture
def clients(tmp_path: Path) -> Clients:
    return Clients(Settings(data_dir=tmp_path / "data"))


@pytest.fixture
def api(clients: Clients) -> Iterator[httpx.Client]:
    with serving(clients) as client:
        yield client


def raw_upload(http: httpx.Client, name: bytes, content: bytes = b"A note about lighthouses.") -> httpx.Response:
    body = (
        f"--{BOUNDARY}\r\n".encode()
        + b'Content-Disposition: form-data; name="files"; filename="'
        + name
        + b'"\r\nContent-Type: text/markdown\r\n\r\n'
        + content
        + f"\r\n--{BOUNDARY}--\r\n".encode()
    )
    headers = {"content-type": f"multipart/form-data; boundary={BOUNDARY}"}
    return http.post(f"{KBS}/docs/documents", content=body, headers=headers)


def test_a_name_that_is_not_utf8_is_refused_and_nothing_is_stored(api: httpx.Client, clients: Clients) -> None:
    http = api
    ok(http.post(KBS, json={"name": "docs"}), 201)
    message = error(raw_upload(http, b"a\xff\xfeb.md"), 400)
    assert "is not valid UTF-8; rename the file" in message and "\ufffd" in message
    assert ok(http.get(f"{KBS}/docs/documents"))["items"] == []
    assert stored(clients) == []
    # The same characters sent as UTF-8 are a fine name, and stored.
    accepted = raw_upload(http, "aÿþb.md".encode())
    assert accepted.status_code < 300, accepted.text
    assert "aÿþb.md" in accepted.text
    assert stored(clients)


def stored(clients: Clients) -> list[Path]:
    """Every file of the blob store (the originals are stored before the reply)."""
    return [p for p in clients.settings.data_dir.rglob("*") if p.is_file() and "blobs" in p.parts]
