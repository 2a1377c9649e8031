"""The Lambda handler of the HTTP API (API Gateway HTTP API, payload format 2.0): the FastAPI app through Mangum.

``functions/api/app.py`` exposes :data:`api_handler`. The app is built on the first invocation, on the execution
environment's clients (:func:`ragstep.entry.aws.runtime.get_clients`), and again whenever those are rebuilt (a
rotated secret), so a warm invocation pays for neither FastAPI nor the clients.

Each invocation logs with the Lambda context (the API Gateway request id is the correlation id) and reports
``ApiLatency``, ``ApiClientErrors`` and ``ApiServerErrors`` by ``executor`` (``inprocess`` or ``stepfunctions``).

Importing this module costs only the standard library.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from ragstep.entry.aws.runtime import get_clients, logger, metrics, warm_up, with_lambda_context

if TYPE_CHECKING:
    from ragstep.context import Clients

_lock = threading.Lock()
#: The answer to an event that is no API Gateway HTTP API request: the API's error shape, status 400.
NOT_AN_HTTP_EVENT: dict[str, Any] = {
    "statusCode": 400,
    "headers": {"content-type": "application/json"},
    "body": '{"error": "invalid_input", "message": "not an API Gateway HTTP API (payload format 2.0) request"}',
    "isBase64Encoded": False,
}
# The Mangum app and the clients it was built on: a new Clients object (reset, rotated secret) means a new app.
_app: tuple[Clients, Any] | None = None


def _mangum(clients: Clients) -> Any:
    global _app
    current = _app
    if current is None or current[0] is not clients:
        with _lock:
            current = _app
            if current is None or current[0] is not clients:
                from mangum import Mangum

                from ragstep.entry.http.app import create_app

                # Usage records are written before each answer ends: a frozen environment must not hold one.
                current = _app = (clients, Mangum(create_app(clients, flush_usage=True), lifespan="off"))
    return current[1]


def _serve_api(event: Any, context: Any) -> dict[str, Any]:
    import time

    from aws_lambda_powertools.metrics import MetricUnit

    started = time.perf_counter()
    clients = get_clients()
    try:
        response = _mangum(clients)(event, context)
    except Exception as exc:
        # Mangum answers whatever the app raises with a 500 itself: what escapes it is an event it cannot read (not a
        # dict, headers that are no mapping, a body that is not valid base64 ...).
        logger().warning("not an HTTP API (payload 2.0) event: %s", type(exc).__name__)
        response = NOT_AN_HTTP_EVENT
    status = int(response.get("statusCode") or 0) if isinstance(response, dict) else 0
    m = metrics()
    m.add_dimension(name="executor", value=clients.settings.executor)
    m.add_metric(name="ApiLatency", unit=MetricUnit.Milliseconds, value=(time.perf_counter() - started) * 1000.0)
    m.add_metric(name="ApiClientErrors", unit=MetricUnit.Count, value=int(400 <= status < 500))
    m.add_metric(name="ApiServerErrors", unit=MetricUnit.Count, value=int(status >= 500))
    return response


# The API Gateway request id (HTTP API payload 2.0) is the correlation id of an API call.
api_handler = with_lambda_context(_serve_api, correlation_id_path="requestContext.requestId")
api_handler.__doc__ = "The HTTP API (API Gateway HTTP API, payload format 2.0) served by FastAPI through Mangum."
# Provisioned concurrency or SnapStart: the app is built during init, off the first request's path.
warm_up(lambda: _mangum(get_clients()))
