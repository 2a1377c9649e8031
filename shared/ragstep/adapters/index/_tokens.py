"""The local index's stored tokens across tokenizer versions (:data:`ragstep.retrieval.text.TOKENIZER_VERSION`).

Every chunk row keeps its tokens (``chunks.tokens``: what BM25 and the snapshot's vocabulary are built from), and the
``meta`` table says which tokenizer wrote them (key ``tokenizer``; a database without the key was written by version 1,
which did not fold accents). An index written before folding would otherwise answer a folded query term
("repertoires") with nothing where it holds "répertoires", so :func:`upgrade_stored_tokens` brings it up to date when
the index is opened:

* in one write transaction, every row's tokens are folded as the current tokenizer would write them
  (:func:`ragstep.retrieval.latin_fold.fold_stored_tokens`: equal to tokenizing the chunk's text again, without
  jieba), the stamp is set and, when a row changed, the generation is bumped so no snapshot of the old tokens is used
  again. A crash or a full disk rolls it all back: the old tokens stay, stamped as old, and the next open tries again.
  Rows are read in batches of :data:`_BATCH`, so memory stays bounded on a large index;
* two processes opening the same old index at once queue on SQLite's write lock; the second finds the stamp set;
* a database that cannot be written (a read-only data dir) keeps its old tokens, and the snapshot build folds them in
  memory instead (``fold_stored`` of :func:`ragstep.adapters.index._build.stream_snapshot`), so searches match the
  same either way; only a snapshot saved as folded is then mapped from disk (:func:`._snapshot.load_snapshot`).

Processes of two versions writing one data dir are not supported: rows an earlier version writes after the upgrade
keep unfolded tokens (queries still find them typed with accents, :func:`ragstep.retrieval.text.keyword_terms` asking
for both forms, and ingesting them again folds them).

The S3-snapshot index's generations are local index folders: a reader's copy upgrades when it is opened, and the next
write to the knowledge base publishes an upgraded generation (``ragstep kb upgrade-tokens`` publishes one at once:
:meth:`ragstep.adapters.index.s3snapshot.S3SnapshotIndex.upgrade_tokens`).
"""

from __future__ import annotations

import contextlib
import sqlite3

from ragstep.adapters._sqlite import SqliteDatabase
from ragstep.errors import StorageError
from ragstep.retrieval.latin_fold import fold_stored_tokens
from ragstep.retrieval.text import TOKENIZER_VERSION, stopwords

__all__ = ["TOKENIZER_VERSION", "fold_row_tokens", "stored_version", "upgrade_stored_tokens"]

_KEY = "tokenizer"
#: Rows read and rewritten at a time within the upgrade's transaction.
_BATCH = 2000


def stored_version(conn: sqlite3.Connection) -> int:
    """The tokenizer version the stored tokens were written by (1 for a database from before the stamp)."""
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (_KEY,)).fetchone()
    return int(row[0]) if row else 1


def fold_row_tokens(tokens: str) -> str:
    """One row's stored tokens of version 1 as version 2 writes them."""
    return fold_stored_tokens(tokens, stopwords().__contains__)


def upgrade_stored_tokens(db: SqliteDatabase) -> int | None:
    """Bring the stored tokens up to :data:`TOKENIZER_VERSION` (module docstring): how many rows were rewritten (0
    when they were current, or written by a later version, left as they are), None when the database could not be
    written."""
    if stored_version(db.connection()) >= TOKENIZER_VERSION:
        return 0
    changed = 0
    try:
        with db.write() as conn:
            if stored_version(conn) >= TOKENIZER_VERSION:
                return 0  # another process upgraded it while this one waited for the lock
            last = -1
            while True:
                rows = conn.execute(
                    "SELECT row, tokens FROM chunks WHERE row > ? ORDER BY row LIMIT ?", (last, _BATCH)
                ).fetchall()
                if not rows:
                    break
                last = rows[-1][0]
                updates = [(new, row) for row, tokens in rows if (new := fold_row_tokens(tokens)) != tokens]
                conn.executemany("UPDATE chunks SET tokens = ? WHERE row = ?", updates)
                changed += len(updates)
            conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (_KEY, str(TOKENIZER_VERSION)))
            if changed:  # snapshots of the old tokens are of an older generation from now on
                conn.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation'")
    except StorageError:
        return None
    if changed:
        # Into the database file now, so a copy of the file alone (an S3-snapshot writer copies the folder without
        # the WAL) holds the upgrade. PASSIVE never waits: a busy reader only leaves it for SQLite's next checkpoint.
        with contextlib.suppress(sqlite3.Error):
            db.connection().execute("PRAGMA wal_checkpoint(PASSIVE)")
    return changed
