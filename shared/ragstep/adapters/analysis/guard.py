"""Which SQL the data-analysis sandbox runs, decided by DuckDB's own parser (never by matching text).

A query is accepted only if:

1. the parser finds exactly one statement in it, and that statement is a ``SELECT`` (``WITH ... SELECT``, ``FROM t``
   and ``VALUES`` are SELECTs too). Comments and string literals cannot hide a second statement: the parser, not a
   regular expression, splits them;
2. its syntax tree (``json_serialize_sql``) reads only the loaded tables (``k_...``) and the CTEs it defines itself,
   in the scope it defines them. Table functions (``read_csv``, ``read_text``, ``glob``, ``range``, ``query`` ...),
   other kinds of table reference (``SUMMARIZE``/``SHOW``, ``PIVOT``), catalog or schema qualified names (another
   database, ``information_schema``, ``system``) and time travel (``AT``) are refused;
3. every function it calls is unqualified and not one that reads the environment, the configuration or the
   catalog, or runs SQL text (:data:`DENIED_FUNCTIONS`, :data:`DENIED_PREFIXES`).

This is the first line; the locked-down connection (no file system, network or extension; configuration locked) is
the second, and the time and memory limits bound what an accepted query can cost.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ragstep.models.analysis import AnalysisError

if TYPE_CHECKING:
    import duckdb

#: Longer SQL is refused before it is parsed (a generated query is a few hundred characters).
MAX_SQL_CHARS = 8000
#: Table references a query may use: stored tables (checked by name), joins, subqueries, ``VALUES`` and no FROM.
ALLOWED_TABLE_REFS = frozenset({"BASE_TABLE", "JOIN", "SUBQUERY", "EMPTY", "EXPRESSION_LIST"})
#: Scalar functions that read the process, the configuration or the catalog, change state, or run SQL text.
DENIED_FUNCTIONS = frozenset(
    {
        "getenv",
        "setseed",
        "nextval",
        "currval",
        "version",
        "platform",
        "user",
        "session_user",
        "current_user",
        "current_role",
        "txid_current",
        "query",
        "query_table",
        "read_text",
        "read_blob",
        "glob",
        "checkpoint",
        "force_checkpoint",
        "can_cast_implicitly",
        "has_table_privilege",
        "has_schema_privilege",
        "has_database_privilege",
        "pg_has_role",
        "col_description",
        "obj_description",
    }
)
#: Every ``current_*`` but these is about the session (settings, schema, query, user), not the time.
ALLOWED_CURRENT = frozenset(
    {"current_date", "current_time", "current_timestamp", "current_localtime", "current_localtimestamp"}
)
DENIED_PREFIXES = (
    "duckdb_",
    "pragma_",
    "current_",
    "read_",
    "json_execute",
    "json_serialize",
    "json_deserialize",
    "sql_",
    "enable_",
    "disable_",
    "which_secret",
    "pg_",
    "sqlite_",
    "postgres_",
    "mysql_",
    "parquet_",
    "iceberg_",
    "delta_",
    "icu_",
)


def refused(message: str) -> AnalysisError:
    return AnalysisError("refused", message)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]


def check_sql(con: duckdb.DuckDBPyConnection, sql: str, tables: Iterable[str]) -> str:
    """``sql`` when the sandbox may run it against ``tables`` (names, any case); else ``AnalysisError("refused")``."""
    import duckdb

    if not sql or not sql.strip():
        raise refused("the query is empty")
    if len(sql) > MAX_SQL_CHARS:
        raise refused(f"the query is {len(sql)} characters long; at most {MAX_SQL_CHARS}")
    if "\x00" in sql:
        raise refused("the query contains a NUL character")
    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as exc:
        raise refused(f"not valid SQL: {_first_line(exc)}") from None
    if len(statements) != 1:
        raise refused(f"exactly one statement is allowed; the parser found {len(statements)}")
    kind = statements[0].type
    if kind != duckdb.StatementType.SELECT:
        raise refused(f"only SELECT is allowed; this is a {kind.name} statement")
    try:
        row = con.execute("SELECT json_serialize_sql($sql)", {"sql": sql}).fetchone()
    except duckdb.Error as exc:
        raise refused(f"not valid SQL: {_first_line(exc)}") from None
    tree: dict[str, Any] = json.loads(row[0]) if row else {"error": True, "error_message": "no syntax tree"}
    if tree.get("error"):
        raise refused(f"not a plain SELECT: {tree.get('error_message') or tree.get('error_type')}")
    _walk(tree.get("statements") or [], frozenset(), frozenset(t.lower() for t in tables))
    return sql


def _cte_names(node: dict[str, Any]) -> set[str]:
    cte_map = node.get("cte_map")
    entries = cte_map.get("map") if isinstance(cte_map, dict) else None
    return {str(e.get("key", "")).lower() for e in entries or [] if isinstance(e, dict)}


def _check_ref(ref: Any) -> None:
    # A table function is refused by name when the walk reaches it.
    if isinstance(ref, dict) and ref.get("type") not in (*ALLOWED_TABLE_REFS, "TABLE_FUNCTION"):
        raise refused(f"reads from a {str(ref.get('type', 'unknown')).lower().replace('_', ' ')}; only the tables")


def _check_table(node: dict[str, Any], ctes: frozenset[str], allowed: frozenset[str]) -> None:
    name = str(node.get("table_name", "")).lower()
    qualified = bool(node.get("schema_name") or node.get("catalog_name"))
    if node.get("at_clause") is not None:
        raise refused("time travel (AT ...) is not allowed")
    if qualified:
        raise refused(f"table {name!r} is qualified with a schema or database; name the loaded tables only")
    if name not in allowed and name not in ctes:
        raise refused(f"table {name!r} is not one of the loaded tables ({', '.join(sorted(allowed)) or 'none'})")


def _check_function(node: dict[str, Any]) -> None:
    name = str(node.get("function_name", "")).lower()
    # The parser itself qualifies some built-ins with ``main`` (a list literal ``[1, 2]`` is ``main.list_value``):
    # that is the default schema, where an unqualified name resolves anyway; any other schema or catalog is refused.
    if node.get("schema") not in (None, "", "main") or node.get("catalog"):
        raise refused(f"function {name!r} is qualified with a schema or database")
    if name in ALLOWED_CURRENT:
        return
    if name in DENIED_FUNCTIONS or name.startswith(DENIED_PREFIXES):
        raise refused(f"function {name!r} is not allowed")


def _walk(node: Any, ctes: frozenset[str], allowed: frozenset[str]) -> None:
    """Check every node; CTE names count only inside the node that defines them (a CTE cannot cover a system
    table of the same name elsewhere in the query)."""
    if isinstance(node, list):
        for item in node:
            _walk(item, ctes, allowed)
        return
    if not isinstance(node, dict):
        return
    names = _cte_names(node)
    if names:
        ctes = ctes | names
    kind = node.get("type")
    if "from_table" in node:
        _check_ref(node["from_table"])
    if kind == "JOIN":
        _check_ref(node.get("left"))
        _check_ref(node.get("right"))
    if kind == "BASE_TABLE":
        _check_table(node, ctes, allowed)
    elif kind == "TABLE_FUNCTION":
        function = node.get("function") or {}
        raise refused(f"table function {str(function.get('function_name', '')).lower()!r} is not allowed")
    if node.get("class") in ("FUNCTION", "WINDOW", "BOUND_FUNCTION") and "function_name" in node:
        _check_function(node)
    for value in node.values():
        if isinstance(value, dict | list):
            _walk(value, ctes, allowed)
