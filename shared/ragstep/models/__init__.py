"""The state contract: the JSON that flows between pipeline stages, split by topic.

Every stage is a function ``state -> state``. On AWS the state crosses Step Functions between Lambda functions, so
everything here must round-trip through JSON unchanged (``tests/test_models.py`` checks each model). Bump
:data:`SCHEMA_VERSION` on any change that an older stage could not read. Import from ``ragstep.models``: the
sub-modules are an arrangement, this package is the public surface.

Names load on first use (PEP 562): building the pydantic classes of every sub-module is slow, and a command or
function needs only some of them (``ragstep kb list`` the catalog's, a search function no ingest models), so
``from ragstep.models import KnowledgeBase`` imports ``catalog`` and ``base`` alone.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ragstep.models.base import (
        DEFAULT_TENANT,
        MAX_QUERY_CHARS,
        SCHEMA_VERSION,
        ErrorInfo,
        StreamEvent,
        TraceAction,
        TraceEvent,
        check_identifier,
        check_query,
        check_tenant,
    )
    from ragstep.models.catalog import Knowledge, KnowledgeBase, KnowledgeBaseType
    from ragstep.models.chat import (
        ChatRequest,
        ChatSettings,
        ChatState,
        CitationMode,
        DocAggregate,
        FallbackStrategy,
        HistoryRound,
        Language,
        Reference,
        SessionSummary,
        Turn,
        Usage,
        language_of,
    )
    from ragstep.models.ingest import (
        CHILD_OVERLAP_DIVISOR,
        DEFAULT_CHILD_SIZE,
        DEFAULT_PARENT_SIZE,
        INGEST_SCHEMA_VERSION,
        INGEST_SKIPPED,
        EmbedBatch,
        IngestOptions,
        IngestProducts,
        IngestSource,
        IngestState,
        IngestStatus,
    )
    from ragstep.models.search import (
        Chunk,
        ChunkType,
        Fusion,
        ImageInfo,
        MatchType,
        Probability,
        RetrievalOverrides,
        RetrievalSettings,
        SearchRequest,
        SearchResult,
    )
    from ragstep.models.state import RESULT_FIELDS, PipelineState, ResultField

#: Where each public name is defined (the sub-module of this package).
_WHERE = {
    "DEFAULT_TENANT": "base",
    "MAX_QUERY_CHARS": "base",
    "SCHEMA_VERSION": "base",
    "ErrorInfo": "base",
    "StreamEvent": "base",
    "TraceAction": "base",
    "TraceEvent": "base",
    "check_identifier": "base",
    "check_query": "base",
    "check_tenant": "base",
    "Knowledge": "catalog",
    "KnowledgeBase": "catalog",
    "KnowledgeBaseType": "catalog",
    "ChatRequest": "chat",
    "ChatSettings": "chat",
    "ChatState": "chat",
    "CitationMode": "chat",
    "DocAggregate": "chat",
    "FallbackStrategy": "chat",
    "HistoryRound": "chat",
    "Language": "chat",
    "Reference": "chat",
    "SessionSummary": "chat",
    "Turn": "chat",
    "Usage": "chat",
    "language_of": "chat",
    "CHILD_OVERLAP_DIVISOR": "ingest",
    "DEFAULT_CHILD_SIZE": "ingest",
    "DEFAULT_PARENT_SIZE": "ingest",
    "INGEST_SCHEMA_VERSION": "ingest",
    "INGEST_SKIPPED": "ingest",
    "EmbedBatch": "ingest",
    "IngestOptions": "ingest",
    "IngestProducts": "ingest",
    "IngestSource": "ingest",
    "IngestState": "ingest",
    "IngestStatus": "ingest",
    "Chunk": "search",
    "ChunkType": "search",
    "Fusion": "search",
    "ImageInfo": "search",
    "MatchType": "search",
    "Probability": "search",
    "RetrievalOverrides": "search",
    "RetrievalSettings": "search",
    "SearchRequest": "search",
    "SearchResult": "search",
    "RESULT_FIELDS": "state",
    "PipelineState": "state",
    "ResultField": "state",
}

__all__ = [
    "CHILD_OVERLAP_DIVISOR",
    "DEFAULT_CHILD_SIZE",
    "DEFAULT_PARENT_SIZE",
    "DEFAULT_TENANT",
    "INGEST_SCHEMA_VERSION",
    "INGEST_SKIPPED",
    "MAX_QUERY_CHARS",
    "RESULT_FIELDS",
    "SCHEMA_VERSION",
    "ChatRequest",
    "ChatSettings",
    "ChatState",
    "Chunk",
    "ChunkType",
    "CitationMode",
    "DocAggregate",
    "EmbedBatch",
    "ErrorInfo",
    "FallbackStrategy",
    "Fusion",
    "HistoryRound",
    "ImageInfo",
    "IngestOptions",
    "IngestProducts",
    "IngestSource",
    "IngestState",
    "IngestStatus",
    "Knowledge",
    "KnowledgeBase",
    "KnowledgeBaseType",
    "Language",
    "MatchType",
    "PipelineState",
    "Probability",
    "Reference",
    "ResultField",
    "RetrievalOverrides",
    "RetrievalSettings",
    "SearchRequest",
    "SearchResult",
    "SessionSummary",
    "StreamEvent",
    "TraceAction",
    "TraceEvent",
    "Turn",
    "Usage",
    "check_identifier",
    "check_query",
    "check_tenant",
    "language_of",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # the next lookup is an ordinary module attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
