"""``ragstep bench viking``: hierarchical retrieval (``find``) against flat hybrid search, on a documentation tree.

The corpus is built at bench time from documentation installed on the machine (by default npm's docs, Markdown, and
CMake's Help tree, reStructuredText whose underlined headings are rewritten as Markdown ``#`` headings), copied into a
temporary folder under ``npm/`` and ``cmake/`` and ingested with ``kb create --layers`` (extractive layers).

Questions are generated deterministically: every section heading (level 2 or deeper, not a document's first
heading) of two to twelve words that no other document has is a question, and its document is the answer; an even
sample of them (``--questions``) is kept. A second, harder set (:func:`make_ambiguous_questions`): headings several
documents share, asked with the name of the folder that tells them apart. Figures, for each set: Recall@10 of the
answer's document (flat: documents at the rank of their best chunk, as ``ragstep search`` returns them;
hierarchical: the documents ``find`` returns, best first), and, for layered context within ``--budget`` tokens, the
tokens used and how often the answer's document got L2; and the questions each retrieval missed (read them
before changing a ranking rule).
"""

from __future__ import annotations

import re
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

from ragstep.app.ingest import ingest_file
from ragstep.app.knowledge_bases import create_knowledge_base
from ragstep.app.search import knowledge_search
from ragstep.app.viking import find, refresh_hierarchy
from ragstep.bench.common import fmt
from ragstep.context import Clients, Context
from ragstep.models import ChunkType, KnowledgeBase, SearchRequest
from ragstep.settings import Settings

#: Where the default corpus comes from (name -> folder); missing folders are left out.
DEFAULT_SOURCES = {
    "npm": Path("/usr/lib/node_modules/npm/docs/content"),
    "cmake": Path("/usr/share/cmake-3.25/Help"),
}
#: CMake's Help folders taken (the others are thousands of one-paragraph pages that hold no section headings).
CMAKE_FOLDERS = ("manual", "command", "policy", "envvar", "module", "prop_tgt")
_UNDERLINE = re.compile(r"^([=\-^~\"*+#`:.'])\1{2,}\s*$")
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*$", re.M)


def rst_to_markdown(text: str) -> str:
    """Underlined (and overlined) reStructuredText headings as Markdown headings, by underline character; the rest
    unchanged (the parsers take it as plain text)."""
    lines = text.splitlines()
    out: list[str] = []
    seen: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if line.strip() and not _UNDERLINE.match(line) and _UNDERLINE.match(nxt) and len(nxt.strip()) >= 3:
            char = nxt.strip()[0]
            if char not in seen:
                seen.append(char)
            if out and _UNDERLINE.match(out[-1]):
                out.pop()  # an overline
            out.append("#" * min(seen.index(char) + 1, 6) + " " + line.strip())
            i += 2
            continue
        out.append(line)
        i += 1
    return "\n".join(out) + "\n"


def build_corpus(dest: Path, sources: dict[str, Path]) -> list[str]:
    """Copy the documentation trees into ``dest`` (as Markdown); returns the relative paths written, sorted."""
    written: list[str] = []
    for name, root in sorted(sources.items()):
        if not root.is_dir():
            continue
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(root)
            if name == "cmake" and (len(rel.parts) < 2 or rel.parts[0] not in CMAKE_FOLDERS):
                continue
            if path.suffix not in (".md", ".rst") or not path.is_file():
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            if path.suffix == ".rst":
                text = rst_to_markdown(text)
            target = dest / name / rel.with_suffix(".md")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            written.append(target.relative_to(dest).as_posix())
    return sorted(written)


def _clean(heading: str) -> str:
    # A link keeps its text ("[npm ci](/commands/npm-ci)" asks "npm ci", not the link's address).
    heading = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    return re.sub(r"[`*_]|\{#[^}]*\}|<[^>]*>", "", heading).strip(" :")


def make_questions(dest: Path, docs: list[str], wanted: int) -> list[tuple[str, str]]:
    """(question, answer document path): unique deep section headings, evenly sampled."""
    per_doc: dict[str, list[str]] = {}
    for rel in docs:
        found = [(len(m.group(1)), _clean(m.group(2))) for m in _HEADING.finditer((dest / rel).read_text())]
        per_doc[rel] = [h for level, h in found[1:] if level >= 2 and 2 <= len(h.split()) <= 12]
    counts = Counter(h.lower() for hs in per_doc.values() for h in set(hs))
    # Sorted by document, then heading: a set's order depends on the hash seed, and the sample must not.
    pool = sorted(
        {(h, rel) for rel, hs in per_doc.items() for h in hs if counts[h.lower()] == 1}, key=lambda x: (x[1], x[0])
    )
    if len(pool) <= wanted:
        return [(h, rel) for h, rel in pool]
    step = len(pool) / wanted
    return [pool[int(i * step)] for i in range(wanted)]


def _headings(dest: Path, docs: list[str], min_words: int = 2) -> dict[str, list[str]]:
    """Each document's section headings (level >= 2, not its first heading, ``min_words``-12 words), cleaned."""
    per_doc: dict[str, list[str]] = {}
    for rel in docs:
        found = [(len(m.group(1)), _clean(m.group(2))) for m in _HEADING.finditer((dest / rel).read_text())]
        per_doc[rel] = [h for level, h in found[1:] if level >= 2 and min_words <= len(h.split()) <= 12]
    return per_doc


def make_ambiguous_questions(dest: Path, docs: list[str], wanted: int) -> list[tuple[str, str]]:
    """The harder set: a heading that several documents share, asked with the name of the folder that tells them
    apart (the shallowest folder of the answer that holds no other document with that heading), so the heading's
    own words point at every document that has it and only the sub-tree decides. Headings unique within the
    document's own folder only (the folder is the document's parent) and at least two documents deep are kept, so
    the answer sits deep in the tree; evenly sampled as :func:`make_questions`."""
    per_doc = _headings(dest, docs, min_words=1)  # the folder's name is part of the question
    holders: dict[str, set[str]] = {}
    for rel, hs in per_doc.items():
        for h in set(hs):
            holders.setdefault(h.lower(), set()).add(rel)
    pool: set[tuple[str, str]] = set()
    for rel, hs in per_doc.items():
        folders = PurePosixPath(rel).parts[:-1]
        if len(folders) < 2:
            continue
        for h in set(hs):
            others = holders[h.lower()] - {rel}
            if not others:
                continue  # unique: the easy set's question
            for depth in range(1, len(folders) + 1):
                prefix = "/".join(folders[:depth]) + "/"
                if not any(o.startswith(prefix) for o in others):
                    words = re.sub(r"[-_.]+", " ", folders[depth - 1])
                    pool.add((f"{h} ({words})", rel))
                    break
    ordered = sorted(pool, key=lambda x: (x[1], x[0]))
    if len(ordered) <= wanted:
        return ordered
    step = len(ordered) / wanted
    return [ordered[int(i * step)] for i in range(wanted)]


def run_viking_bench(
    *,
    sources: dict[str, Path] | None = None,
    questions: int = 150,
    budget: int = 2000,
    embedding_model: str = "none",
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    say = progress or (lambda _msg: None)
    with tempfile.TemporaryDirectory(prefix="ragstep-bench-viking-") as tmp:
        corpus = Path(tmp) / "corpus"
        docs = build_corpus(corpus, sources or DEFAULT_SOURCES)
        asked = make_questions(corpus, docs, questions)
        say(f"{len(docs)} documents, {len(asked)} questions")
        ctx = Clients(Settings(data_dir=Path(tmp) / "data", chat_provider="extractive")).context()
        kb = create_knowledge_base(ctx, "docs", embedding_model=embedding_model, layers=True)
        started = time.perf_counter()
        ids: dict[str, str] = {}
        for rel in docs:
            result = ingest_file(corpus / rel, kb, ctx)
            ids[result.knowledge_id] = rel
        ingest_s = time.perf_counter() - started
        started = time.perf_counter()
        report = refresh_hierarchy(kb, ctx, [corpus])
        layers_s = time.perf_counter() - started
        say(f"ingested in {ingest_s:.1f} s, {report.nodes} nodes' layers in {layers_s:.1f} s")
        easy = _measure(asked, kb, ids, ctx, budget)
        hard = _measure(make_ambiguous_questions(corpus, docs, questions), kb, ids, ctx, budget)
        return {
            "documents": len(docs),
            "nodes": report.nodes,
            "embedding_model": embedding_model,
            "ingest_s": round(ingest_s, 1),
            "layers_s": round(layers_s, 1),
            "budget": budget,
            **easy,
            "ambiguous": hard,
            "examples": [{"question": q, "answer": a} for q, a in asked[:3]],
        }


def _measure(
    asked: list[tuple[str, str]], kb: KnowledgeBase, ids: dict[str, str], ctx: Context, budget: int
) -> dict[str, Any]:
    """Recall@10 of flat and hierarchical retrieval, their median latencies and the layered context's figures."""
    flat_hits = hier_hits = at_l2 = 0
    # Each question a retrieval missed, with its answer (`--json`): where a ranking rule loses, read first.
    flat_misses: list[list[str]] = []
    hier_misses: list[list[str]] = []
    used: list[int] = []
    flat_ms: list[float] = []
    hier_ms: list[float] = []
    for question, answer in asked:
        t0 = time.perf_counter()
        state = knowledge_search(
            SearchRequest(query=question, knowledge_base_ids=[kb.id], overrides={"rerank_top_k": 50}), ctx
        )
        flat_ms.append((time.perf_counter() - t0) * 1000)
        ranking: list[str] = []
        for r in state.results("final_results"):
            if r.chunk_type in (ChunkType.ABSTRACT, ChunkType.OVERVIEW):
                doc = ids.get(str(r.metadata.get("document_id", "")), "")  # a document's own L0/L1 counts
            else:
                doc = ids.get(r.knowledge_id, "")
            if doc and doc not in ranking:
                ranking.append(doc)
        flat_hits += answer in ranking[:10]
        if answer not in ranking[:10]:
            flat_misses.append([question, answer])
        t0 = time.perf_counter()
        # Folders are matches too: 20 matches leave room for the 10 documents compared with flat's 10.
        found = find(question, [kb.id], ctx, limit=20, budget=budget)
        hier_ms.append((time.perf_counter() - t0) * 1000)
        leaves = [ids.get(m.knowledge_id, "") for m in found.resources if m.is_leaf]
        hier_hits += answer in leaves[:10]
        if answer not in leaves[:10]:
            hier_misses.append([question, answer])
        assert found.layered is not None
        used.append(found.layered.used)
        answer_uri = f"ragstep://{kb.name}/{answer}"
        at_l2 += any(i.uri == answer_uri and i.layer == "L2" for i in found.layered.items)
    n = max(len(asked), 1)
    return {
        "questions": len(asked),
        "flat_recall_at_10": round(flat_hits / n, 3),
        "hierarchical_recall_at_10": round(hier_hits / n, 3),
        "flat_p50_ms": round(statistics.median(flat_ms), 1) if flat_ms else 0.0,
        "hierarchical_p50_ms": round(statistics.median(hier_ms), 1) if hier_ms else 0.0,
        "layered_max_tokens": max(used, default=0),
        "layered_p50_tokens": statistics.median(used) if used else 0,
        "answer_at_l2": round(at_l2 / n, 3),
        "flat_misses": flat_misses,
        "hierarchical_misses": hier_misses,
    }


def _misses(figures: dict[str, Any]) -> str:
    """The questions only one of the two retrievals missed (the ones a ranking change wins or loses)."""
    flat = {q for q, _ in figures.get("flat_misses", [])}
    hier = {q for q, _ in figures.get("hierarchical_misses", [])}
    only_hier = sorted(hier - flat)
    return (
        f"  missed by hierarchical only ({len(only_hier)}): {'; '.join(only_hier) or '-'}; "
        f"by flat only: {len(flat - hier)}; by both: {len(flat & hier)}"
    )


def render(result: dict[str, Any]) -> str:
    rows = [
        f"{result['documents']} documents ({result['nodes']} nodes), {result['questions']} questions, "
        f"embedding {result['embedding_model']}; ingest {result['ingest_s']} s, layers {result['layers_s']} s",
        f"Recall@10 of the answer's document: flat hybrid {fmt(result['flat_recall_at_10'], 3)}, "
        f"hierarchical {fmt(result['hierarchical_recall_at_10'], 3)}",
        _misses(result),
        f"median latency: flat {result['flat_p50_ms']} ms, hierarchical {result['hierarchical_p50_ms']} ms",
        f"layered context within {result['budget']} tokens: max {result['layered_max_tokens']}, median "
        f"{result['layered_p50_tokens']}; answer's document at L2 for {fmt(result['answer_at_l2'] * 100, 1)} %",
    ]
    hard = result.get("ambiguous")
    if hard:
        rows.append(
            f"ambiguous headings, asked with their folder ({hard['questions']} questions): Recall@10 flat "
            f"{fmt(hard['flat_recall_at_10'], 3)}, hierarchical {fmt(hard['hierarchical_recall_at_10'], 3)}; "
            f"answer at L2 for {fmt(hard['answer_at_l2'] * 100, 1)} %"
        )
        rows.append(_misses(hard))
    return "\n".join(rows)
