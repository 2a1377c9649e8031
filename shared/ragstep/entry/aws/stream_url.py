"""The streaming chat function: the chat part of the HTTP API under uvicorn, behind a Lambda Function URL in
RESPONSE_STREAM mode.

Python's managed runtime cannot stream a response by itself, API Gateway HTTP APIs buffer, and so does Mangum. The
``ChatStreamFunction`` of template.yaml therefore runs the AWS Lambda Web Adapter (its public layer, and
``AWS_LAMBDA_EXEC_WRAPPER=/opt/bootstrap``): the adapter starts the function's Handler, ``functions/api/run.sh``, as a
command; that runs :func:`main`, which serves the chat part of the app ``ragstep serve`` serves (chat, sessions,
knowledge search and ``/healthz``: :data:`~ragstep.entry.http.app.CHAT_ROUTERS`), on Starlette alone
(:mod:`ragstep.entry.http.chat_app`, for the cold start), on ``127.0.0.1:$AWS_LWA_PORT``. The
adapter waits until ``GET /healthz`` answers (``AWS_LWA_READINESS_CHECK_PATH``), then turns each Function URL
invocation into an HTTP request to the app and streams its response back as it is written
(``AWS_LWA_INVOKE_MODE=response_stream``): chat frames reach the client one by one, the pipeline runs in-process.

**Auth** is the app's own: the Function URL's AuthType is NONE and every request needs one of our API keys
(``RAGSTEP_AUTH=required``), checked by the same :class:`~ragstep.entry.http.auth.Gate` as behind API Gateway, with
the same scopes, limits and usage records. AWS_IAM would make every client sign requests with SigV4, which the
``openai`` SDKs, LangChain and curl users do not do; README "Streaming chat on AWS" says how to put CloudFront in
front instead.

What one execution environment keeps between invocations: the clients of :func:`ragstep.entry.aws.runtime.get_clients`
and an app built on them (built again, as the API function's, when a rotated secret rebuilds the clients). Each
request's usage record is written before its answer ends (``create_app(flush_usage=True)``): the environment may be
frozen, and later discarded, as soon as the response is complete.
"""

from __future__ import annotations

import json
import os
import threading
from typing import TYPE_CHECKING, Any

import anyio.to_thread

from ragstep.deadline import deadline_at, from_epoch_ms
from ragstep.entry.aws.runtime import get_clients

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.types import Receive, Scope, Send

    from ragstep.context import Clients

DEFAULT_PORT = 8080
#: The Lambda context as JSON, added to each request by the Lambda Web Adapter.
LAMBDA_CONTEXT_HEADER = b"x-amzn-lambda-context"
#: Longer than any execution environment lives: the adapter is the only client and keeps its connections pooled, so
#: the app must never be the one to close an idle connection (a close racing the adapter's next request on it
#: would fail that request).
KEEP_ALIVE_SECONDS = 24 * 3600
#: The pipelines whose stages a new environment imports before it reports ready: the default model's (``ragstep``)
#: and plain chat's. The others a chat may name (``viking_stream``, the non-streaming ones) import their stages on
#: first use: every environment would pay for them before its first answer, and few answers use them.
PRELOADED_PIPELINES = ("rag_stream", "chat_stream", "chat_history_stream")


class LambdaApp:
    """An ASGI app that serves ``create_chat_app(clients, flush_usage=True)`` on the environment's current clients:
    the routes of ``create_app(routers=CHAT_ROUTERS)``, the ones the Function URL is for, on Starlette alone
    (:mod:`ragstep.entry.http.chat_app`: importing FastAPI was a large part of a cold start)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._current: tuple[Clients, Starlette] | None = None

    def app(self) -> Starlette:
        """The app on the current clients (built on first use, and again after the clients were rebuilt)."""
        clients = get_clients()
        current = self._current
        if current is None or current[0] is not clients:
            with self._lock:
                current = self._current
                if current is None or current[0] is not clients:
                    from ragstep.entry.http.chat_app import create_chat_app

                    if current is not None:
                        current[1].state.gate.close()
                    built = create_chat_app(clients, flush_usage=True)
                    current = self._current = (clients, built)
        return current[1]

    def start(self) -> None:
        """What a new environment does before it reports ready: the app, its clients, the chat stages."""
        from ragstep.pipeline.definitions import PIPELINES, load_stage

        self.app()
        # The common pipelines' stages are imported now, while the adapter's readiness check waits, rather than
        # during the first answer.
        for name in PRELOADED_PIPELINES:
            for stage in PIPELINES[name].stage_names():
                load_stage(stage)

    def close(self) -> None:
        current = self._current
        if current is not None:
            current[1].state.gate.close()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        # get_clients() may look a rotated secret up (a network call once per RAGSTEP_SECRETS_MAX_AGE_S): off the loop.
        app = await anyio.to_thread.run_sync(self.app)
        # The invocation's deadline, which the adapter forwards in a header: this request task and the worker threads
        # it starts (AnyIO copies the context) bound their provider calls by it.
        with deadline_at(invocation_deadline(scope)):
            await app(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await anyio.to_thread.run_sync(self.start)
                except Exception as exc:  # uvicorn logs the message and exits: the adapter reports an init failure
                    await send({"type": "lifespan.startup.failed", "message": f"{type(exc).__name__}: {exc}"})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await anyio.to_thread.run_sync(self.close)
                await send({"type": "lifespan.shutdown.complete"})
                return


def invocation_deadline(scope: Scope) -> float | None:
    """The deadline of the invocation behind this request (:mod:`ragstep.deadline`), from the
    ``x-amzn-lambda-context`` header the Lambda Web Adapter adds: the Lambda context as JSON, ``deadline`` in Unix
    milliseconds. None without the header (the app run locally) or when it does not parse: no deadline, as locally.

    Clients cannot forge a longer time: the Function URL's requests reach the app only through the adapter, which
    sets the header itself, and a deadline can only shorten what the function's timeout allows anyway.
    """
    if scope.get("type") != "http":
        return None
    raw = next((v for k, v in scope.get("headers") or () if k == LAMBDA_CONTEXT_HEADER), None)
    if raw is None:
        return None
    try:
        data = json.loads(raw)
        value = data.get("deadline", data.get("deadline_ms")) if isinstance(data, dict) else None
        return from_epoch_ms(float(value)) if isinstance(value, int | float | str) else None
    except (ValueError, TypeError):
        return None


def port(environ: Any = None) -> int:
    """The port the adapter forwards to: ``AWS_LWA_PORT``, else ``PORT`` (the adapter's older name), else 8080."""
    env = os.environ if environ is None else environ
    text = env.get("AWS_LWA_PORT") or env.get("PORT") or str(DEFAULT_PORT)
    try:
        value = int(text)
    except ValueError:
        raise SystemExit(f"AWS_LWA_PORT/PORT must be a TCP port number, not {text!r}") from None
    if not 1 <= value <= 65535:
        raise SystemExit(f"AWS_LWA_PORT/PORT must be 1-65535, not {value}")
    return value


def main() -> None:
    """Serve :class:`LambdaApp` on 127.0.0.1 (the adapter runs in the same environment; nothing else may reach it)."""
    import uvicorn

    level = (os.environ.get("AWS_LAMBDA_LOG_LEVEL") or os.environ.get("POWERTOOLS_LOG_LEVEL") or "INFO").lower()
    level = "warning" if level == "warn" else level
    uvicorn.run(
        LambdaApp(),
        host="127.0.0.1",
        port=port(),
        lifespan="on",
        access_log=False,  # the adapter and the Function URL log requests already
        log_level=level if level in ("debug", "info", "warning", "error") else "info",
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        # A Function URL carries no WebSocket, and the app has no WebSocket route: not importing a WebSocket
        # implementation (uvicorn's "auto" loads the websockets package when installed) shortens each start.
        ws="none",
    )


if __name__ == "__main__":
    main()
