"""``extract_entities``: the question's entities, for the knowledge-graph search (runs beside ``rewrite_query``).

The chat model reads the question with the same prompt and worked example that built the graph at ingest time
(:mod:`ragstep.retrieval.graph_extraction`), so a name comes out the way the graph spells it; the answer is parsed
leniently and served from the response cache when the question repeats. It never fails the request: no knowledge
base of the request has a graph -> ``skip`` (``graph_off``); a model that cannot generate (the extractive
answerer) -> ``skip`` (``model_not_generative``); a failing model -> ``degrade``; nothing found -> ``no_entities``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragstep.errors import RagstepError
from ragstep.models import PipelineState, TraceEvent
from ragstep.ports import ChatMessage, ChatOptions
from ragstep.stages.chat.common import complete_cached

if TYPE_CHECKING:
    from ragstep.context import Context

STAGE = "extract_entities"
#: Names and a few attributes fit easily; a runaway answer is cut here.
MAX_TOKENS = 512


def run(state: PipelineState, ctx: Context) -> PipelineState:
    if not any(kb.graph for kb in state.knowledge_bases):
        return state.with_trace(TraceEvent(stage=STAGE, action="skip", reason="graph_off"))
    model = ctx.chat_model
    if not model.generative:
        return state.with_trace(TraceEvent(stage=STAGE, action="skip", reason="model_not_generative"))
    # Only now: most requests skip above, and the extraction prompt brings the graph models (a chat function
    # preloads this stage at start).
    from ragstep.retrieval.graph_extraction import messages, parse_extraction

    prompt = [ChatMessage(role, content) for role, content in messages(state.request.query, question=True)]
    try:
        response, hit = complete_cached(
            ctx, model, "entities", prompt, ChatOptions(temperature=0.0, max_tokens=MAX_TOKENS, json_object=True)
        )
    except RagstepError as exc:
        event = TraceEvent(stage=STAGE, action="degrade", reason="extraction_failed", detail={"error": exc.message})
        return state.with_trace(event)
    names = [node.name for node in parse_extraction(response.content).nodes][: ctx.settings.graph_max_entities]
    event = TraceEvent(
        stage=STAGE,
        counts={"entities": len(names)},
        reason=None if names else "no_entities",
        detail={
            "entities": names,
            "model": model.name,
            **({"cache": "hit" if hit else "miss"} if ctx.cache is not None else {}),
        },
    )
    return state.with_entities(names, event)
