"""Pipeline stages: one module per stage, each exposing ``run(state, ctx) -> state`` (ctx: the request's :class:`~ragstep.context.Context`).

A stage is a function of the state and the adapters only: it keeps nothing between calls, so the same function runs
in-process or as its own Lambda function. Stage modules are imported lazily by name (see
:data:`ragstep.pipeline.definitions.STAGES`).
"""
