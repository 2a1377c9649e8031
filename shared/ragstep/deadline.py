"""How long the request being served may still take, and the per-attempt timeouts the network clients derive from it.

On AWS a function is killed when its time is up: a provider call that is still waiting then, or a retry chain whose
backoff outlives the invocation, turns a clean error (or a ``degrade`` row) into a Lambda timeout, and the state
machine retries the whole task. So each invocation sets a **deadline** -- a :func:`time.monotonic` instant, the
Lambda context's remaining time minus a safety margin the handler keeps for encoding its answer -- and every HTTP
provider (chat, embedding, rerank, web search) and the OpenSearch client asks this module, per attempt:

* :func:`attempt_timeout` -- the configured timeout, or less when the deadline is closer; below
  :data:`MIN_ATTEMPT_S` no attempt starts and the caller raises its own error (a ``ProviderError`` the stages degrade
  on, a ``StorageError`` for the index) saying the time ran out;
* :func:`may_retry` -- whether sleeping the backoff and then one more minimal attempt still fits.

The deadline lives in a :class:`~contextvars.ContextVar`: it is request-scoped without reaching the process-wide
adapters through every port signature, and it follows the request into the threads that serve it (asyncio tasks and
AnyIO worker threads copy the context; so does :class:`ContextThreadPool`, the retrievers' and branches' pool).
Where no deadline is set -- locally, in the CLI, under ``ragstep serve`` -- every call behaves as before.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

#: No attempt starts with less time than this left: it could not finish, and the error it would end in says less
#: than "out of time".
MIN_ATTEMPT_S = 0.5
#: What a Lambda handler keeps for itself after the stage or request: encoding the state (perhaps offloading results
#: to S3), logging, flushing metrics. A quarter of the remaining time when that is less (a 5 s function).
LAMBDA_MARGIN_S = 1.5

_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar("ragstep_deadline", default=None)


def current() -> float | None:
    """The deadline in force (a :func:`time.monotonic` instant), None when there is none."""
    return _deadline.get()


def remaining_s() -> float | None:
    """Seconds left before the deadline (negative once passed), None when there is none."""
    at = _deadline.get()
    return None if at is None else at - time.monotonic()


@contextlib.contextmanager
def deadline_at(at: float | None) -> Iterator[float | None]:
    """Serve the block under the deadline ``at`` (monotonic); inside another deadline the earlier one holds, so a
    nested scope can only shorten the time. ``None`` keeps whatever is in force."""
    outer = _deadline.get()
    effective = outer if at is None else (at if outer is None else min(outer, at))
    token = _deadline.set(effective)
    try:
        yield effective
    finally:
        _deadline.reset(token)


def from_remaining_ms(remaining_ms: float, *, margin_s: float = LAMBDA_MARGIN_S) -> float:
    """The deadline of an invocation with ``remaining_ms`` left, keeping ``margin_s`` (at most a quarter of it)."""
    left = max(0.0, remaining_ms / 1000.0)
    return time.monotonic() + left - min(margin_s, left / 4)


def from_lambda_context(context: Any, *, margin_s: float = LAMBDA_MARGIN_S) -> float | None:
    """The deadline of the invocation ``context`` (a Lambda context object); None when it does not tell."""
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if not callable(remaining):
        return None
    try:
        ms = float(remaining())
    except (TypeError, ValueError):
        return None
    return from_remaining_ms(ms, margin_s=margin_s) if math.isfinite(ms) else None


def from_epoch_ms(deadline_ms: float, *, margin_s: float = LAMBDA_MARGIN_S) -> float | None:
    """The deadline of an invocation that ends at ``deadline_ms`` (Unix time in milliseconds, as the Lambda runtime
    API and the Lambda Web Adapter's ``x-amzn-lambda-context`` header give it)."""
    if not math.isfinite(deadline_ms) or deadline_ms <= 0:
        return None
    return from_remaining_ms(deadline_ms - time.time() * 1000.0, margin_s=margin_s)


def attempt_timeout(configured_s: float) -> float | None:
    """The timeout of the next attempt: ``configured_s``, or the time left when that is less; None when less than
    :data:`MIN_ATTEMPT_S` is left (the caller gives up with an error naming the deadline)."""
    left = remaining_s()
    if left is None:
        return configured_s
    if left < MIN_ATTEMPT_S:
        return None
    return min(configured_s, left)


def may_retry(delay_s: float) -> bool:
    """Whether waiting ``delay_s`` and then one attempt of at least :data:`MIN_ATTEMPT_S` fits before the deadline."""
    left = remaining_s()
    return left is None or left - delay_s >= MIN_ATTEMPT_S


def out_of_time(attempts: int) -> str:
    """The end of an error message for a call the deadline stopped (after ``attempts`` attempts)."""
    left = remaining_s() or 0.0
    done = f"after {attempts} attempt{'s' if attempts != 1 else ''}" if attempts else "before any attempt"
    return f"gave up {done}: the request's deadline leaves {max(0.0, left):.2f}s (the caller's time limit)"


class ContextThreadPool(ThreadPoolExecutor):
    """A thread pool whose tasks run in the submitter's :mod:`contextvars` context, as :func:`asyncio.to_thread`
    does, so work fanned out for a request keeps that request's deadline."""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        return super().submit(contextvars.copy_context().run, fn, *args, **kwargs)
