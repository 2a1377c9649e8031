"""What a new user met: ``ragstep ingest`` tells a changed file (``updated``) from a first one (``indexed``) and shows
no row that is not an error under "error"; ``.json`` files in a document knowledge base are read as text; words a
manual page hyphenated at a line's end are found whole; a Spanish question's verb meets the page that does the task."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragstep.parsers import parse
from ragstep.parsers.text import join_hyphenated
from ragstep.retrieval.expansion import segments
from ragstep.retrieval.keyword_language import question_keyword_terms
from ragstep.retrieval.text import tokenize
from test_ingest_pipeline import Cli, write

FIELDS = ["path", "knowledge_id", "status", "chunks", "error", "note"]


@pytest.fixture(autouse=True)
def _plain_environment(plain_environment: None) -> None:
    pass


@pytest.fixture
def cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Cli:
    cli = Cli(tmp_path / "data", capsys)
    cli.ok("kb", "create", "docs", "--embedding-model", "none")
    return cli


def rows_of(table: str) -> dict[str, list[str]]:
    header, _rule, *rows, _summary = table.splitlines()
    assert header.split() == ["file", "status", "chunks", "note"]
    return {Path(row.split()[0]).name: row.split(None, 3)[1:] for row in rows}


def test_a_changed_file_is_updated_and_no_row_is_called_an_error(cli: Cli, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    write(docs, "kept.md", "# Kept\n\nThe kettle boils water for tea.\n")
    write(docs, "edited.md", "# Edited\n\nThe grinder makes coarse grounds.\n")
    first = cli.json("ingest", str(docs), "--kb", "docs")
    assert [(r["status"], r["note"]) for r in first] == [("indexed", ""), ("indexed", "")]

    write(docs, "edited.md", "# Edited\n\nThe grinder makes fine grounds for espresso.\n")
    write(docs, "added.md", "# Added\n\nThe scale weighs the beans.\n")
    write(docs, "copy.md", "# Kept\n\nThe kettle boils water for tea.\n")
    rows = rows_of(cli.ok("ingest", str(docs), "--kb", "docs"))
    assert rows == {
        "added.md": ["indexed", "1"],
        "copy.md": ["duplicate", "0", "duplicate of kept.md"],
        "edited.md": ["updated", "1", "replaced the version indexed before (1 chunk)"],
        "kept.md": ["unchanged", "1"],
    }

    # --json: every field it always had, with its old meaning, and the note besides.
    write(docs, "edited.md", "# Edited\n\nThe grinder makes medium grounds for filter coffee.\n")
    results = {Path(r["path"]).name: r for r in cli.json("ingest", str(docs), "--kb", "docs")}
    assert all(list(r) == FIELDS for r in results.values())
    edited = results["edited.md"]
    assert (edited["status"], edited["chunks"], edited["error"]) == ("updated", 1, "")
    assert edited["knowledge_id"] == next(r["knowledge_id"] for r in first if r["path"].endswith("edited.md"))
    assert results["copy.md"]["error"] == results["copy.md"]["note"] == "duplicate of kept.md"
    assert [results[n]["status"] for n in ("added.md", "kept.md")] == ["unchanged", "unchanged"]
    found = cli.json("search", "grinder grounds", "--kb", "docs")
    assert isinstance(found, dict)
    edited_text = "# Edited\n\nThe grinder makes medium grounds for filter coffee."
    assert [r["content"] for r in found["results"]] == [edited_text]


def test_json_files_are_read_as_text_in_a_document_knowledge_base(cli: Cli, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    config = {"service": "cold-start cache", "owner": "Caf\u00e9 team", "regions": ["eu-west-1"], "retries": 3}
    write(docs, "config.json", json.dumps(config))  # ASCII escapes: "Caf\\u00e9"
    faq = [{"standard_question": "How do I reset my password?", "similar_questions": ["forgot my password"],
            "answers": ["Use the Reset link on the sign-in page."]}]  # fmt: skip
    write(docs, "faq.json", json.dumps(faq))
    write(docs, "tsconfig.json", '{\n  // strict checks\n  "compilerOptions": {"strict": true}\n}\n')
    write(docs, "empty.json", "[]")
    run = cli("ingest", str(docs), "--kb", "docs")
    assert run.code == 2  # the empty one failed; the others are in
    rows = rows_of(run.out)
    assert rows["config.json"] == ["indexed", "1", "JSON read as text"]
    assert rows["faq.json"][:2] == ["indexed", "1"] and rows["faq.json"][2].startswith("a FAQ list read as text")
    assert rows["tsconfig.json"][:2] == ["indexed", "1"]
    assert rows["tsconfig.json"][2].startswith("not valid JSON (") and "read as plain text" in rows["tsconfig.json"][2]
    assert rows["empty.json"][:2] == ["failed", "0"] and "the document is empty" in rows["empty.json"][2]

    found = cli.json("search", "café team cache", "--kb", "docs")
    assert isinstance(found, dict)
    top = found["results"][0]
    assert top["knowledge_filename"] == "config.json" and '"owner": "Café team"' in top["content"]
    answer = cli.json("search", "reset password", "--kb", "docs")
    assert isinstance(answer, dict)
    assert answer["results"][0]["content"] == (
        "## How do I reset my password?\n\nAlso asked: forgot my password\n\nUse the Reset link on the sign-in page."
    )


def test_a_faq_knowledge_base_says_what_to_do_with_a_json_that_is_not_a_faq(cli: Cli, tmp_path: Path) -> None:
    cli.ok("kb", "create", "faq", "--type", "faq", "--embedding-model", "none")
    path = write(tmp_path, "settings.json", '{"theme": "dark"}')
    (row,) = cli.json("ingest", str(path), "--kb", "faq")
    assert row["status"] == "failed"
    assert "expected a non-empty JSON list of FAQ entries" in row["note"]
    assert "document knowledge base, which reads it as text" in row["note"]


# -- manual pages rendered to text ---------------------------------------------------------------------------------

# As `MANWIDTH=80 man -P cat gzip` prints it: groff hyphenates with U+2010 at the line's end.
GZIP_PAGE = (
    "DESCRIPTION\n"
    "       If you get an error when uncom\u2010\n"
    "       pressing a .Z file, do not assume that the .Z file is correct simply be\u2010\n"
    "       cause the standard uncompress does not complain.  For  MS\u2010\n"
    "       DOS, CR LF is converted to LF when compressing.\n"
)


def test_words_hyphenated_at_a_line_end_are_joined() -> None:
    text = join_hyphenated(GZIP_PAGE)
    assert "when uncompressing a .Z file" in text and "simply because the standard" in text
    assert "For  MS\u2010\n       DOS, CR" in text  # a capital goes on: a compound, kept as it is
    assert join_hyphenated("well-\nknown") == "well-\nknown"  # a plain hyphen may be a real one: left alone
    assert join_hyphenated("soft\u00ad\n  ware") == "software"
    assert parse(GZIP_PAGE.encode(), "gzip.txt").text == text
    # Inside a word, U+2010 separates as "-" does.
    assert tokenize("x\u2010ray non\u2010zero") == tokenize("x-ray non-zero")


def test_a_manual_page_is_found_by_a_word_it_hyphenated(cli: Cli, tmp_path: Path) -> None:
    path = write(tmp_path, "gzip.txt", GZIP_PAGE)
    cli.ok("ingest", str(path), "--kb", "docs")
    found = cli.json("search", "uncompressing", "--kb", "docs")
    assert isinstance(found, dict)
    (hit,) = found["results"]
    assert hit["knowledge_filename"] == "gzip.txt" and "when uncompressing a .Z file" in hit["content"]


# -- a Spanish question's verb -------------------------------------------------------------------------------------

TOOLS_ES = {
    "ls.txt": "ls - lista los archivos de un directorio\n\nMuestra los archivos y los subdirectorios, ordenados "
    "según su nombre.\n",
    "find.txt": "find - busca archivos en un árbol de directorios\n\nRecorre los subdirectorios y muestra los archivos "
    "cuyo nombre coincide con un patrón.\n",
    "cp.txt": "cp - copia archivos y directorios\n\nCopia un archivo en otro, o varios archivos en un directorio.\n",
}


def test_a_spanish_question_asks_for_the_forms_documents_write_of_its_verb() -> None:
    terms = question_keyword_terms("¿Cómo busco archivos por nombre?")
    assert {"busco", "buscar", "busca"} <= set(terms) and "comar" not in terms  # "cómo" is no verb
    assert {"cambiar", "cambia"} <= set(question_keyword_terms("¿Cómo cambio la fecha de un archivo?"))
    assert {"cuenta"} <= set(question_keyword_terms("¿Cómo cuento las palabras de un archivo?"))
    # English, and a lone Spanish-looking word, are left as they were.
    assert question_keyword_terms("How do I undo a commit in a git repo?") == ["undo", "commit", "git", "repo"]
    assert question_keyword_terms("photo con tripod") == ["photo", "con", "tripod"]
    # "ue" in a Spanish word is a diphthong, not a German umlaut spelled out; a German name keeps both spellings.
    spanish = question_keyword_terms("¿Puede el juego guardar la partida?")
    assert {"puede", "juego"} <= set(spanish) and not {"pude", "jugo"} & set(spanish)
    assert {"mueller", "muller"} <= set(question_keyword_terms("¿Quién es el señor Mueller?"))
    assert {"mueller", "muller"} <= set(question_keyword_terms("Wie finde ich Herrn Mueller?"))
    # Query expansion cuts a Spanish question at its opening mark too: no "¿cómo" variant.
    assert segments("¿cómo busco archivos por nombre?") == ["archivos", "nombre"]


def test_a_spanish_question_finds_the_tool_that_does_what_it_asks(cli: Cli, tmp_path: Path) -> None:
    for name, text in TOOLS_ES.items():
        write(tmp_path / "es", name, text)
    cli.ok("ingest", str(tmp_path / "es"), "--kb", "docs")
    found = cli.json("search", "¿cómo busco archivos por nombre?", "--kb", "docs")
    assert isinstance(found, dict)
    assert [r["knowledge_filename"] for r in found["results"]][:2] == ["find.txt", "ls.txt"]


def test_the_ingest_machines_last_stage_records_an_update_as_such(tmp_path: Path) -> None:
    # On AWS the state machine's last stage records the job (finish_job): the same outcomes as `ragstep ingest`.
    import hashlib

    from ragstep.app.ingest import new_ingest_state
    from ragstep.app.jobs import queue_ingestion
    from ragstep.app.knowledge_bases import create_knowledge_base
    from ragstep.app.s3_jobs import finish_job
    from ragstep.context import Clients
    from ragstep.pipeline import run_pipeline
    from ragstep.settings import Settings

    ctx = Clients(Settings(data_dir=tmp_path / "data")).context()
    kb = create_knowledge_base(ctx, "docs", embedding_model="none")
    outcomes = []
    for text in (b"# Notes\n\nThe first version.\n", b"# Notes\n\nThe second version, changed.\n"):
        digest = hashlib.sha256(text).hexdigest()
        key = f"uploads/{kb.id}/{digest}/notes.md"
        ctx.blobs.put(key, text, "text/markdown")
        job = queue_ingestion(ctx, kb, filename="notes.md", blob_key=key, content_hash=digest, size=len(text))
        state = new_ingest_state(kb, knowledge_id=job.knowledge_id, blob_key=key, filename="notes.md",
                                 title="notes", content_hash=digest, size=len(text))  # fmt: skip
        done = finish_job(ctx, run_pipeline("ingest", state.model_copy(update={"job_id": job.id}), ctx))
        assert done is not None
        outcomes.append((done.status, done.error, done.note, done.chunks))
    assert outcomes == [
        ("indexed", "", "", 1),
        ("updated", "", "replaced the version indexed before (1 chunk)", 1),
    ]
