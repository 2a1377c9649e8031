"""The data-analysis sandbox against hostile SQL: the security bar of the data-analysis issue, with its counts.

Every statement goes through the sandbox a request gets (:meth:`DuckDBAnalysis.session`: the guard, then the locked
connection, in a limited process of its own), as a model's SQL does; the corpus is ``tests/support/hostile_sql.py``
(the end-to-end corpus through the stage is ``tests/test_hostile_sql.py``). The bar: zero statements executed
outside the rules, zero reads outside the loaded tables, no statement running past the timeout plus one second.
The counts per category are printed (``-s``) and quoted in the README (Security, "Data analysis sandbox").
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ragstep.adapters.analysis.duckdb import DuckDBAnalysis, DuckDBSession, table_name
from ragstep.models.analysis import AnalysisError
from ragstep.ports import AnalysisSession
from support.hostile_sql import OWN, SECRET, hostile

TIMEOUT_S = 0.5


def _loaded(s: AnalysisSession, tmp_path: Path) -> AnalysisSession:
    (tmp_path / "secret.txt").write_text(SECRET, encoding="utf-8")
    data = tmp_path / "own.csv"
    data.write_text("city,price\n" + "".join(f"c{i % 7},{i}\n" for i in range(3000)), encoding="utf-8")
    s.load(OWN, str(data), "csv")
    s.lock()
    return s


@pytest.fixture
def session(tmp_path: Path) -> Iterator[AnalysisSession]:
    """The sandbox a request gets: a session process, each query in a limited process of its own."""
    s = _loaded(DuckDBAnalysis(memory_limit_mb=64, timeout_s=TIMEOUT_S, max_rows=200).session(), tmp_path)
    yield s
    s.close()


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[DuckDBSession]:
    """The same engine in this process (its connection reachable, to test the lock without the guard)."""
    s = DuckDBSession(memory_limit_mb=64, timeout_s=TIMEOUT_S, max_rows=200)
    _loaded(s, tmp_path)
    yield s
    s.close()


def test_no_hostile_statement_runs_reads_outside_or_hangs(
    session: AnalysisSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = hostile(tmp_path)
    counts: dict[str, dict[str, int]] = {}
    executed: list[str] = []
    slow: list[tuple[str, float]] = []
    for category, statements in cases.items():
        tally = counts.setdefault(category, {"total": 0})
        for sql in statements:
            tally["total"] += 1
            started = time.perf_counter()
            try:
                session.query(sql)
                executed.append(sql)
            except AnalysisError as exc:
                tally[exc.reason] = tally.get(exc.reason, 0) + 1
                # Only the resource hogs may get past the parser: they must stop at a limit, and nothing else may.
                hit_limit = exc.reason == "timeout" or "needs more than" in exc.message
                assert hit_limit == (category == "resource_limits"), (sql, exc.reason, exc.message)
                assert exc.reason == "refused" or category == "resource_limits", (sql, exc.message)
                assert SECRET not in exc.message
            elapsed = time.perf_counter() - started
            if elapsed > TIMEOUT_S + 1:
                slow.append((sql, elapsed))
    total = sum(c["total"] for c in counts.values())
    with capsys.disabled():
        print(f"\nhostile statements: {total}")
        for category, tally in counts.items():
            print(f"  {category}: {tally}")
    assert total >= 200
    assert not executed, executed
    assert not slow, slow
    # Nothing was written, and the loaded table is whole.
    assert not (tmp_path / "out.csv").exists() and not (tmp_path / "export").exists()
    assert not (tmp_path / "evil.db").exists()
    result = session.query(f"SELECT count(*) AS n, count(DISTINCT city) AS c FROM {table_name(OWN)}")
    assert result.rows == (("3000", "7"),)


def test_the_locked_connection_refuses_on_its_own(engine: DuckDBSession, tmp_path: Path) -> None:
    """The second line: statements the guard would refuse fail on the locked connection too (run here without the
    guard, on the session's connection, to show the lock holds by itself)."""
    import duckdb

    con = engine._con  # the sandbox's connection, bypassing the guard on purpose
    secret = tmp_path / "secret.txt"
    for sql in (
        f"SELECT * FROM read_csv('{secret}')",
        f"SELECT * FROM read_text('{secret}')",
        "SELECT * FROM glob('/etc/*')",
        f"COPY {table_name(OWN)} TO '{tmp_path / 'out.csv'}'",
        f"ATTACH '{tmp_path / 'evil.db'}'",
        "INSTALL httpfs",
        "LOAD excel",
        "SET enable_external_access = true",
        "SET lock_configuration = false",
        "SET threads = 4",
        "RESET memory_limit",
        "SELECT * FROM 'https://example.com/x.csv'",
    ):
        with pytest.raises(duckdb.Error):
            con.execute(sql).fetchall()
    assert not (tmp_path / "out.csv").exists() and not (tmp_path / "evil.db").exists()
    assert con.execute("SELECT current_setting('threads')").fetchone() == (1,)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT city, avg(price) AS avg_price FROM k_kown GROUP BY city ORDER BY city",
        "WITH t AS (SELECT * FROM k_kown WHERE price > 10) SELECT count(*) FROM t",
        "FROM k_kown SELECT max(price)",
        "SELECT city FROM K_KOWN WHERE city GLOB 'c*' LIMIT 3",
        "SELECT strftime(current_date, '%Y') AS y, (SELECT count(*) FROM k_kown) AS n",
        "SELECT a.city, count(*) FROM k_kown a JOIN (SELECT DISTINCT city FROM k_kown) b USING (city) GROUP BY 1",
        "SELECT city, row_number() OVER (PARTITION BY city ORDER BY price DESC) AS r FROM k_kown QUALIFY r = 1",
        "SELECT 1 -- a comment; DROP TABLE k_kown",
        "SELECT 'DROP TABLE k_kown; --' AS text",
    ],
)
def test_ordinary_analysis_queries_run(session: AnalysisSession, sql: str) -> None:
    result = session.query(sql)
    assert result.columns and result.rows and not result.truncated


def test_rows_are_capped_and_the_cap_noted(session: AnalysisSession) -> None:
    result = session.query("SELECT * FROM k_kown")
    assert len(result.rows) == 200 and result.truncated
    assert result.columns == ("city", "price") and result.rows[0] == ("c0", "0")


def test_loading_after_the_lock_is_refused(session: AnalysisSession, tmp_path: Path) -> None:
    with pytest.raises(AnalysisError, match="locked"):
        session.load("later", str(tmp_path / "secret.txt"), "csv")
