"""Extra evaluation sets derived from the public sets in the benchmark folder (``python -m ragstep.bench.derived``).

Generated at bench time into a cache folder (never committed), deterministically (seeded), in the BEIR layout
``ragstep bench quality --set`` reads:

* ``cmrc2018-entities``: another question style on the cmrc2018-zh paragraphs. The query is a paragraph's article
  title alone (an entity lookup: "广茂铁路"), the paragraph its one relevant document, and the corpus is the same
  paragraphs *without* their titles, so the title must be found in the text, not in a title field. 300 titles,
  sampled with a fixed seed. No vectors (its queries were never embedded): keyword search only, as a knowledge base
  without an embedding model.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from ragstep.bench.common import find_bench_dir

SEED = 17
ENTITY_QUERIES = 300
SETS = ("cmrc2018-entities",)


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


def build(out: Path, bench_dir: Path | None = None) -> list[Path]:
    """Every derived set under ``out``; the same files on every call."""
    source = find_bench_dir(bench_dir)
    return [cmrc_entities(source, Path(out))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ragstep.bench.derived", description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="cache folder for the generated sets")
    parser.add_argument("--bench-dir", type=Path, default=None, help="the benchmark sets (default: ../shared/bench)")
    args = parser.parse_args(argv)
    for folder in build(args.out, args.bench_dir):
        print(folder)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
