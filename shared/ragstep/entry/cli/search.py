"""``ragstep search``: one request to the ``knowledge_search`` use case, printed as a table or as JSON."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ragstep.entry.cli.common import (
    collector_paused,
    context_of,
    keep_logs_off_the_terminal,
    print_json,
    profile_fields,
    require_data,
    validation_message,
)
from ragstep.errors import InputError

if TYPE_CHECKING:
    from ragstep.adapters.embedders.local import LocalEmbedder

#: The prefix of the settings' environment names: ``--set RAGSTEP_EMBEDDING_TOP_K=5`` is ``embedding_top_k=5``.
ENV_PREFIX = "ragstep_"
#: Longer queries are embedded when the search reaches them (one the request then rejects as too long, 4,000
#: characters, is not embedded first).
AHEAD_MAX_CHARS = 1000
#: --top-k asks for at least this many candidates from the search stage (its default embedding_top_k).
MIN_CANDIDATES = 30


def override_key(key: str) -> str:
    """A retrieval setting's field name from what the user wrote: the field name or its ``RAGSTEP_*`` env name,
    in any case (environment names are matched case-insensitively, so ``--set`` accepts the same spellings)."""
    name = key.strip().lower()
    return name.removeprefix(ENV_PREFIX) if name.startswith(ENV_PREFIX) else name


def parse_overrides(pairs: Sequence[str]) -> dict[str, Any]:
    """``--set key=value`` pairs into a RetrievalOverrides dict (values parsed as JSON when they are JSON)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InputError(f"--set expects KEY=VALUE, got {pair!r}")
        try:
            out[override_key(key)] = json.loads(value)
        except json.JSONDecodeError:
            out[override_key(key)] = value
    return out


def top_k_overrides(top_k: int) -> dict[str, Any]:
    """What ``--top-k N`` means: N results (the final cut) from at least N candidates.

    Checked here against the setting's own bounds so that the error names the flag the user typed, not the field.
    """
    from pydantic import ValidationError

    from ragstep.models import RetrievalOverrides

    try:
        RetrievalOverrides.model_validate({"rerank_top_k": top_k})
    except ValidationError as exc:
        raise InputError(f"--top-k: {validation_message(exc).partition(': ')[2]}") from None
    return {"rerank_top_k": top_k, "embedding_top_k": max(top_k, MIN_CANDIDATES)}


def cmd_search(args: argparse.Namespace) -> int:
    with collector_paused(until_exit=getattr(args, "whole_process", False)):  # one request: see collector_paused
        return _search(args)


def _search(args: argparse.Namespace) -> int:
    require_data(args)
    if getattr(args, "hierarchical", False):
        from ragstep.entry.cli.viking import cmd_hierarchical_search

        return cmd_hierarchical_search(args)
    ahead = embedder_ahead(args)  # before the imports below: they are what the embedding runs beside
    from ragstep.app.search import knowledge_search, search_response
    from ragstep.entry.cli.render import render_results
    from ragstep.models import SearchRequest

    # A provider's failure (web search offline, an embedding service down) is a trace row or the error's line here.
    keep_logs_off_the_terminal("ragstep.providers")
    overrides = parse_overrides(args.set or [])
    if not (args.kb or args.knowledge or overrides.get("web_search")):
        # Said in the command's words: the request's own check names the HTTP body's fields.
        raise InputError(
            "name what to search: --kb NAME (`ragstep kb list` shows them), --knowledge ID, or the web with "
            "--set web_search=true"
        )
    if args.top_k is not None:
        # --top-k wins over --set rerank_top_k; an explicit --set embedding_top_k is kept.
        wanted = top_k_overrides(args.top_k)
        overrides["rerank_top_k"] = wanted["rerank_top_k"]
        overrides.setdefault("embedding_top_k", wanted["embedding_top_k"])
    request = SearchRequest(
        query=args.query,
        knowledge_base_ids=args.kb or [],
        knowledge_ids=args.knowledge or [],
        tag_ids=args.tag or [],
        session_id=args.session,
        overrides=overrides,
        **profile_fields(args),
    )
    ctx = context_of(args)
    if ahead is not None:
        ctx.register_embedder(ahead)
    state = knowledge_search(request, ctx)
    if args.json:
        print_json(search_response(state, ctx))
    else:
        print(render_results(state))
    return 0


def embedder_ahead(args: argparse.Namespace) -> LocalEmbedder | None:
    """The embedded embedding model of the knowledge bases ``--kb`` names, already embedding the query on a thread
    of its own (:meth:`~ragstep.adapters.embedders.local.LocalEmbedder.embed_query_ahead`), for the search to use:
    a new process's first query costs the engine work on one core, which then runs beside the time this command
    spends importing and building pydantic, the models and the settings on the other. None when the knowledge
    bases do not all store one ``local:`` model.

    The catalog is read as ``kb list`` reads it, without pydantic, and only where that read applies (the embedded
    catalog, no setting in the environment but the data dir). Anything unexpected returns None and changes nothing
    else: the search embeds the query itself, and reports what is wrong, as before."""
    names = set(args.kb or ())
    query = args.query.strip()
    if not names or not query or len(query) > AHEAD_MAX_CHARS:
        return None
    try:
        from ragstep.entry.cli.plain import plain_catalog

        catalog = plain_catalog(getattr(args, "data_dir", None), os.environ)
        if catalog is None:
            return None
        models = set()
        for text in catalog.kb_documents():
            doc = json.loads(text)
            if isinstance(doc, dict) and (doc.get("id") in names or doc.get("name") in names):
                models.add(doc.get("embedding_model"))
        if len(models) != 1:
            return None
        model = models.pop()
        provider, _, name = str(model).partition(":")
        if provider != "local":
            return None
        from ragstep.adapters.embedders.local import LocalEmbedder

        embedder = LocalEmbedder(name)
        if embedder.model_id != model:  # stored in another spelling: the search's own embedder would not be this one
            return None
        embedder.embed_query_ahead(query)
        return embedder
    except Exception:  # an optimisation only: the search below meets any such problem again and reports it
        return None
