"""``ragstep search``: one request to the ``knowledge_search`` use case, printed as a table or as JSON."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from ragstep.entry.cli.common import collector_paused, context_of, print_json, validation_message
from ragstep.errors import InputError

#: The prefix of the settings' environment names: ``--set RAGSTEP_EMBEDDING_TOP_K=5`` is ``embedding_top_k=5``.
ENV_PREFIX = "ragstep_"
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
    from ragstep.app.search import knowledge_search, search_response
    from ragstep.entry.cli.render import render_results
    from ragstep.models import SearchRequest

    if getattr(args, "hierarchical", False):
        from ragstep.entry.cli.viking import cmd_hierarchical_search

        return cmd_hierarchical_search(args)
    overrides = parse_overrides(args.set or [])
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
    )
    state = knowledge_search(request, context_of(args))
    if args.json:
        print_json(search_response(state))
    else:
        print(render_results(state))
    return 0
