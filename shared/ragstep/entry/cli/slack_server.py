"""The local Slack webhook server of ``ragstep slack serve`` (see :mod:`ragstep.entry.cli.slack`).

Apart from the command's module because the parser is built at every start-up: ``http.server`` and the thread pool
load only when the command runs.
"""

from __future__ import annotations

import json
import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from ragstep.errors import InputError

if TYPE_CHECKING:
    import argparse

    from ragstep.context import Clients

log = logging.getLogger(__name__)

PATH = "/slack/events"
#: A Slack request is a few KiB; anything far larger is not one.
MAX_BODY = 1024 * 1024


class SlackDevServer(ThreadingHTTPServer):
    """The webhook on ``(host, port)``; answers run on :attr:`workers` (``shutdown_workers`` waits for them)."""

    daemon_threads = True

    def __init__(self, clients: Clients, address: tuple[str, int], workers: int = 4) -> None:
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
        super().__init__(address, _Handler)

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

        try:
            ctx = self.clients.context(self.clients.settings.slack_tenant)
            outcome = answer_slack_event(envelope, ctx, self.clients.slack)
            log.info("slack event %s: %s", envelope.get("event_id"), outcome)
        except Exception:  # a worker thread has no caller to raise to
            log.exception("slack event %s: could not answer", envelope.get("event_id"))

    def shutdown_workers(self) -> None:
        self.workers.shutdown(wait=True)


class _Handler(BaseHTTPRequestHandler):
    server: SlackDevServer
    # Keep-alive (Slack reuses connections) and no Nagle delay between the headers and the body (~40 ms each).
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def do_POST(self) -> None:
        if self.path.split("?")[0] != PATH:
            return self._send(404, {"error": "not_found", "message": f"POST Slack events to {PATH}"})
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            return self._send(413, {"error": "too_large", "message": "request body too large"})
        body = self.rfile.read(length)
        reply = self.server.intake.handle(body, dict(self.headers.items()))
        self._send(reply.status, reply.body)

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s - %s", self.address_string(), format % args)


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
