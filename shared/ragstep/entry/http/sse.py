"""Server-sent events: the frames the chat routes write, the response that streams them, and an incremental parser.

The chat pipelines are blocking generators (the model's HTTP stream, SQLite, boto3), so :class:`SSEResponse` pulls
each frame on a worker thread and sends it as soon as it is ready. However the response ends -- the last frame, an
error, or the client going away (Starlette cancels the response when the server reports the disconnect) -- the
response's ``close`` runs on a worker thread, shielded from the cancellation: it closes the chat's generator, which
closes the model's stream (the provider stops generating within one chunk) and saves the partial answer.

While a frame is slow to come (a model reading a long prompt before its first token, a retry's backoff), the response
sends a comment frame (``: keep-alive``) every ``heartbeat_s``: a proxy or load balancer with an idle timeout does
not cut the stream, and the client sees that the server is still at work. Every SSE parser skips comments (the HTML
standard's rule; the ``openai`` SDKs too).
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectSendStream
from starlette.responses import StreamingResponse
from starlette.types import Send

#: What a proxy must not do to an event stream: cache it, or buffer it (nginx honours ``X-Accel-Buffering``).
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
DONE = b"data: [DONE]\n\n"
HEARTBEAT = b": keep-alive\n\n"
#: Seconds without a frame before a heartbeat is sent (below the 30-60 s idle timeouts of common proxies).
HEARTBEAT_S = 15.0


def _json(payload: Any) -> bytes:
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()


def data_frame(payload: Any) -> bytes:
    """``data: <json>`` (OpenAI's frames have no event name)."""
    return b"data: " + _json(payload) + b"\n\n"


def event_frame(event: str, payload: Any) -> bytes:
    """``event: <event>`` and ``data: <json>`` (WeKnora's frames)."""
    return b"event: " + event.encode() + b"\ndata: " + _json(payload) + b"\n\n"


_END = object()


def _next_frame(frames: Iterator[bytes]) -> Any:
    return next(frames, _END)


class SSEResponse(StreamingResponse):
    """A ``text/event-stream`` response over a blocking iterator of frames; ``close`` is called once it ends."""

    media_type = "text/event-stream"

    def __init__(
        self, frames: Iterator[bytes], close: Callable[[], None], *, heartbeat_s: float | None = HEARTBEAT_S
    ) -> None:
        super().__init__(iter(()), headers=SSE_HEADERS, media_type=self.media_type)
        self._frames = frames
        self._close = close
        self._heartbeat_s = heartbeat_s

    async def stream_response(self, send: Send) -> None:
        # Errors are carried out of the task group and raised as themselves, not as an exception group: Starlette
        # turns a send's OSError (the client went away) into ClientDisconnect, and a frames' error is the route's.
        failed: list[BaseException] = []
        try:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            sender, receiver = anyio.create_memory_object_stream[Any](1)
            sent_at = [anyio.current_time()]
            async with anyio.create_task_group() as group:
                group.start_soon(self._produce, sender.clone(), failed)
                if self._heartbeat_s:
                    group.start_soon(self._beat, sender.clone(), sent_at, self._heartbeat_s)
                sender.close()
                async with receiver:
                    # Never cancelled while waiting (an item handed over at that instant would be lost): the frames
                    # and the heartbeats both come through the stream.
                    async for frame in receiver:
                        if frame is _END:
                            break
                        try:
                            await send({"type": "http.response.body", "body": frame, "more_body": True})
                        except Exception as exc:
                            failed.insert(0, exc)
                            break
                        sent_at[0] = anyio.current_time()
                    # Before the stream closes: the producer (after the frame it is computing) and the heartbeat.
                    group.cancel_scope.cancel()
            if failed:
                raise failed[0]
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self._close)

    async def _produce(self, sender: MemoryObjectSendStream[Any], failed: list[BaseException]) -> None:
        """Pull the frames on a worker thread, one at a time, into ``sender``; ``_END`` after the last (or after an
        error, kept in ``failed`` to be raised as itself, not as a task group's exception group)."""
        async with sender:
            while True:
                # Not abandoned on cancellation: a disconnect waits for the frame being computed (one model chunk
                # at most), then the close in stream_response stops the rest.
                try:
                    frame = await anyio.to_thread.run_sync(_next_frame, self._frames)
                except Exception as exc:
                    failed.append(exc)
                    frame = _END
                try:
                    await sender.send(frame)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    return  # the response is over
                if frame is _END:
                    return

    @staticmethod
    async def _beat(sender: MemoryObjectSendStream[Any], sent_at: list[float], interval: float) -> None:
        """A comment frame whenever ``interval`` seconds passed since the last frame sent."""
        async with sender:
            while True:
                await anyio.sleep(max(0.0, sent_at[0] + interval - anyio.current_time()))
                if anyio.current_time() - sent_at[0] >= interval:
                    try:
                        await sender.send(HEARTBEAT)
                    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                        return  # the response is over
                    sent_at[0] = anyio.current_time()


@dataclass(frozen=True)
class SSEFrame:
    """One dispatched event: its name (None when the frame had no ``event:`` line) and its data lines joined."""

    event: str | None
    data: str
    id: str | None = None


_EOL = re.compile(r"\r\n|\r|\n")


class SSEParser:
    """Incremental ``text/event-stream`` parser (the HTML standard's rules): feed it bytes as they arrive, in chunks
    cut anywhere (inside a UTF-8 character or between ``\\r`` and ``\\n``), and get the frames completed so far.

    Comment lines (``:`` heartbeats) are skipped; a frame without data lines is not dispatched.
    """

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="strict")
        self._buffer = ""
        self._started = False
        self._event: str | None = None
        self._data: list[str] = []
        self._id: str | None = None

    def feed(self, chunk: bytes) -> list[SSEFrame]:
        text = self._decoder.decode(chunk)
        if not self._started and text:
            self._started = True
            text = text.removeprefix("\ufeff")
        self._buffer += text
        frames: list[SSEFrame] = []
        while (match := _EOL.search(self._buffer)) is not None:
            if match.group() == "\r" and match.end() == len(self._buffer):
                break  # the "\n" of a "\r\n" may be in the next chunk
            line, self._buffer = self._buffer[: match.start()], self._buffer[match.end() :]
            frame = self._line(line)
            if frame is not None:
                frames.append(frame)
        return frames

    def _line(self, line: str) -> SSEFrame | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._id = value
        return None

    def _dispatch(self) -> SSEFrame | None:
        event, data = self._event, self._data
        self._event, self._data = None, []
        if not data:
            return None
        return SSEFrame(event=event, data="\n".join(data), id=self._id)
