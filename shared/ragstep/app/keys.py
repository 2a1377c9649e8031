"""API keys: make one (shown once), list, revoke, and check a presented key -- the use cases of the CLI and the
admin routes, and the check every authenticated request runs.

A key is ``rsk_<prefix>_<secret>``: the 8-hex-digit prefix finds the stored record, the SHA-256 of the whole key is
compared with the stored hash in constant time (:func:`hmac.compare_digest`). SHA-256 and not a slow password hash:
the secret is 32 random bytes (``secrets.token_urlsafe(32)``, 256 bits), so guessing it offline from a leaked hash
is as hopeless as guessing it online, and a slow hash would only add its tens of milliseconds to every request.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime

from pydantic import ValidationError

from ragstep.errors import ConflictError, InputError, NotFoundError, UnauthorizedError
from ragstep.models import DEFAULT_TENANT
from ragstep.models.tenancy import KEY_MARK, PREFIX_HEX, ApiKey
from ragstep.ports import KeyStore
from ragstep.scopes import SCOPES

_KEY = re.compile(rf"^{KEY_MARK}_([0-9a-f]{{{PREFIX_HEX}}})_([A-Za-z0-9_-]{{43}})$")
_DURATION = re.compile(r"^(\d+)([smhdw])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
# Compared against when no key has the presented prefix, so an unknown key costs the same as a wrong one.
_NO_HASH = "0" * 64


@dataclass(frozen=True, slots=True)
class CreatedKey:
    """A new key's record and the key itself: the only time the key is ever available."""

    key: ApiKey
    secret: str


def hash_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def parse_expiry(text: str, now: float | None = None) -> float:
    """``--expires``: a duration from now (``90d``, ``12h``, ``2w``), a date (``2027-01-31``, midnight UTC) or an
    ISO 8601 instant; returns epoch seconds."""
    now = time.time() if now is None else now
    text = text.strip()
    if match := _DURATION.match(text):
        return now + int(match[1]) * _UNITS[match[2]]
    try:
        if len(text) == 10:
            day = date.fromisoformat(text)
            return datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp()
        instant = datetime.fromisoformat(text)
    except ValueError:
        raise InputError(
            f"expiry {text!r} is not a duration (90d, 12h, 2w), a date (2027-01-31) or an ISO 8601 time"
        ) from None
    return (instant if instant.tzinfo else instant.replace(tzinfo=UTC)).timestamp()


def check_scopes(scopes: Sequence[str]) -> list[str]:
    unknown = [s for s in scopes if s not in SCOPES]
    if unknown or not scopes:
        said = f"unknown scope {unknown[0]!r}" if unknown else "a key needs at least one scope"
        raise InputError(f"{said}; scopes are {', '.join(SCOPES)}")
    return list(dict.fromkeys(scopes))


def create_key(
    store: KeyStore,
    tenant_id: str,
    scopes: Sequence[str],
    *,
    name: str = "",
    knowledge_bases: Sequence[str] = (),
    expires_at: float | None = None,
    rate_per_second: float | None = None,
    burst: int | None = None,
    now: float | None = None,
) -> CreatedKey:
    """A new key of ``tenant_id`` (which must exist; ``default`` always does)."""
    now = time.time() if now is None else now
    if tenant_id != DEFAULT_TENANT and store.get_tenant(tenant_id) is None:
        raise NotFoundError(f"unknown tenant {tenant_id!r}; create it first (ragstep tenants create {tenant_id})")
    if expires_at is not None and expires_at <= now:
        raise InputError("the expiry is in the past; give a later time")
    for _ in range(3):  # a prefix clash (1 in 4 billion per pair) is retried with a new key
        prefix, secret = secrets.token_hex(PREFIX_HEX // 2), secrets.token_urlsafe(32)
        text = f"{KEY_MARK}_{prefix}_{secret}"
        try:
            key = ApiKey(
                prefix=prefix,
                key_hash=hash_key(text),
                tenant_id=tenant_id,
                name=name,
                scopes=check_scopes(scopes),
                knowledge_bases=list(dict.fromkeys(knowledge_bases)),
                created_at=now,
                expires_at=expires_at,
                rate_per_second=rate_per_second,
                burst=burst,
            )
        except ValidationError as exc:
            err = exc.errors()[0]
            raise InputError(f"{'.'.join(map(str, err['loc']))}: {err['msg']}") from None
        try:
            store.put_key(key)
        except ConflictError:
            continue
        return CreatedKey(key, text)
    raise ConflictError("could not find a free key prefix; retry")


def revoke_key(store: KeyStore, prefix: str, tenant_id: str | None = None, now: float | None = None) -> ApiKey:
    """Revoke the key ``prefix`` (only among ``tenant_id``'s keys when given: another tenant's key is unknown)."""
    key = store.get_key(prefix)
    if key is None or (tenant_id is not None and key.tenant_id != tenant_id):
        raise NotFoundError(f"unknown key {prefix!r}; `ragstep keys list` shows the prefixes")
    revoked = store.revoke_key(prefix, time.time() if now is None else now)
    assert revoked is not None  # it existed a moment ago and keys are never deleted
    return revoked


@dataclass(frozen=True, slots=True)
class Reach:
    """What a key may do, in every dimension a maker's limit bounds: scopes, knowledge bases (empty: all), expiry
    (None: never), and its effective rate limit (0: unlimited) and burst -- the settings' defaults filled in."""

    scopes: frozenset[str]
    knowledge_bases: frozenset[str]
    expires_at: float | None
    rate_per_second: float
    burst: int

    @classmethod
    def of(cls, key: ApiKey, default_rate: float, default_burst: int) -> Reach:
        return cls(
            scopes=frozenset(key.scopes),
            knowledge_bases=frozenset(key.knowledge_bases),
            expires_at=key.expires_at,
            rate_per_second=key.rate_per_second if key.rate_per_second is not None else default_rate,
            burst=key.burst or default_burst,
        )

    @property
    def unlimited(self) -> bool:
        """No knowledge-base list, no expiry, no rate limit: only the scopes bound it."""
        return not self.knowledge_bases and self.expires_at is None and self.rate_per_second <= 0


def wider_in(other: Reach, limit: Reach) -> str | None:
    """The first dimension in which ``other`` reaches beyond ``limit``, as the words of a 403; None when it does
    not (it may equal ``limit``)."""
    if not other.scopes <= limit.scopes:
        return f"scopes beyond its own ({', '.join(sorted(other.scopes - limit.scopes))})"
    if limit.knowledge_bases and not (other.knowledge_bases and other.knowledge_bases <= limit.knowledge_bases):
        return f"knowledge bases beyond its own ({', '.join(sorted(limit.knowledge_bases))})"
    if limit.expires_at is not None and (other.expires_at is None or other.expires_at > limit.expires_at):
        return "a later expiry than its own, or none"
    if limit.rate_per_second > 0:
        if other.rate_per_second <= 0 or other.rate_per_second > limit.rate_per_second:
            return f"a higher rate limit than its own {limit.rate_per_second:g}/s, or none"
        if other.burst > limit.burst:
            return f"a larger burst than its own {limit.burst}"
    return None


def split_key(text: str) -> tuple[str, str]:
    """(prefix, whole key) of a presented key; :class:`UnauthorizedError` when it is not shaped like one."""
    match = _KEY.match(text)
    if match is None:
        raise UnauthorizedError(
            f"malformed API key: expected {KEY_MARK}_<8 hex digits>_<43 characters>, as `ragstep keys create` prints it"
        )
    return match[1], text


def presented_key(headers: Mapping[str, str]) -> str | None:
    """The key in ``Authorization: Bearer`` or ``X-API-Key`` (None when neither is there)."""
    authorization = headers.get("authorization")
    header_key = headers.get("x-api-key")
    bearer = None
    if authorization is not None:
        scheme, _, value = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise UnauthorizedError("malformed Authorization header: send `Authorization: Bearer <key>`")
        bearer = value.strip()
    if bearer is not None and header_key is not None and bearer != header_key.strip():
        raise UnauthorizedError("two different API keys were sent (Authorization and X-API-Key); send one")
    key = bearer if bearer is not None else header_key
    return key.strip() if key is not None else None


def verify_key(store: KeyStore, text: str, now: float | None = None, key: ApiKey | None = None) -> ApiKey:
    """The stored key ``text`` is, when it is active; else :class:`UnauthorizedError` (the message never says
    whether the prefix exists: a wrong and an unknown key read the same). ``key``: the record, when already read."""
    prefix, whole = split_key(text)
    stored = key if key is not None else store.get_key(prefix)
    expected = stored.key_hash if stored is not None else _NO_HASH
    if not hmac.compare_digest(hash_key(whole), expected) or stored is None:
        raise UnauthorizedError("invalid API key; check it, or make a new one with `ragstep keys create`")
    status = stored.status(time.time() if now is None else now)
    if status != "active":
        raise UnauthorizedError(f"API key {prefix} is {status}; make a new one with `ragstep keys create`")
    return stored
