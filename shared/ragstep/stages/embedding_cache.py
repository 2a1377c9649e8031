"""The query-embedding cache: a query's vector per embedding model, kept in the tenant's response cache for the
cache TTL (24 h by default), so a repeated question costs no embedding call.

The key hashes the model id and the exact query text; the value is the vector as JSON (float32 values written
with 9 significant digits, which round-trip exactly). Only embedders behind a network call are cached
(:data:`CACHED_PROVIDERS`): a precomputed table answers faster than any cache, and may be replaced under the same
id. Without a cache (``RAGSTEP_CACHE_BACKEND=none``) every query is embedded, as before.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ragstep.context import Context
    from ragstep.ports import Embedder


CACHED_PROVIDERS = ("openai", "bedrock")


def embedding_key(model_id: str, text: str) -> str:
    digest = hashlib.sha256(json.dumps([model_id, text], ensure_ascii=False).encode("utf-8")).hexdigest()
    return f"query_embedding:{digest}"


def query_embedding(ctx: Context, embedder: Embedder, text: str) -> tuple[list[float], bool]:
    """The query's vector and whether it came from the cache."""
    cache = ctx.cache if embedder.model_id.partition(":")[0] in CACHED_PROVIDERS else None
    key = embedding_key(embedder.model_id, text)
    if cache is not None:
        hit = cache.get(key)
        if hit is not None:
            return [float(x) for x in json.loads(hit)], True
    vector = [float(x) for x in embedder.embed_query(text)]
    if cache is not None:
        cache.put(key, json.dumps([float(f"{x:.9g}") for x in vector]), ctx.settings.cache_ttl_seconds)
    return vector, False
