"""Any OpenAI-compatible ``/chat/completions`` endpoint (OpenAI, DeepSeek, DashScope compatible mode, Ollama, vLLM,
SiliconFlow ...) through httpx, answering whole or streamed (server-sent events).

Retries: HTTP 429 and 5xx (honouring ``Retry-After``), timeouts and connection failures are retried with backoff --
but only until the first answer token. Once a delta has been handed to the caller the answer is never requested
again (a replay would repeat text the reader already has); a stream that breaks after that is a
:class:`~ragstep.errors.ProviderError`. Closing the delta iterator closes the HTTP response, so the provider stops
generating for a reader that has gone. Under a request deadline (:mod:`ragstep.deadline`, set on AWS from the Lambda
context) each attempt's timeout is at most the time left, and no retry starts that could not finish. The same holds
for ``max_wait_s`` (``RAGSTEP_CHAT_MAX_WAIT_S``): the total wait for the answer to start, across every attempt and
backoff, so a hung model costs that long at most, not ``timeout x attempts``.

A provider's error body and URL are logged (credentials masked), never put in the error, which reaches users: it
says which model failed and how (:func:`ragstep.adapters._http.provider_failure`). A prompt larger than the
server's context window is recognised and named as such, with the setting that fixes it.
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ragstep import __version__, deadline
from ragstep.adapters._http import log_detail, provider_failure, retry_after_s, status_class
from ragstep.errors import ProviderError
from ragstep.ports import ChatDelta, ChatGrounding, ChatMessage, ChatOptions, ChatResponse, ChatUsage

if TYPE_CHECKING:
    import httpx

#: Connecting never waits longer than this, whatever the read timeout (a dead host should fail fast).
CONNECT_TIMEOUT_S = 10.0
#: What a server says when the prompt does not fit its context window: llama.cpp ("exceeds the available context
#: size"), OpenAI / vLLM ("maximum context length", ``context_length_exceeded``), Ollama and others ("context window",
#: "context length").
_CONTEXT_OVERFLOW = re.compile(
    r"context[_ ](?:length|window|size)|exceeds? the (?:available )?context|maximum context|too many tokens|"
    r"prompt is too long|input is too long",
    re.IGNORECASE,
)
CONTEXT_WINDOW_HINT = (
    ": the prompt does not fit the model's context window; set RAGSTEP_CHAT_CONTEXT_WINDOW to the server's context "
    "size (in tokens) so ragstep sends fewer passages and history rounds"
)


class _Retryable(Exception):
    """A failure worth another attempt (the message says what happened)."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def _usage(data: Any) -> ChatUsage | None:
    if not isinstance(data, dict):
        return None
    prompt = int(data.get("prompt_tokens") or 0)
    completion = int(data.get("completion_tokens") or 0)
    return ChatUsage(prompt, completion, int(data.get("total_tokens") or prompt + completion))


def parse_sse_line(line: str) -> dict[str, Any] | bool | None:
    """One line of the event stream: the chunk it carries, ``True`` for ``[DONE]``, ``None`` for anything else
    (blank lines, comments, ``event:``/``id:`` fields, and ``data:`` that is not a JSON object -- some gateways
    interleave keep-alive or diagnostic lines, which must not end the answer)."""
    if not line.startswith("data:"):
        return None
    payload = line[5:].strip()
    if payload == "[DONE]":
        return True
    try:
        chunk = json.loads(payload)
    except ValueError:
        return None
    return chunk if isinstance(chunk, dict) else None


def delta_of(chunk: dict[str, Any]) -> ChatDelta:
    """The text, reasoning, usage and finish reason one streamed chunk carries."""
    content = reasoning = ""
    finish = None
    choices = chunk.get("choices") or []
    if choices and isinstance(choices[0], dict):
        delta = choices[0].get("delta") or {}
        content = delta.get("content") or ""
        # DeepSeek-R1 and vLLM reasoning parsers: reasoning_content; some OpenRouter-style gateways: reasoning.
        reasoning = delta.get("reasoning_content") or delta.get("reasoning") or ""
        finish = choices[0].get("finish_reason")
    return ChatDelta(
        content=str(content), reasoning=str(reasoning), usage=_usage(chunk.get("usage")), finish_reason=finish
    )


class OpenAIChatModel:
    """``provider:model`` at ``base_url`` (``.../v1``); ``api_key`` may be None for local servers."""

    generative = True

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 3,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 20.0,
        provider: str = "openai",
        max_wait_s: float | None = None,
    ) -> None:
        if not model:
            raise ProviderError(f"no chat model configured for {provider}; set RAGSTEP_CHAT_MODEL")
        self.model = model
        self.name = f"{provider}:{model}"
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.timeout_s = timeout_s
        #: The longest the answer may take to start, all attempts and backoffs together (None: unbounded).
        self.max_wait_s = max_wait_s
        self._api_key = api_key or None
        self._max_retries = max_retries
        self._backoff_base_s = backoff_base_s
        self._backoff_max_s = backoff_max_s
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()

    @property
    def source(self) -> str:
        """How messages name this model: the provider and the model (never the URL or the key: they reach users)."""
        return f"chat model {self.name}"

    # -- the port --------------------------------------------------------------------------------------------

    def complete(
        self, messages: Sequence[ChatMessage], options: ChatOptions, grounding: ChatGrounding | None = None
    ) -> ChatResponse:
        response = self._open(self._payload(messages, options, stream=False), stream=False, until=self._until())
        try:
            data = response.json()
        except ValueError as exc:
            log_detail(self.source, self.url, "answered a body that is not JSON", response.text)
            raise ProviderError(f"{self.source} answered with a body that is not JSON") from exc
        choices = data.get("choices") if isinstance(data, dict) else None
        if not choices or not isinstance(choices[0], dict):
            log_detail(self.source, self.url, "answered without choices", response.text)
            raise ProviderError(f"{self.source} answered without choices")
        message = choices[0].get("message") or {}
        return ChatResponse(
            content=str(message.get("content") or ""),
            reasoning=str(message.get("reasoning_content") or message.get("reasoning") or ""),
            usage=_usage(data.get("usage")),
            model=str(data.get("model") or self.model),
            finish_reason=choices[0].get("finish_reason"),
        )

    def stream(
        self, messages: Sequence[ChatMessage], options: ChatOptions, grounding: ChatGrounding | None = None
    ) -> Iterator[ChatDelta]:
        import httpx

        payload = self._payload(messages, options, stream=True)
        attempts = self._max_retries + 1
        until = self._until()
        for attempt in range(attempts):
            response = self._open(payload, stream=True, until=until)
            started = False  # a delta reached the caller: from here on, never retry
            finished = False
            try:
                for line in response.iter_lines():
                    parsed = parse_sse_line(line)
                    if parsed is True:
                        finished = True
                        break
                    if not parsed:
                        continue
                    delta = delta_of(parsed)
                    if delta.finish_reason:
                        finished = True
                    if delta.content or delta.reasoning or delta.usage or delta.finish_reason:
                        started = True
                        yield delta
            except (httpx.TransportError, httpx.StreamError) as exc:
                delay = self._delay_s(attempt, None)
                if started or attempt + 1 >= attempts or not self._may_retry(delay, until):
                    log_detail(self.source, self.url, "stream broke off", f"{type(exc).__name__}: {exc}")
                    what = "timed out" if isinstance(exc, httpx.TimeoutException) else "broke off"
                    raise ProviderError(f"{self.source}: the answer stream {what} ({type(exc).__name__})") from exc
                time.sleep(delay)
                continue
            finally:
                response.close()  # also on GeneratorExit: the provider sees the connection go and stops
            if not finished:
                raise ProviderError(f"{self.source}: the answer stream ended before the answer was complete")
            return

    # -- internals -------------------------------------------------------------------------------------------

    def _payload(self, messages: Sequence[ChatMessage], options: ChatOptions, *, stream: bool) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": m.role, "content": m.content} for m in messages],
            "stream": stream,
        }
        if stream:
            payload["stream_options"] = {"include_usage": True}
        if options.temperature is not None:
            payload["temperature"] = options.temperature
        if options.max_tokens is not None:
            payload["max_tokens"] = options.max_tokens
        if options.top_p is not None:
            payload["top_p"] = options.top_p
        if options.stop:
            payload["stop"] = list(options.stop)
        if options.json_object:
            # JSON mode: OpenAI, DeepSeek, DashScope, vLLM and Ollama's OpenAI endpoint all take this form.
            payload["response_format"] = {"type": "json_object"}
        return payload

    def _http(self) -> httpx.Client:
        import httpx

        with self._lock:
            if self._client is None:
                headers = {"User-Agent": f"ragstep/{__version__}"}
                if self._api_key:
                    headers["Authorization"] = f"Bearer {self._api_key}"
                timeout = httpx.Timeout(self.timeout_s, connect=min(CONNECT_TIMEOUT_S, self.timeout_s))
                self._client = httpx.Client(timeout=timeout, headers=headers)
            return self._client

    def _until(self) -> float | None:
        """The monotonic instant the answer must have started by (None: no bound)."""
        return None if self.max_wait_s is None else time.monotonic() + self.max_wait_s

    def _waited_out(self, attempt: int, last: str) -> ProviderError:
        plural = "s" if attempt != 1 else ""
        return ProviderError(
            f"{self.source} gave no answer within {self.max_wait_s:g}s ({attempt} attempt{plural}"
            f"{f', last: {last}' if last else ''}); RAGSTEP_CHAT_MAX_WAIT_S bounds the wait"
        )

    def _may_retry(self, delay: float, until: float | None) -> bool:
        """Whether sleeping ``delay`` and one more minimal attempt still fit the request's deadline and the wait."""
        fits_wait = until is None or time.monotonic() + delay + deadline.MIN_ATTEMPT_S <= until
        return fits_wait and deadline.may_retry(delay)

    def _open(self, payload: dict[str, Any], *, stream: bool, until: float | None = None) -> httpx.Response:
        """A successful response (headers read; the body still unread when ``stream``), after retries, started
        before ``until`` (monotonic)."""
        attempts = self._max_retries + 1
        last = ""
        for attempt in range(attempts):
            try:
                return self._attempt(payload, stream, attempt, last, until)
            except _Retryable as exc:
                last = str(exc)
                if attempt + 1 < attempts:
                    delay = self._delay_s(attempt, exc.retry_after)
                    if not deadline.may_retry(delay):  # the retry could not finish before the caller's time is up
                        raise ProviderError(f"{self.source} {deadline.out_of_time(attempt + 1)}; last: {last}") from exc
                    if not self._may_retry(delay, until):
                        raise self._waited_out(attempt + 1, last) from exc
                    time.sleep(delay)
        plural = "s" if attempts != 1 else ""
        raise ProviderError(f"{self.source} failed after {attempts} attempt{plural}: {last}")

    def _attempt(
        self, payload: dict[str, Any], stream: bool, attempt: int = 0, last: str = "", until: float | None = None
    ) -> httpx.Response:
        import httpx

        # Never longer than the request's deadline allows (ragstep.deadline; no deadline = the configured timeout),
        # nor than what is left of the total wait.
        timeout_s = deadline.attempt_timeout(self.timeout_s)
        if timeout_s is None:
            raise ProviderError(f"{self.source} {deadline.out_of_time(attempt)}{f'; last: {last}' if last else ''}")
        if until is not None:
            left = until - time.monotonic()
            if left < deadline.MIN_ATTEMPT_S:
                raise self._waited_out(attempt, last)
            timeout_s = min(timeout_s, left)
        timeout = httpx.Timeout(timeout_s, connect=min(CONNECT_TIMEOUT_S, timeout_s))
        client = self._http()
        try:
            request = client.build_request("POST", self.url, json=payload, timeout=timeout)
            response = client.send(request, stream=stream)
        except httpx.TimeoutException as exc:
            raise _Retryable(f"timed out after {timeout_s:.3g}s ({type(exc).__name__})") from exc
        except httpx.ConnectError as exc:
            log_detail(self.source, self.url, "unreachable", str(exc))
            raise _Retryable("unreachable (check RAGSTEP_CHAT_BASE_URL)") from exc
        except (httpx.NetworkError, httpx.RemoteProtocolError) as exc:
            log_detail(self.source, self.url, "connection failed", f"{type(exc).__name__}: {exc}")
            raise _Retryable(f"connection failed ({type(exc).__name__})") from exc
        except httpx.HTTPError as exc:  # bad URL, proxy misconfiguration: retrying cannot help
            log_detail(self.source, self.url, "request failed", f"{type(exc).__name__}: {exc}")
            what = f"request failed ({type(exc).__name__}); check RAGSTEP_CHAT_BASE_URL"
            raise ProviderError(f"{self.source}: {what}") from exc
        if response.is_success:
            return response
        try:
            body = response.read().decode("utf-8", "replace")
        except httpx.HTTPError:
            body = "(body unreadable)"
        finally:
            response.close()
        status = response.status_code
        if status == 429 or status >= 500:
            provider_failure(self.source, self.url, status, body)  # logged; the retry decides what the user sees
            raise _Retryable(f"HTTP {status} ({status_class(status)})", retry_after_s(response.headers))
        hint = " (check RAGSTEP_CHAT_API_KEY)" if status in (401, 403) else ""
        if status in (400, 413, 422) and _CONTEXT_OVERFLOW.search(body):
            hint = CONTEXT_WINDOW_HINT
        raise provider_failure(self.source, self.url, status, body, hint=hint)

    def _delay_s(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self._backoff_max_s)
        ceiling = min(self._backoff_max_s, self._backoff_base_s * 2**attempt)
        return ceiling * random.uniform(0.5, 1.0)

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None
