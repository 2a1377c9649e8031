"""The web console: the page ``ragstep serve`` answers at ``/``, its assets under ``/console/``, and ``GET /v1/me``.

The page is plain ES modules and one stylesheet in this folder (no build step, no CDN, no request to any other host:
the Content-Security-Policy below forbids it). It is a client of the public API like any other: it sends the API key
the user typed (kept in the tab's ``sessionStorage``) as ``Authorization: Bearer``, and sees the same routes, scopes
and ``{error, message}`` bodies. The only route added for it is ``GET /v1/me``, which any client may use: who the
presented key is and what its scopes allow, so a page (or a script) can offer only what will work.

On AWS the API function serves the same routes (``template.yaml``: ``GET /`` and ``GET /console/{proxy+}`` without
the key authorizer, since a browser fetches a page before it can send a key; every ``/v1`` route keeps it). The HTTP
API buffers a response, so there the page sends its questions to the streaming chat function's URL instead
(``RAGSTEP_CONSOLE_CHAT_URL``, which the stack sets): the page carries it in a ``<meta>``, and its
Content-Security-Policy allows that one origin besides its own.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from fastapi import APIRouter, FastAPI, Request
from pydantic import BaseModel, Field
from starlette.responses import HTMLResponse, Response
from starlette.staticfiles import StaticFiles

from ragstep.entry.http.access import clients_of, gate_of, principal
from ragstep.entry.http.errors import error_doc
from ragstep.errors import InputError

#: The page's files (package data: pyproject's ``[tool.setuptools.package-data]``), apart from this module so that
#: nothing but them is ever served.
ASSETS = Path(__file__).resolve().parent / "static"

#: The page may load its own files and call its own origin, nothing else; it may not be framed (clickjacking).
#: ``blob:`` images: the pictures of a passage are fetched with the API key and shown from the fetched bytes.
PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # Revalidated on every load (a 304 when unchanged): an upgraded server never serves yesterday's script.
    "Cache-Control": "no-cache",
}


class _Assets(StaticFiles):
    """The console's files, with :data:`PAGE_HEADERS` (ETag and 304 come from Starlette)."""

    def file_response(
        self, full_path: Any, stat_result: Any, scope: Any, status_code: int = 200
    ) -> Response:  # Starlette's signature
        response = super().file_response(full_path, stat_result, scope, status_code)
        response.headers.update(PAGE_HEADERS)
        return response


class Me(BaseModel):
    """Who the presented API key is, and what it may do."""

    tenant_id: str
    key_prefix: str = Field(description='the key\'s public prefix ("" when the server needs no key)')
    key_name: str = ""
    scopes: list[str] = Field(description="search, chat, ingest, manage, usage")
    knowledge_bases: list[str] = Field(description="the only knowledge bases the key sees ([]: all of the tenant's)")
    expires_at: float | None = None
    keyless: bool = Field(description="true on a local server without API keys: every request is the default tenant's")


router = APIRouter()


_ME_ERRORS = {
    401: "no API key, or a malformed, unknown, revoked or expired one",
    429: "over the key's rate limit or the tenant's daily quota (see Retry-After)",
    500: "an internal error (the server's log has the details)",
    503: "the key store cannot be used",
}


@router.get("/v1/me", responses={status: error_doc(said) for status, said in _ME_ERRORS.items()})
def me(request: Request) -> Me:
    """The caller: its tenant, key prefix and name, scopes and knowledge bases. Needs a valid key (when the server
    has keys) and no particular scope; the key's rate limit and quotas count it like any request."""
    caller = principal(request)
    gate_of(request).admit(caller)
    key = caller.key
    return Me(
        tenant_id=caller.tenant_id,
        key_prefix=caller.key_prefix,
        key_name=key.name if key is not None else "",
        scopes=list(caller.scopes),
        knowledge_bases=list(key.knowledge_bases) if key is not None else [],
        expires_at=key.expires_at if key is not None else None,
        keyless=key is None,
    )


_CHAT_URL_META = '<meta name="ragstep-chat-url" content="">'


def chat_origin(url: str) -> str:
    """The origin of the console's chat URL (``""`` when none is set)."""
    if not url:
        return ""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment or url[-1] != "/":
        raise InputError(
            f"RAGSTEP_CONSOLE_CHAT_URL={url!r} is not a base URL: give http(s)://host/ ending with '/' "
            "(on AWS the stack's ChatStreamUrl)"
        )
    return f"{parts.scheme}://{parts.netloc}"


def render_page(chat_url: str) -> tuple[str, dict[str, str]]:
    """index.html with the chat URL in its ``<meta>``, and its headers (the chat URL's origin allowed to connect)."""
    origin = chat_origin(chat_url)
    text = (ASSETS / "index.html").read_text(encoding="utf-8")
    text = text.replace(_CHAT_URL_META, f'<meta name="ragstep-chat-url" content="{html.escape(chat_url)}">')
    headers = dict(PAGE_HEADERS)
    if origin:
        policy = headers["Content-Security-Policy"]
        headers["Content-Security-Policy"] = policy.replace("connect-src 'self'", f"connect-src 'self' {origin}")
    return text, headers


@router.get("/", include_in_schema=False)
def page(request: Request) -> Response:
    text, headers = render_page(clients_of(request).settings.console_chat_url)
    return HTMLResponse(text, headers=headers)


def install(app: FastAPI) -> None:
    """The console on ``app``: ``/``, ``/console/*`` and ``GET /v1/me``. A chat URL that is not a base URL is
    refused here, when the server starts, not on the first page load."""
    chat_origin(app.state.clients.settings.console_chat_url)
    app.include_router(router)
    app.mount("/console", _Assets(directory=ASSETS), name="console")
