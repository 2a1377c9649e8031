"""Lambda handler of event-driven retrieval: SQS batches from the RetrievalRequests queue.

Both inputs arrive here: messages services send to the queue (a request, or an EventBridge-shaped event), and
``ragstep.RetrievalRequested`` events, which the template's EventBridge rule delivers to the same queue. Each record
is processed once per request id (:class:`ragstep.app.channels.retrieval_events.RetrievalEvents`); the batch reports
the records that failed (Powertools batch, ``ReportBatchItemFailures``), so only those come back, and a record that
keeps failing (a poison message) moves to the dead-letter queue after the queue's ``maxReceiveCount`` receives.
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


def _handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
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

    response = process_partial_response(
        event=event, record_handler=record_handler, processor=BatchProcessor(event_type=EventType.SQS), context=context
    )
    return dict(response)


handler = with_lambda_context(_handler)
