"""What the LLM is asked to extract for the knowledge graph, and how its answer is read.

One prompt serves both sides (WeKnora's design): at ingest time it reads a chunk, at query time the question, so
the names it produces for one and the other match. It asks for one JSON object ``{"nodes": [{"name",
"attributes"}], "relations": [{"source", "target", "type"}]}`` and shows a worked example.

Models answer loosely, so :func:`parse_extraction` is lenient: the JSON may sit in a code fence or between prose;
the lists may be named ``node``/``entities``/``relation``/``relationships``; a node may be a bare string or name
itself ``entity``/``title``; a relation may say ``entity1``/``entity2``/``relation``/``description``; attributes
may be one string. Whatever cannot be read is dropped, never raised: a bad extraction costs a chunk its nodes,
never an ingest or a request.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ragstep.models.graph import GraphExtraction, GraphNode, GraphRelation

SYSTEM_PROMPT = """You build a knowledge graph. From the text you are given, list the named things it talks about \
(people, organisations, places, products, events, works, concepts, technical terms) as nodes, each with short \
attributes the text states about it, and the relations the text states between two of those nodes.

Rules:
- Answer with one JSON object and nothing else: {"nodes": [...], "relations": [...]}.
- A node is {"name": "...", "attributes": ["...", ...]}; use the name exactly as the text writes it, without quotes \
or titles.
- A relation is {"source": "<node name>", "target": "<node name>", "type": "<a short verb phrase>"}; both ends must \
be nodes you listed.
- Extract only what the text says; invent nothing. No named thing in the text: {"nodes": [], "relations": []}.
- Keep the text's language for names, attributes and relation types."""

EXAMPLE_TEXT = (
    "The Orinoco Bridge, designed by the engineer Maria Vass, links Ciudad Bolivar to Soledad. It opened in 1967 "
    "and was the longest suspension bridge in South America at the time."
)
EXAMPLE_ANSWER = {
    "nodes": [
        {"name": "Orinoco Bridge", "attributes": ["suspension bridge", "opened in 1967"]},
        {"name": "Maria Vass", "attributes": ["engineer"]},
        {"name": "Ciudad Bolivar", "attributes": []},
        {"name": "Soledad", "attributes": []},
        {"name": "South America", "attributes": []},
    ],
    "relations": [
        {"source": "Maria Vass", "target": "Orinoco Bridge", "type": "designed"},
        {"source": "Orinoco Bridge", "target": "Ciudad Bolivar", "type": "links"},
        {"source": "Orinoco Bridge", "target": "Soledad", "type": "links"},
        {"source": "Orinoco Bridge", "target": "South America", "type": "located in"},
    ],
}
EXAMPLE_QUESTION = "Who designed the bridge to Soledad?"
EXAMPLE_QUESTION_ANSWER = {"nodes": [{"name": "Soledad", "attributes": []}], "relations": []}


def messages(text: str, *, question: bool = False) -> list[tuple[str, str]]:
    """(role, content) pairs: the rules, the worked example, then ``text`` (a chunk, or a user's question)."""
    kind = "Question" if question else "Text"
    example_in, example_out = (
        (EXAMPLE_QUESTION, EXAMPLE_QUESTION_ANSWER) if question else (EXAMPLE_TEXT, EXAMPLE_ANSWER)
    )
    return [
        ("system", SYSTEM_PROMPT),
        ("user", f"{kind}:\n{example_in}"),
        ("assistant", json.dumps(example_out, ensure_ascii=False)),
        ("user", f"{kind}:\n{text}"),
    ]


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)


def _json_value(text: str) -> Any:
    text = _THINK.sub("", text)
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    decoder = json.JSONDecoder()
    for candidate in candidates:
        for i, ch in enumerate(candidate):
            if ch in "{[":
                try:
                    return decoder.raw_decode(candidate, i)[0]
                except ValueError:
                    continue
    return None


def _first(item: dict[str, Any], *keys: str) -> Any:
    return next((item[k] for k in keys if item.get(k) not in (None, "", [])), None)


def _clean(value: Any) -> str:
    return " ".join(value.split()).strip(" \"'“”‘’《》「」") if isinstance(value, str) else ""


def _node(item: Any) -> GraphNode | None:
    if isinstance(item, str):
        name = _clean(item)
        return GraphNode(name=name) if name else None
    if not isinstance(item, dict):
        return None
    name = _clean(_first(item, "name", "entity", "title", "node"))
    if not name:
        return None
    raw = _first(item, "attributes", "attribute", "description", "properties")
    values = raw if isinstance(raw, list) else [raw] if raw is not None else []
    attributes = [a for a in (_clean(v) for v in values) if a]
    return GraphNode(name=name, attributes=attributes)


def _relation(item: Any) -> GraphRelation | None:
    if isinstance(item, list | tuple) and len(item) >= 2:
        item = {"source": item[0], "target": item[-1], "type": item[1] if len(item) > 2 else ""}
    if not isinstance(item, dict):
        return None
    source = _clean(_first(item, "source", "entity1", "from", "head", "subject"))
    target = _clean(_first(item, "target", "entity2", "to", "tail", "object"))
    kind = _clean(_first(item, "type", "relation", "relationship", "description", "predicate"))
    return GraphRelation(source=source, target=target, type=kind) if source and target and source != target else None


def parse_extraction(text: str) -> GraphExtraction:
    """The nodes and relations in a model's answer (empty when there is nothing readable)."""
    value = _json_value(text)
    if isinstance(value, list):  # a bare list: nodes only
        value = {"nodes": value}
    if not isinstance(value, dict):
        return GraphExtraction()
    raw_nodes = _first(value, "nodes", "node", "entities", "entity")
    raw_relations = _first(value, "relations", "relation", "relationships", "edges")
    nodes: dict[str, GraphNode] = {}
    for item in raw_nodes if isinstance(raw_nodes, list) else []:
        node = _node(item)
        if node is not None:
            known = nodes.get(node.name)
            attrs = [*known.attributes, *node.attributes] if known else node.attributes
            nodes[node.name] = GraphNode(name=node.name, attributes=list(dict.fromkeys(attrs)))
    relations: dict[tuple[str, str, str], GraphRelation] = {}
    for item in raw_relations if isinstance(raw_relations, list) else []:
        relation = _relation(item)
        if relation is None:
            continue
        for end in (relation.source, relation.target):  # a relation names its ends: they are nodes too
            nodes.setdefault(end, GraphNode(name=end))
        relations.setdefault((relation.source, relation.target, relation.type), relation)
    return GraphExtraction(nodes=list(nodes.values()), relations=list(relations.values()))
