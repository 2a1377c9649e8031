"""The pipeline state's wire form: what a stage sends the next one (Step Functions, a Lambda's return value).

In memory every stage sees whole :class:`~ragstep.models.SearchResult` lists; on the wire (``schema_version`` "3",
asked for with ``state.model_dump(mode="json", context=WIRE)``) the state carries

* each result once, in a table keyed by result id (``chunks``: the result as the first list that holds it has it,
  without its id and score), and per list only ``[id, score]``, or ``[id, score, changes]`` where the list's copy
  differs from the table's (the rerank's ``metadata.rerank`` scores, the merge's stitched ``content``, a
  reference's ``cited`` and ``positions``): ``changes`` holds the differing fields; for ``content`` grown around the
  table's text only ``{"before": ..., "after": ...}``, for ``metadata`` only the keys set (``+metadata``) and removed
  (``-metadata``), and under ``-`` the fields it does not have. A table entry leaves out the fields at their
  defaults;
* the answer's user message (``chat.user_content``) with each of its passages (``chat.passages``) as its number
  between NULs (``{"with_passages": ...}``), and each passage that holds its reference's text as that reference's
  number and the text around it, so the passages' text travels once;
* the state's fields that are null left out (each defaults to None: a result list whose stage has not run, no
  error ...);
* each query embedding as base64 of its little-endian float32 values (``"f32:..."``), or float64 (``"f64:..."``)
  when a value is not a float32 (a provider's JSON floats): exact either way, so no score moves.

The lists compacted are the state's four result lists and the answer's references (``chat.references``). The table
is also the one part the claim check offloads (:mod:`ragstep.pipeline.transport`): the lists of ids stay in the
state. :func:`expand` turns the wire form back into the fields the models validate; a state without a table (one
written by version 1 or 2, or dumped without ``WIRE`` for a log or a recording) is read as it is.
"""

import base64
import re
import sys
from array import array
from functools import cache
from typing import Any

#: The serialisation context that asks for the wire form.
WIRE: dict[str, Any] = {"ragstep_wire": True}
#: The wire key of the results' table: not a field of the state (the claim check may offload it).
TABLE = "chunks"
#: The compacted lists, by their path in the state.
LISTS: tuple[tuple[str, ...], ...] = (
    ("search_results",),
    ("rerank_results",),
    ("merge_results",),
    ("final_results",),
    ("chat", "references"),
)
_KEYLESS = ("id", "score")

_ENTRY = {
    "type": "array",
    "prefixItems": [
        {"type": "string", "description": "the result's id: its key in chunks"},
        {"type": "number", "description": "its score in this list"},
        {
            "type": "object",
            "description": "the fields where this list's copy differs from the table's; content may be "
            "{before, after}: text around the table's; +metadata: metadata keys set, -metadata: metadata keys "
            "removed, -: fields it does not have",
        },
    ],
    "minItems": 2,
    "maxItems": 3,
}
_LIST = {"anyOf": [{"type": "array", "items": _ENTRY}, {"type": "null"}]}
#: The JSON schema of what the wire form changes in the state's (``PipelineState.model_json_schema()``); kept with
#: it in tests/test_state_schema.py's snapshot, so a change to either needs a new ``schema_version``.
WIRE_SCHEMA: dict[str, Any] = {
    "description": "PipelineState as stages send it (ragstep.models.wire): its null fields left out, every other "
    "field as in its schema",
    "type": "object",
    "properties": {
        TABLE: {
            "type": "object",
            "description": "each result once, by id, without id, score and the fields at their defaults (absent "
            "when offloaded: offloaded.chunks)",
            "additionalProperties": {"type": "object"},
        },
        "query_embeddings": {
            "type": "object",
            "additionalProperties": {"type": "string", "pattern": "^f(32|64):[A-Za-z0-9+/=]*$"},
        },
        **{path[0]: _LIST for path in LISTS if len(path) == 1},
        "chat": {
            "type": "object",
            "properties": {
                "references": _LIST,
                "passages": {
                    "type": "array",
                    "items": {
                        "anyOf": [
                            {"type": "string"},
                            {
                                "type": "object",
                                "description": "the text of chat.references[reference], with before and after "
                                "around it",
                                "properties": {
                                    "reference": {"type": "integer"},
                                    "before": {"type": "string"},
                                    "after": {"type": "string"},
                                },
                            },
                        ]
                    },
                },
                "user_content": {
                    "anyOf": [
                        {"type": "string"},
                        {
                            "type": "object",
                            "properties": {"with_passages": {"type": "string"}},
                            "description": "chat.passages[n] written as NUL n NUL",
                        },
                    ]
                },
            },
        },
    },
}


def is_wire(context: Any) -> bool:
    return isinstance(context, dict) and bool(context.get("ragstep_wire"))


# -- vectors --------------------------------------------------------------------------------------------------------


def pack_vector(values: list[float]) -> str:
    """``values`` as ``f32:<base64>`` (each value a float32: what embedders produce) or ``f64:<base64>``; exact."""
    packed = array("f", values)
    kind = "f32" if packed.tolist() == values else "f64"
    if kind == "f64":
        packed = array("d", values)
    if sys.byteorder == "big":
        packed.byteswap()
    return f"{kind}:{base64.b64encode(packed.tobytes()).decode('ascii')}"


def unpack_vector(text: str) -> list[float]:
    kind, sep, body = text.partition(":")
    if not sep or kind not in ("f32", "f64"):
        raise ValueError("a packed query embedding is 'f32:<base64>' or 'f64:<base64>'")
    values = array("f" if kind == "f32" else "d")
    try:
        values.frombytes(base64.b64decode(body, validate=True))
    except ValueError as exc:
        raise ValueError(f"a packed query embedding is not valid base64 of {kind} values: {exc}") from None
    if sys.byteorder == "big":
        values.byteswap()
    return values.tolist()


# -- results --------------------------------------------------------------------------------------------------------


def _get(data: dict[str, Any], path: tuple[str, ...]) -> tuple[dict[str, Any] | None, str]:
    """The dict holding the list at ``path`` (None when a part of the way is missing) and the list's key."""
    holder: Any = data
    for part in path[:-1]:
        holder = holder.get(part) if isinstance(holder, dict) else None
    return (holder if isinstance(holder, dict) else None), path[-1]


def _changes(result: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    changes: dict[str, Any] = {}
    for key, value in result.items():
        if key in _KEYLESS or body.get(key, _MISSING) == value:
            continue
        old = body.get(key)
        where = value.find(old) if key == "content" and isinstance(value, str) and isinstance(old, str) else -1
        if old and where >= 0:  # grown around the table's text (the merge's stitching): only what was added
            changes[key] = {"before": value[:where], "after": value[where + len(old) :]}
        elif key == "metadata" and isinstance(value, dict) and isinstance(old, dict):
            added = {k: v for k, v in value.items() if old.get(k, _MISSING) != v}
            removed = [k for k in old if k not in value]
            if added:
                changes["+metadata"] = added
            if removed:
                changes["-metadata"] = removed
        else:
            changes[key] = value
    dropped = [k for k in body if k not in result]  # a field the table's copy has and this one does not
    if dropped:
        changes["-"] = dropped
    return changes


_MISSING = object()


def compact(data: dict[str, Any]) -> dict[str, Any]:
    """The JSON dump of a state (edited in place and returned) in the wire form: a table of results, lists of ids."""
    chat = data.get("chat")
    references = chat.get("references") if isinstance(chat, dict) else None
    contents = [r.get("content") for r in references] if isinstance(references, list) else []
    table: dict[str, dict[str, Any]] = {}
    for path in LISTS:
        holder, key = _get(data, path)
        results = holder.get(key) if holder is not None else None
        if not results:
            continue
        entries: list[list[Any]] = []
        for result in results:
            rid = result["id"]
            body = table.get(rid)
            if body is None:
                body = table[rid] = {k: v for k, v in result.items() if k not in _KEYLESS}
            changes = _changes(result, body)
            entries.append([rid, result.get("score", 0.0), changes] if changes else [rid, result.get("score", 0.0)])
        holder[key] = entries  # type: ignore[index]  # holder is not None: results came from it
    if table:
        defaults = _defaults()
        data[TABLE] = {
            rid: {k: v for k, v in body.items() if defaults.get(k, _MISSING) != v} for rid, body in table.items()
        }
    _passages_by_number(chat)
    _passages_by_reference(chat, contents)
    embeddings = data.get("query_embeddings")
    if isinstance(embeddings, dict):
        data["query_embeddings"] = {m: pack_vector(v) for m, v in embeddings.items()}
    for key in [k for k, v in data.items() if v is None]:  # every nullable field of the state defaults to None
        del data[key]
    return data


def expand(data: dict[str, Any]) -> dict[str, Any]:
    """The fields a state's models validate, from its wire form (a new dict; ``data`` is not changed). A state
    without a table, packed vectors or a packed chat message comes back as it is."""
    embeddings = data.get("query_embeddings")
    vectors: dict[str, Any] = embeddings if isinstance(embeddings, dict) else {}
    packed = any(isinstance(v, str) for v in vectors.values())
    chat = data.get("chat")
    passages = chat.get("passages") if isinstance(chat, dict) else None
    chat_packed = isinstance(chat, dict) and (
        isinstance(chat.get("user_content"), dict)
        or (isinstance(passages, list) and any(isinstance(p, dict) for p in passages))
    )
    if TABLE not in data and not packed and not chat_packed:
        return data
    out = dict(data)
    if packed:
        out["query_embeddings"] = {m: unpack_vector(v) if isinstance(v, str) else v for m, v in vectors.items()}
    if isinstance(chat, dict):
        out["chat"] = chat = dict(chat)
    table = out.pop(TABLE, None)
    if table is not None:
        if not isinstance(table, dict):
            raise ValueError(f"{TABLE}: the results' table is an object of results by id")
        for path in LISTS:
            holder, key = _get(out, path)
            entries = holder.get(key) if holder is not None else None
            if isinstance(entries, list) and entries:  # anything else is left for validation to refuse
                holder[key] = [_entry(table, entry, ".".join(path)) for entry in entries]  # type: ignore[index]
    if isinstance(chat, dict):
        passages = chat.get("passages")
        if isinstance(passages, list) and any(isinstance(p, dict) for p in passages):
            chat["passages"] = [_passage(p, chat.get("references"), n) for n, p in enumerate(passages)]
        if isinstance(chat.get("user_content"), dict):
            chat["user_content"] = _passages_in(chat["user_content"], chat.get("passages"))
    return out


def _entry(table: dict[str, Any], entry: Any, where: str) -> Any:
    if isinstance(entry, dict):  # a whole result (the expanded form) among entries: read as it is
        return entry
    if not isinstance(entry, list) or len(entry) not in (2, 3) or not isinstance(entry[0], str):
        raise ValueError(f"{where}: each entry is [id, score] or [id, score, changes]")
    rid, score = entry[0], entry[1]
    body = table.get(rid)
    if not isinstance(body, dict):
        raise ValueError(f"{where}: result {rid!r} is not in the state's results table ({TABLE})")
    result = {**body, "id": rid, "score": score}
    changes = entry[2] if len(entry) == 3 else {}
    if not isinstance(changes, dict):
        raise ValueError(f"{where}: the changes of result {rid!r} are an object")
    for key, value in changes.items():
        if key in ("+metadata", "-metadata", "-") and not isinstance(value, dict | list):
            raise ValueError(f"{where}: the change {key!r} of result {rid!r} is an object or a list")
        if key == "content" and isinstance(value, dict):
            result["content"] = f"{value.get('before', '')}{result.get('content', '')}{value.get('after', '')}"
        elif key == "+metadata":
            result["metadata"] = {**result.get("metadata", {}), **value}
        elif key == "-metadata":
            result["metadata"] = {k: v for k, v in result.get("metadata", {}).items() if k not in value}
        elif key == "-":
            for name in value:
                result.pop(name, None)
        else:
            result[key] = value
    return result


@cache
def _defaults() -> dict[str, Any]:
    """A search result's fields at their defaults, as JSON: left out of the table (validation puts them back)."""
    from ragstep.models.search import SearchResult

    required = {"id": "", "content": "", "knowledge_id": "", "knowledge_base_id": ""}
    dumped = SearchResult(**required).model_dump(mode="json")
    return {k: v for k, v in dumped.items() if k not in required and k not in _KEYLESS}


# -- the chat message: its passages once ----------------------------------------------------------------------------

_MARK = "\x00"
_MARKED = re.compile(r"\x00(\d+)\x00")
_MIN_PASSAGE = 64  # shorter passages are left in place: a marker would save little


def _passages_by_number(chat: Any) -> None:
    """``chat.user_content`` (the message into_chat_message built around the passages) with each passage that is
    in it once replaced by its number between NULs, as ``{"with_passages": text}``; edited in place. Nothing is
    replaced when the text already holds a NUL (queries cannot: ragstep.models.base.check_query refuses them)."""
    if not isinstance(chat, dict):
        return
    text, passages = chat.get("user_content"), chat.get("passages")
    if not isinstance(text, str) or not isinstance(passages, list) or not passages or _MARK in text:
        return
    marked = text
    for n, passage in enumerate(passages):
        usable = isinstance(passage, str) and len(passage) >= _MIN_PASSAGE and _MARK not in passage
        if usable and marked.count(passage) == 1:
            marked = marked.replace(passage, f"{_MARK}{n}{_MARK}")
    if marked != text:
        chat["user_content"] = {"with_passages": marked}


def _passages_in(value: dict[str, Any], passages: Any) -> str:
    marked = value.get("with_passages")
    if not isinstance(marked, str) or not isinstance(passages, list):
        raise ValueError("chat.user_content: the wire form is {'with_passages': text} beside chat.passages")

    def passage(match: re.Match[str]) -> str:
        n = int(match.group(1))
        if n >= len(passages) or not isinstance(passages[n], str):
            raise ValueError(f"chat.user_content: passage {n} is not in chat.passages")
        return passages[n]

    return _MARKED.sub(passage, marked)


def _passages_by_reference(chat: Any, contents: list[Any]) -> None:
    """Each of ``chat.passages`` that holds the text of the reference of its number (what into_chat_message gave
    the model: the passage, enriched with its title or captions) as ``{"reference": n, "before", "after"}``; edited
    in place. ``contents``: the references' texts (read before their list was compacted)."""
    passages = chat.get("passages") if isinstance(chat, dict) else None
    if not isinstance(passages, list):
        return
    for n, passage in enumerate(passages):
        content = contents[n] if n < len(contents) else None
        if isinstance(passage, str) and isinstance(content, str) and len(content) >= _MIN_PASSAGE:
            where = passage.find(content)
            if where >= 0:
                passages[n] = {"reference": n, "before": passage[:where], "after": passage[where + len(content) :]}


def _passage(value: Any, references: Any, n: int) -> Any:
    if not isinstance(value, dict):
        return value
    ref = value.get("reference")
    if not isinstance(references, list) or not isinstance(ref, int) or not 0 <= ref < len(references):
        raise ValueError(f"chat.passages[{n}]: reference {ref!r} is not in chat.references")
    content = references[ref].get("content", "") if isinstance(references[ref], dict) else ""
    return f"{value.get('before', '')}{content}{value.get('after', '')}"
