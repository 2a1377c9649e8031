"""What ``model`` names on the OpenAI-compatible routes: a pipeline profile and, for the clients that send nothing
but ``model`` and ``messages`` (LangChain's ChatOpenAI, litellm, LlamaIndex, Open WebUI), the knowledge bases.

* ``ragstep/<knowledge base>`` answers from that knowledge base (its name, or its id) with the default pipeline;
  ``GET /v1/models`` lists one such id for every knowledge base the caller's key may use.
* ``ragstep/<kb1>+<kb2>`` answers from several (a knowledge base whose own name holds ``+`` is found by its whole
  name first).
* ``ragstep`` alone answers from the body's ``knowledge_base_ids``, else from the server's default set,
  ``RAGSTEP_OPENAI_DEFAULT_KNOWLEDGE_BASES`` (comma-separated names or ids; ``*``: every knowledge base the key may
  use; a default the key may not use is left out).
* Any other profile that searches works in place of ``ragstep``: a chat pipeline's name (``rag/docs`` answers in
  one call, ``viking_stream/docs`` with hierarchical retrieval). A pipeline that searches nothing (``chat``,
  ``chat_stream``, ``chat_history_stream``: the model alone) takes no knowledge base: ``chat/docs`` or ``chat`` with
  ``knowledge_base_ids`` is a 400 naming the forms that search, never an answer that silently read nothing.

A model naming knowledge bases and a body naming others is refused: which one was meant is not ours to guess.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from ragstep.context import Context
from ragstep.entry.http.errors import FieldError
from ragstep.errors import InputError
from ragstep.pipeline.definitions import CHAT_PIPELINES, PIPELINES, Stage

log = logging.getLogger("ragstep.http")

#: The default profile: ``ragstep`` is the streaming RAG pipeline.
DEFAULT_PROFILE = "ragstep"
#: ``model``'s profile -> chat pipeline: ``ragstep`` is the default RAG pipeline; each pipeline is also a profile.
MODEL_PROFILES: dict[str, str] = {DEFAULT_PROFILE: "rag_stream", **{p: p for p in CHAT_PIPELINES}}
#: What separates the knowledge bases of one model id.
KB_JOINER = "+"


@dataclass(frozen=True)
class ModelChoice:
    """A ``model`` understood: the pipeline it runs and the knowledge bases it names (ids; empty: none named)."""

    pipeline: str
    knowledge_base_ids: tuple[str, ...] = ()


def retrieves(pipeline: str) -> bool:
    """Whether ``pipeline`` answers from knowledge bases (so it needs one named): it builds a context to answer from."""
    return any(isinstance(step, Stage) and step.name == "into_chat_message" for step in PIPELINES[pipeline].steps)


def model_id(kb_name: str, profile: str = DEFAULT_PROFILE) -> str:
    return f"{profile}/{kb_name}"


def _kb_ids(model: str, named: str, ctx: Context) -> tuple[str, ...]:
    whole = ctx.catalog.get_kb(named)
    if whole is not None:
        return (whole.id,)
    ids: list[str] = []
    for name in named.split(KB_JOINER):
        kb = ctx.catalog.get_kb(name) if name else None
        if kb is None:
            raise FieldError(
                f"model {model!r} names knowledge base {name!r}, which does not exist or this API key may not "
                "use: GET /v1/models lists the models (ragstep/<knowledge base>) this key may use",
                "model",
                not_found=True,
            )
        if kb.id not in ids:
            ids.append(kb.id)
    return tuple(ids)


def choice_of(model: str, ctx: Context) -> ModelChoice:
    """The pipeline and knowledge bases ``model`` names (module docstring); an unknown profile is a 400, a knowledge
    base this caller cannot use a 404, each naming ``model``."""
    profile, slash, named = model.partition("/")
    if profile not in MODEL_PROFILES:
        raise FieldError(
            f"unknown model {model!r}: name a knowledge base as 'ragstep/<knowledge base>' (GET /v1/models lists "
            f"them), or a pipeline profile: {', '.join(MODEL_PROFILES)}",
            "model",
        )
    pipeline = MODEL_PROFILES[profile]
    if not slash:
        return ModelChoice(pipeline)
    if not named.strip():
        raise FieldError(
            f"model {model!r} names no knowledge base after '/': use '{profile}/<knowledge base>'", "model"
        )
    if not retrieves(pipeline):
        raise searches_nothing(model, profile, "model", named)
    return ModelChoice(pipeline, _kb_ids(model, named, ctx))


def searching_profiles() -> list[str]:
    """The profiles that search knowledge bases (those a knowledge base may follow: ``<profile>/<knowledge base>``)."""
    return [name for name, pipeline in MODEL_PROFILES.items() if retrieves(pipeline)]


def searches_nothing(model: str, profile: str, param: str, named: str = "") -> FieldError:
    """The 400 of a knowledge base given to a profile whose pipeline searches nothing: answered, it would read no
    passage of it."""
    kb = named or "<knowledge base>"
    without = f"'{profile}' without a knowledge base" if param == "model" else f"the request without {param}"
    return FieldError(
        f"model {model!r}: the pipeline {profile!r} answers with the model alone and searches no knowledge base, so "
        f"it takes none; to answer from {kb!r} use 'ragstep/{kb}' (or "
        f"{', '.join(f'{p}/{kb}' for p in searching_profiles() if p != DEFAULT_PROFILE)}), or send {without}",
        param,
    )


def default_knowledge_bases(ctx: Context) -> list[str]:
    """The server's default knowledge bases (``RAGSTEP_OPENAI_DEFAULT_KNOWLEDGE_BASES``) that this caller may use,
    as ids."""
    names = [n.strip() for n in ctx.settings.openai_default_knowledge_bases.split(",") if n.strip()]
    if "*" in names:
        return [kb.id for kb in ctx.catalog.list_kbs()]
    found: list[str] = []
    for name in names:
        kb = ctx.catalog.get_kb(name)
        if kb is None:
            # A default this key may not use (or a typo in the setting): the others still answer; the log says it.
            log.info("RAGSTEP_OPENAI_DEFAULT_KNOWLEDGE_BASES: %r is not a knowledge base this caller may use", name)
        elif kb.id not in found:
            found.append(kb.id)
    return found


def knowledge_bases(
    model: str, choice: ModelChoice, given: list[str], ctx: Context, *, other_targets: bool = False
) -> list[str]:
    """The knowledge bases to answer from: the model's, the body's (``given``), else the server's default set -- none
    when the request has ``other_targets`` (knowledge items, web search) to answer from instead."""
    named = choice.knowledge_base_ids
    if named and given:
        found = [ctx.catalog.get_kb(name) for name in given]
        if {kb.id if kb is not None else name for kb, name in zip(found, given, strict=True)} != set(named):
            raise InputError(
                f"model {model!r} names knowledge bases and knowledge_base_ids names others: name them once "
                "(the model 'ragstep' with knowledge_base_ids, or the model alone)"
            )
        return list(named)
    if named or given:
        return list(named) or given
    return [] if other_targets else default_knowledge_bases(ctx)


def no_knowledge_base(model: str) -> FieldError:
    """The 400 of a retrieving pipeline asked with no knowledge base from anywhere."""
    return FieldError(
        f"model {model!r} names no knowledge base: use the model 'ragstep/<knowledge base>' (GET /v1/models lists "
        "them), send knowledge_base_ids, or set RAGSTEP_OPENAI_DEFAULT_KNOWLEDGE_BASES on the server",
        "model",
    )


def model_object(model: str, ctx: Context) -> dict[str, Any]:
    """``GET /v1/models/{model}``: the model, when ``model`` is one this caller may name (else a 404 naming it)."""
    try:
        choice = choice_of(model, ctx)
    except FieldError as exc:
        raise FieldError(exc.message, "model", not_found=True) from exc
    kbs = [ctx.catalog.get_kb(kb_id) for kb_id in choice.knowledge_base_ids]
    created = min((int(kb.created_at) for kb in kbs if kb is not None), default=0)
    return {"id": model, "object": "model", "created": created, "owned_by": "ragstep"}


def model_list(ctx: Context) -> dict[str, Any]:
    """``GET /v1/models``: the pipeline profiles, then ``ragstep/<name>`` for each knowledge base the caller's key may
    use (by name, the order ``ragstep kb list`` shows)."""
    profiles = [{"id": name, "object": "model", "created": 0, "owned_by": "ragstep"} for name in MODEL_PROFILES]
    kbs = [
        {"id": model_id(kb.name), "object": "model", "created": int(kb.created_at), "owned_by": "ragstep"}
        for kb in sorted(ctx.catalog.list_kbs(), key=lambda kb: kb.name)
    ]
    return {"object": "list", "data": profiles + kbs}
