"""The local index's snapshot build: rows streamed out of SQLite into numpy arrays, the vectors into the snapshot
folder (:mod:`._vectors`), int8 codes and, above ``ivf_min_rows`` rows, the IVF lists (:mod:`ragstep.retrieval.ivf`),
below them from ``signs.MIN_ROWS`` rows the codes' sign bits (:mod:`ragstep.retrieval.signs`).

Rows are streamed from one read transaction, never fetched all at once: per row, the string columns become small ints
(dictionary codes in first-seen order), the tokens int32 term ids, and the vector is appended to its space's file in
the build folder, so the float32 matrices never sit in RAM (peak memory at a million chunks: ``ragstep bench latency
--docs 1000000``).
"""

from __future__ import annotations

import itertools
import sqlite3
from array import array
from collections import defaultdict
from pathlib import Path

import numpy as np

from ragstep.adapters.index._snapshot import Codes, Snapshot, Space, bm25_norms, csc_postings
from ragstep.adapters.index._tokens import fold_row_tokens
from ragstep.adapters.index._vectors import VectorSink
from ragstep.errors import StorageError
from ragstep.retrieval import ivf, signs
from ragstep.retrieval.quantize import SAMPLE_ROWS, fit


def stream_snapshot(
    conn: sqlite3.Connection, build_dir: Path | None, storage: str, ivf_min_rows: int, fold_stored: bool = False
) -> Snapshot:
    """A snapshot of the committed state, streamed from one read transaction (``build_dir``: where the float32
    matrices go, see :mod:`._vectors`; None keeps them in RAM). ``fold_stored``: the stored tokens are of an earlier
    tokenizer that could not be upgraded in place; they are folded here as the current one writes them
    (:mod:`._tokens`)."""
    sinks: dict[str, VectorSink] = {}
    conn.execute("BEGIN")  # one read transaction: generation and rows from the same committed state
    try:
        gen = int(conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()[0])
        positions: dict[str, array[int]] = {}
        spaces_found = conn.execute(
            "SELECT space, count(*), max(length(vector)) FROM chunks WHERE space IS NOT NULL GROUP BY space"
        ).fetchall()
        for i, (name, count, width) in enumerate(sorted(spaces_found)):
            # The file name save_snapshot gives this space's matrix (spaces are numbered in sorted order).
            path = build_dir / f"space{i}_matrix.npy" if build_dir is not None else None
            sinks[name], positions[name] = VectorSink(path, count, width), array("i")
        ids: list[str] = []
        columns: list[dict[str, int]] = [{}, {}, {}, {}]  # knowledge, kb, tag, type: value -> first-seen code
        codes = [array("i"), array("i"), array("i"), array("i")]
        enabled = bytearray()
        # term -> id, a new term getting the next id, all in C (map + defaultdict + count): 3x the listcomp
        vocab_ids: defaultdict[str, int] = defaultdict(itertools.count().__next__)
        term_id = vocab_ids.__getitem__
        term_ids = array("i")
        lengths = array("q")
        rows = conn.execute(
            "SELECT id, knowledge_id, knowledge_base_id, tag_id, chunk_type, enabled, tokens, space, vector"
            " FROM chunks ORDER BY row"
        )
        for pos, (cid, kid, kb, tag, ctype, on, tokens, space, vector) in enumerate(rows):
            ids.append(cid)
            for col, out, value in zip(columns, codes, (kid, kb, tag, ctype), strict=True):
                out.append(col.setdefault(value, len(col)))
            enabled.append(1 if on else 0)
            toks = (fold_row_tokens(tokens) if fold_stored else tokens).split()
            lengths.append(len(toks))
            term_ids.extend(map(term_id, toks))
            if space is not None:
                sink = sinks[space]
                if len(vector) != sink.dim * 4:
                    raise StorageError(
                        f"chunk {cid!r} has a {len(vector) // 4}-dimension vector in space {space!r}, whose "
                        f"others have {sink.dim}; re-ingest its knowledge item"
                    )
                sink.add(vector)
                positions[space].append(pos)
    except BaseException:
        for sink in sinks.values():
            sink.abort()
        raise
    finally:
        conn.execute("COMMIT")
    vocab = dict(vocab_ids)  # a plain dict from here: a lookup of an unknown term must not add it
    n = len(ids)
    lengths_np = np.frombuffer(lengths, dtype=np.int64) if n else np.zeros(0, dtype=np.int64)
    terms_np = np.frombuffer(term_ids, dtype=np.int32) if term_ids else np.zeros(0, dtype=np.int32)
    indptr, post_rows, post_tf = csc_postings(terms_np, lengths_np, len(vocab))
    del term_ids, terms_np
    knowledge, kb, tag, ctype = (
        Codes.from_first_seen(list(col), np.frombuffer(c, dtype=np.int32) if n else np.zeros(0, np.int32))
        for col, c in zip(columns, codes, strict=True)
    )
    kb_docs, norm = bm25_norms(kb.codes, len(kb.names), lengths_np)
    spaces = {}
    for name, sink in sinks.items():
        sink.close()
        spaces[name] = vector_space(np.frombuffer(positions[name], dtype=np.int32).copy(), sink, storage, ivf_min_rows)

    snap = Snapshot(
        generation=gen,
        ids=ids,
        kb=kb,
        knowledge=knowledge,
        tag=tag,
        ctype=ctype,
        enabled=np.frombuffer(bytes(enabled), dtype=np.uint8).astype(bool),
        vocab=vocab,
        indptr=indptr,
        post_rows=post_rows,
        post_tf=post_tf,
        norm=norm,
        spaces=spaces,
        kb_docs=kb_docs,
    )
    return snap


def vector_space(rows: np.ndarray, sink: VectorSink, storage: str, ivf_min_rows: int) -> Space:
    """A space's matrix (mapped from the build folder when there is one), its int8 codes and, above
    ``ivf_min_rows`` rows, its IVF partition with the codes in list order."""
    sp = Space(rows, sink.matrix())
    n = sink.rows
    if storage != "int8" or n == 0:
        return sp
    # The rows fit() would sample from the whole matrix: the same quantiser as fitting on it.
    stride = max(1, -(-n // SAMPLE_ROWS))
    quantizer = fit(sink.take(np.arange(0, n, stride)))
    codes = np.empty((n, sink.dim), dtype=np.int8)
    slot = None  # code row of each matrix row (None: the same row)
    if n >= ivf_min_rows:
        step = max(1, -(-n // ivf.TRAIN_ROWS))
        trained = ivf.train(sink.take(np.arange(0, n, step)), n)
        sp.partition = ivf.build(trained, sink.blocks(), n)
        slot = np.empty(n, dtype=np.int64)
        slot[sp.partition.order] = np.arange(n)
    lo = 0
    for block in sink.blocks():
        hi = lo + block.shape[0]
        if slot is None:
            codes[lo:hi] = quantizer.encode(block)
        else:
            codes[slot[lo:hi]] = quantizer.encode(block)
        lo = hi
    sp.codes, sp.quantizer = codes, quantizer
    if slot is None and n >= signs.MIN_ROWS:  # the sign-bit first pass (and its calibration), saved with the codes
        sp.signs = signs.encode(codes, quantizer)
    return sp
