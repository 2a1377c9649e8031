"""Request signatures: Slack's ``v0`` scheme and the HMAC-SHA256 this project uses for webhooks and callbacks.

Standard library only (every webhook verifies before it loads anything else). Comparisons are constant-time, and a
timestamp more than :data:`MAX_SKEW_S` away from now is refused, so a captured request cannot be replayed later.
"""

from __future__ import annotations

import hashlib
import hmac

#: How far a signed request's timestamp may be from now (Slack's recommendation: five minutes).
MAX_SKEW_S = 300
SLACK_VERSION = "v0"


def slack_signature(secret: str, timestamp: str, body: bytes) -> str:
    """``v0=<hex HMAC-SHA256 of "v0:{timestamp}:{body}">``, as Slack sends it in ``X-Slack-Signature``."""
    base = f"{SLACK_VERSION}:{timestamp}:".encode() + body
    return f"{SLACK_VERSION}=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


#: The most digits a Unix time in seconds has for the next 30,000 years: anything longer is not a timestamp.
MAX_TIMESTAMP_DIGITS = 12


def fresh(timestamp: str, now: float, max_skew_s: int = MAX_SKEW_S) -> bool:
    """``timestamp`` (Unix seconds: 1 to 12 ASCII digits) is within ``max_skew_s`` of ``now``.

    Only plain digits are read: ``int()`` alone also takes ``+``, ``_``, spaces and other scripts' digits, and
    hundreds of digits that overflow the float arithmetic (an error where every bad signature must read the same).
    """
    if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= MAX_TIMESTAMP_DIGITS):
        return False
    return abs(now - int(timestamp)) <= max_skew_s


def slack_request_ok(secret: str, timestamp: str | None, body: bytes, signature: str | None, now: float) -> bool:
    """Whether a request carries a valid, fresh Slack signature over exactly ``body`` (the raw bytes received)."""
    if not secret or not timestamp or not signature or not fresh(timestamp, now):
        return False
    return hmac.compare_digest(slack_signature(secret, timestamp, body), signature)


def hmac_signature(secret: str, timestamp: str, body: bytes) -> str:
    """``sha256=<hex HMAC-SHA256 of "{timestamp}.{body}">``: how ragstep signs callbacks and expects webhooks signed
    (the timestamp travels in ``X-Ragstep-Timestamp``, the signature in ``X-Ragstep-Signature``)."""
    return "sha256=" + hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()


def hmac_request_ok(secret: str, timestamp: str | None, body: bytes, signature: str | None, now: float) -> bool:
    if not secret or not timestamp or not signature or not fresh(timestamp, now):
        return False
    return hmac.compare_digest(hmac_signature(secret, timestamp, body), signature)
