"""The embedded search index: BM25 over jieba tokens and exact cosine kNN, persistent in a data dir.

Design
------
* **SQLite is the source of truth.** Every write (replace a knowledge item's chunks, delete, enable/disable) is one
  transaction that also bumps a ``generation`` counter, so a crash mid-write leaves the last committed state intact,
  and other processes see a consistent index (WAL mode: readers never block the writer).
* **Search runs on an immutable in-memory snapshot** built from SQLite: BM25 postings in CSC layout (per term: the
  rows that contain it and their term frequency) and one float32 matrix per embedding space. A query is a handful of
  numpy vector operations: ~1 ms of BM25 and ~8 ms of exact kNN at 100k chunks x 384 dims on a 2-core machine. A
  snapshot is never mutated; a rebuild makes a new one and swaps the reference, so concurrent readers in threads
  need no lock.
* **Snapshots are cached on disk** (``snapshots/gen-N``, written to a temp dir and renamed), so a new process -- the
  CLI, a Lambda cold start -- maps the arrays instead of rebuilding them. A snapshot whose generation differs from
  SQLite's is never used.
* A write invalidates the snapshot; the next search rebuilds it (lazily, so a batch of ingests pays once). Rebuilds
  are O(total tokens) in numpy: about a second per 100k chunks.

Keyword scores are normalised per query to the best hit (best = 1.0), which makes ``keyword_threshold`` mean the
same on any corpus; the raw BM25 score is kept in :attr:`Hit.raw_score`.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import shutil
import sqlite3
import tempfile
import threading
from array import array
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ragstep.adapters.index._replace import checked_replacement
from ragstep.errors import ConflictError, InputError, StorageError
from ragstep.models import Chunk
from ragstep.ports import Hit, IndexStats, SearchFilter
from ragstep.retrieval.text import tokenize

BM25_K1 = 1.5
BM25_B = 0.75
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
_MAX_MASKS = 64


class _Codes:
    """Dictionary-encodes a string column so filters become integer comparisons on numpy arrays."""

    def __init__(self, values: Sequence[str]) -> None:
        self.names = sorted(set(values))
        self.index = {name: i for i, name in enumerate(self.names)}
        self.codes = np.fromiter((self.index[v] for v in values), dtype=np.int32, count=len(values))

    @classmethod
    def restore(cls, names: list[str], codes: np.ndarray) -> _Codes:
        obj = cls.__new__(cls)
        obj.names, obj.index, obj.codes = names, {n: i for i, n in enumerate(names)}, codes
        return obj

    def isin(self, wanted: Sequence[str]) -> np.ndarray:
        found = [self.index[w] for w in wanted if w in self.index]
        if not found:
            return np.zeros(len(self.codes), dtype=bool)
        if len(found) == 1:
            return self.codes == found[0]
        return np.isin(self.codes, found)


@dataclass
class _Space:
    rows: np.ndarray  # positions (into the snapshot) of the chunks embedded in this space
    matrix: np.ndarray  # float32 (len(rows), dim), L2-normalised
    row_of: dict[int, int] | None = None  # position -> matrix row, built on first use


@dataclass
class _Snapshot:
    generation: int
    ids: list[str]
    kb: _Codes
    knowledge: _Codes
    tag: _Codes
    ctype: _Codes
    enabled: np.ndarray
    vocab: dict[str, int]
    indptr: np.ndarray  # int64 (V + 1,)
    post_rows: np.ndarray  # int32: rows containing each term, grouped by term
    post_tf: np.ndarray  # float32: term frequency for each posting
    norm: np.ndarray  # float32 per row: k1 * (1 - b + b * len / avgdl), precomputed for BM25
    spaces: dict[str, _Space]
    masks: dict[SearchFilter, np.ndarray] = field(default_factory=dict)
    _positions: dict[str, int] | None = None

    def position(self, chunk_id: str) -> int | None:
        if self._positions is None:  # built on first use: only the rerank stage needs it
            self._positions = {cid: i for i, cid in enumerate(self.ids)}
        return self._positions.get(chunk_id)

    @property
    def size(self) -> int:
        return len(self.ids)

    def mask(self, flt: SearchFilter) -> np.ndarray:
        cached = self.masks.get(flt)
        if cached is not None:
            return cached
        m = self.enabled.copy() if flt.enabled_only else np.ones(self.size, dtype=bool)
        if flt.knowledge_base_ids:
            m &= self.kb.isin(flt.knowledge_base_ids)
        if flt.knowledge_ids:
            m &= self.knowledge.isin(flt.knowledge_ids)
        if flt.tag_ids:
            m &= self.tag.isin(flt.tag_ids)
        if flt.chunk_types:
            m &= self.ctype.isin([str(t) for t in flt.chunk_types])
        if len(self.masks) >= _MAX_MASKS:
            self.masks.clear()
        self.masks[flt] = m
        return m


def _top(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest finite scores, best first (ties broken by position for determinism)."""
    finite = np.flatnonzero(np.isfinite(scores))
    if finite.size == 0:
        return finite
    if finite.size > k:
        part = np.argpartition(-scores[finite], k - 1)[:k]
        finite = finite[part]
    order = np.lexsort((finite, -scores[finite]))
    return finite[order]


class LocalSearchIndex:
    """The :class:`ragstep.ports.SearchIndex` of the embedded mode."""

    def __init__(self, root: Path, *, persist_snapshots: bool = True, parallel_rows: int = PARALLEL_ROWS) -> None:
        self.root = Path(root)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(
                f"cannot create the index folder {self.root}: {exc.strerror or exc}; pass --data-dir to a "
                "writable folder"
            ) from exc
        self._db_path = self.root / "index.sqlite"
        self._snap_root = self.root / "snapshots"
        self._persist = persist_snapshots
        self._local = threading.local()
        self._build_lock = threading.Lock()
        self._snapshot: _Snapshot | None = None
        self._workers = max(1, min(4, os.cpu_count() or 1))
        self._parallel_rows = parallel_rows
        self._pool: ThreadPoolExecutor | None = None
        self._conn()  # fail now, with a clear message, if the data dir cannot hold the database

    # -- connections and transactions ---------------------------------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            try:
                conn = sqlite3.connect(self._db_path, timeout=30.0, isolation_level=None)
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=FULL")
                conn.executescript(_SCHEMA)
            except sqlite3.Error as exc:
                raise StorageError(
                    f"cannot open the index {self._db_path}: {exc}; check the data dir is writable and not corrupt"
                ) from exc
            self._local.conn = conn
        return conn

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise StorageError(f"cannot write the index {self._db_path}: {exc}") from exc
        try:
            yield conn
            conn.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation'")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

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
            for i, c in enumerate(chunks)
        ]
        try:
            with self._write() as conn:
                conn.execute("DELETE FROM chunks WHERE knowledge_id = ?", (knowledge_id,))
                conn.executemany(
                    "INSERT INTO chunks (id, knowledge_id, knowledge_base_id, tag_id, chunk_type, chunk_index,"
                    " enabled, tokens, space, vector, doc) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    rows,
                )
        except sqlite3.IntegrityError as exc:
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
        if sp is None:
            return {}
        if sp.row_of is None:
            sp.row_of = {int(pos): i for i, pos in enumerate(sp.rows)}
        found: dict[str, int] = {}
        for cid in chunk_ids:
            pos = snap.position(cid)
            row = sp.row_of.get(pos) if pos is not None else None
            if row is not None:
                found[cid] = row
        if not found:
            return {}
        # One gather for all rows (a copy, in RAM even when the matrix is memory-mapped): indexing the memmap row by
        # row made a memmap object per chunk.
        block = np.asarray(sp.matrix[np.fromiter(found.values(), dtype=np.int64, count=len(found))])
        return dict(zip(found, block, strict=True))

    def stats(self) -> IndexStats:
        conn = self._conn()
        chunks, items = conn.execute("SELECT count(*), count(DISTINCT knowledge_id) FROM chunks").fetchone()
        spaces = dict(conn.execute("SELECT space, count(*) FROM chunks WHERE space IS NOT NULL GROUP BY space"))
        return IndexStats(chunks=chunks, knowledge_items=items, vector_spaces=spaces)

    def keyword_search(self, tokens: Sequence[str], flt: SearchFilter, top_k: int, threshold: float) -> list[Hit]:
        snap = self.snapshot()
        term_ids = [snap.vocab[t] for t in dict.fromkeys(tokens) if t in snap.vocab]
        if not term_ids or snap.size == 0 or top_k <= 0:
            return []
        n = snap.size
        acc = np.zeros(n, dtype=np.float32)
        for t in term_ids:
            lo, hi = snap.indptr[t], snap.indptr[t + 1]
            rows, tf = snap.post_rows[lo:hi], snap.post_tf[lo:hi]
            df = hi - lo
            idf = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
            # Rows are unique within one term's postings, so fancy-index += accumulates correctly.
            acc[rows] += idf * tf * (BM25_K1 + 1.0) / (tf + snap.norm[rows])
        acc[~snap.mask(flt)] = 0.0
        acc[acc <= 0.0] = -np.inf
        best = _top(acc, top_k)
        if best.size == 0:
            return []
        top_score = float(acc[best[0]])
        hits = []
        for pos in best:
            raw = float(acc[pos])
            score = raw / top_score
            if score < threshold:
                break  # best-first order: everything after scores lower
            hits.append(Hit(snap.ids[pos], score, raw))
        return hits

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
        allowed = snap.mask(flt)[sp.rows]
        selected = np.flatnonzero(allowed)
        if selected.size == 0:
            return []
        if selected.size < 0.5 * allowed.size:
            # A selective filter: score only the rows it lets through (copying them beats scoring them all).
            scores = self._matvec(sp.matrix[selected], q)
            rows = sp.rows[selected]
        else:
            scores = self._matvec(sp.matrix, q)
            scores[~allowed] = -np.inf
            rows = sp.rows
        scores[scores < threshold] = -np.inf
        best = _top(scores, top_k)
        return [Hit(snap.ids[rows[i]], float(scores[i]), float(scores[i])) for i in best]

    def _matvec(self, matrix: np.ndarray, q: np.ndarray) -> np.ndarray:
        """``matrix @ q``, split into row blocks scored concurrently when the matrix is large."""
        n = matrix.shape[0]
        if n < self._parallel_rows or self._workers == 1:
            return matrix @ q
        if self._pool is None:
            with self._build_lock:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(self._workers - 1, thread_name_prefix="ragstep-knn")
        out = np.empty(n, dtype=np.float32)
        bounds = np.linspace(0, n, self._workers + 1, dtype=np.int64)
        futures = [
            self._pool.submit(np.matmul, matrix[lo:hi], q, out=out[lo:hi]) for lo, hi in itertools.pairwise(bounds[1:])
        ]
        np.matmul(matrix[: bounds[1]], q, out=out[: bounds[1]])
        for f in futures:
            f.result()
        return out

    # -- snapshots -----------------------------------------------------------------------------------------------

    def snapshot(self) -> _Snapshot:
        """The current immutable snapshot, rebuilt (or loaded from disk) when SQLite has moved on."""
        gen = self._generation()
        snap = self._snapshot
        if snap is not None and snap.generation == gen:
            return snap
        with self._build_lock:
            snap = self._snapshot
            gen = self._generation()
            if snap is None or snap.generation != gen:
                snap = self._load_snapshot(gen) or self._build_snapshot()
                self._snapshot = snap
            return snap

    def _build_snapshot(self) -> _Snapshot:
        # Rows are streamed from one read transaction into arrays sized up front, rather than fetched all at once:
        # at 100k chunks, fetchall() held every 1.5 kB vector blob as bytes, a Python list held every token id,
        # and np.vstack + astype copied the matrix twice (683 MiB peak for the build; BENCHMARKS.md).
        conn = self._conn()
        conn.execute("BEGIN")  # one read transaction: generation and rows from the same committed state
        try:
            gen = self._generation()
            # Per space: the vectors' bytes back to back (one memcpy a row), their width, the rows holding them
            widths: dict[str, int] = {}
            blobs: dict[str, bytearray] = {}
            positions: dict[str, array[int]] = {}
            for name, width in conn.execute(
                "SELECT space, max(length(vector)) FROM chunks WHERE space IS NOT NULL GROUP BY space"
            ):
                widths[name], blobs[name], positions[name] = width, bytearray(), array("i")
            ids: list[str] = []
            kbs: list[str] = []
            knowledge: list[str] = []
            tags: list[str] = []
            ctypes: list[str] = []
            enabled = bytearray()
            # term -> id, a new term getting the next id, all in C (map + defaultdict + count): 3x the listcomp
            vocab_ids: defaultdict[str, int] = defaultdict(itertools.count().__next__)
            term_id = vocab_ids.__getitem__
            term_ids = array("q")
            lengths = array("q")
            rows = conn.execute(
                "SELECT id, knowledge_id, knowledge_base_id, tag_id, chunk_type, enabled, tokens, space, vector"
                " FROM chunks ORDER BY row"
            )
            for pos, (cid, kid, kb, tag, ctype, on, tokens, space, vector) in enumerate(rows):
                ids.append(cid)
                knowledge.append(kid)
                kbs.append(kb)
                tags.append(tag)
                ctypes.append(ctype)
                enabled.append(1 if on else 0)
                toks = tokens.split()
                lengths.append(len(toks))
                term_ids.extend(map(term_id, toks))
                if space is not None:
                    if len(vector) != widths[space]:
                        raise StorageError(
                            f"chunk {cid!r} has a {len(vector) // 4}-dimension vector in space {space!r}, whose "
                            f"others have {widths[space] // 4}; re-ingest its knowledge item"
                        )
                    blobs[space] += vector
                    positions[space].append(pos)
        finally:
            conn.execute("COMMIT")
        vocab = dict(vocab_ids)  # a plain dict from here: a lookup of an unknown term must not add it
        n = len(ids)
        lengths_np = np.frombuffer(lengths, dtype=np.int64) if n else np.zeros(0, dtype=np.int64)
        terms_np = np.frombuffer(term_ids, dtype=np.int64) if term_ids else np.zeros(0, dtype=np.int64)
        indptr, post_rows, post_tf = _csc_postings(terms_np, lengths_np, len(vocab))
        del term_ids, terms_np
        avgdl = float(lengths_np.mean()) if n and lengths_np.sum() else 1.0
        norm = (BM25_K1 * (1.0 - BM25_B + BM25_B * lengths_np / avgdl)).astype(np.float32)
        spaces = {}
        for name, blob in blobs.items():
            matrix = np.frombuffer(blob, dtype="<f4").reshape(-1, widths[name] // 4).astype(np.float32, copy=False)
            spaces[name] = _Space(np.frombuffer(positions[name], dtype=np.int32).copy(), matrix)
            del blob
        blobs.clear()

        snap = _Snapshot(
            generation=gen,
            ids=ids,
            kb=_Codes(kbs),
            knowledge=_Codes(knowledge),
            tag=_Codes(tags),
            ctype=_Codes(ctypes),
            enabled=np.frombuffer(bytes(enabled), dtype=np.uint8).astype(bool),
            vocab=vocab,
            indptr=indptr,
            post_rows=post_rows,
            post_tf=post_tf,
            norm=norm,
            spaces=spaces,
        )
        if self._persist:
            self._save_snapshot(snap)
        return snap

    def _save_snapshot(self, snap: _Snapshot) -> None:
        """Best effort: a read-only data dir or a full disk only costs the next process a rebuild."""
        final = self._snap_root / f"gen-{snap.generation}"
        if final.exists():
            return
        tmp: Path | None = None
        try:
            self._snap_root.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(dir=self._snap_root, prefix=".build-"))
            arrays = {
                "indptr": snap.indptr,
                "post_rows": snap.post_rows,
                "post_tf": snap.post_tf,
                "norm": snap.norm,
                "enabled": snap.enabled,
                "kb": snap.kb.codes,
                "knowledge": snap.knowledge.codes,
                "tag": snap.tag.codes,
                "ctype": snap.ctype.codes,
            }
            space_names = sorted(snap.spaces)
            for i, name in enumerate(space_names):
                arrays[f"space{i}_rows"] = snap.spaces[name].rows
                arrays[f"space{i}_matrix"] = snap.spaces[name].matrix
            for key, arr in arrays.items():
                np.save(tmp / f"{key}.npy", arr)
            terms = [""] * len(snap.vocab)
            for term, tid in snap.vocab.items():
                terms[tid] = term
            meta = {
                "generation": snap.generation,
                "spaces": space_names,
                "codes": {k: getattr(snap, k).names for k in ("kb", "knowledge", "tag", "ctype")},
                "ids": snap.ids,
                "terms": terms,
            }
            (tmp / "meta.json").write_text(json.dumps(meta, ensure_ascii=False), encoding="utf-8")
            os.replace(tmp, final)
        except OSError:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
            return
        for old in self._snap_root.glob("gen-*"):
            # Only older generations: another process may already have written a newer one.
            suffix = old.name.removeprefix("gen-")
            if suffix.isdigit() and int(suffix) < snap.generation:
                shutil.rmtree(old, ignore_errors=True)

    def _load_snapshot(self, gen: int) -> _Snapshot | None:
        folder = self._snap_root / f"gen-{gen}"
        if not self._persist or not folder.is_dir():
            return None
        try:
            meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))

            def arr(name: str) -> np.ndarray:
                return np.load(folder / f"{name}.npy", mmap_mode="r")

            codes = meta["codes"]
            spaces = {
                name: _Space(np.asarray(arr(f"space{i}_rows")), arr(f"space{i}_matrix"))
                for i, name in enumerate(meta["spaces"])
            }
            return _Snapshot(
                generation=gen,
                ids=meta["ids"],
                kb=_Codes.restore(codes["kb"], np.asarray(arr("kb"))),
                knowledge=_Codes.restore(codes["knowledge"], np.asarray(arr("knowledge"))),
                tag=_Codes.restore(codes["tag"], np.asarray(arr("tag"))),
                ctype=_Codes.restore(codes["ctype"], np.asarray(arr("ctype"))),
                enabled=np.asarray(arr("enabled")),
                vocab={t: i for i, t in enumerate(meta["terms"])},
                indptr=np.asarray(arr("indptr")),
                post_rows=arr("post_rows"),
                post_tf=arr("post_tf"),
                norm=np.asarray(arr("norm")),
                spaces=spaces,
            )
        except (OSError, ValueError, KeyError):
            return None  # damaged or half-deleted cache: rebuild from SQLite


def _csc_postings(term_ids: np.ndarray, lengths: np.ndarray, vocab_size: int) -> tuple[np.ndarray, ...]:
    """Postings grouped by term: ``indptr`` offsets, the rows holding each term and the term's frequency there."""
    n = len(lengths)
    if term_ids.size == 0:
        return np.zeros(vocab_size + 1, dtype=np.int64), np.zeros(0, np.int32), np.zeros(0, np.float32)
    rows = np.repeat(np.arange(n, dtype=np.int64), lengths)
    keys, counts = np.unique(term_ids * n + rows, return_counts=True)  # sorted by term, then row
    post_terms = keys // n
    indptr = np.zeros(vocab_size + 1, dtype=np.int64)
    np.cumsum(np.bincount(post_terms, minlength=vocab_size), out=indptr[1:])
    return indptr, (keys % n).astype(np.int32), counts.astype(np.float32)
