"""The Lambda authorizer of the HTTP API (REQUEST type, payload format 2.0, simple responses).

API Gateway calls it before the API function with the request's headers; it resolves the presented API key with the
same checks as every server (:func:`ragstep.app.keys.verify_key`: the hash compared in constant time, revoked and
expired keys refused) and answers ``{"isAuthorized": true, "context": {tenant_id, key_prefix, scopes}}``, so a
request with a bad key never reaches (or bills) the API function. API Gateway caches the answer per
``Authorization`` header for ``AuthorizerCacheSeconds`` (template.yaml): a revoked key is refused by the authorizer
within that time, and by the API function itself within ``RAGSTEP_KEY_CACHE_SECONDS``.

The API function still checks the key and everything per route: the cached answer covers a key, not a route, so the
route's scope, the key's knowledge-base allow-list, rate limits and quotas stay with the app's
:class:`~ragstep.entry.http.auth.Gate`.

What API Gateway answers itself: 401 ``{"message": "Unauthorized"}`` when the ``Authorization`` header is missing
(the identity source; the authorizer is not called), 403 ``{"message": "Forbidden"}`` when this function says no.
Nothing about the key is logged: only its non-secret prefix, and only once it is known to exist.

Importing this module costs only the standard library.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ragstep.entry.aws.runtime import get_clients, logger, with_lambda_context

if TYPE_CHECKING:
    from ragstep.context import Clients

DENY: dict[str, Any] = {"isAuthorized": False}


def headers_of(event: Any) -> dict[str, str]:
    """The request's headers with lower-case names (payload 2.0 gives them so; a test event may not); none when the
    event or its headers are not a mapping (such a request is denied: it presents no key)."""
    headers = event.get("headers") if isinstance(event, Mapping) else None
    if not isinstance(headers, Mapping):
        return {}
    return {str(k).lower(): str(v) for k, v in headers.items() if isinstance(v, str)}


def authorize(event: Any, clients: Clients, now: float | None = None) -> dict[str, Any]:
    """The simple response for ``event``: authorized with the key's tenant, prefix and scopes, or not."""
    from ragstep.app.keys import presented_key, verify_key
    from ragstep.errors import UnauthorizedError

    try:
        text = presented_key(headers_of(event))
        if text is None:
            return DENY
        key = verify_key(clients.keys, text, time.time() if now is None else now)
    except UnauthorizedError as exc:
        logger().info("API key refused", extra={"reason": exc.message})
        return DENY
    return {
        "isAuthorized": True,
        "context": {"tenant_id": key.tenant_id, "key_prefix": key.prefix, "scopes": ",".join(key.scopes)},
    }


def _authorize(event: Any, context: Any) -> dict[str, Any]:
    return authorize(event, get_clients())


# The API Gateway request id is the correlation id, as in the API function's logs.
authorizer_handler = with_lambda_context(_authorize, correlation_id_path="requestContext.requestId")
authorizer_handler.__doc__ = "The HTTP API's Lambda authorizer (REQUEST, payload 2.0, simple responses)."
