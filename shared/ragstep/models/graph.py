"""The knowledge graph of a knowledge base: nodes (named things, with attributes and the chunks that mention them)
and relations between them, extracted by an LLM per chunk at ingest time."""

from __future__ import annotations

from pydantic import Field

from ragstep.models.base import _Model, empty_list


class GraphNode(_Model):
    name: str
    attributes: list[str] = Field(default_factory=empty_list)
    #: The chunks the node was extracted from (of one document in an extraction; of all of them in a lookup).
    chunk_ids: list[str] = Field(default_factory=empty_list)


class GraphRelation(_Model):
    source: str
    target: str
    type: str = ""


class GraphExtraction(_Model):
    """What the LLM found in some text: nodes and the relations between them."""

    nodes: list[GraphNode] = Field(default_factory=empty_list)
    relations: list[GraphRelation] = Field(default_factory=empty_list)
