"""The local Slack webhook server of ``ragstep slack serve`` (see :mod:`ragstep.entry.cli.slack`).

Served by uvicorn, the server ``ragstep serve`` runs, with a small ASGI app (:class:`SlackEvents`): the HTTP framing
-- ``Content-Length``, chunked bodies, keep-alive -- is the server's, so no part of one request's body is ever read as
the next request (a hand-written layer once answered a request smuggled inside an oversized body). A body over
:data:`MAX_BODY` is refused with 413 and the connection closed. Apart from the command's module because the parser is
built at every start-up: uvicorn and the thread pool load only when the command runs.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any

from ragstep.errors import InputError, RagstepError

if TYPE_CHECKING:
    import argparse
    import socket

    from starlette.types import Receive, Scope, Send

    from ragstep.app.channels.slack_intake import Reply
    from ragstep.context import Clients

log = logging.getLogger(__name__)

PATH = "/slack/events"
#: A Slack request is a few KiB; anything far larger is not one.
MAX_BODY = 1024 * 1024


class SlackEvents:
    """The ASGI app: ``POST /slack/events`` through the same intake as the Lambda webhook; the answers run on
    :attr:`workers` threads (:meth:`drain` waits for them)."""

    def __init__(self, clients: Clients, workers: int = 4) -> None:
        from ragstep.app.channels.slack_intake import SlackIntake

        settings = clients.settings
        secret = settings.slack_signing_secret.get_secret_value() if settings.slack_signing_secret else ""
        if not secret:
            raise InputError("set RAGSTEP_SLACK_SIGNING_SECRET (the Slack app's Basic Information > Signing Secret)")
        self.clients = clients
        self.workers = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ragstep-slack")
        self._pending: set[Future[None]] = set()
        self._pending_lock = threading.Lock()
        self.intake = SlackIntake(secret, lambda: clients.idempotency, self._hand_off)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] != PATH:
            return await _send(send, 404, {"error": "not_found", "message": f"POST Slack events to {PATH}"})
        if scope["method"] != "POST":
            return await _send(send, 405, {"error": "method_not_allowed", "message": f"POST Slack events to {PATH}"})
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAX_BODY:
            return await _too_large(send)
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > MAX_BODY:
                return await _too_large(send)
            if not message.get("more_body", False):
                break
        import anyio.to_thread

        reply = await anyio.to_thread.run_sync(self._handle, bytes(body), headers)
        await _send(send, reply.status, reply.body)

    def _handle(self, body: bytes, headers: dict[str, str]) -> Reply:
        from ragstep.app.channels.slack_intake import Reply

        try:
            return self.intake.handle(body, headers)
        except Exception:  # the intake answers what it expects; anything else is a bug, logged here
            log.exception("slack request failed")
            return Reply(500, {"error": "internal_error", "message": "could not handle the request; see the log"})

    def _hand_off(self, envelope: dict[str, Any]) -> None:
        future = self.workers.submit(self._answer, envelope)
        with self._pending_lock:
            self._pending.add(future)
        future.add_done_callback(self._done)

    def _done(self, future: Future[None]) -> None:
        with self._pending_lock:
            self._pending.discard(future)

    def drain(self, timeout_s: float = 30.0) -> bool:
        """Wait until every answer handed off so far is done; False if some still run after ``timeout_s``."""
        with self._pending_lock:
            pending = set(self._pending)
        return not wait(pending, timeout=timeout_s).not_done

    def _answer(self, envelope: dict[str, Any]) -> None:
        from ragstep.app.channels.slack_worker import answer_slack_event

        event_id = envelope.get("event_id")
        try:
            ctx = self.clients.context(self.clients.settings.slack_tenant)
            outcome = answer_slack_event(envelope, ctx, self.clients.slack)
            log.info("slack event %s: %s", event_id, outcome)
        except RagstepError as exc:  # Slack unreachable, a bad token: one line on the console says which
            log.error("slack event %s: could not answer: %s", event_id, exc.message)
        except Exception as exc:  # a worker thread has no caller to raise to
            if os.environ.get("RAGSTEP_DEBUG"):
                log.exception("slack event %s: could not answer", event_id)
            else:
                log.error(
                    "slack event %s: could not answer: internal error (%s); set RAGSTEP_DEBUG=1 for a traceback",
                    event_id,
                    type(exc).__name__,
                )

    def shutdown_workers(self) -> None:
        self.workers.shutdown(wait=True)


async def _send(send: Send, status: int, body: dict[str, Any], *, close: bool = False) -> None:
    data = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


async def _too_large(send: Send) -> None:
    # The rest of the body is never read: the connection closes after this answer, so none of it is a request.
    message = f"request body over {MAX_BODY} bytes; a Slack event is a few KiB"
    await _send(send, 413, {"error": "payload_too_large", "message": message}, close=True)


class SlackDevServer:
    """:class:`SlackEvents` on ``(host, port)`` under uvicorn (port 0: a free one, in :attr:`server_address`).
    :meth:`serve_forever` until :meth:`shutdown` (or Ctrl-C in the main thread)."""

    def __init__(self, clients: Clients, address: tuple[str, int], workers: int = 4) -> None:
        try:
            import uvicorn
        except ImportError:
            raise InputError("`ragstep slack serve` needs uvicorn: pip install 'ragstep[serve]'") from None
        self.app = SlackEvents(clients, workers)
        host, port = address
        config = uvicorn.Config(self.app, host=host, port=port, lifespan="off", access_log=False, log_level="warning")
        self._socket: socket.socket = config.bind_socket()
        self._socket.listen(config.backlog)  # connections made before serving starts wait instead of being refused
        self.server_address: tuple[str, int] = self._socket.getsockname()[:2]
        self._server = uvicorn.Server(config)
        self._serving = threading.Event()
        self._stopped = threading.Event()

    @property
    def intake(self) -> Any:
        return self.app.intake

    def serve_forever(self) -> None:
        self._serving.set()
        try:
            self._server.run(sockets=[self._socket])
        finally:
            self._stopped.set()

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Stop serving, and wait (``timeout_s`` at most) until :meth:`serve_forever` has returned."""
        self._server.should_exit = True
        if self._serving.is_set():
            self._stopped.wait(timeout_s)

    def server_close(self) -> None:
        self._socket.close()

    def drain(self, timeout_s: float = 30.0) -> bool:
        return self.app.drain(timeout_s)

    def shutdown_workers(self) -> None:
        self.app.shutdown_workers()


def serve(args: argparse.Namespace) -> int:
    """``ragstep slack serve``: until Ctrl-C."""
    from ragstep.entry.cli.common import context_of
    from ragstep.entry.cli.serve import check_listen

    check_listen(args.host, args.port)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    server = SlackDevServer(context_of(args).clients, (args.host, args.port))
    print(f"Slack events: http://{args.host}:{server.server_address[1]}{PATH} (Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        server.shutdown_workers()
    return 0
