"""Lambda handler of event-driven retrieval: SQS batches from the RetrievalRequests queue.

Both inputs arrive here: messages services send to the queue (a request, or an EventBridge-shaped event), and
``ragstep.RetrievalRequested`` events, which the template's EventBridge rule delivers to the same queue. Each record
is processed once per request id (:class:`ragstep.app.channels.retrieval_events.RetrievalEvents`); the batch reports
the records that failed (Powertools batch, ``ReportBatchItemFailures``), so only those come back, and a record that
keeps failing (a poison message) moves to the dead-letter queue after the queue's ``maxReceiveCount`` receives.
An event that is no SQS batch is answered with no failures (nothing in it could be retried) and a warning logged;
the answer is always ``{"batchItemFailures": [...]}``, never an exception.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from ragstep.entry.aws.runtime import get_clients, logger, with_lambda_context

if TYPE_CHECKING:
    from ragstep.app.channels.retrieval_events import RetrievalEvents
    from ragstep.context import Clients

_lock = threading.Lock()
_events: tuple[Clients, RetrievalEvents] | None = None


def retrieval_events() -> RetrievalEvents:
    """The processor of this execution environment (built again when the clients are, e.g. a rotated secret)."""
    global _events
    clients = get_clients()
    with _lock:
        if _events is None or _events[0] is not clients:
            from ragstep.app.channels.retrieval_events import RetrievalEvents

            _events = (clients, RetrievalEvents(clients))
        return _events[1]


def _handler(event: Any, context: Any) -> dict[str, Any]:
    from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

    processor = retrieval_events()

    def record_handler(record: SQSRecord) -> None:
        try:
            result = processor.handle(record.body, context)
        except Exception as exc:
            # Logged with the message id only: a request's text is the caller's data.
            logger().warning("retrieval request %s failed: %s: %s", record.message_id, type(exc).__name__, exc)
            raise
        logger().info("retrieval request %s: %s", result["detail"]["request_id"], result["detail"]["status"])

    records = sqs_records(event)
    if not records:
        if records is None:
            logger().warning("not an SQS batch: nothing to process")
        return {"batchItemFailures": []}
    # Every failure is reported by message id, even when all failed: the default raises instead, and the error the
    # runtime reports then carries each record's traceback.
    processor_ = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
    response = process_partial_response(
        event={"Records": records}, record_handler=record_handler, processor=processor_, context=context
    )
    return dict(response)


def sqs_records(event: Any) -> list[dict[str, Any]] | None:
    """The records of an SQS batch event that carry a message id (SQS sends no other; nothing could report another
    as failed), or None when ``event`` is no SQS batch at all."""
    records = event.get("Records") if isinstance(event, dict) else None
    if not isinstance(records, list):
        return None
    kept = [r for r in records if isinstance(r, dict) and isinstance(r.get("messageId"), str) and r["messageId"]]
    if len(kept) < len(records):
        logger().warning("dropped %d records without a message id", len(records) - len(kept))
    return kept


handler = with_lambda_context(_handler)
