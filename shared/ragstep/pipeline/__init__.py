"""Pipeline declarations, the in-process executor and the state transport (claim check)."""

from ragstep.pipeline.definitions import (
    PIPELINES,
    STAGES,
    Map,
    Parallel,
    Pipeline,
    Stage,
    get_pipeline,
    load_stage,
    state_model,
)
from ragstep.pipeline.executor import join_branches, run_pipeline, run_stage

__all__ = [
    "PIPELINES",
    "STAGES",
    "Map",
    "Parallel",
    "Pipeline",
    "Stage",
    "get_pipeline",
    "join_branches",
    "load_stage",
    "run_pipeline",
    "run_stage",
    "state_model",
]
