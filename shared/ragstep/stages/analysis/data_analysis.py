"""``data_analysis``: questions over ingested spreadsheets answered with one SQL query (WeKnora's DATA_ANALYSIS).

Runs after the final cut (``filter_top_k`` in ``rag_stream``, ``chunk_merge`` in ``rag``) on the context results:

1. Trigger: results that are ``table_summary`` / ``table_column`` chunks of data files (``.csv``, ``.xlsx``). The
   first ``data_analysis_max_files`` files (3) in result order are analysed. A file's ``blob_key`` must lie under
   ingestion's own ``data/<knowledge base>/<knowledge id>/`` of a knowledge base this request resolved, so a result
   can only ever load its own file, from the tenant's own blob store.
2. Each file is fetched (S3 to ``/tmp`` on AWS; larger than ``data_analysis_max_file_bytes`` is skipped) and loaded
   into one in-memory DuckDB: ``k_<knowledge id>`` (every sheet of a workbook as ``k_<knowledge id>_<sheet>``); then
   the sandbox is locked (:mod:`ragstep.adapters.analysis.duckdb`).
3. Per file, the chat model gets WeKnora's prompt (:mod:`.prompts`) at temperature 0.1 with the provider's JSON mode
   and answers ``{"knowledge_id", "sql"}``; an empty ``sql`` means no analysis is needed.
4. The query is checked by DuckDB's own parser (one SELECT over the loaded tables only) and run under the time,
   memory and row limits, in a process of its own killed at the deadline
   (:mod:`ragstep.adapters.analysis.sandbox`; its measured wall clock and peak memory are in the trace). The
   result -- the SQL and a Markdown table -- becomes a ``data_analysis`` result placed first in the context, and
   that file's summary/column chunks leave the results (the schema is not cited twice).

Failures degrade, never fail the request: each is a ``degrade`` row with its reason (``refused`` with the parser's
reason, ``timeout``, ``failed``, ``not_json``, ``model_failed``, ``unreadable``, ``too_large``, ``missing``,
``no_excel``), and the file's summary chunks stay. The extractive answerer cannot write SQL: the stage skips.
"""

from __future__ import annotations

import json
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragstep.errors import NotFoundError, RagstepError
from ragstep.models import ChunkType, MatchType, PipelineState, ResultField, SearchResult, TraceEvent
from ragstep.models.blob_keys import DATA_PREFIX
from ragstep.ports import ChatMessage, ChatOptions
from ragstep.stages.chat.common import cache_key, cached, remember, strip_think

# Most answers reference no data file and end at the trigger check: the analysis models and the prompt (with the
# parsers' Markdown tables) are imported by the steps after it, not with the stage (a chat function preloads it).
if TYPE_CHECKING:
    from ragstep.context import Context
    from ragstep.models.analysis import DataTable, QueryCost
    from ragstep.ports import AnalysisSession, ChatModel

STAGE = "data_analysis"
DATA_CHUNKS = (ChunkType.TABLE_SUMMARY, ChunkType.TABLE_COLUMN)
FORMATS = ("csv", "xlsx")
#: WeKnora's temperature for the plan; a query is short.
TEMPERATURE = 0.1
SQL_MAX_TOKENS = 1024
_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$")


@dataclass(frozen=True, slots=True)
class DataFile:
    knowledge_id: str
    knowledge_base_id: str
    blob_key: str
    format: str
    filename: str
    title: str


def _field(state: PipelineState) -> ResultField:
    """Where the context results are: the final cut when it ran, else the merge's (``rag`` has no filter_top_k)."""
    return "final_results" if state.ran("final_results") else "merge_results"


def data_files(state: PipelineState, results: list[SearchResult], limit: int) -> tuple[list[DataFile], int]:
    """The data files the results reference, in result order (at most ``limit``), and how many more there were."""
    allowed = {kb.id for kb in state.knowledge_bases} | set(state.knowledge_scope.values())
    found: dict[str, DataFile] = {}
    for r in results:
        key = str(r.metadata.get("blob_key") or "")
        fmt = str(r.metadata.get("format") or "")
        if r.chunk_type not in DATA_CHUNKS or r.knowledge_id in found or fmt not in FORMATS:
            continue
        if r.knowledge_base_id not in allowed or not key.startswith(
            f"{DATA_PREFIX}{r.knowledge_base_id}/{r.knowledge_id}/"
        ):
            continue
        filename = r.knowledge_filename or key.rsplit("/", 1)[-1]
        found[r.knowledge_id] = DataFile(r.knowledge_id, r.knowledge_base_id, key, fmt, filename, r.knowledge_title)
    files = list(found.values())
    return files[:limit], max(0, len(files) - limit)


def parse_plan(text: str) -> dict[str, str]:
    """``{"knowledge_id", "sql"}`` from the model's answer (``<think>`` and code fences dropped, the first JSON
    object taken); :class:`AnalysisError` (``not_json``) when there is none."""
    from ragstep.models.analysis import AnalysisError

    body = _FENCE.sub("", strip_think(text).strip())
    start = body.find("{")
    try:
        if start < 0:
            raise ValueError("no JSON object")
        value, _ = json.JSONDecoder().raw_decode(body[start:])
    except ValueError:
        raise AnalysisError(
            "not_json", f"the model did not answer with a JSON object: {text.strip()[:120]!r}"
        ) from None
    if not isinstance(value, dict) or not isinstance(value.get("sql", ""), str):
        raise AnalysisError("not_json", "the model's JSON has no text field 'sql'")
    return {"knowledge_id": str(value.get("knowledge_id") or ""), "sql": str(value.get("sql") or "").strip()}


def _with_table_names(sql: str, knowledge_id: str, tables: list[DataTable]) -> str:
    """WeKnora's substitution: a query that names the knowledge id where the table belongs gets the table name."""
    if not tables or not knowledge_id or knowledge_id == tables[0].name:
        return sql
    return re.sub(rf"(?<![\w\"]){re.escape(knowledge_id)}(?![\w\"])", tables[0].name, sql)


def _plan(ctx: Context, model: ChatModel, prompt: str) -> tuple[dict[str, str], bool]:
    """The model's plan for one file, through the response cache (only answers that parsed are kept)."""
    from ragstep.models.analysis import AnalysisError

    messages = [ChatMessage("user", prompt)]
    options = ChatOptions(temperature=TEMPERATURE, max_tokens=SQL_MAX_TOKENS, json_object=True)
    key = cache_key(STAGE, model.name, messages, options)
    hit = cached(ctx, key)
    if hit is not None:
        return parse_plan(hit.content), True
    try:
        response = model.complete(messages, options)
    except RagstepError as exc:
        raise AnalysisError("model_failed", exc.message) from None
    plan = parse_plan(response.content)
    remember(ctx, key, response.content)
    return plan, False


def _cost(cost: QueryCost | None) -> dict[str, float]:
    """The query process's measured cost, for the trace (wall clock and peak memory of the process that ran it)."""
    if cost is None:
        return {}
    return {"process_ms": cost.elapsed_ms, "peak_rss_mb": cost.peak_rss_mb, "base_rss_mb": cost.base_rss_mb}


def _degrade(reason: str, file: DataFile, message: str, **detail: Any) -> TraceEvent:
    info = {"knowledge_id": file.knowledge_id, "file": file.filename, "error": message, **detail}
    return TraceEvent(stage=STAGE, action="degrade", reason=reason, detail=info)


def _load(
    ctx: Context, session: AnalysisSession, files: list[DataFile], folder: Path
) -> tuple[list[tuple[DataFile, list[DataTable]]], list[TraceEvent]]:
    from ragstep.models.analysis import AnalysisError

    cap = ctx.settings.data_analysis_max_file_bytes
    loaded: list[tuple[DataFile, list[DataTable]]] = []
    events: list[TraceEvent] = []
    for i, file in enumerate(files):
        try:
            try:
                data = ctx.blobs.get(file.blob_key)
            except NotFoundError:
                raise AnalysisError("missing", "the stored data file is gone; ingest the file again") from None
            if len(data) > cap:
                raise AnalysisError("too_large", f"{len(data)} bytes; RAGSTEP_DATA_ANALYSIS_MAX_FILE_BYTES is {cap}")
            path = folder / f"{i}.{file.format}"
            path.write_bytes(data)
            loaded.append((file, session.load(file.knowledge_id, str(path), file.format)))
        except AnalysisError as exc:
            events.append(_degrade(exc.reason, file, exc.message))
        except RagstepError as exc:  # the blob store failing: this file is not analysed, the answer goes on
            events.append(_degrade("unreadable", file, exc.message))
        except OSError as exc:  # /tmp full or unwritable
            events.append(_degrade("unreadable", file, f"cannot write the file to a temporary folder: {exc}"))
    return loaded, events


def _analyse(
    ctx: Context, state: PipelineState, loaded: list[tuple[DataFile, list[DataTable]]], session: AnalysisSession
) -> tuple[list[SearchResult], list[TraceEvent], list[dict[str, Any]]]:
    from ragstep.models.analysis import AnalysisError
    from ragstep.stages.analysis.prompts import analysis_prompt, result_markdown

    model = ctx.chat_model
    top = max((r.score for r in state.results(_field(state))), default=1.0)
    analyses: list[SearchResult] = []
    events: list[TraceEvent] = []
    queries: list[dict[str, Any]] = []
    for file, tables in loaded:
        sql = ""
        started: float | None = None
        try:
            plan, hit = _plan(ctx, model, analysis_prompt(state.search_query, file.knowledge_id, tables))
            sql = _with_table_names(plan["sql"], file.knowledge_id, tables)
            if not sql:
                events.append(
                    TraceEvent(
                        stage=STAGE,
                        action="skip",
                        reason="no_analysis_needed",
                        detail={"knowledge_id": file.knowledge_id, "file": file.filename},
                    )
                )
                continue
            started = time.perf_counter()
            result = session.query(sql)
        except AnalysisError as exc:
            # How long the query held this request (the sandbox's bound: the timeout plus one second).
            held = {} if started is None else {"wall_ms": round((time.perf_counter() - started) * 1000, 1)}
            cost = _cost(exc.cost)
            events.append(_degrade(exc.reason, file, exc.message, **({"sql": sql} if sql else {}), **held, **cost))
            continue
        wall_ms = round((time.perf_counter() - started) * 1000, 1)
        queries.append(
            {
                "knowledge_id": file.knowledge_id,
                "sql": sql,
                "rows": len(result.rows),
                "truncated": result.truncated,
                "ms": result.elapsed_ms,
                "wall_ms": wall_ms,
                **_cost(result.cost),
                **({"cache": "hit" if hit else "miss"} if ctx.cache is not None else {}),
            }
        )
        analyses.append(
            SearchResult(
                id=f"analysis_{file.knowledge_id}",
                content=result_markdown(file.filename, sql, result),
                knowledge_id=file.knowledge_id,
                knowledge_base_id=file.knowledge_base_id,
                knowledge_title=file.title,
                knowledge_filename=file.filename,
                # First in the context, and ranked so by score too (a later sort keeps it in front).
                score=max(1.0, top),
                match_type=MatchType.DATA_ANALYSIS,
                metadata={
                    "sql": sql,
                    "columns": list(result.columns),
                    "rows": len(result.rows),
                    "truncated": result.truncated,
                    "tables": [t.name for t in tables],
                    "blob_key": file.blob_key,
                },
            )
        )
    return analyses, events, queries


def run(state: PipelineState, ctx: Context) -> PipelineState:
    field = _field(state)
    results = state.results(field)
    if not ctx.settings.data_analysis_enabled:
        return state.with_trace(TraceEvent(stage=STAGE, action="skip", reason="disabled"))
    files, over = data_files(state, results, ctx.settings.data_analysis_max_files)
    if not files:
        return state.with_trace(TraceEvent(stage=STAGE, action="skip", reason="no_data_files"))
    if not ctx.chat_model.generative:
        return state.with_trace(
            TraceEvent(
                stage=STAGE,
                action="skip",
                reason="model_not_generative",
                # The files, so the answer's note can tell whether the answer needed them (stages/chat/notes.py).
                detail={"model": ctx.chat_model.name, "knowledge_ids": [f.knowledge_id for f in files]},
            )
        )
    try:
        session = ctx.data_analysis.session()
    except ImportError:  # a function deployed without DuckDB (its layer) answers without the analysis
        return state.with_trace(TraceEvent(stage=STAGE, action="skip", reason="no_sql_engine"))
    try:
        with tempfile.TemporaryDirectory(prefix="ragstep-analysis-") as tmp:
            loaded, events = _load(ctx, session, files, Path(tmp))
        # Files are in; from here on nothing outside the loaded tables can be reached.
        session.lock()
        analyses, more, queries = _analyse(ctx, state, loaded, session)
    finally:
        session.close()
    analysed = {a.knowledge_id for a in analyses}
    kept = [r for r in results if not (r.knowledge_id in analysed and r.chunk_type in DATA_CHUNKS)]
    event = TraceEvent(
        stage=STAGE,
        counts={
            "files": len(files),
            "loaded": len(loaded),
            "analysed": len(analyses),
            "removed_chunks": len(results) - len(kept),
            **({"files_over_limit": over} if over else {}),
        },
        detail={"field": field, "queries": queries},
    )
    return state.with_results(field, [*analyses, *kept], event, *events, *more)
