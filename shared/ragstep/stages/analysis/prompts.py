"""The data-analysis prompt and the Markdown the analysis becomes.

The prompt is WeKnora's (``chat_pipeline/data_analysis.go``: question, knowledge id, table schema; "determine if the
question requires data analysis ... if NO, leave the sql field empty"), with what its structured-output schema said
spelled out as text (the JSON object's fields), DuckDB named, and five sample rows per table added to the schema:
values show the model how dates and numbers are written (``2024-03-01``, ``12,500`` stored as text) before it writes
a query over them.
"""

from __future__ import annotations

from collections.abc import Sequence

from ragstep.models.analysis import DataTable, QueryResult
from ragstep.parsers.markdown import table

ANALYSIS_PROMPT = """
User Question: {query}
Knowledge ID: {knowledge_id}
Table Schema: {schema}

Determine if the user's question requires data analysis (e.g., statistics, aggregation, filtering) on this table.
If YES, generate a DuckDB SQL query to answer the user's question and fill in the knowledge_id and sql fields.
If NO, leave the sql field empty.

The query must be a single read-only SELECT statement over the tables named above (double-quote column names).
Return your response in the specified JSON format: {{"knowledge_id": "{knowledge_id}", "sql": "..."}}"""


def schema_description(tables: Sequence[DataTable]) -> str:
    """WeKnora's ``TableSchema.Description`` for each table (sheet), with its first rows as a Markdown table."""
    parts = []
    for t in tables:
        lines = [f"Table name: {t.name}"]
        if t.sheet is not None:
            lines.append(f"Sheet: {t.sheet}")
        lines += [f"Columns: {len(t.columns)}", f"Rows: {t.row_count}", "", "Column info:"]
        lines += [f"- {name} ({type_})" for name, type_ in t.columns]
        if t.sample_rows:
            lines += ["", f"First {len(t.sample_rows)} rows:", table([[n for n, _ in t.columns], *t.sample_rows])]
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def analysis_prompt(query: str, knowledge_id: str, tables: Sequence[DataTable]) -> str:
    return ANALYSIS_PROMPT.format(query=query, knowledge_id=knowledge_id, schema=schema_description(tables))


def result_markdown(filename: str, sql: str, result: QueryResult) -> str:
    """The passage the answer reads: which file, the SQL, and the result as a Markdown table (truncation noted)."""
    shown = len(result.rows)
    if result.truncated:
        count = f"the first {shown} rows; the query returned more"
    else:
        count = f"{shown} row{'s' if shown != 1 else ''}"
    lines = [f"Data analysis of {filename} (DuckDB SQL over the whole file)", "", "SQL:", "```sql", sql.strip(), "```"]
    lines += ["", f"Result ({count}):", ""]
    lines.append(table([list(result.columns), *result.rows]) if result.rows else "(no rows)")
    return "\n".join(lines)
