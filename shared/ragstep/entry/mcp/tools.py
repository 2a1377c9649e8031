"""The MCP tools: what each is for (written for a model choosing among them), its JSON schema, the scope it needs,
and what it does -- through the same use cases as the HTTP API and the CLI.

Framework-free: nothing here imports the MCP SDK, so the tools are the same over stdio and Streamable HTTP, and a
tool's outcome is a :class:`ToolOutput` (the text a model reads, the structured content a program reads). A tool
error is an outcome too (``is_error``), with one line a model can act on: an unknown knowledge base names the ones
the caller may use.
"""

from __future__ import annotations

import difflib
import io
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from ragstep.context import Context
from ragstep.entry.mcp.documents import document_of
from ragstep.errors import InputError, NotFoundError, RagstepError
from ragstep.models.tenancy import Scope

#: Passages a ``search`` returns unless the call says otherwise, and the most it may ask for.
DEFAULT_TOP_K = 5
MAX_TOP_K = 50
#: A passage's text is cut at this many characters in the text a model reads (the structured content has it whole).
TEXT_PREVIEW = 1200
#: ``read_passage``: how many passages before and after the one asked for, at most.
MAX_NEIGHBOURS = 5


@dataclass(frozen=True, slots=True)
class ToolOutput:
    text: str
    data: dict[str, Any] = field(default_factory=dict)
    is_error: bool = False


@dataclass(frozen=True, slots=True)
class Caller:
    """Who calls a tool: the context of their tenant (limited to their key's knowledge bases) and their scopes.
    ``inline_jobs``: ingestion runs inside the call (stdio: no worker process) rather than being queued;
    ``local_files``: ``ingest`` may read a file of this machine by path (stdio: the machine's own user)."""

    context: Context
    scopes: tuple[str, ...]
    inline_jobs: bool = False
    local_files: bool = False


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    title: str
    description: str
    scope: Scope
    schema: dict[str, Any]
    run: Callable[[Caller, Mapping[str, Any]], ToolOutput]
    read_only: bool = True


def _kbs_schema(required: bool = True) -> dict[str, Any]:
    return {
        "type": "array",
        "items": {"type": "string"},
        "minItems": 1 if required else 0,
        "description": "knowledge bases to use, by name or id (list_knowledge_bases names them)",
    }


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


# -- helpers -------------------------------------------------------------------------------------------------------


def _strings(args: Mapping[str, Any], name: str) -> list[str]:
    value = args.get(name) or []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InputError(f"{name} must be a list of strings")
    return list(value)


def _text(args: Mapping[str, Any], name: str) -> str:
    value = args.get(name)
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{name} is required: a non-empty string")
    return value


def _int(args: Mapping[str, Any], name: str, default: int, low: int, high: int) -> int:
    value = args.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InputError(f"{name} must be an integer from {low} to {high}")
    return value


def available_kbs(ctx: Context) -> list[str]:
    return sorted(kb.name for kb in ctx.catalog.list_kbs())


def _require_kbs(ctx: Context, refs: list[str]) -> list[str]:
    """``refs`` as knowledge base ids, or an error naming the knowledge bases this caller may use."""
    if not refs:
        raise InputError(f"name at least one knowledge base in knowledge_bases; available: {_names(ctx)}")
    ids = []
    for ref in refs:
        try:
            ids.append(ctx.require_kb(ref).id)
        except NotFoundError:
            raise NotFoundError(f"unknown knowledge base {ref!r}; available: {_names(ctx)}") from None
    return list(dict.fromkeys(ids))


def _names(ctx: Context) -> str:
    return ", ".join(available_kbs(ctx)) or "none (create one first)"


def _cut(text: str, limit: int = TEXT_PREVIEW) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _passage_line(n: int, result: Any) -> str:
    where = result.knowledge_filename or result.knowledge_title or result.knowledge_id
    head = f"[{n}] {where} (chars {result.start_at}-{result.end_at}, score {result.score:.3f}, {result.match_type})"
    return f"{head}\nid: {result.id}\n{_cut(result.content)}"


def _result_data(result: Any) -> dict[str, Any]:
    keep = (
        "id", "content", "knowledge_id", "knowledge_base_id", "knowledge_filename", "knowledge_title", "chunk_index",
        "start_at", "end_at", "score", "match_type", "tag_id",
    )  # fmt: skip
    dumped: dict[str, Any] = result.model_dump(mode="json")
    return {k: dumped[k] for k in keep if k in dumped}


# -- the tools -----------------------------------------------------------------------------------------------------


def _search(caller: Caller, args: Mapping[str, Any]) -> ToolOutput:
    from ragstep.app.cost import cost_of
    from ragstep.app.search import knowledge_search
    from ragstep.models import SearchRequest

    ctx = caller.context
    kb_ids = _require_kbs(ctx, _strings(args, "knowledge_bases"))
    top_k = _int(args, "top_k", DEFAULT_TOP_K, 1, MAX_TOP_K)
    request = SearchRequest(
        query=_text(args, "query"),
        knowledge_base_ids=kb_ids,
        knowledge_ids=_strings(args, "knowledge_ids"),
        tag_ids=_strings(args, "tags"),
        overrides={"rerank_top_k": top_k},
    )
    state = knowledge_search(request, ctx)
    results = state.results("final_results")[:top_k]
    # The cost receipt travels in the structured content, as in every other response (ragstep.app.cost).
    usage = {"cost": cost_of(state, ctx).model_dump(mode="json")}
    if not results:
        return ToolOutput("No passage matched this query.", {"query": request.query, "results": [], "usage": usage})
    text = "\n\n".join(_passage_line(n, r) for n, r in enumerate(results, start=1))
    return ToolOutput(text, {"query": request.query, "results": [_result_data(r) for r in results], "usage": usage})


def _answer(caller: Caller, args: Mapping[str, Any]) -> ToolOutput:
    from ragstep.app.chat import chat_response, require_session, run_chat
    from ragstep.models import ChatRequest

    ctx = caller.context
    kb_ids = _require_kbs(ctx, _strings(args, "knowledge_bases"))
    session = args.get("session_id")
    if session is not None:
        if not isinstance(session, str):
            raise InputError("session_id must be a string (the session_id of an earlier answer)")
        require_session(ctx, session)
    # rag_stream, run to its end: it loads the session's history, so a follow-up is resolved against it (rag has no
    # load_history stage: it reads only the rounds a stateless caller sends).
    question = _text(args, "question")
    request = ChatRequest(query=question, knowledge_base_ids=kb_ids, session_id=session, pipeline="rag_stream")
    body = chat_response(run_chat(request, ctx), ctx)
    references = body.get("references") or []
    # The notes say what the answer could not use (a stage the question needed that did not run, a follow-up searched
    # with the previous question's words): an agent reads them where a person reads them after the answer.
    notes = [str(note) for note in body.get("notes") or []]
    lines = [str(body.get("answer", "")).strip(), *(f"(note: {note})" for note in notes)]
    if references:
        lines.append("\nSources:")
        for n, ref in enumerate(references, start=1):
            where = ref.get("knowledge_filename") or ref.get("knowledge_title") or ref.get("knowledge_id")
            lines.append(f"[{n}] {where} (chars {ref.get('start_at')}-{ref.get('end_at')}; passage id {ref.get('id')})")
    lines.append(f"\nsession_id: {body.get('session_id')} (pass it to ask a follow-up)")
    data = {
        "answer": body.get("answer", ""),
        "session_id": body.get("session_id"),
        "model": body.get("model", ""),
        "cost_usd": body["usage"]["cost"]["total_usd"],
        "usage": body["usage"],
        "references": [{k: r.get(k) for k in _REFERENCE_FIELDS} for r in references],
        "notes": notes,
    }
    return ToolOutput("\n".join(lines), data)


_REFERENCE_FIELDS = ("id", "content", "knowledge_id", "knowledge_filename", "start_at", "end_at", "score")


def _find(caller: Caller, args: Mapping[str, Any]) -> ToolOutput:
    from ragstep.app.viking import find

    ctx = caller.context
    refs = _strings(args, "knowledge_bases")
    _require_kbs(ctx, refs)
    result = find(_text(args, "query"), refs, ctx, limit=_int(args, "limit", 10, 1, 50))
    matches = [*result.resources, *result.skills, *result.memories]
    if not matches:
        return ToolOutput("Nothing matched this query.", {"query": result.query, "matches": []})
    data = [m.model_dump(mode="json") for m in matches]
    lines = []
    for n, m in enumerate(data, start=1):
        kind = "document" if m["is_leaf"] else "folder"
        lines.append(f"[{n}] {m['uri']} ({kind}, score {float(m['score']):.3f})\n{_cut(str(m['abstract']))}")
    return ToolOutput("\n\n".join(lines), {"query": result.query, "matches": data})


def _list_kbs(caller: Caller, args: Mapping[str, Any]) -> ToolOutput:
    from ragstep.app.knowledge_bases import describe_knowledge_base

    ctx = caller.context
    infos = [describe_knowledge_base(ctx, kb) for kb in ctx.catalog.list_kbs()]
    if not infos:
        return ToolOutput("No knowledge base yet.", {"knowledge_bases": []})
    lines = [
        f"- {i.knowledge_base.name} (id {i.knowledge_base.id}, {i.knowledge_base.type}): {i.documents} documents, "
        f"{i.chunks} passages" + (f" -- {i.knowledge_base.description}" if i.knowledge_base.description else "")
        for i in infos
    ]
    data = [
        {
            "id": i.knowledge_base.id,
            "name": i.knowledge_base.name,
            "type": str(i.knowledge_base.type),
            "description": i.knowledge_base.description,
            "documents": i.documents,
            "chunks": i.chunks,
        }
        for i in infos
    ]
    return ToolOutput("\n".join(lines), {"knowledge_bases": data})


def _list_documents(caller: Caller, args: Mapping[str, Any]) -> ToolOutput:
    from ragstep.app.documents import list_documents

    ctx = caller.context
    kb = _text(args, "knowledge_base")
    _require_kbs(ctx, [kb])
    page = list_documents(ctx, kb, _int(args, "limit", 50, 1, 200), args.get("cursor"))
    docs = [d.model_dump(mode="json") for d in page.items]
    if not docs:
        return ToolOutput(f"{kb} holds no document.", {"documents": [], "next_cursor": None})
    lines = [
        f"- {d['file']} (id {d['id']}, {d['status']}, {d['chunks']} passages"
        + (f", tag {d['tag']}" if d["tag"] else "")
        + ("" if d["enabled"] else ", disabled")
        + (f": {d['error']}" if d["error"] else "")
        + ")"
        for d in docs
    ]
    if page.next_cursor:
        lines.append(f"(more: cursor {page.next_cursor})")
    return ToolOutput("\n".join(lines), {"documents": docs, "next_cursor": page.next_cursor})


def _read_passage(caller: Caller, args: Mapping[str, Any]) -> ToolOutput:
    ctx = caller.context
    passage_id = _text(args, "passage_id")
    around = _int(args, "neighbours", 1, 0, MAX_NEIGHBOURS)
    allowed = {kb.id for kb in ctx.catalog.list_kbs()}
    chunk = ctx.index.fetch([passage_id]).get(passage_id)
    if chunk is None or chunk.knowledge_base_id not in allowed:
        raise NotFoundError(f"no passage {passage_id!r}: use an id that search or answer returned")
    wanted = [i for i in range(chunk.chunk_index - around, chunk.chunk_index + around + 1) if i >= 0]
    found = ctx.index.chunks_at({chunk.knowledge_id: wanted}).get(chunk.knowledge_id, {})
    ordered = [found[i] for i in sorted(found)] or [chunk]
    where = chunk.knowledge_filename or chunk.knowledge_title or chunk.knowledge_id
    parts = [f"{where}, passages {ordered[0].chunk_index}-{ordered[-1].chunk_index} (asked: {chunk.chunk_index})"]
    parts += [("» " if c.id == chunk.id else "") + c.content.strip() for c in ordered]
    data = {
        "passage": {
            "id": chunk.id,
            "knowledge_id": chunk.knowledge_id,
            "knowledge_filename": chunk.knowledge_filename,
            "chunk_index": chunk.chunk_index,
            "start_at": chunk.start_at,
            "end_at": chunk.end_at,
        },
        "passages": [
            {"id": c.id, "chunk_index": c.chunk_index, "start_at": c.start_at, "end_at": c.end_at, "content": c.content}
            for c in ordered
        ],
    }
    return ToolOutput("\n\n".join(parts), data)


def _ingest(caller: Caller, args: Mapping[str, Any]) -> ToolOutput:
    from ragstep.app.jobs import run_job, runner_for
    from ragstep.app.uploads import Upload, store_uploads

    ctx = caller.context
    kb = ctx.require_kb(_require_kbs(ctx, [_text(args, "knowledge_base")])[0])
    name, data = document_of(args, local_files=caller.local_files, file_limit=ctx.settings.max_file_bytes)
    tag = args.get("tag") or ""
    if not isinstance(tag, str):
        raise InputError("tag must be a string")
    jobs = store_uploads(ctx, kb, [Upload(name=name, file=io.BytesIO(data))], tag)
    job = jobs[0]
    if caller.inline_jobs:
        job = run_job(ctx, job.id) or job
    else:
        runner_for(ctx.clients).submit(ctx.tenant_id, job.id)
    status = str(job.status)
    text = f"{name}: job {job.id} {status} in {kb.name} (document id {job.knowledge_id})"
    if job.error:
        text += f": {job.error}"
    return ToolOutput(
        text,
        {"job_id": job.id, "status": status, "document_id": job.knowledge_id, "error": job.error},
        is_error=status == "failed",
    )


TOOLS: tuple[Tool, ...] = (
    Tool(
        "search",
        "Search knowledge bases",
        "Find the passages of the user's documents that best match a query (hybrid keyword + meaning search, "
        "reranked). Use it to look facts up before answering; cite passages by file. Returns passages with "
        "their file, character position, score and id (read_passage shows the text around one).",
        "search",
        _object(
            {
                "query": {"type": "string", "description": "what to look for, in the user's words (any language)"},
                "knowledge_bases": _kbs_schema(),
                "top_k": {"type": "integer", "minimum": 1, "maximum": MAX_TOP_K, "default": DEFAULT_TOP_K},
                "knowledge_ids": {"type": "array", "items": {"type": "string"}, "description": "only these documents"},
                "tags": {"type": "array", "items": {"type": "string"}, "description": "only passages with these tags"},
            },
            ["query", "knowledge_bases"],
        ),
        _search,
    ),
    Tool(
        "answer",
        "Answer from knowledge bases",
        "Answer a question from the user's documents, grounded in retrieved passages, with numbered sources [n]. "
        "Returns the answer, its sources, notes on what it could not use and a session_id; pass session_id back "
        "to ask a follow-up in context.",
        "chat",
        _object(
            {
                "question": {"type": "string", "description": "the question, in the user's words"},
                "knowledge_bases": _kbs_schema(),
                "session_id": {"type": "string", "description": "continue this conversation (from an earlier answer)"},
            },
            ["question", "knowledge_bases"],
        ),
        _answer,
    ),
    Tool(
        "find",
        "Browse a knowledge base's hierarchy",
        "Hierarchical find over knowledge bases organised in folders (OpenViking-style): returns the matching "
        "documents and folders with their paths and abstracts. Use it to see where a topic lives; use search for "
        "passages.",
        "search",
        _object(
            {
                "query": {"type": "string"},
                "knowledge_bases": _kbs_schema(),
                "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10},
            },
            ["query", "knowledge_bases"],
        ),
        _find,
    ),
    Tool(
        "list_knowledge_bases",
        "List knowledge bases",
        "The knowledge bases this caller may use, with their ids, types, descriptions and sizes. Call it first "
        "when you do not know which knowledge base to search.",
        "search",
        _object({}, []),
        _list_kbs,
    ),
    Tool(
        "list_documents",
        "List documents",
        "The documents of one knowledge base: ids, file names, ingestion status and passage counts.",
        "search",
        _object(
            {
                "knowledge_base": {"type": "string", "description": "a knowledge base name or id"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 200, "default": 50},
                "cursor": {"type": "string", "description": "next_cursor of the previous page"},
            },
            ["knowledge_base"],
        ),
        _list_documents,
    ),
    Tool(
        "read_passage",
        "Read a passage in context",
        "A passage by its id (from search or answer) with its neighbours in the document, to read around a hit.",
        "search",
        _object(
            {
                "passage_id": {"type": "string"},
                "neighbours": {"type": "integer", "minimum": 0, "maximum": MAX_NEIGHBOURS, "default": 1},
            },
            ["passage_id"],
        ),
        _read_passage,
    ),
    Tool(
        "ingest",
        "Add a document",
        "Add a document (text, a file as base64, or over stdio a local file's absolute path or file:// URI) to a "
        "knowledge base. The file name's extension decides how it is parsed (.md, .txt, .json, .html, .pdf, .docx, "
        ".csv, .xlsx, .rst, .jsonl, .yaml, .toml, .ini, source code such as .py or .js). Sending the same name "
        "again replaces it.",
        "ingest",
        _object(
            {
                "knowledge_base": {"type": "string", "description": "a knowledge base name or id"},
                "filename": {"type": "string", "description": "e.g. notes.md (with path: the file's own name)"},
                "text": {"type": "string", "description": "the document's text (UTF-8)"},
                "content_base64": {"type": "string", "description": "or the file's bytes, base64-encoded"},
                "path": {"type": "string", "description": "or (stdio only) a local file: /abs/path or file:///..."},
                "tag": {"type": "string"},
            },
            ["knowledge_base"],
        ),
        _ingest,
        read_only=False,
    ),
)
BY_NAME = {tool.name: tool for tool in TOOLS}


def tools_for(scopes: tuple[str, ...]) -> list[Tool]:
    """The tools a caller with ``scopes`` may call (a tool outside them is not listed)."""
    return [tool for tool in TOOLS if tool.scope in scopes]


def call_tool(name: str, args: Mapping[str, Any] | None, caller: Caller) -> ToolOutput:
    """Run tool ``name``: its output, or an error outcome with one line a model can act on (never an exception)."""
    tool = BY_NAME.get(name)
    if tool is None or tool.scope not in caller.scopes:
        names = ", ".join(t.name for t in tools_for(caller.scopes))
        return ToolOutput(f"unknown tool {name!r}; the tools are: {names}", is_error=True)
    unknown = [key for key in args or {} if key not in tool.schema["properties"]]
    if unknown:  # the schema forbids them; a misspelt optional argument must not be ignored without a word
        accepted = list(tool.schema["properties"])
        close = difflib.get_close_matches(unknown[0], accepted, n=1)
        guess = f" (did you mean {close[0]}?)" if close else ""
        return ToolOutput(f"unknown argument {unknown[0]!r}{guess}; {name} takes {', '.join(accepted)}", is_error=True)
    try:
        return tool.run(caller, args or {})
    except ValidationError as exc:
        from ragstep.models.unknown_fields import explain_unknown_fields, model_named

        first = explain_unknown_fields(exc.errors()[:1], model_named(exc.title))[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "arguments"
        message = str(first.get("msg", "invalid value")).removeprefix("Value error, ")  # pydantic's, not ours
        return ToolOutput(f"invalid {where}: {message}", is_error=True)
    except RagstepError as exc:
        return ToolOutput(str(exc), is_error=True)
