"""``ragstep bench state-size``: the pipeline state's size after each step, as a stage Lambda sends it, in the
expanded form (every list in full, query embeddings as JSON floats: what schema versions 1 and 2 sent) and in the
wire form the transport sends since version 3 (:mod:`ragstep.models.wire`), against the per-state share of the
Step Functions payload limit (:func:`~ragstep.pipeline.definitions.payload_limit`) -- over it, a request pays the
claim check (a blob store write and read per stage).

Both pipelines that run on Step Functions (``knowledge_search`` and ``rag``), at their default settings (top-k
included), in-process, on:

* ``demo``: the bundled demo documents (``ragstep demo``'s), with the configured embedding model, asked the demo's
  own questions about them;
* ``msmarco-1k``: the first 1,000 passages of msmarco-5k (one chunk each) with their precomputed MiniLM vectors,
  asked the first ``--questions`` msmarco questions: the typical question of a 1,000-chunk knowledge base;
* ``cmrc2018-1k``: the first 1,000 paragraphs of cmrc2018-zh (Chinese Wikipedia, e5 vectors), its questions: the
  same in Chinese, whose characters take three bytes each.

Sizes are bytes of JSON as the python3.12 Lambda runtime writes a handler's return value (the template's runtime).
The benchmark sets are read from ``--bench-dir`` (default ``../shared/bench``); a set that is absent is left out.
"""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from ragstep.context import Clients, Context
from ragstep.models import ChatRequest, PipelineState, SearchRequest
from ragstep.models.wire import WIRE
from ragstep.pipeline import transport
from ragstep.pipeline.definitions import get_pipeline, payload_limit
from ragstep.pipeline.executor import run_step
from ragstep.settings import Settings

PIPELINES = ("knowledge_search", "rag")
RUNTIME = {"AWS_EXECUTION_ENV": "AWS_Lambda_python3.12"}
SETS = ("demo", "msmarco-1k", "cmrc2018-1k")
#: The demo's questions about its documents (``ragstep demo`` searches and asks these).
DEMO_QUESTIONS = (
    "How are keyword and vector results fused?",
    "中文分词如何处理简称？",
    "Lambda 冷启动 词典加载",
    "Is it cheap when nobody is using it?",
)
CORPUS_CHUNKS = 1000

Progress = Callable[[str], None] | None


def sizes(state: PipelineState) -> tuple[int, int]:
    """Bytes of ``state`` as a stage Lambda returns it: expanded (versions 1 and 2) and in the wire form."""
    expanded = transport.wire_size(state.model_dump(mode="json"), RUNTIME)
    return expanded, transport.wire_size(state.model_dump(mode="json", context=WIRE), RUNTIME)


def step_sizes(pipeline: str, state: PipelineState, ctx: Context) -> list[tuple[str, int, int]]:
    """Run ``pipeline`` on ``state`` step by step; after each, its name and the state's two sizes."""
    out = []
    for step in get_pipeline(pipeline).steps:
        state = run_step(step, state, ctx)
        out.append((step.name, *sizes(state)))
    return out


def _state(pipeline: str, question: str, kb_id: str, ctx: Context) -> PipelineState:
    from ragstep.app.chat import new_chat_state
    from ragstep.app.search import new_state

    if pipeline == "knowledge_search":
        return new_state(SearchRequest(query=question, knowledge_base_ids=[kb_id]), ctx)
    return new_chat_state(ChatRequest(query=question, knowledge_base_ids=[kb_id], pipeline=pipeline), ctx)


def demo_set(data_dir: Path, settings: dict[str, Any]) -> tuple[Context, str, list[str]]:
    from ragstep.app.ingest import expand_paths, ingest_file
    from ragstep.app.knowledge_bases import create_knowledge_base
    from ragstep.models import KnowledgeBaseType

    ctx = Clients(Settings(data_dir=data_dir, **settings)).context()
    kb = create_knowledge_base(ctx, "demo-docs", KnowledgeBaseType.DOCUMENT)
    with resources.as_file(resources.files("ragstep").joinpath("data", "demo", "docs")) as folder:
        for path in expand_paths([folder], (".md",)):
            ingest_file(path, kb, ctx)
    return ctx, kb.id, list(DEMO_QUESTIONS)


def corpus_set(
    folder: Path, vectors: str, data_dir: Path, questions: int, settings: dict[str, Any]
) -> tuple[Context, str, list[str]]:
    """The first :data:`CORPUS_CHUNKS` documents of a BEIR set, indexed with its precomputed vectors."""
    from ragstep.bench.quality import build_index, load_beir

    bench = load_beir(folder, vectors)
    bench.corpus = bench.corpus[:CORPUS_CHUNKS]
    if bench.corpus_emb is not None:
        bench.corpus_emb = bench.corpus_emb[:CORPUS_CHUNKS]
    ctx = Clients(Settings(data_dir=data_dir, **settings)).context()
    kb, _ = build_index(bench, ctx)
    return ctx, kb.id, [text for _, text in bench.queries[:questions]]


def measure(ctx: Context, kb_id: str, questions: list[str]) -> dict[str, Any]:
    """Per pipeline: its per-state limit and, per step, the sizes' medians and maxima over the questions, and how
    many of the questions' states were over the limit in each form."""
    out: dict[str, Any] = {}
    for pipeline in PIPELINES:
        limit = payload_limit(pipeline, Settings.model_fields["state_limit_bytes"].default)
        rows: dict[str, list[tuple[int, int]]] = {}
        for question in questions:
            for name, expanded, wire in step_sizes(pipeline, _state(pipeline, question, kb_id, ctx), ctx):
                rows.setdefault(name, []).append((expanded, wire))
        out[pipeline] = {
            "limit": limit,
            "steps": {
                name: {
                    "expanded_median": round(statistics.median(e for e, _ in pairs)),
                    "expanded_max": max(e for e, _ in pairs),
                    "wire_median": round(statistics.median(w for _, w in pairs)),
                    "wire_max": max(w for _, w in pairs),
                    "expanded_over": sum(e > limit for e, _ in pairs),
                    "wire_over": sum(w > limit for _, w in pairs),
                }
                for name, pairs in rows.items()
            },
            "questions": len(questions),
            # A question needs the claim check when any of its states is over the limit.
            "claim_checked_expanded": _over(rows, 0, limit, len(questions)),
            "claim_checked_wire": _over(rows, 1, limit, len(questions)),
        }
    return out


def _over(rows: dict[str, list[tuple[int, int]]], form: int, limit: int, questions: int) -> int:
    return sum(any(pairs[q][form] > limit for pairs in rows.values()) for q in range(questions))


def run_state_size(
    *,
    sets: tuple[str, ...] = SETS,
    questions: int = 30,
    bench_dir: str | Path | None = None,
    settings: dict[str, Any] | None = None,
    progress: Progress = None,
) -> dict[str, Any]:
    """Every set of ``sets`` that is available; ``settings`` are ``Settings`` fields for the data dirs (e.g.
    ``{"embedder": "none"}``)."""
    from ragstep.bench.common import find_bench_dir
    from ragstep.errors import InputError

    unknown = [s for s in sets if s not in SETS]
    if unknown:
        raise InputError(f"unknown set {', '.join(unknown)}; one of {', '.join(SETS)}")
    extra = dict(settings or {})
    results: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    for name in sets:
        with tempfile.TemporaryDirectory(prefix="ragstep-bench-state-") as tmp:
            if name == "demo":
                ctx, kb_id, asked = demo_set(Path(tmp), extra)
            else:
                folder_name, vectors = ("msmarco-5k", "emb") if name == "msmarco-1k" else ("cmrc2018-zh", "e5")
                try:
                    folder = find_bench_dir(bench_dir) / folder_name
                except InputError as exc:
                    skipped[name] = str(exc)
                    continue
                if not folder.is_dir():
                    skipped[name] = f"{folder} is absent"
                    continue
                if progress:
                    progress(f"{name}: indexing {CORPUS_CHUNKS} documents of {folder_name}")
                ctx, kb_id, asked = corpus_set(folder, vectors, Path(tmp), questions, extra)
            if progress:
                progress(f"{name}: {len(asked)} questions through {', '.join(PIPELINES)}")
            results[name] = measure(ctx, kb_id, asked)
    return {"runtime": RUNTIME["AWS_EXECUTION_ENV"], "sets": results, "skipped": skipped}


def render(result: dict[str, Any]) -> str:
    lines = [
        f"State size per step, bytes as the {result['runtime']} runtime sends them: expanded (schema 2: every list "
        "in full, vectors as JSON floats) -> wire form (schema 3); median (max) over the questions"
    ]
    for name, pipelines in result["sets"].items():
        for pipeline, row in pipelines.items():
            lines.append(
                f"\n{name} / {pipeline}: per-state limit {row['limit']} bytes; questions that need the claim check: "
                f"{row['claim_checked_expanded']}/{row['questions']} -> {row['claim_checked_wire']}/{row['questions']}"
            )
            lines.append(f"  {'step':<20} {'expanded':>18} {'wire':>18} {'ratio':>6}")
            for step, s in row["steps"].items():
                ratio = s["wire_median"] / s["expanded_median"] if s["expanded_median"] else 1.0
                lines.append(
                    f"  {step:<20} {s['expanded_median']:>8} ({s['expanded_max']:>7}) "
                    f"{s['wire_median']:>8} ({s['wire_max']:>7}) {ratio:>6.2f}"
                )
    for name, why in result["skipped"].items():
        lines.append(f"\n{name}: skipped ({why})")
    return "\n".join(lines)
