"""The shared tokenizer: jieba for Han runs, a regex for the rest, stopwords removed, NFKC + lower-case."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest

from ragstep.retrieval.text import build_jieba_cache, query_terms, stopwords, tokenize

SHARED = Path(__file__).resolve().parents[1] / "shared"


def test_english_words_lowercased_without_stopwords() -> None:
    assert tokenize("How do I install RAGStep on Linux? It's v2.0") == ["install", "ragstep", "linux", "v2", "0"]


def test_chinese_is_segmented_for_search() -> None:
    toks = tokenize("中华人民共和国的首都是北京")
    assert {"中华", "人民", "共和国", "中华人民共和国", "首都", "北京"} <= set(toks)
    assert "的" not in toks and "是" not in toks


def test_mixed_text_keeps_document_order() -> None:
    assert tokenize("用 Python 调用 OpenSearch 接口") == ["用", "python", "调用", "opensearch", "接口"]


def test_full_width_letters_fold_to_ascii() -> None:
    assert tokenize("ＡＷＳ Ｌａｍｂｄａ １２３") == ["aws", "lambda", "123"]


def test_query_terms_are_distinct_and_ordered() -> None:
    assert query_terms("lambda Lambda LAMBDA cold start") == ["lambda", "cold", "start"]


def test_stopword_lists_cover_both_languages() -> None:
    words = stopwords()
    assert {"the", "and", "的", "了"} <= words
    assert all("'" not in w for w in words)


def test_keep_stopwords_option() -> None:
    assert tokenize("the cat", keep_stopwords=True) == ["the", "cat"]


def test_dictionary_cache_round_trip(tmp_path: Path) -> None:
    import pickle

    path = build_jieba_cache(tmp_path / "sub" / "dict.pkl")
    freq, total = pickle.loads(path.read_bytes())
    assert total > 1_000_000 and freq["北京"] > 0
    assert not list((tmp_path / "sub").glob("*.tmp"))


def test_a_user_cache_from_an_earlier_version_is_rewritten_once(tmp_path: Path) -> None:
    # An earlier ragstep pickled its table class under another module path (ragstep.text, before the restructure):
    # loading it fails, and the cache must be rewritten, not left for jieba to rebuild its table on every start.
    import subprocess
    import sys

    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path), "PYTHONPATH": str(SHARED)}
    env.pop("RAGSTEP_JIEBA_CACHE", None)
    where = "from ragstep.retrieval import text; print(text._default_cache_path(), text._user_cache_path())"
    default, user = subprocess.run(
        [sys.executable, "-c", where], capture_output=True, text=True, env=env, check=True
    ).stdout.split()
    if default != user:
        pytest.skip("this checkout ships a packaged jieba table, which is used before the user cache")
    Path(user).parent.mkdir(parents=True)
    Path(user).write_bytes(b"\x80\x05cragstep.text\n_restore_prefix_freq\n)R.")  # a class this version lacks
    code = "from ragstep.retrieval import text; print(type(text.jieba_tokenizer().FREQ).__name__)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert proc.stdout.strip() == "PrefixFreq"
    with open(user, "rb") as fh:
        assert type(pickle.load(fh)[0]).__name__ == "PrefixFreq"


def test_text_below_the_first_han_character_needs_no_split() -> None:
    """tokenize() splits out Han runs only for text with a character from U+3400 on: no character below it is in
    the class, so the split it skips would have returned the text whole. An English corpus never compiles it."""
    from ragstep.retrieval.text import _han_runs

    _han_runs.cache_clear()
    assert tokenize("“Naïve” café — résumé of 5 APIs") == ["naive", "cafe", "resume", "5", "apis"]
    assert _han_runs.cache_info().misses == 0
    han = _han_runs()
    assert [cp for cp in range(0x3400) if han.search(chr(cp))] == []
    assert han.split("api文档 and 重置密码") == ["api", "文档", " and ", "重置密码", ""]
    assert tokenize("api文档") == ["api", "文档"]
