"""The hierarchical bench's corpus and questions: built deterministically from documentation trees."""

from __future__ import annotations

from pathlib import Path

from ragstep.bench.viking import build_corpus, make_ambiguous_questions, make_questions, render, rst_to_markdown


def test_rst_headings_become_markdown_headings() -> None:
    text = "****\nTop\n****\n\nIntro.\n\nFirst part\n==========\n\nSub part\n--------\n\nMore\n==========\nx\n"
    assert rst_to_markdown(text) == "# Top\n\nIntro.\n\n## First part\n\n### Sub part\n\n## More\nx\n"


def test_questions_are_deep_headings_no_other_document_has(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "guide").mkdir(parents=True)
    (src / "guide" / "install.md").write_text("# Install\n\n## Offline wheel installs\n\n## See also\n\n## Notes\n")
    (src / "guide" / "proxy.rst").write_text("Proxy\n=====\n\nCorporate proxy settings\n------------------------\n")
    (src / "other.md").write_text("# Other\n\n## See also\n\n## Very first heading\n")
    out = tmp_path / "out"
    docs = build_corpus(out, {"tool": src})
    assert docs == ["tool/guide/install.md", "tool/guide/proxy.md", "tool/other.md"]
    # "See also" is in two documents, "Notes" is one word, each document's first heading is its title.
    assert make_questions(out, docs, 10) == [
        ("Offline wheel installs", "tool/guide/install.md"),
        ("Corporate proxy settings", "tool/guide/proxy.md"),
        ("Very first heading", "tool/other.md"),
    ]
    assert make_questions(out, docs, 2) == [
        ("Offline wheel installs", "tool/guide/install.md"),
        ("Corporate proxy settings", "tool/guide/proxy.md"),
    ]


def test_the_ambiguous_set_asks_shared_headings_with_the_folder_that_tells_them_apart(tmp_path: Path) -> None:
    src = tmp_path / "src"
    files = {
        "commands/npm-install.md": "# npm install\n\n## Synopsis\n\n## save-exact\n\n## [global](/using/config)\n",
        "commands/npm-ci.md": "# npm ci\n\n## Synopsis\n\n## global\n",
        "using/config.md": "# Config\n\n## save-exact\n\n## Offline wheel installs\n",
        "top.md": "# Top\n\n## save-exact\n",
    }
    for name, text in files.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_text(text)
    out = tmp_path / "out"
    docs = build_corpus(out, {"tool": src})
    # "save-exact" is in three documents: each deep one is told apart by its folder; top.md is too shallow. "Synopsis"
    # and "global" are shared within commands/ only (nothing tells them apart); a unique heading is the easy set's.
    assert make_ambiguous_questions(out, docs, 10) == [
        ("save-exact (commands)", "tool/commands/npm-install.md"),
        ("save-exact (using)", "tool/using/config.md"),
    ]


def test_the_report_names_the_questions_only_hierarchical_retrieval_missed() -> None:
    figures = {"questions": 3, "flat_recall_at_10": 0.667, "hierarchical_recall_at_10": 0.333, "flat_p50_ms": 9.0,
               "hierarchical_p50_ms": 20.0, "layered_max_tokens": 1990, "layered_p50_tokens": 1900, "answer_at_l2": 0.5,
               "flat_misses": [["Both", "b.md"]],
               "hierarchical_misses": [["Command Arguments", "manual/lang.md"], ["Both", "b.md"]]}  # fmt: skip
    result = {"documents": 3, "nodes": 5, "embedding_model": "none", "ingest_s": 0.1, "layers_s": 0.1, "budget": 2000,
              **figures, "ambiguous": {**figures, "hierarchical_misses": [], "flat_misses": []}}  # fmt: skip
    lines = render(result).splitlines()
    assert lines[2] == "  missed by hierarchical only (1): Command Arguments; by flat only: 0; by both: 1"
    assert lines[-1] == "  missed by hierarchical only (0): -; by flat only: 0; by both: 0"
