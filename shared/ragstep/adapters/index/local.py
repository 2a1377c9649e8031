"""The embedded search index: BM25 over jieba tokens and exact cosine kNN, persistent in a data dir.

Design
------
* **SQLite is the source of truth.** Every write (replace a knowledge item's chunks, delete, enable/disable) is one
  transaction that also bumps a ``generation`` counter, so a crash mid-write leaves the last committed state intact,
  and other processes see a consistent index (WAL mode: readers never block the writer).
* **Search runs on an immutable in-memory snapshot** built from SQLite: BM25 postings in CSC layout (per term: the
  rows that contain it and their term frequency) and one float32 matrix per embedding space. A query is a handful of
  numpy vector operations (ranking only the rows a query term touched, and a top-k by a sampled cut, so neither
  costs O(index) work beyond one pass over the scores). A snapshot is never mutated; a rebuild makes a new one and
  swaps the reference, so concurrent readers in threads need no lock.
* **Vectors are scanned as int8 codes** (``vector_storage="int8"``, :mod:`ragstep.retrieval.quantize`): a quarter of
  the bytes per query; the ``rescore_factor x top_k`` best approximate candidates are rescored exactly on the float32
  matrix, which stays memory-mapped on disk so only those rows are read. ``"float32"`` scans the matrix exactly.
* **Above ``ivf_min_rows`` rows (250k) the int8 pass probes IVF lists** (:mod:`ragstep.retrieval.ivf`): ~6 % of the
  rows instead of all (a full scan is too slow at a million), at the price of approximate recall. From 20k rows below
  that, a sign-bit pass over every row (:mod:`ragstep.retrieval.signs`, an eighth of the int8 bytes) picks the ~2 %
  whose int8 codes are scored, when its calibration on the index's own rows says they hold the exact neighbours.
* **Snapshots are cached on disk** (``snapshots/gen-N``, written to a temp dir and renamed), so a new process -- the
  CLI, a Lambda cold start -- maps the arrays instead of rebuilding them (:attr:`LocalSearchIndex.snapshot_builds`
  counts rebuilds). A snapshot whose generation differs from SQLite's is never used. A build streams the vectors
  into the snapshot folder (:mod:`._build`): the float32 matrix is never in RAM.
* A write invalidates the snapshot; the next search rebuilds it (lazily, so a batch of ingests pays once). Rebuilds
  are O(total tokens) in numpy: about a second per 100k chunks.

Keyword scores are normalised per query to the best hit (best = 1.0), which makes ``keyword_threshold`` mean the
same on any corpus; the raw BM25 score is kept in :attr:`Hit.raw_score`.

BM25 statistics are those of the knowledge bases being searched, taken together (:mod:`ragstep.retrieval.bm25`): the
document count, document frequencies and average length of the knowledge bases the filter names (or, when it names
none, of those holding the chunks it lets through: a search by knowledge ids uses its items' knowledge bases). So
ingesting into one knowledge base never reorders another's results, and a search over several ranks all their chunks
on one scale. Statistics never span tenants: each tenant has its own index folder. The snapshot precomputes each
chunk's length norm against its own knowledge base's average length (the one-knowledge-base search, the common case,
uses it as is); the norms against several knowledge bases' joint average are computed once per set of knowledge bases
(O(chunks), cached on the snapshot). A query counts each term's document frequency within the searched knowledge bases
from the term's postings, the same O(postings) as the scoring itself. An index that holds one knowledge base scores
exactly as with whole-index statistics.
"""

from __future__ import annotations

import itertools
import math
import os
import shutil
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

import numpy as np

from ragstep.adapters._sqlite import SqliteDatabase
from ragstep.adapters.index._backfill import RowVectorBackfill
from ragstep.adapters.index._build import stream_snapshot
from ragstep.adapters.index._candidates import CandidateScoring
from ragstep.adapters.index._ids import ids_at
from ragstep.adapters.index._keyword import term_postings
from ragstep.adapters.index._replace import checked_replacement, noting_indexed
from ragstep.adapters.index._snapshot import Snapshot, Space, load_snapshot, new_build_dir, save_snapshot, top
from ragstep.adapters.index._tokens import upgrade_stored_tokens
from ragstep.adapters.index._vectors import first_pass
from ragstep.errors import ConflictError, InputError, StorageError
from ragstep.models import Chunk
from ragstep.ports import Hit, IndexStats, SearchFilter
from ragstep.retrieval import ivf
from ragstep.retrieval.background import Background, Backgrounds
from ragstep.retrieval.bm25 import BM25_B, BM25_K1, Bm25Stats, idf, length_norms, term_scores
from ragstep.retrieval.quantize import approx_scores, candidates_wanted
from ragstep.retrieval.text import tokenize

# Above this many rows a matrix-vector product is split across threads (numpy releases the GIL); below it the
# thread hand-off costs more than it saves.
PARALLEL_ROWS = 40_000
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS chunks (
    row INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    knowledge_id TEXT NOT NULL,
    knowledge_base_id TEXT NOT NULL,
    tag_id TEXT NOT NULL DEFAULT '',
    chunk_type TEXT NOT NULL,
    chunk_index INTEGER NOT NULL DEFAULT 0,
    enabled INTEGER NOT NULL DEFAULT 1,
    tokens TEXT NOT NULL,
    space TEXT,
    vector BLOB,
    doc TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS chunks_knowledge ON chunks (knowledge_id, chunk_index);
CREATE INDEX IF NOT EXISTS chunks_kb ON chunks (knowledge_base_id);
INSERT OR IGNORE INTO meta (key, value) VALUES ('generation', '0'), ('format', '1');
"""


class LocalSearchIndex(RowVectorBackfill, CandidateScoring):
    """The embedded mode's :class:`~ragstep.ports.SearchIndex`, :class:`~ragstep.index_capabilities.VectorBackfill`."""

    #: Keyword and vector hits are fused by the search stage (there is no server to fuse them).
    supports_server_hybrid = False

    def __init__(
        self,
        root: Path,
        *,
        persist_snapshots: bool = True,
        parallel_rows: int = PARALLEL_ROWS,
        vector_storage: Literal["float32", "int8"] = "int8",
        rescore_factor: int = 4,
        ivf_min_rows: int = ivf.MIN_ROWS,
    ) -> None:
        self.root = Path(root)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(
                f"cannot create the index folder {self.root}: {exc.strerror or exc}; pass --data-dir to a "
                "writable folder"
            ) from exc
        self._snap_root = self.root / "snapshots"
        self._persist = persist_snapshots
        # Fails now, with a clear message, if the data dir cannot hold the database.
        self._db = SqliteDatabase(self.root / "index.sqlite", _SCHEMA)
        #: Rows whose tokens (an earlier tokenizer's) were upgraded on opening; None: the database could not be written,
        #: so each snapshot build folds them instead (:mod:`._tokens`)
        self.tokens_upgraded = upgrade_stored_tokens(self._db)
        self._build_lock = threading.Lock()
        self._snapshot: Snapshot | None = None
        self._workers = max(1, min(4, os.cpu_count() or 1))
        self._parallel_rows = parallel_rows
        self._storage = vector_storage
        self._rescore = rescore_factor
        self._ivf_min_rows = ivf_min_rows
        self._backgrounds = Backgrounds()
        #: Snapshots built from SQLite by this object (a snapshot mapped from disk is not counted).
        self.snapshot_builds = 0
        self._pool: ThreadPoolExecutor | None = None

    # -- connections and transactions ---------------------------------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        return self._db.connection()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction that also bumps the generation, so snapshots of the old state are not used."""
        with self._db.write() as conn:
            yield conn
            conn.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation'")

    def _generation(self) -> int:
        row = self._conn().execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
        return int(row[0])

    # -- writes --------------------------------------------------------------------------------------------------

    def replace_knowledge(
        self,
        knowledge_id: str,
        chunks: Sequence[Chunk],
        vectors: np.ndarray | None = None,
        space: str | None = None,
    ) -> None:
        vecs = checked_replacement(knowledge_id, chunks, vectors, space)
        blobs: list[bytes | None] = [None] * len(chunks)
        if vecs is not None and space:
            blobs = [row.astype("<f4").tobytes() for row in vecs]
            self._check_dimension(space, vecs.shape[1])
        rows = [
            (
                c.id,
                c.knowledge_id,
                c.knowledge_base_id,
                c.tag_id,
                str(c.chunk_type),
                c.chunk_index,
                int(c.enabled),
                " ".join(tokenize(c.index_text if c.index_text is not None else c.content)),
                space if blobs[i] is not None else None,
                blobs[i],
                c.model_dump_json(exclude={"embed_text"}),
            )
            for i, c in enumerate(noting_indexed(chunks))  # a large document's tokenizing takes seconds: told
        ]
        with self._write() as conn:
            conn.execute("DELETE FROM chunks WHERE knowledge_id = ?", (knowledge_id,))
            try:
                conn.executemany(
                    "INSERT INTO chunks (id, knowledge_id, knowledge_base_id, tag_id, chunk_type, chunk_index,"
                    " enabled, tokens, space, vector, doc) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    rows,
                )
            except sqlite3.IntegrityError as exc:  # rolled back by _write: the old chunks stay
                raise ConflictError(
                    f"a chunk id of knowledge {knowledge_id} is already used by another knowledge item: {exc}"
                ) from exc

    def _check_dimension(self, space: str, dim: int) -> None:
        row = self._conn().execute("SELECT length(vector) FROM chunks WHERE space = ? LIMIT 1", (space,)).fetchone()
        if row and row[0] != dim * 4:
            raise InputError(
                f"embedding space {space!r} holds {row[0] // 4}-dimensional vectors, got {dim}; "
                "re-embed the knowledge base or use another embedding model id"
            )

    def delete_knowledge(self, knowledge_ids: Sequence[str]) -> int:
        if not knowledge_ids:
            return 0
        with self._write() as conn:
            marks = ",".join("?" * len(knowledge_ids))
            return conn.execute(f"DELETE FROM chunks WHERE knowledge_id IN ({marks})", list(knowledge_ids)).rowcount

    def delete_knowledge_base(self, knowledge_base_id: str) -> int:
        with self._write() as conn:
            return conn.execute("DELETE FROM chunks WHERE knowledge_base_id = ?", (knowledge_base_id,)).rowcount

    def set_enabled(self, chunk_ids: Sequence[str], enabled: bool) -> int:
        if not chunk_ids:
            return 0
        with self._write() as conn:
            marks = ",".join("?" * len(chunk_ids))
            return conn.execute(
                f"UPDATE chunks SET enabled = ? WHERE id IN ({marks})", [int(enabled), *chunk_ids]
            ).rowcount

    # -- reads ---------------------------------------------------------------------------------------------------

    def fetch(self, chunk_ids: Sequence[str]) -> dict[str, Chunk]:
        out: dict[str, Chunk] = {}
        ids = list(dict.fromkeys(chunk_ids))
        conn = self._conn()
        for start in range(0, len(ids), 500):  # stay under SQLite's bound-parameter limit
            part = ids[start : start + 500]
            marks = ",".join("?" * len(part))
            for cid, enabled, doc in conn.execute(f"SELECT id, enabled, doc FROM chunks WHERE id IN ({marks})", part):
                chunk = Chunk.model_validate_json(doc)
                if chunk.enabled != bool(enabled):
                    chunk = chunk.model_copy(update={"enabled": bool(enabled)})
                out[cid] = chunk
        return out

    def knowledge_chunks(self, knowledge_id: str, limit: int) -> list[Chunk]:
        cur = self._conn().execute(
            "SELECT doc FROM chunks WHERE knowledge_id = ? AND enabled = 1 ORDER BY chunk_index, row LIMIT ?",
            (knowledge_id, limit),
        )
        return [Chunk.model_validate_json(doc) for (doc,) in cur]

    def chunks_at(self, wanted: Mapping[str, Sequence[int]]) -> dict[str, dict[int, Chunk]]:
        terms: list[tuple[str, list[object]]] = []  # one (SQL clause, its parameters) per knowledge item
        for kid, indexes in wanted.items():
            idx = sorted({int(i) for i in indexes if int(i) >= 0})
            if idx:
                terms.append((f"(knowledge_id = ? AND chunk_index IN ({','.join('?' * len(idx))}))", [kid, *idx]))
        out: dict[str, dict[int, Chunk]] = {}
        for start in range(0, len(terms), 100):  # keep statements under SQLite's parameter limit
            part = terms[start : start + 100]
            sql = f"SELECT doc FROM chunks WHERE enabled = 1 AND ({' OR '.join(c for c, _ in part)})"
            for (doc,) in self._conn().execute(sql, [p for _, params in part for p in params]):
                chunk = Chunk.model_validate_json(doc)
                out.setdefault(chunk.knowledge_id, {}).setdefault(chunk.chunk_index, chunk)
        return out

    def vectors(self, chunk_ids: Sequence[str], space: str) -> dict[str, np.ndarray]:
        snap = self.snapshot()
        sp = snap.spaces.get(space)
        if sp is None or not sp.rows.shape[0]:
            return {}
        # rows holds ascending positions: one binary search of them all finds their matrix rows (a position -> row
        # dict held every id in memory; a search per id cast the int32 rows to int64 each time)
        known = {cid: pos for cid in chunk_ids if (pos := snap.position(cid)) is not None}
        wanted = np.fromiter(known.values(), dtype=sp.rows.dtype, count=len(known))
        rows = np.minimum(np.searchsorted(sp.rows, wanted), sp.rows.shape[0] - 1)
        found = {cid: int(r) for cid, r, ok in zip(known, rows, sp.rows[rows] == wanted, strict=True) if ok}
        if not found:
            return {}
        # One gather for all rows (a copy, in RAM even when the matrix is memory-mapped): indexing the memmap row by
        # row made a memmap object per chunk.
        block = sp.take(np.fromiter(found.values(), dtype=np.int64, count=len(found)))
        return dict(zip(found, block, strict=True))

    def stats(self) -> IndexStats:
        conn = self._conn()
        chunks, items = conn.execute("SELECT count(*), count(DISTINCT knowledge_id) FROM chunks").fetchone()
        spaces = dict(conn.execute("SELECT space, count(*) FROM chunks WHERE space IS NOT NULL GROUP BY space"))
        return IndexStats(chunks=chunks, knowledge_items=items, vector_spaces=spaces)

    def keyword_search(
        self,
        tokens: Sequence[str],
        flt: SearchFilter,
        top_k: int,
        threshold: float,
        *,
        stats: Bm25Stats | None = None,
    ) -> list[Hit]:
        """BM25 with the joint statistics of the knowledge bases ``flt`` covers (module docstring), or with
        ``stats`` when given: those of a larger collection this index is one part of (:meth:`bm25_stats`)."""
        snap = self.snapshot()
        terms = list(term_postings(snap, tokens))  # each word as written; its other forms held: one term
        if not terms or snap.size == 0 or top_k <= 0:
            return []
        acc = np.zeros(snap.size, dtype=np.float32)
        kb_codes = snap.kb.codes
        scope = snap.bm25_scope(flt)
        df = stats.df if stats is not None else {t.key: scope.df(t.rows, kb_codes) for t in terms}
        for term in terms:
            rows = term.rows
            if stats is None:
                weight, norms = idf(term.frequency(df), scope.docs), scope.norm[rows]
            else:
                weight = idf(term.frequency(df), stats.docs)
                norms = length_norms(snap.row_lengths()[rows], stats.avgdl)
            # Rows are unique within one term's postings, so fancy-index += accumulates correctly.
            acc[rows] += term.share(df) * term_scores(term.tf, norms, weight)
        # Only rows a term touched can score (BM25 term scores are > 0): rank those, not every row of the index
        # (at a million rows, masking and ranking all of them cost more than the scoring).
        touched = np.flatnonzero(acc > 0.0)
        touched = touched[snap.mask(flt)[touched]]
        best = touched[top(acc[touched], top_k)]
        if best.size == 0:
            return []
        raws = acc[best].tolist()  # Python floats at once, not a numpy scalar a hit
        top_score = raws[0]
        kept = []
        for raw in raws:
            score = raw / top_score
            if score < threshold:
                break  # best-first order: everything after scores lower
            kept.append((score, raw))
        ids = ids_at(snap.ids, best[: len(kept)])
        return [Hit(cid, score, raw) for cid, (score, raw) in zip(ids, kept, strict=True)]

    def bm25_stats(self, tokens: Sequence[str], flt: SearchFilter) -> Bm25Stats:
        """This index's part of the BM25 statistics of a search spanning several indexes: the chunks and tokens of
        the knowledge bases ``flt`` covers here, and how many of those chunks hold each of ``tokens``."""
        snap = self.snapshot()
        scope = snap.bm25_scope(flt)
        if not scope.codes:
            return Bm25Stats()
        df = {t.key: scope.df(t.rows, snap.kb.codes) for t in term_postings(snap, tokens)}
        return Bm25Stats(scope.docs, snap.kb_tokens(scope.codes), df)

    def vector_background(self, space: str, flt: SearchFilter) -> Background | None:
        """Where a query's cosines sit among ``flt``'s vectors (:class:`~ragstep.retrieval.background.Backgrounds`)."""
        return self._backgrounds.of(self.snapshot(), space, flt)

    def vector_search(
        self, vector: np.ndarray, space: str, flt: SearchFilter, top_k: int, threshold: float
    ) -> list[Hit]:
        snap = self.snapshot()
        sp = snap.spaces.get(space)
        if sp is None or top_k <= 0:
            return []
        q = np.asarray(vector, dtype=np.float32).reshape(-1)
        if q.shape[0] != sp.matrix.shape[1]:
            raise InputError(f"query vector has {q.shape[0]} dimensions, the {space!r} space has {sp.matrix.shape[1]}")
        norm = float(np.linalg.norm(q))
        if not math.isfinite(norm) or norm == 0.0:
            return []
        q = q / norm
        allowed, selected = sp.allowed(snap, flt)
        if selected.size == 0:
            return []
        want = candidates_wanted(top_k, self._rescore)
        if sp.codes is not None and sp.quantizer is not None and self._storage == "int8" and selected.size > want:
            w, bias = sp.quantizer.query_weights(q)
            selective = selected.size < 0.5 * allowed.size
            found = self._probe(sp, q, allowed, selected.size, want, w, bias) if sp.partition is not None else None
            if found is not None:
                cand_rows = found
            elif selective:
                codes = sp.codes[sp.code_rows(selected)]
                approx = self._scan(codes.shape[0], lambda lo, hi, out: approx_scores(codes[lo:hi], w, bias, out))
                cand_rows = selected[top(approx, want)]
            else:  # every code, or from signs.MIN_ROWS rows the sign-bit pass's candidates (_vectors.first_pass)
                cand_rows = first_pass(sp, q, allowed, want, w, bias, self._scan)
            # Matrix rows in ascending order: sequential page reads, and the exact path's tie-break by position.
            matrix_rows = np.sort(cand_rows)
            scores = sp.take(matrix_rows) @ q
            rows = sp.rows[matrix_rows]
        elif selected.size < 0.5 * allowed.size:
            # A selective filter: score only the rows it lets through (copying them beats scoring them all).
            scores = self._matvec(sp.matrix[selected], q)
            rows = sp.rows[selected]
        else:
            scores = self._matvec(sp.matrix, q)
            scores[~allowed] = -np.inf
            rows = sp.rows
        scores[scores < threshold] = -np.inf
        best = top(scores, top_k)
        found = scores[best].tolist()
        return [Hit(cid, s, s) for cid, s in zip(ids_at(snap.ids, rows[best]), found, strict=True)]

    def _probe(
        self, sp: Space, q: np.ndarray, allowed: np.ndarray, selected: int, want: int, w: np.ndarray, bias: float
    ) -> np.ndarray | None:
        """Matrix rows of the ``want`` best approximate candidates in the IVF lists nearest to ``q`` (more lists
        when a filter leaves too few of their rows), or None when scanning the ``selected`` rows the filter allows
        would cost no more: the caller scans those (or every row) instead."""
        part, codes = sp.partition, sp.codes
        assert part is not None and codes is not None
        count = ivf.probe_count(part.lists)
        while count < part.lists and codes.shape[0] * count / part.lists < selected:
            lists = part.probe(q, count)
            idx, approx = self._scan_lists(part, lists, lambda lo, hi, out: approx_scores(codes[lo:hi], w, bias, out))
            rows = part.order[idx]
            ok = allowed[rows]
            if np.count_nonzero(ok) >= want:
                approx[~ok] = -np.inf
                return rows[top(approx, want)]
            count *= 4
        return None

    def _scan_lists(
        self, part: ivf.Partition, lists: np.ndarray, score: Callable[[int, int, np.ndarray], object]
    ) -> tuple[np.ndarray, np.ndarray]:
        """:func:`ivf.scan_lists`, the lists split in two halves of equal rows scanned concurrently when large."""
        sizes = part.offsets[lists + 1] - part.offsets[lists]
        total = int(sizes.sum())
        if total < self._parallel_rows or self._workers == 1 or lists.size < 2:
            return ivf.scan_lists(part, lists, score)
        pool = self._executor()
        cut = min(max(1, int(np.searchsorted(np.cumsum(sizes), total // 2))), lists.size - 1)
        later = pool.submit(ivf.scan_lists, part, lists[cut:], score)
        idx, out = ivf.scan_lists(part, lists[:cut], score)
        idx2, out2 = later.result()
        return np.concatenate((idx, idx2)), np.concatenate((out, out2))

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            with self._build_lock:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(self._workers - 1, thread_name_prefix="ragstep-knn")
        return self._pool

    def _matvec(self, matrix: np.ndarray, q: np.ndarray) -> np.ndarray:
        """``matrix @ q``, split into row blocks scored concurrently when the matrix is large."""
        if matrix.shape[0] < self._parallel_rows or self._workers == 1:
            return matrix @ q
        return self._scan(matrix.shape[0], lambda lo, hi, out: np.matmul(matrix[lo:hi], q, out=out))

    def _scan(self, n: int, score: Callable[[int, int, np.ndarray], object]) -> np.ndarray:
        """Scores of ``n`` rows; ``score(lo, hi, out)`` fills ``out`` for rows lo..hi (blocks run concurrently)."""
        out = np.empty(n, dtype=np.float32)
        if n < self._parallel_rows or self._workers == 1:
            score(0, n, out)
            return out
        pool = self._executor()
        bounds = [int(b) for b in np.linspace(0, n, self._workers + 1, dtype=np.int64)]
        futures = [pool.submit(score, lo, hi, out[lo:hi]) for lo, hi in itertools.pairwise(bounds[1:])]
        score(0, bounds[1], out[: bounds[1]])
        for f in futures:
            f.result()
        return out

    # -- snapshots -----------------------------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """The current immutable snapshot, rebuilt (or loaded from disk) when SQLite has moved on."""
        gen = self._generation()
        snap = self._snapshot
        if snap is not None and snap.generation == gen:
            return snap
        with self._build_lock:
            snap = self._snapshot
            gen = self._generation()
            if snap is None or snap.generation != gen:
                saved = load_snapshot(self._snap_root, gen, self.tokens_upgraded is None) if self._persist else None
                snap = saved or self._build_snapshot()
                self._snapshot = snap
            return snap

    def _build_snapshot(self) -> Snapshot:
        # streamed from SQLite, the vectors into the build folder (_build.py)
        self.snapshot_builds += 1
        build_dir = new_build_dir(self._snap_root) if self._persist else None
        try:
            fold = self.tokens_upgraded is None
            snap = stream_snapshot(self._conn(), build_dir, self._storage, self._ivf_min_rows, fold)
        except BaseException:
            if build_dir is not None:
                shutil.rmtree(build_dir, ignore_errors=True)
            raise
        if self._persist:
            save_snapshot(snap, self._snap_root, build_dir)
        return snap


__all__ = ["BM25_B", "BM25_K1", "PARALLEL_ROWS", "LocalSearchIndex"]
