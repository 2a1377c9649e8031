"""The state contract: the JSON that flows between pipeline stages, split by topic.

Every stage is a function ``state -> state``. On AWS the state crosses Step Functions between Lambda functions, so
everything here must round-trip through JSON unchanged (``tests/test_models.py`` checks each model). Bump
:data:`SCHEMA_VERSION` on any change that an older stage could not read. Import from ``ragstep.models``: the
sub-modules are an arrangement, this package is the public surface.
"""

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
from ragstep.models.chat import Turn
from ragstep.models.ingest import (
    CHILD_OVERLAP_DIVISOR,
    DEFAULT_CHILD_SIZE,
    DEFAULT_PARENT_SIZE,
    INGEST_SCHEMA_VERSION,
    INGEST_SKIPPED,
    IngestOptions,
    IngestProducts,
    IngestSource,
    IngestState,
    IngestStatus,
)
from ragstep.models.search import (
    RESULT_FIELDS,
    Chunk,
    ChunkType,
    Fusion,
    ImageInfo,
    MatchType,
    PipelineState,
    Probability,
    ResultField,
    RetrievalOverrides,
    RetrievalSettings,
    SearchRequest,
    SearchResult,
)

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
    "Chunk",
    "ChunkType",
    "ErrorInfo",
    "Fusion",
    "ImageInfo",
    "IngestOptions",
    "IngestProducts",
    "IngestSource",
    "IngestState",
    "IngestStatus",
    "Knowledge",
    "KnowledgeBase",
    "KnowledgeBaseType",
    "MatchType",
    "PipelineState",
    "Probability",
    "ResultField",
    "RetrievalOverrides",
    "RetrievalSettings",
    "SearchRequest",
    "SearchResult",
    "StreamEvent",
    "TraceAction",
    "TraceEvent",
    "Turn",
    "check_identifier",
    "check_query",
    "check_tenant",
]
