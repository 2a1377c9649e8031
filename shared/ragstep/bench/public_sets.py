"""BEIR-layout quality sets from two more public sources, kinds of corpus the fusion was never developed on.

* ``korquad-ko``: Korean (Hangul, words glued to their particles: "서울에서", so a question's word and the passage's
  rarely match whole), from KorQuAD 1.0's dev file (korquad/korquad.github.io, ``dataset/KorQuAD_v1.0_dev.json``,
  CC BY-ND 2.0 KR). The paragraphs of the first :data:`KORQUAD_ARTICLES` articles form the corpus (no title, as
  in the xquad sets); a fixed sample of :data:`KORQUAD_QUESTIONS` of their questions (the smallest hashes of
  their ids) are the queries, each one's own paragraph relevant.
* ``covid-faq``: an FAQ (stanford-oval/covid-faq, ``data/clean/faq_db.csv``: 129 entries on COVID-19 vaccines, the
  question as the title, the answer as the text) and people's own questions about it, labelled with the entries
  that answer them (``data/combine_validation_relabel.csv``; a question no entry answers, labelled -1, is left
  out). Short documents, paraphrased questions, several relevant entries per question.

Both get e5 vectors (``corpus.e5.npy`` / ``queries.e5.npy``, as :mod:`ragstep.bench.xquad` makes them: the local
embedder, float16, L2-normalised). Run::

    git clone https://github.com/korquad/korquad.github.io /tmp/korquad
    git clone https://github.com/stanford-oval/covid-faq /tmp/covid-faq
    python -m ragstep.bench.public_sets korquad /tmp/korquad OUT_DIR
    python -m ragstep.bench.public_sets covid-faq /tmp/covid-faq OUT_DIR
    ragstep bench quality --set OUT_DIR/korquad-ko --vectors e5
"""

from __future__ import annotations

import csv
import hashlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

#: Articles of the KorQuAD dev file whose paragraphs make the corpus (a few hundred paragraphs: embedded in minutes).
KORQUAD_ARTICLES = 60
#: Questions sampled from those articles.
KORQUAD_QUESTIONS = 150


def write_set(
    folder: Path,
    corpus: Sequence[tuple[str, str, str]],
    queries: Sequence[tuple[str, str]],
    qrels: Sequence[tuple[str, str, int]],
    source: str,
    *,
    embed: bool = True,
) -> Path:
    """A BEIR-layout folder: ``corpus`` (id, title, text), ``queries`` (id, text), ``qrels`` (query, doc, grade),
    ``SOURCE.txt``, and e5 vectors of the documents (title and text, as the bench indexes them) and queries."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "corpus.jsonl").open("w", encoding="utf-8") as fh:
        for did, title, text in corpus:
            fh.write(json.dumps({"_id": did, "title": title, "text": text}, ensure_ascii=False) + "\n")
    with (folder / "queries.jsonl").open("w", encoding="utf-8") as fh:
        for qid, text in queries:
            fh.write(json.dumps({"_id": qid, "text": text}, ensure_ascii=False) + "\n")
    with (folder / "qrels.tsv").open("w", encoding="utf-8") as fh:
        fh.write("query-id\tcorpus-id\tscore\n")
        for qid, did, grade in qrels:
            fh.write(f"{qid}\t{did}\t{grade}\n")
    (folder / "SOURCE.txt").write_text(source + "\n", encoding="utf-8")
    if embed:
        from ragstep.adapters.embedders.local import LocalEmbedder
        from ragstep.bench.quality import document_text

        embedder = LocalEmbedder()
        corpus_vecs = embedder.embed([document_text(title, text) for _, title, text in corpus])
        query_vecs = np.stack([embedder.embed_query(text) for _, text in queries])
        np.save(folder / "corpus.e5.npy", corpus_vecs.astype(np.float16))
        np.save(folder / "queries.e5.npy", query_vecs.astype(np.float16))
    return folder


def _smallest_hashes(ids: Sequence[str], n: int) -> set[str]:
    return set(sorted(ids, key=lambda i: hashlib.sha256(i.encode()).hexdigest())[:n])


def build_korquad(src: Path, out: Path, *, embed: bool = True) -> Path:
    """``korquad-ko`` from a checkout of korquad/korquad.github.io (module docstring)."""
    with (src / "dataset" / "KorQuAD_v1.0_dev.json").open(encoding="utf-8") as fh:
        data = json.load(fh)["data"][:KORQUAD_ARTICLES]
    corpus: list[tuple[str, str, str]] = []
    asked: list[tuple[str, str, str]] = []
    for a, article in enumerate(data):
        for p, para in enumerate(article["paragraphs"]):
            pid = f"k{a:03d}-{p:02d}"
            corpus.append((pid, "", str(para["context"])))
            asked.extend((str(q["id"]), str(q["question"]), pid) for q in para["qas"])
    chosen = _smallest_hashes([qid for qid, _, _ in asked], KORQUAD_QUESTIONS)
    picked = [(qid, text, pid) for qid, text, pid in asked if qid in chosen]
    return write_set(
        out / "korquad-ko",
        corpus,
        [(qid, text) for qid, text, _ in picked],
        [(qid, pid, 1) for qid, _, pid in picked],
        "KorQuAD 1.0 dev (https://github.com/korquad/korquad.github.io, CC BY-ND 2.0 KR), the first "
        f"{KORQUAD_ARTICLES} articles' paragraphs and {KORQUAD_QUESTIONS} of their questions; built by "
        "`python -m ragstep.bench.public_sets korquad`.",
        embed=embed,
    )


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def build_covid_faq(src: Path, out: Path, *, embed: bool = True) -> Path:
    """``covid-faq`` from a checkout of stanford-oval/covid-faq (module docstring)."""
    entries = _csv(src / "data" / "clean" / "faq_db.csv")
    corpus = [(f"faq{int(e['ID']):03d}", e["Question"].strip(), e["Answer"].strip()) for e in entries]
    known = {did for did, _, _ in corpus}
    queries: list[tuple[str, str]] = []
    qrels: list[tuple[str, str, int]] = []
    seen: set[str] = set()
    for row in _csv(src / "data" / "combine_validation_relabel.csv"):
        text = row["Question"].strip()
        labels = [f"faq{int(x):03d}" for x in row["Answer"].replace(" ", "").split(",") if x and int(x) >= 0]
        labels = [d for d in labels if d in known]
        if not labels or not text or text.casefold() in seen:
            continue
        seen.add(text.casefold())
        qid = f"q{len(queries):03d}"
        queries.append((qid, text))
        qrels.extend((qid, d, 1) for d in dict.fromkeys(labels))
    return write_set(
        out / "covid-faq",
        corpus,
        queries,
        qrels,
        "stanford-oval/covid-faq (https://github.com/stanford-oval/covid-faq): data/clean/faq_db.csv (the FAQ) and "
        "data/combine_validation_relabel.csv (user questions and the entries that answer them); built by "
        "`python -m ragstep.bench.public_sets covid-faq`.",
        embed=embed,
    )


BUILDERS = {"korquad": build_korquad, "covid-faq": build_covid_faq}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3 or args[0] not in BUILDERS:
        print(f"usage: python -m ragstep.bench.public_sets {{{','.join(BUILDERS)}}} CHECKOUT OUT_DIR", file=sys.stderr)
        return 2
    print(BUILDERS[args[0]](Path(args[1]), Path(args[2])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
