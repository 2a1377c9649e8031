"""Keyword search that ignores the accents of Latin letters ("repertoires" finds "répertoires", and the reverse).

* The tokenizer folds Latin letters only: other scripts' tokens are exactly those of the tokenizer before folding.
* An index written before folding (``tests/data/index-tokenizer-1``: SQL dumps of a data dir that version wrote)
  upgrades its stored tokens when it is opened, or folds them in memory when it cannot write them.
* OpenSearch documents carry folded tokens, and queries ask for the unfolded form too, which documents indexed
  before folding hold (a scripted cluster on 127.0.0.1 matches terms as the ``whitespace`` analyzer does).
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ragstep.adapters.index._build import stream_snapshot
from ragstep.adapters.index._snapshot import load_snapshot, save_snapshot
from ragstep.adapters.index._tokens import fold_row_tokens, stored_version
from ragstep.adapters.index.local import LocalSearchIndex
from ragstep.adapters.index.opensearch import OpenSearchBackfillIndex, build_document, index_class
from ragstep.adapters.index.opensearch.tokens import UPGRADE_SCRIPT
from ragstep.app.search import new_state
from ragstep.context import Clients
from ragstep.entry.cli.main import main
from ragstep.index_capabilities import token_upgrade
from ragstep.models import Chunk, KnowledgeBase, KnowledgeBaseType, SearchRequest
from ragstep.ports import SearchFilter
from ragstep.retrieval.latin_fold import fold_text
from ragstep.retrieval.text import TOKENIZER_VERSION, keyword_terms, query_terms, tokenize
from ragstep.retrieval.token_vector import TokenVectorReranker
from ragstep.settings import Settings
from ragstep.stages.search import chunk_search
from support.scripted_http import RecordedRequest, ScriptedHTTPServer, ScriptedResponse

OLD_INDEX = Path(__file__).parent / "data" / "index-tokenizer-1"
ALL = SearchFilter()

# Texts in scripts whose marks change the word, with the tokens the tokenizer gave before folding existed (written out
# as that version printed them): kana with dakuten, Hangul, Cyrillic й/ё/ї/ґ, Devanagari, Thai, Arabic, Greek, Hebrew.
OTHER_SCRIPTS = {
    "がくせいはバスでガッコウへ行きます。パンダ": ["がくせいはバスでガッコウへ", "行", "きます", "パンダ"],
    "한국어 검색은 조사를 붙여 씁니다 값을": ["한국어", "검색은", "조사를", "붙여", "씁니다", "값을"],
    "Йогурт и ёлка: поиск по-русски": ["йогурт", "и", "ёлка", "поиск", "по", "русски"],
    "Їжак ґанок": ["їжак", "ґанок"],
    "नमस्ते दुनिया हिंदी खोज": ["नमस", "त", "द", "न", "य", "ह", "द", "ख", "ज"],
    "สวัสดีครับ การค้นหา": ["สว", "สด", "คร", "บ", "การค", "นหา"],
    "مرحبا بالعالم البحث": ["مرحبا", "بالعالم", "البحث"],
    "Αθήνα και Ελλάδα": ["αθήνα", "και", "ελλάδα"],
    "שָׁלוֹם עולם": ["ש", "לו", "ם", "עולם"],
}


@pytest.fixture(autouse=True)
def _keyword_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Defaults only, and new knowledge bases keyword-only: these tests are about what BM25 matches."""
    for key in list(os.environ):
        if key.startswith("RAGSTEP_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("RAGSTEP_EMBEDDER", "none")


# ---------------------------------------------------------------------------------------------------- the tokenizer


def test_latin_letters_fold_to_ascii() -> None:
    text = "Répertoires, Müller, Straße, canción, garçon, Ærø, Łódź, Đakovo, Œuvre, Þórr, phở, São, Ħal, Ağrı"
    assert tokenize(text) == [
        "repertoires", "muller", "strasse", "cancion", "garcon", "aero", "lodz", "dakovo", "oeuvre", "thorr", "pho",
        "sao", "hal", "agri",
    ]  # fmt: skip
    # "à" folds to the stopword "a" and goes, as an English "a" does; ASCII text is as before
    assert tokenize("Voilà à la maison") == ["voila", "la", "maison"]
    assert tokenize("The quick brown fox, 5 APIs") == tokenize("The quick brown fox, 5 APIs", fold=False)
    # fold=False is the tokenizer before folding
    assert tokenize("Répertoires à créer", fold=False) == ["répertoires", "à", "créer"]


def test_other_scripts_keep_their_tokens() -> None:
    for text, before in OTHER_SCRIPTS.items():
        assert tokenize(text) == before, text
        assert fold_text(text.lower()) == text.lower(), text
    mixed = "检索 café 中文 が й"
    assert tokenize(mixed) == ["检索", "cafe", "中文", "が", "й"]


def test_stored_tokens_fold_to_what_the_tokenizer_writes_now() -> None:
    texts = [
        "Les répertoires de données sont créés à la première exécution.",
        "Frau Müller wohnt in der Schloßstraße; Ærøskøbing, Łódź, phở bò.",
        "检索增强生成 RAG: café, naïve résumé — à propos",
        *OTHER_SCRIPTS,
    ]
    for text in texts:
        assert fold_row_tokens(" ".join(tokenize(text, fold=False))) == " ".join(tokenize(text)), text


def test_keyword_terms_ask_for_the_unfolded_form_too() -> None:
    assert query_terms("Où sont les répertoires ?") == ["ou", "sont", "les", "repertoires"]
    assert keyword_terms("Où sont les répertoires ?") == ["ou", "sont", "les", "repertoires", "où", "répertoires"]
    assert keyword_terms("where are the folders") == query_terms("where are the folders")


def test_keyword_terms_ask_for_both_spellings_of_a_german_umlaut() -> None:
    """German writes ä ö ü as ae oe ue without the letters: "Mueller" is "Müller" (token "muller"), "Groesse" is
    "Größe" ("grosse"). English words that hold the letter pairs are not taken for umlauts."""
    assert keyword_terms("Mueller") == ["mueller", "muller"]
    assert keyword_terms("Wie ist die Groesse?")[-2:] == ["groesse", "grosse"]
    assert keyword_terms("Müller") == ["muller", "müller", "mueller"]
    assert keyword_terms("Größe") == ["grosse", "größe", "groesse"]
    for english in ("queue timeout", "due date", "larvae of bees", "a poem", "Feuer und Dauer"):
        assert keyword_terms(english) == query_terms(english), english


def test_the_model_free_reranker_counts_folded_terms() -> None:
    # The reranker counts query terms in each candidate's normalised text: folded on both sides.
    reranker = TokenVectorReranker()
    docs = ["Les répertoires de données.", "Les fichiers de données."]
    for query in ("repertoires", "répertoires"):
        scores = reranker.rerank(query, docs)
        assert scores[0] > scores[1], (query, scores)


# ------------------------------------------------------------------------------------------------ the local index


def restore_old_data_dir(target: Path) -> Path:
    """The data dir of :data:`OLD_INDEX`, restored from its SQL dumps."""
    (target / "index").mkdir(parents=True)
    for dump, db in (("catalog.sql", target / "catalog.sqlite"), ("index.sql", target / "index" / "index.sqlite")):
        conn = sqlite3.connect(db)
        conn.executescript((OLD_INDEX / dump).read_text(encoding="utf-8"))
        conn.close()
    return target


def cli_search(capsys: pytest.CaptureFixture[str], data: Path, query: str) -> list[str]:
    capsys.readouterr()
    code = main(["--data-dir", str(data), "search", query, "--kb", "docs", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return [r["knowledge_filename"] for r in json.loads(out)["results"]]


def test_search_ignores_accents_both_ways(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "repertoires.md").write_text("# Répertoires\n\nLa commande crée les répertoires de données.\n", "utf-8")
    (docs / "cancion.txt").write_text("La canción más antigua del archivo.\n", "utf-8")
    (docs / "mueller.md").write_text("Frau Müller wohnt in der Schloßstraße.\n", "utf-8")
    (docs / "plain.txt").write_text("The cafe menu lists a creme brulee, written without accents.\n", "utf-8")
    (docs / "koeln.txt").write_text("Herr Schroeder faehrt nach Koeln zur Messe.\n", "utf-8")
    data = tmp_path / "data"
    assert main(["--data-dir", str(data), "kb", "create", "docs"]) == 0
    assert main(["--data-dir", str(data), "ingest", str(docs), "--kb", "docs"]) == 0
    # typed without the accents the documents have (the knowledge base has no vectors: keyword matches only)
    assert cli_search(capsys, data, "repertoires de donnees") == ["repertoires.md"]
    assert cli_search(capsys, data, "cancion") == ["cancion.txt"]
    assert cli_search(capsys, data, "Muller Schlossstrasse") == ["mueller.md"]
    # and the reverse: accents the document does not have
    assert cli_search(capsys, data, "crème brûlée au café") == ["plain.txt"]
    assert cli_search(capsys, data, "répertoires") == ["repertoires.md"]
    # German umlauts spelled out (ae oe ue), in the question or in the document
    assert cli_search(capsys, data, "Mueller") == ["mueller.md"]
    assert cli_search(capsys, data, "Schröder Köln") == ["koeln.txt"]


def test_an_index_written_before_folding_upgrades_when_opened(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = restore_old_data_dir(tmp_path / "data")
    db = data / "index" / "index.sqlite"
    with sqlite3.connect(db) as conn:
        assert stored_version(conn) == 1
        before = dict(conn.execute("SELECT id, tokens FROM chunks"))
        (gen_before,) = conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
    assert "répertoires" in before["e68a08817d8a570ba1746905e73ea169-0"].split()

    # What a user of the old version typed still finds the same documents; what they could not, now does.
    assert cli_search(capsys, data, "répertoires") == ["repertoires.md"]
    assert cli_search(capsys, data, "repertoires") == ["repertoires.md"]
    assert cli_search(capsys, data, "cancion indice") == ["cancion.txt"]
    assert cli_search(capsys, data, "Mueller Muller") == ["mueller.md"]
    assert cli_search(capsys, data, "crème brûlée") == ["plain.txt"]
    assert cli_search(capsys, data, "大熊猫") == ["panda.md"]

    with sqlite3.connect(db) as conn:
        assert stored_version(conn) == TOKENIZER_VERSION
        (gen_after,) = conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
        after = {
            cid: (tokens, json.loads(doc)) for cid, tokens, doc in conn.execute("SELECT id, tokens, doc FROM chunks")
        }
    # Every row as an ingest by this version writes it; nothing else changed; the generation moved on once.
    assert set(after) == set(before)
    for cid, (tokens, doc) in after.items():
        assert tokens == " ".join(tokenize(doc["index_text"] or doc["content"])), cid
    assert int(gen_after) == int(gen_before) + 1
    # Opening it again changes nothing.
    LocalSearchIndex(data / "index")
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone() == (gen_after,)


def test_unwritable_old_tokens_are_folded_in_memory(tmp_path: Path) -> None:
    """A database whose tokens could not be upgraded in place: the snapshot build folds them, and a snapshot saved
    from the unfolded tokens at the same generation is not mapped."""
    data = restore_old_data_dir(tmp_path / "data")
    conn = sqlite3.connect(data / "index" / "index.sqlite", isolation_level=None)
    snaps = tmp_path / "snapshots"
    old = stream_snapshot(conn, None, "float32", 1 << 30)
    assert "répertoires" in old.vocab and "repertoires" not in old.vocab
    save_snapshot(old, snaps)
    meta_path = snaps / f"gen-{old.generation}" / "meta.json"
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    del meta["tokenizer"]  # as the version before folding saved it
    meta_path.write_text(json.dumps(meta), encoding="utf-8")
    assert load_snapshot(snaps, old.generation, folded_only=True) is None
    assert load_snapshot(snaps, old.generation) is not None  # rows upgraded in place: a new generation anyway

    folded = stream_snapshot(conn, None, "float32", 1 << 30, fold_stored=True)
    upgraded = LocalSearchIndex(tmp_path / "copy")
    upgraded.replace_knowledge("k", [])  # an empty index of this version, then the old rows as this version writes
    rows = [json.loads(doc) for (doc,) in conn.execute("SELECT doc FROM chunks ORDER BY row")]
    for doc in rows:
        upgraded.replace_knowledge(doc["knowledge_id"], [Chunk.model_validate(doc)])
    assert set(folded.vocab) == set(upgraded.snapshot().vocab)
    assert "repertoires" in folded.vocab and "répertoires" not in folded.vocab


# ------------------------------------------------------------------------------------------------------ OpenSearch


def ok(body: Any) -> ScriptedResponse:
    return ScriptedResponse(200, body)


class TermCluster:
    """Answers the search stage's keyword requests as OpenSearch does for a ``whitespace``-analysed field and
    ``term`` queries: a document matches a term it holds exactly (scored by how many of the query's terms it holds)."""

    def __init__(self, docs: dict[str, dict[str, Any]]) -> None:
        self.docs = docs

    def __call__(self, req: RecordedRequest) -> ScriptedResponse:
        if req.method == "GET" and req.path.endswith("/_mapping"):
            return ok({"t": {"mappings": {"properties": {}}}})
        if req.path.endswith("/_count"):
            return ok({"count": len(self.docs)})
        if req.path.endswith("/_bulk"):
            return self.bulk(req)
        if (req.json or {}).get("sort"):  # a scan: every document after search_after, in chunk id order
            after = ((req.json or {}).get("search_after") or [""])[0]
            page = [(cid, d) for cid, d in sorted(self.docs.items()) if cid > after][: req.json["size"]]
            hits: list[dict[str, Any]] = [{"_id": cid, "_source": d, "sort": [cid, d["version"]]} for cid, d in page]
            return ok({"hits": {"hits": hits}})
        query = (req.json or {}).get("query", {})
        should = query.get("bool", {}).get("should")
        if should and all("term" in c and "tokens" in c["term"] for c in should):
            terms = {c["term"]["tokens"] for c in should}
            scored = [(cid, len(terms & set(d["tokens"].split()))) for cid, d in self.docs.items()]
            hits = [
                {"_id": cid, "_score": float(n), "_source": {"chunk_id": cid, "version": "v"}}
                for cid, n in sorted(scored, key=lambda p: -p[1])
                if n
            ]
            return ok({"hits": {"hits": hits}})
        # a fetch by chunk id: every document
        hits = [{"_id": cid, "_score": 0.0, "_source": d} for cid, d in self.docs.items()]
        return ok({"hits": {"hits": hits}})

    def bulk(self, req: RecordedRequest) -> ScriptedResponse:
        """``update`` actions with the token upgrade's script, run as Painless would: the new tokens only where the
        stored ones are the script's ``old``."""
        lines = [json.loads(line) for line in req.body.decode().splitlines()]
        items = []
        for meta, body in zip(lines[::2], lines[1::2], strict=True):
            doc_id = meta["update"]["_id"]
            params = body["script"]["params"]
            doc = self.docs.get(doc_id)
            if doc is None:
                items.append({"update": {"_id": doc_id, "status": 404, "error": {"type": "document_missing"}}})
                continue
            result = "noop" if doc["tokens"] != params["old"] else "updated"
            if result == "updated":
                doc["tokens"] = params["tokens"]
            items.append({"update": {"_id": doc_id, "status": 200, "result": result}})
        return ok({"took": 1, "errors": False, "items": items})


@pytest.fixture
def server() -> Iterator[ScriptedHTTPServer]:
    with ScriptedHTTPServer() as srv:
        yield srv


def test_opensearch_documents_carry_folded_tokens_and_queries_ask_for_both_forms(
    server: ScriptedHTTPServer, tmp_path: Path
) -> None:
    new = Chunk(id="new", knowledge_id="k1", knowledge_base_id="kb", content="Les répertoires de données.")
    old = Chunk(id="old", knowledge_id="k2", knowledge_base_id="kb", content="Anciens répertoires.")
    source = build_document(new, version="v")
    assert source["tokens"] == "les repertoires de donnees"
    # A document an earlier ragstep indexed holds the unfolded tokens (its tokenizer is tokenize(fold=False)).
    legacy = {**build_document(old, version="v"), "tokens": " ".join(tokenize(old.content, fold=False))}
    assert legacy["tokens"] == "anciens répertoires"
    server.set_fallback(TermCluster({"new": source, "old": legacy}))
    settings = Settings(
        data_dir=tmp_path / "data",
        index_backend="opensearch",
        opensearch_url=server.url,
        opensearch_index="t",
        opensearch_auth="none",
        opensearch_max_retries=0,
    )
    ctx = Clients(settings).context()
    ctx.catalog.create_kb(
        KnowledgeBase(id="kb", name="kb", type=KnowledgeBaseType.DOCUMENT, embedding_model="none", created_at=0.0)
    )

    def found(query: str) -> list[str]:
        state = chunk_search.run(new_state(SearchRequest(query=query, knowledge_base_ids=["kb"]), ctx), ctx)
        return sorted(r.id for r in state.search_results or [])

    start = len(server.requests)
    assert found("répertoires") == ["new", "old"]  # typed with accents: the old document still matches
    keyword = [r for r in server.requests[start:] if r.json and "should" in r.json.get("query", {}).get("bool", {})]
    assert keyword, [r.path for r in server.requests]
    assert {c["term"]["tokens"] for c in keyword[0].json["query"]["bool"]["should"]} == {"repertoires", "répertoires"}
    assert found("repertoires") == ["new"]  # the old one once `kb upgrade-tokens` (below) or a new ingest folds it


def test_opensearch_documents_indexed_before_get_folded_tokens_in_place(
    server: ScriptedHTTPServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chunks = {
        "a-old": "Anciens répertoires.",  # indexed before folding
        "b-new": "Les répertoires de données.",  # indexed since
        "c-ascii": "Plain words only.",
    }
    docs = {cid: build_document(Chunk(id=cid, knowledge_id=cid, knowledge_base_id="kb", content=text), version="v")
            for cid, text in chunks.items()}  # fmt: skip
    docs["a-old"]["tokens"] = " ".join(tokenize(chunks["a-old"], fold=False))
    cluster = TermCluster(docs)
    server.set_fallback(cluster)
    index = OpenSearchBackfillIndex(server.url, index="t", auth="none", max_retries=0, sleep=lambda _s: None)
    assert token_upgrade(index) is index

    start = len(server.requests)
    assert index.upgrade_tokens("kb") == (3, 1)
    assert docs["a-old"]["tokens"] == "anciens repertoires"
    (bulk,) = [r for r in server.requests[start:] if r.path.endswith("/_bulk")]
    meta, body = (json.loads(line) for line in bulk.body.decode().splitlines())
    assert meta == {"update": {"_id": "a-old", "retry_on_conflict": 3}}
    assert body["script"]["params"] == {"old": "anciens répertoires", "tokens": "anciens repertoires"}
    assert index.upgrade_tokens("kb") == (3, 0)  # nothing left to change: no second write
    assert [r for r in server.requests[start:] if r.path.endswith("/_bulk")] == [bulk]

    # A document re-ingested between the read and the write keeps the tokens it got (the script's guard: noop).
    docs["a-old"]["tokens"] = "anciens répertoires"
    answer_bulk = cluster.bulk

    def reingested_first(req: RecordedRequest) -> ScriptedResponse:
        docs["a-old"]["tokens"] = "nouveaux repertoires"
        return answer_bulk(req)

    cluster.bulk = reingested_first  # type: ignore[method-assign]
    assert index.upgrade_tokens("kb") == (3, 0)
    assert docs["a-old"]["tokens"] == "nouveaux repertoires"
    last = [r for r in server.requests if r.path.endswith("/_bulk")][-1]
    assert json.loads(last.body.decode().splitlines()[1])["script"]["source"] == UPGRADE_SCRIPT

    # Serverless collections cannot update in place: no such capability, and the command says what to do instead.
    assert token_upgrade(index_class("aoss")(server.url, index="t", flavour="aoss", auth="none")) is None
    data = tmp_path / "data"
    assert main(["--data-dir", str(data), "kb", "create", "docs"]) == 0
    capsys.readouterr()
    assert main(["--data-dir", str(data), "kb", "upgrade-tokens", "docs"]) == 0
    assert capsys.readouterr().out == "nothing to do: the local index folds stored tokens itself when it opens\n"
