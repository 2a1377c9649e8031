"""BEIR-layout quality sets built from XQuAD, for fusion work on corpora the project was never tuned on.

XQuAD (google-deepmind/xquad, CC BY-SA 4.0) is 240 Wikipedia paragraphs and their 1,190 SQuAD questions,
professionally translated into 11 languages with the same ids in every file. That gives, from one source, sets in
several scripts (Latin, Cyrillic, Devanagari, Thai, Arabic, Han) and cross-lingual sets (questions in one language,
passages in another: BM25 finds little beyond names and numbers there, the vectors carry the ranking), so a fusion
that trusts the keyword list where it has nothing to say shows up at once.

Each set: the 240 paragraphs of the passage language (no title: XQuAD's titles are English in every file), a fixed
sample of 100 questions of the question language (the same question ids in every set), each question's own
paragraph judged relevant (1), and e5 vectors (``corpus.e5.npy`` / ``queries.e5.npy``, multilingual-e5-small as the
local embedder runs it, float16, L2-normalised). Run::

    git clone https://github.com/google-deepmind/xquad /tmp/xquad
    python -m ragstep.bench.xquad /tmp/xquad OUT_DIR [en ru en-ru ...]
    ragstep bench quality --set OUT_DIR/xquad-en --vectors e5
    ragstep bench answer --set OUT_DIR/xquad-en        # answers.jsonl: SQuAD's reference spans

A name is ``LANG`` (questions and passages in LANG) or ``Q-P`` (questions in Q, passages in P).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

#: The sets the benchmark table reports; the first three were developed on, the last three held out.
DEFAULT_SETS = ("en", "ru", "en-ru", "th", "de-en", "hi")
#: Questions per set: enough for a stable mean, few enough to embed in seconds.
QUESTIONS = 100


def _load(src: Path, lang: str) -> list[dict[str, Any]]:
    with (src / f"xquad.{lang}.json").open(encoding="utf-8") as fh:
        data: list[dict[str, Any]] = json.load(fh)["data"]
    return data


def _paragraphs(data: list[dict[str, Any]]) -> list[tuple[str, str, list[tuple[str, str]]]]:
    """(paragraph id, text, [(question id, question)]) in file order; ids are positions, the same in every file."""
    out = []
    for a, article in enumerate(data):
        for p, para in enumerate(article["paragraphs"]):
            qas = [(str(q["id"]), str(q["question"])) for q in para["qas"]]
            out.append((f"p{a:02d}-{p:02d}", str(para["context"]), qas))
    return out


def _answers(data: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Each question's reference answers (SQuAD's spans of its paragraph, deduplicated), by question id."""
    return {
        str(q["id"]): list(dict.fromkeys(str(a["text"]) for a in q["answers"]))
        for article in data
        for para in article["paragraphs"]
        for q in para["qas"]
    }


def _sample(question_ids: list[str], n: int) -> set[str]:
    """A fixed sample that does not depend on the language: the n ids with the smallest hash."""
    return set(sorted(question_ids, key=lambda q: hashlib.sha256(q.encode()).hexdigest())[:n])


def build_set(src: Path, name: str, out: Path, *, questions: int = QUESTIONS, embed: bool = True) -> Path:
    """Write the set ``name`` (``LANG`` or ``Q-P``) under ``out / f"xquad-{name}"``; returns that folder."""
    q_lang, _, p_lang = name.partition("-")
    p_lang = p_lang or q_lang
    passages = _paragraphs(_load(src, p_lang))
    asked = _paragraphs(_load(src, q_lang))
    chosen = _sample([qid for _, _, qas in asked for qid, _ in qas], questions)
    folder = out / f"xquad-{name}"
    folder.mkdir(parents=True, exist_ok=True)
    queries: list[tuple[str, str, str]] = [
        (qid, text, pid) for pid, _, qas in asked for qid, text in qas if qid in chosen
    ]
    with (folder / "corpus.jsonl").open("w", encoding="utf-8") as fh:
        for pid, text, _ in passages:
            fh.write(json.dumps({"_id": pid, "title": "", "text": text}, ensure_ascii=False) + "\n")
    with (folder / "queries.jsonl").open("w", encoding="utf-8") as fh:
        for qid, text, _ in queries:
            fh.write(json.dumps({"_id": qid, "text": text}, ensure_ascii=False) + "\n")
    with (folder / "qrels.tsv").open("w", encoding="utf-8") as fh:
        fh.write("query-id\tcorpus-id\tscore\n")
        for qid, _, pid in queries:
            fh.write(f"{qid}\t{pid}\t1\n")
    # The reference answers are spans of the passage language's paragraph: `ragstep bench answer` reads them.
    answers = _answers(_load(src, p_lang))
    with (folder / "answers.jsonl").open("w", encoding="utf-8") as fh:
        for qid, _, _ in queries:
            fh.write(json.dumps({"_id": qid, "answers": answers.get(qid, [])}, ensure_ascii=False) + "\n")
    (folder / "SOURCE.txt").write_text(
        f"XQuAD (https://github.com/google-deepmind/xquad, CC BY-SA 4.0): questions xquad.{q_lang}.json, "
        f"passages xquad.{p_lang}.json; built by `python -m ragstep.bench.xquad`.\n",
        encoding="utf-8",
    )
    if embed:
        from ragstep.adapters.embedders.local import LocalEmbedder

        embedder = LocalEmbedder()
        corpus_vecs = embedder.embed([text for _, text, _ in passages])
        query_vecs = np.stack([embedder.embed_query(text) for _, text, _ in queries])
        np.save(folder / "corpus.e5.npy", corpus_vecs.astype(np.float16))
        np.save(folder / "queries.e5.npy", query_vecs.astype(np.float16))
    return folder


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2:
        print("usage: python -m ragstep.bench.xquad XQUAD_CHECKOUT OUT_DIR [SET ...]", file=sys.stderr)
        return 2
    src, out = Path(args[0]), Path(args[1])
    for name in args[2:] or DEFAULT_SETS:
        print(build_set(src, name, out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
