"""Pipeline stages: one module per stage, each exposing ``run(state, ctx) -> state``.

``ctx`` is the request's :class:`~ragstep.context.Context`: its tenant's adapters and the shared model clients.

A stage is a function of the state and the adapters only: it keeps nothing between calls, so the same function runs
in-process or as its own Lambda function. Stage modules are imported lazily by name (see
:data:`ragstep.pipeline.definitions.STAGES`).
"""
