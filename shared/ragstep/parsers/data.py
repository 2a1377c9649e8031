"""Data files (``.csv``, ``.xlsx``) summarised with DuckDB: one :class:`DataFileSummary` per table or sheet.

Data files are not chunked as text. Ingestion indexes a summary (file, sheet, row count, columns with types, five
sample rows) and one entry per column (type, distinct count, sample values), and keeps the raw file in the blob
store, so the data-analysis stage can query it with DuckDB later.

* CSV: decoded like text files (:mod:`ragstep.parsers.text`: UTF-8, UTF-8 BOM, GB18030, Big5, else windows-1252,
  with the same note on the ingest row), then read by ``read_csv_auto`` with the whole file sampled for types
  (``sample_size=-1``), so a value late in the file cannot break the type guess.
* XLSX: every worksheet (chart sheets skipped) through ``read_xlsx`` of DuckDB's ``excel`` extension. The extension
  is loaded offline from the ``duckdb-extension-excel`` wheel (same version as DuckDB) by its path; without that
  package it falls back to ``LOAD excel`` (an extension installed earlier). A column whose cells do not all fit the
  type DuckDB infers from the first rows (``10``, ``12.5``, ``n/a``) is read as text instead of failing the sheet.
  Empty sheets are skipped; a file with no rows at all is an :class:`InputError`.
* Sample values are the first five distinct non-null values in file order; values longer than
  :data:`MAX_VALUE_CHARS` are shortened with ``…``. The sample-row table shows at most :data:`MAX_TABLE_COLUMNS`
  columns (the column list always has them all).
"""

from __future__ import annotations

import datetime as dt
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragstep.errors import InputError, RagstepError
from ragstep.parsers.base import ColumnSummary, DataFileSummary, ParsedDocument, ParseLimits, render
from ragstep.parsers.ooxml import local, open_package, read_part, relationships
from ragstep.parsers.text import read_text

if TYPE_CHECKING:
    import duckdb


SAMPLE_COUNT = 5
MAX_VALUE_CHARS = 80


# -- DuckDB --------------------------------------------------------------------------------------------------------


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _show(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, dt.datetime):
        text = value.isoformat(sep=" ")
    elif isinstance(value, dt.date | dt.time):
        text = value.isoformat()
    elif isinstance(value, bytes):
        text = value.hex()
    else:
        text = str(value)
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 1] + "…"


def connect() -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB that never downloads an extension (Lambda has no internet access and no home)."""
    import duckdb

    config: dict[str, Any] = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}
    if not os.environ.get("HOME"):
        config["home_directory"] = tempfile.gettempdir()
    return duckdb.connect(":memory:", config=config)


def excel_extension_path() -> Path | None:
    """The excel extension shipped by the ``duckdb-extension-excel`` wheel for this DuckDB version, if installed."""
    import duckdb

    try:
        import duckdb_extension_excel
    except ImportError:
        return None
    folder = Path(duckdb_extension_excel.__file__).parent
    path = folder / "extensions" / f"v{duckdb.__version__}" / "excel.duckdb_extension"
    return path if path.is_file() else None


def load_excel(con: duckdb.DuckDBPyConnection) -> None:
    import duckdb

    path = excel_extension_path()
    try:
        if path is not None:
            con.execute("LOAD '" + str(path).replace("'", "''") + "'")
        else:
            con.execute("LOAD excel")
    except duckdb.Error as exc:
        raise RagstepError(
            f"reading .xlsx needs DuckDB's excel extension: pip install duckdb-extension-excel=={duckdb.__version__}"
            f" ({str(exc).splitlines()[0]})"
        ) from exc


def summarize_table(
    con: duckdb.DuckDBPyConnection, table: str, filename: str, fmt: str, sheet: str | None
) -> DataFileSummary:
    """Summarise a DuckDB table (rows in file order: ``rowid`` follows insertion order)."""
    described = con.execute(f"DESCRIBE {table}").fetchall()
    names = [str(row[0]) for row in described]
    types = [str(row[1]) for row in described]
    row_count = con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]  # type: ignore[index]
    counts: list[Any] = []
    if names:
        parts = [f"count(DISTINCT {_quote(n)}), count(*) - count({_quote(n)})" for n in names]
        counts = list(con.execute(f"SELECT {', '.join(parts)} FROM {table}").fetchone() or ())
    columns = []
    for i, (name, type_) in enumerate(zip(names, types, strict=True)):
        q = _quote(name)
        samples = con.execute(
            f"SELECT {q} FROM {table} WHERE {q} IS NOT NULL GROUP BY {q} ORDER BY min(rowid) LIMIT {SAMPLE_COUNT}"
        ).fetchall()
        columns.append(
            ColumnSummary(name, type_, int(counts[2 * i]), int(counts[2 * i + 1]), tuple(_show(s[0]) for s in samples))
        )
    rows = con.execute(f"SELECT * FROM {table} ORDER BY rowid LIMIT {SAMPLE_COUNT}").fetchall()
    return DataFileSummary(
        filename, fmt, sheet, int(row_count), tuple(columns), tuple(tuple(_show(v) for v in row) for row in rows)
    )


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _document(
    filename: str, fmt: str, summaries: list[DataFileSummary], skipped: list[str], note: str = ""
) -> ParsedDocument:
    if not any(s.row_count for s in summaries):
        raise InputError(f"{filename}: the data file has no rows")
    kept = tuple(s for s in summaries if s.row_count)
    metadata: dict[str, Any] = {"skipped_sheets": skipped} if skipped else {}
    if note:  # how the text was decoded, when not plain UTF-8 (ragstep.parsers.text)
        metadata["note"] = note
    return ParsedDocument(filename, fmt, render(kept), tables=kept, metadata=metadata)


def parse_csv(data: bytes, filename: str) -> ParsedDocument:
    """A CSV's summary; ``metadata["note"]`` says how its text was decoded when that was a guess (windows-1252, or
    bytes that did not decode), as for a text file."""
    import duckdb

    text, note = read_text(data, filename)
    if not text.strip():
        raise InputError(f"{filename}: the document is empty")
    with tempfile.TemporaryDirectory(prefix="ragstep-csv-") as tmp:
        path = Path(tmp) / "data.csv"
        path.write_text(text, encoding="utf-8")  # DuckDB reads UTF-8; the other encodings are decoded above
        con = connect()
        try:
            con.execute("CREATE TABLE t AS SELECT * FROM read_csv_auto($path, sample_size = -1)", {"path": str(path)})
            summary = summarize_table(con, "t", filename, "csv", None)
        except duckdb.Error as exc:
            raise InputError(f"{filename}: not a readable CSV ({_first_line(exc)})") from exc
        finally:
            con.close()
    return _document(filename, "csv", [summary], [], note)


def xlsx_sheets(data: bytes, filename: str, limits: ParseLimits | None = None) -> list[str]:
    """The names of the workbook's worksheets, in tab order (chart sheets and dialog sheets left out). DuckDB
    inflates the sheets: the declared size of every part counts against ``limits`` first (:mod:`.ooxml`)."""
    with open_package(data, filename, "XLSX", limits) as package:
        package.charge_every_part()
        workbook = read_part(package, "xl/workbook.xml", filename, "XLSX")
        if workbook is None:
            raise InputError(f"{filename}: not a readable XLSX (no xl/workbook.xml)")
        rels = relationships(package, "xl/workbook.xml", filename, "XLSX")
    names = []
    for element in workbook.iter():
        if local(element.tag) != "sheet":
            continue
        rel_id = next((v for k, v in element.attrib.items() if local(k) == "id" and k.startswith("{")), "")
        rel_type = rels.get(rel_id, ("",))[0]
        if rel_type and not rel_type.endswith("/worksheet"):
            continue
        names.append(element.get("name", ""))
    return names


def read_sheet(con: duckdb.DuckDBPyConnection, table: str, path: str, sheet: str) -> bool:
    """Load one sheet into ``table``; False when the sheet is empty."""
    import duckdb

    args = {"path": path, "sheet": sheet}
    try:
        con.execute(f"CREATE TABLE {table} AS SELECT * FROM read_xlsx($path, sheet = $sheet)", args)
        return True
    except duckdb.BinderException as exc:
        if "No rows found" in str(exc):
            return False
        raise
    except duckdb.InvalidInputException as exc:
        if "Failed to parse cell" not in str(exc):
            raise
    # Mixed column types: read typed (bad cells become NULL) and as text; a column that lost values keeps text.
    con.execute("CREATE TEMP TABLE typed AS SELECT * FROM read_xlsx($path, sheet = $sheet, ignore_errors = true)", args)
    con.execute("CREATE TEMP TABLE raw AS SELECT * FROM read_xlsx($path, sheet = $sheet, all_varchar = true)", args)
    names = [str(row[0]) for row in con.execute("DESCRIBE typed").fetchall()]
    lost = con.execute(
        "SELECT " + ", ".join(f"count(r.{_quote(n)}) - count(t.{_quote(n)})" for n in names) + " FROM "
        "(SELECT *, row_number() OVER () AS __n FROM typed) t JOIN (SELECT *, row_number() OVER () AS __n FROM raw) r"
        " USING (__n)"
    ).fetchone()
    picks = [f"{'r' if lost and lost[i] else 't'}.{_quote(n)}" for i, n in enumerate(names)]
    con.execute(
        f"CREATE TABLE {table} AS SELECT {', '.join(picks)} FROM "
        "(SELECT *, row_number() OVER () AS __n FROM typed) t JOIN (SELECT *, row_number() OVER () AS __n FROM raw) r"
        " USING (__n) ORDER BY __n"
    )
    con.execute("DROP TABLE typed")
    con.execute("DROP TABLE raw")
    return True


def parse_xlsx(data: bytes, filename: str, limits: ParseLimits | None = None) -> ParsedDocument:
    import threading

    import duckdb

    limits = limits or ParseLimits()
    sheets = xlsx_sheets(data, filename, limits)
    if not sheets:
        raise InputError(f"{filename}: the workbook has no worksheets")
    summaries: list[DataFileSummary] = []
    skipped: list[str] = []
    with tempfile.TemporaryDirectory(prefix="ragstep-xlsx-") as tmp:
        path = Path(tmp) / "data.xlsx"
        path.write_bytes(data)
        con = connect()
        # The parse deadline: DuckDB stops between vectors when interrupted (the sheets' size is bounded above).
        timer = threading.Timer(limits.timeout_s, con.interrupt)
        timer.daemon = True
        timer.start()
        try:
            load_excel(con)
            for i, sheet in enumerate(sheets):
                try:
                    if not read_sheet(con, f"sheet_{i}", str(path), sheet):
                        skipped.append(sheet)
                        continue
                    summary = summarize_table(con, f"sheet_{i}", filename, "xlsx", sheet)
                except duckdb.InterruptException:
                    raise InputError(
                        f"{filename}: parsing the XLSX took longer than {limits.timeout_s:g}s "
                        "(RAGSTEP_PARSE_TIMEOUT_S); refused"
                    ) from None
                except duckdb.Error as exc:
                    raise InputError(f"{filename}: sheet {sheet!r} is not readable ({_first_line(exc)})") from exc
                if summary.row_count:
                    summaries.append(summary)
                else:
                    skipped.append(sheet)
        finally:
            timer.cancel()
            con.close()
    return _document(filename, "xlsx", summaries, skipped)
