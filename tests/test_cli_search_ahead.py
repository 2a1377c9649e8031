"""``ragstep search`` embeds the query with the embedded model while it imports the rest (issue #23), and
``ragstep bench cli`` times it in fresh processes against the floor of the stack.

The early embedding is an optimisation only: the same results as the search that embeds the query itself, and
where the plain catalog read does not apply (a setting in the environment, another model, no ``--kb``), nothing
happens early.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from conftest import run_cli
from ragstep.adapters.embedders import DEFAULT_LOCAL_MODEL, LocalEmbedder
from ragstep.bench.cli import FLOOR, run_cli_bench
from ragstep.entry.cli.search import embedder_ahead
from ragstep.errors import InputError

LOCAL_ID = f"local:{DEFAULT_LOCAL_MODEL}"
QUERY = "How do I write a compiled plugin for the JavaScript runtime?"
DOCS = {
    "node.md": "Node-API is the stable C interface for building native addons that Node.js loads as libraries.",
    "flour.md": "Sift two cups of flour with a pinch of salt before folding in the beaten eggs.",
    "tides.md": "Tides rise and fall twice a day as the moon's gravity pulls the oceans.",
}


@pytest.fixture(scope="module")
def e5() -> LocalEmbedder:
    return LocalEmbedder()


@pytest.fixture
def data_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str], plain_environment: None) -> Path:
    """A knowledge base on the default (local) model, ``handbook``, and a keyword-only one, ``words``."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in DOCS.items():
        (docs / name).write_text(text, encoding="utf-8")
    data = tmp_path / "data"
    at = ["--data-dir", str(data)]
    assert run_cli(capsys, *at, "kb", "create", "handbook")[0] == 0
    assert run_cli(capsys, *at, "kb", "create", "words", "--embedding-model", "none")[0] == 0
    for kb in ("handbook", "words"):
        assert run_cli(capsys, *at, "ingest", str(docs), "--kb", kb)[0] == 0
    return data


def args_for(data_dir: Path, *kbs: str, query: str = QUERY) -> argparse.Namespace:
    return argparse.Namespace(data_dir=str(data_dir), kb=list(kbs), query=query)


# -- the adapter ---------------------------------------------------------------------------------------------------


def test_a_query_embedded_ahead_is_the_query_embedded_then(e5: LocalEmbedder) -> None:
    other = LocalEmbedder()
    other.embed_query_ahead(QUERY)
    ahead = other.embed_query(QUERY)
    assert np.array_equal(ahead, e5.embed_query(QUERY))
    # Taken once: the next call embeds again (the same vector), and nothing is kept for it.
    assert np.array_equal(other.embed_query(QUERY), ahead)
    assert other._ahead == {}
    # Another text is embedded as itself, not served the one embedded ahead.
    other.embed_query_ahead(QUERY)
    assert np.array_equal(other.embed_query("tides and the moon"), e5.embed_query("tides and the moon"))


# -- the command line ----------------------------------------------------------------------------------------------


def test_the_search_gets_the_model_of_its_knowledge_base_embedding_already(data_dir: Path) -> None:
    embedder = embedder_ahead(args_for(data_dir, "handbook"))
    assert isinstance(embedder, LocalEmbedder) and embedder.model_id == LOCAL_ID
    assert list(embedder._ahead) == [QUERY]
    assert np.array_equal(embedder.embed_query(QUERY), LocalEmbedder().embed_query(QUERY))


def test_nothing_starts_early_where_the_plain_read_does_not_apply(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert embedder_ahead(args_for(data_dir, "words")) is None  # keyword only: no model to load
    assert embedder_ahead(args_for(data_dir, "handbook", "words")) is None  # not one model
    assert embedder_ahead(args_for(data_dir, "no-such-kb")) is None  # the search reports it
    assert embedder_ahead(args_for(data_dir)) is None  # no --kb
    assert embedder_ahead(args_for(data_dir, "handbook", query="   ")) is None  # the request rejects it
    assert embedder_ahead(args_for(data_dir, "handbook", query="x" * 1001)) is None
    assert embedder_ahead(args_for(data_dir / "catalog.sqlite", "handbook")) is None  # a file: the search says so
    monkeypatch.setenv("RAGSTEP_EMBEDDING_TOP_K", "30")  # a setting the plain read does not interpret
    assert embedder_ahead(args_for(data_dir, "handbook")) is None


def test_the_results_are_those_of_the_search_that_embeds_the_query_itself(
    data_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def search() -> list[tuple[str, float, str]]:
        code, out, _ = run_cli(capsys, "--data-dir", str(data_dir), "search", QUERY, "--kb", "handbook", "--json")
        assert code == 0
        return [(r["id"], r["score"], r["knowledge_filename"]) for r in json.loads(out)["results"]]

    early = search()
    assert early and early[0][2] == "node.md"  # found by meaning: no word of the query is in node.md
    monkeypatch.setenv("RAGSTEP_EMBEDDING_TOP_K", "30")  # the default value, read by the ordinary path only
    assert embedder_ahead(args_for(data_dir, "handbook")) is None
    assert search() == early


# -- the benchmark -------------------------------------------------------------------------------------------------


def test_bench_cli_times_fresh_processes_and_the_floor(
    bench_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reuse = tmp_path / "kb"
    code, out, _ = run_cli(capsys, "bench", "cli", "--docs", "300", "--runs", "1", "--reuse", str(reuse),
                           "--bench-dir", str(bench_dir), "--json")  # fmt: skip
    assert code == 0
    report = json.loads(out)
    assert report["docs"] == 300 and report["vectors"] == "e5" and report["reused"] is False and report["build_s"] > 0
    names = ["search", "--help", "kb list", *(name for name, _ in FLOOR)]
    assert list(report["commands"]) == names
    for name in names:
        got = report["commands"][name]
        assert 0 < got["printed_ms"] <= got["exit_ms"] and got["cpu_ms"] > 0
    assert report["commands"]["search"]["target_ms"] == 300
    # The knowledge base is built once: a second run reads it from --reuse.
    code, out, _ = run_cli(capsys, "bench", "cli", "--docs", "300", "--runs", "1", "--reuse", str(reuse),
                           "--bench-dir", str(bench_dir))  # fmt: skip
    assert code == 0 and "300 chunks, e5 vectors (reused)" in out and "search over its floor" in out


def test_bench_cli_keeps_to_its_own_folder(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(InputError, match="not empty"):
        run_cli_bench(100, 1, reuse=other)
    assert (other / "notes.txt").read_text(encoding="utf-8") == "mine"
    (tmp_path / "built").mkdir()
    (tmp_path / "built" / "bench-cli.json").write_text(
        json.dumps({"docs": 50, "seed": 0, "vectors": "e5", "kb": "bench-latency"})
    )
    with pytest.raises(InputError, match="another run's"):
        run_cli_bench(100, 1, reuse=tmp_path / "built")
    with pytest.raises(InputError, match="--docs and --runs"):
        run_cli_bench(0, 1)
    with pytest.raises(InputError, match="--vectors one of e5, random"):
        run_cli_bench(100, 1, vectors="minilm")
