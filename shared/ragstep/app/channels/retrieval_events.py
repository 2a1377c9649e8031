"""Event-driven retrieval: a request from another service (EventBridge ``ragstep.RetrievalRequested`` or an SQS
message) runs ``knowledge_search`` or ``rag`` and its result -- or a clear error -- goes to the reply target as a
``ragstep.RetrievalCompleted`` event.

* **Once per request id.** Processing and delivery run under Powertools idempotency keyed by ``request_id``: a
  redelivered message (SQS at-least-once, an EventBridge retry, a duplicate send) finds the record and returns the
  result already delivered without running or delivering again. A delivery that fails removes the record, so the
  redelivery does it all again: nothing is lost, nothing is answered twice.
* **Poison vs. failure.** A message that is not a request at all (not JSON, no request id, invalid fields without a
  reply target) raises :class:`~ragstep.errors.InputError`: the queue retries it and then parks it in its DLQ. A valid
  request whose pipeline fails with a ragstep error (unknown knowledge base, provider down) is answered with
  ``status: failed`` and the error. Anything else (a bug, a store outage) raises and is retried.
* **Claim check.** A result over ``RAGSTEP_EVENTS_RESULT_LIMIT_BYTES`` is written to the tenant's blob store under
  ``events/results/<request id>.json``, and the event carries ``result_ref`` instead of the results.

Trust: whoever may put events on the bus or messages on the queue may search any tenant's knowledge bases; the
template lets only the account's principals do so (README: Channels).
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from pydantic import ValidationError

from ragstep.context import Clients, Context
from ragstep.errors import InputError, RagstepError
from ragstep.models import ChatRequest, PipelineState, SearchRequest
from ragstep.models.retrieval_events import COMPLETED, REQUESTED, SOURCE, RetrievalEventRequest

RESULTS_PREFIX = "events/results/"
#: Results are remembered this long per request id (redeliveries within it are answered from the record).
DEDUPE_TTL_S = 24 * 3600
#: Outside Lambda, how long a request may hold its in-progress record (a crashed run blocks redelivery this long).
LOCAL_BUDGET_MS = 300_000


def _message(exc: ValidationError) -> str:
    from ragstep.models.unknown_fields import first_problem

    return first_problem(exc, RetrievalEventRequest)  # an unknown key: what the request accepts


def request_payload(message: Any) -> dict[str, Any]:
    """The request of a message: an EventBridge event's ``detail`` (detail-type ``ragstep.RetrievalRequested``), or
    the request itself. :class:`InputError` when it is neither."""
    if isinstance(message, (str, bytes)):
        try:
            message = json.loads(message)
        except ValueError:
            raise InputError("the message is not JSON; send a retrieval request object") from None
    if not isinstance(message, dict):
        raise InputError("the message is not a JSON object; send a retrieval request object")
    if isinstance(message.get("Records"), list):  # the queue's Lambda event (events/retrieval_events.json)
        raise InputError("an SQS event (Records) holds its requests in each record's body; send one request object")
    if "detail-type" in message:
        if message["detail-type"] != REQUESTED:
            raise InputError(f"detail-type {message['detail-type']!r} is not {REQUESTED}")
        message = message.get("detail")
        if not isinstance(message, dict):
            raise InputError(f"a {REQUESTED} event's detail must be a retrieval request object")
    return message


def parse_request(message: Any) -> RetrievalEventRequest:
    try:
        return RetrievalEventRequest.model_validate(request_payload(message))
    except ValidationError as exc:
        raise InputError(f"invalid retrieval request: {_message(exc)}") from None


def trace_summary(state: PipelineState) -> list[dict[str, Any]]:
    return [{"stage": t.stage, "action": t.action, "ms": round(t.duration_ms, 1)} for t in state.trace]


def run_request(request: RetrievalEventRequest, ctx: Context) -> dict[str, Any]:
    """The result ``detail`` of one request: ``status: succeeded`` with results (or an answer and its references),
    or ``status: failed`` with the error a ragstep error or invalid input gives."""
    from ragstep.app.answers import answer_references
    from ragstep.app.chat import stream_stateless_chat
    from ragstep.app.cost import cost_of
    from ragstep.app.search import knowledge_search
    from ragstep.pipeline.executor import drain

    base: dict[str, Any] = {"request_id": request.request_id, "tenant": request.tenant, "pipeline": request.pipeline}
    try:
        if request.pipeline == "knowledge_search":
            search = SearchRequest(
                query=request.query, knowledge_base_ids=request.knowledge_base_ids, overrides=request.overrides
            )
            state = knowledge_search(search, ctx)
            payload: dict[str, Any] = {"results": [r.model_dump(mode="json") for r in state.results("final_results")]}
        else:
            chat = ChatRequest(
                query=request.query,
                knowledge_base_ids=request.knowledge_base_ids,
                overrides=request.overrides,
                pipeline="rag",
            )
            state = drain(stream_stateless_chat(chat, [], ctx))
            references = answer_references(state)
            payload = {"answer": state.chat.answer, "references": [r.model_dump(mode="json") for r in references]}
    except RagstepError as exc:
        return {**base, "status": "failed", "error": {"type": exc.code, "message": exc.message}}
    except ValidationError as exc:
        return {**base, "status": "failed", "error": {"type": InputError.code, "message": _message(exc)}}
    # The cost receipt, as every response carries it (ragstep.app.cost); it stays in the event under a claim check.
    usage = {"cost": cost_of(state, ctx).model_dump(mode="json")}
    return {**base, "status": "succeeded", **payload, "trace": trace_summary(state), "usage": usage}


def claim_check(detail: dict[str, Any], ctx: Context, limit_bytes: int) -> dict[str, Any]:
    """``detail`` itself when it fits in ``limit_bytes`` of JSON; else the same with its results moved to the blob
    store and ``result_ref`` (uri, key, bytes) in their place."""
    data = json.dumps(detail, ensure_ascii=False, separators=(",", ":")).encode()
    if len(data) <= limit_bytes:
        return detail
    key = f"{RESULTS_PREFIX}{detail['request_id']}.json"
    uri = ctx.blobs.put(key, data, "application/json")
    kept = {k: v for k, v in detail.items() if k not in ("results", "answer", "references")}
    return {**kept, "result_ref": {"uri": uri, "key": key, "bytes": len(data)}}


def result_event(detail: dict[str, Any]) -> dict[str, Any]:
    return {"source": SOURCE, "detail-type": COMPLETED, "time": time.time(), "detail": detail}


class RetrievalEvents:
    """Processes requests once per request id, on ``clients``' idempotency store, and delivers their results."""

    def __init__(self, clients: Clients, *, ttl_s: int = DEDUPE_TTL_S) -> None:
        self.clients = clients
        self._ttl_s = ttl_s
        self._lock = threading.Lock()
        self._once: Any = None
        self._config: Any = None
        # Whether this thread's current request ran: the idempotent call answers from the record without calling
        # _process, and only this tells the caller that the result is an earlier run's.
        self._ran = threading.local()

    def _process_once(self) -> tuple[Any, Any]:
        with self._lock:
            if self._once is None:
                from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function

                self._config = IdempotencyConfig(
                    event_key_jmespath="request_id", raise_on_no_idempotency_key=True, expires_after_seconds=self._ttl_s
                )
                self._once = idempotent_function(
                    self._process,
                    data_keyword_argument="request",
                    persistence_store=self.clients.idempotency,
                    config=self._config,
                    key_prefix="retrieval-request",
                )
            return self._once, self._config

    def _process(self, request: dict[str, Any]) -> dict[str, Any]:
        self._ran.value = True
        parsed = RetrievalEventRequest.model_validate(request)
        ctx = self.clients.context(parsed.tenant)
        detail = claim_check(run_request(parsed, ctx), ctx, self.clients.settings.events_result_limit_bytes)
        event = result_event(detail)
        if parsed.reply is not None:
            self.clients.replies.deliver(parsed.reply, event)
        return event

    def handle(self, message: Any, lambda_context: Any = None) -> dict[str, Any]:
        """The result event of one message (delivered to its reply target, when it names one). Raises
        :class:`InputError` for a message that is not a request (poison), and whatever made delivery fail."""
        return self.process(message, lambda_context)[0]

    def process(self, message: Any, lambda_context: Any = None) -> tuple[dict[str, Any], bool]:
        """:meth:`handle`'s result event, and whether it is a replay: the recorded result of an earlier message with
        the same ``request_id`` (within the dedupe window), returned without running or delivering anything."""
        request = parse_request(message)
        from ragstep.adapters.idempotency import LocalDeadline

        once, config = self._process_once()
        config.register_lambda_context(lambda_context if lambda_context is not None else LocalDeadline(LOCAL_BUDGET_MS))
        self._ran.value = False
        result: dict[str, Any] = once(request=request.model_dump(mode="json"))
        return result, not self._ran.value
