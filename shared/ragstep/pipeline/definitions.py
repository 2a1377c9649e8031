"""Pipelines, declared once.

The in-process executor runs these declarations directly, and the Step Functions definitions in ``statemachine/`` are
generated from them (``ragstep.pipeline.asl``), so the laptop and AWS always run the same stages in the same order.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

# Stage name -> "module:function". Imported on first use so that a Lambda function loads only its own stage.
STAGES: dict[str, str] = {
    "chunk_search": "ragstep.stages.chunk_search:run",
    "chunk_rerank": "ragstep.stages.chunk_rerank:run",
    "chunk_merge": "ragstep.stages.chunk_merge:run",
    "filter_top_k": "ragstep.stages.filter_top_k:run",
    "ingest_parse": "ragstep.stages.ingest_parse:run",
    "ingest_chunk": "ragstep.stages.ingest_chunk:run",
    "ingest_embed": "ragstep.stages.ingest_embed:run",
    "ingest_index": "ragstep.stages.ingest_index:run",
}


@dataclass(frozen=True, slots=True)
class Stage:
    name: str


@dataclass(frozen=True, slots=True)
class Parallel:
    """Branches that run concurrently on the same input state; their additions are joined afterwards."""

    name: str
    branches: tuple[tuple[Step, ...], ...]


Step = Stage | Parallel


@dataclass(frozen=True, slots=True)
class Pipeline:
    name: str
    steps: tuple[Step, ...]
    # EXPRESS for request/response (synchronous, short), STANDARD for long-running ingestion.
    kind: Literal["EXPRESS", "STANDARD"] = "EXPRESS"
    # The state model its stages read and return: a class name in ragstep.models (see :func:`state_model`).
    state: Literal["PipelineState", "IngestState"] = "PipelineState"

    def stage_names(self) -> list[str]:
        names: list[str] = []

        def walk(steps: tuple[Step, ...]) -> None:
            for step in steps:
                if isinstance(step, Stage):
                    names.append(step.name)
                else:
                    for branch in step.branches:
                        walk(branch)

        walk(self.steps)
        return names


KNOWLEDGE_SEARCH = Pipeline(
    "knowledge_search",
    (Stage("chunk_search"), Stage("chunk_rerank"), Stage("chunk_merge"), Stage("filter_top_k")),
)

# One file: S3 upload (or the CLI) -> parse -> chunk -> embed -> index. Products pass through the blob store.
INGEST = Pipeline(
    "ingest",
    (Stage("ingest_parse"), Stage("ingest_chunk"), Stage("ingest_embed"), Stage("ingest_index")),
    kind="STANDARD",
    state="IngestState",
)

PIPELINES: dict[str, Pipeline] = {p.name: p for p in (KNOWLEDGE_SEARCH, INGEST)}


def get_pipeline(name: str) -> Pipeline:
    try:
        return PIPELINES[name]
    except KeyError:
        from ..errors import InputError

        raise InputError(f"unknown pipeline {name!r}; known: {', '.join(sorted(PIPELINES))}") from None


def state_model(name: str) -> type[Any]:
    """The state class of a pipeline, or of the pipeline a stage belongs to (what a stage's handler decodes)."""
    from .. import models

    for pipeline in PIPELINES.values():
        if name == pipeline.name or name in pipeline.stage_names():
            return getattr(models, pipeline.state)
    from ..errors import InputError

    raise InputError(f"unknown pipeline or stage {name!r}; known: {', '.join(sorted([*PIPELINES, *STAGES]))}")


def load_stage(name: str) -> Callable[..., Any]:
    """The stage function registered under ``name`` (imported lazily)."""
    target = STAGES.get(name)
    if target is None:
        from ..errors import InputError

        raise InputError(f"unknown stage {name!r}; known: {', '.join(sorted(STAGES))}")
    module, _, func = target.partition(":")
    return getattr(importlib.import_module(module), func)
