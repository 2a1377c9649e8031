"""Recording a request: the state before the first step and after every step, kept in the tenant's blob store so
``ragstep replay`` can run the request again from any step (:mod:`ragstep.app.replay`).

Which requests are recorded is a setting (``RAGSTEP_RECORD_RATE``: 0 none, the default; 1 all; in between a sample
chosen by the request id, so the same request is always in or out). A record is one gzip'd JSON document at
``records/<unix time>-<request id>.json.gz`` (the time first, so expired records are found by name), written when
the run ends (a run that failed is recorded too, up to its failing
step). Records live for ``RAGSTEP_RECORD_RETENTION_S`` (7 days): each new record removes up to
:data:`PRUNE_PER_SAVE` expired ones, and ``ragstep replay prune`` removes them all; the passages of a deleted
document therefore leave the records within the retention.

Only query pipelines run by the in-process executor are recorded (search and chat through the CLI, the HTTP API,
MCP and events with ``RAGSTEP_EXECUTOR=inprocess``): a Step Functions execution keeps its own history.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ragstep.models import PipelineState

if TYPE_CHECKING:
    from ragstep.context import Context

RECORDS_PREFIX = "records/"
SUFFIX = ".json.gz"
FORMAT = 1
PRUNE_PER_SAVE = 20
#: The request ids of replays (ragstep.app.replay), which are never recorded themselves.
REPLAY_PREFIX = "replay-"


def record_key(request_id: str, created_at: float) -> str:
    return f"{RECORDS_PREFIX}{int(created_at):010d}-{request_id}{SUFFIX}"


def _created_at(key: str) -> int:
    stamp = key.removeprefix(RECORDS_PREFIX).partition("-")[0]
    return int(stamp) if stamp.isdigit() else 0


def record_keys(ctx: Context) -> list[str]:
    """Every record's key, oldest first."""
    return sorted(ctx.blobs.list(RECORDS_PREFIX))


def should_record(state: Any, ctx: Context) -> bool:
    rate = ctx.settings.record_rate
    if rate <= 0 or not isinstance(state, PipelineState) or state.request_id.startswith(REPLAY_PREFIX):
        return False
    if rate >= 1:
        return True
    try:
        position = int(state.request_id[:8], 16) / 0xFFFFFFFF
    except ValueError:
        position = (hash(state.request_id) & 0xFFFFFFFF) / 0xFFFFFFFF
    return position < rate


@dataclass
class Recording:
    """The states of one run, step by step (``start`` first)."""

    pipeline: str
    steps: list[dict[str, Any]] = field(default_factory=list)

    def add(self, after: str, state: PipelineState) -> None:
        self.steps.append({"after": after, "state": state.model_dump(mode="json")})

    def save(self, state: PipelineState, ctx: Context) -> str:
        created = time.time()
        key = record_key(state.request_id, created)
        document = {
            "format": FORMAT,
            "request_id": state.request_id,
            "pipeline": self.pipeline,
            "tenant_id": state.tenant_id,
            "created_at": created,
            "steps": self.steps,
        }
        import gzip

        body = gzip.compress(json.dumps(document, ensure_ascii=False).encode("utf-8"), compresslevel=5)
        ctx.blobs.put(key, body, "application/gzip")
        prune(ctx, limit=PRUNE_PER_SAVE)
        return key


def load(ctx: Context, request_id: str) -> dict[str, Any] | None:
    suffix = f"-{request_id}{SUFFIX}"
    key = next((k for k in record_keys(ctx) if k.endswith(suffix)), None)
    return None if key is None else read(ctx, key)


def read(ctx: Context, key: str) -> dict[str, Any]:
    import gzip

    document: dict[str, Any] = json.loads(gzip.decompress(ctx.blobs.get(key)))
    return document


def prune(ctx: Context, *, limit: int | None = None, now: float | None = None) -> int:
    """Remove records older than the retention (at most ``limit`` of them); how many were removed."""
    cutoff = (time.time() if now is None else now) - ctx.settings.record_retention_s
    expired = [key for key in record_keys(ctx) if _created_at(key) < cutoff]
    for key in expired[:limit]:
        ctx.blobs.delete(key)
    return len(expired[:limit])
