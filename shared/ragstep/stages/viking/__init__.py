"""OpenViking-style retrieval: intent_analysis -> hierarchical_search -> layered_context, over a
:class:`ragstep.models.viking.VikingState` (each stage ``run(state, ctx) -> state``; ``find`` / ``search``).

The pipelines' stages over the one :class:`~ragstep.models.PipelineState` (its ``viking`` part) wrap them:
viking_intent -> viking_query (one typed query: a Map item) -> viking_merge -> viking_layered (what they share:
:mod:`ragstep.stages.viking.common`)."""
