"""The shared tokenizer: jieba for Han runs, a regex for the rest, stopwords removed, NFKC + lower-case."""

from __future__ import annotations

from pathlib import Path

from ragstep.retrieval.text import build_jieba_cache, query_terms, stopwords, tokenize


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
