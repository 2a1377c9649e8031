"""OpenViking-style retrieval: intent_analysis -> hierarchical_search -> layered_context, over a
:class:`ragstep.models.viking.VikingState` (each stage ``run(state, ctx) -> state``)."""
