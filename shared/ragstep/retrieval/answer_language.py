"""A question asked in one language over sentences written in another: what the model-free answerer
(:mod:`ragstep.retrieval.answer_span`) can still read, and what it must not ask for.

People ask in their own language over documents written in another ("How do I number every line with cat?" over
Spanish manual pages, "用gzip压缩文件时怎么保留原文件？" over English ones). The embedding model is multilingual,
so meaning carries across; the other evidence the answerer reads does not, or not in the same way:

* **Words.** A Chinese question's words are never in an English sentence, and a French question shares with a German
  sentence only what no language translates (commands, options, numbers, names). The rarity-weighted share of the
  question's terms (:class:`~ragstep.retrieval.answer_terms.Coverage`) is then near zero for every foreign sentence,
  so it ranks every foreign sentence below native ones that merely share the topic's words -- first in choosing
  which sentences are embedded at all (:data:`~ragstep.retrieval.answer_span.MAX_SENTENCES`, chosen by that share):
  the answering sentence of a foreign passage was not even read. Foreign sentences get a budget of their own
  (:func:`embedding_budget`). Then in the decision: a term no retrieved sentence in the sentence's language holds is
  one the sentence could not hold whether it answers or not; it is unread, not absent. Such terms are credited with
  what an answering sentence holds of its question's terms when both are in one language (:data:`SHARED_BY_ANSWER`,
  read off the English and Chinese sets, not the multilingual one: :func:`read_across`); terms its language does
  hold (a command, an option, a number) count as for a native sentence. The selection does not take the credit: it
  compares sentences on what can be read of each, and credited foreign lines (an untranslated English line of a
  French page) displaced the native sentence that answers. Tried and left out: the share of only the terms its
  language holds (those are mostly the command the question is about, which every sentence of its page holds: a
  synopsis line "cp [OPCIÓN]..." became a full match and unanswerable questions were answered), and the passage's
  share for each of its sentences (chose licence lines).
* **Where similarities sit.** e5 reads a question as less close to a sentence in another language than to the same
  sentence in its own (by an offset that depends on the pair of languages), so native sentences that merely share
  the topic outrank the foreign one that answers. The retrieved sentences of each language, most of which do not
  answer, show where that language sits for this question (the same reading as the answerer's background): each
  foreign sentence's similarity is read relative to its own language's median and put on the scale of the
  question's language (:func:`aligned`). With no sentence in the question's language, a question in Latin letters
  over Chinese passages reads them at least where sentences in its own language would sit
  (:data:`NATIVE_BACKGROUND`): retrieved for the question, they are about its topic, and e5 reads an English
  question at about -0.3 from Chinese sentences on its topic (answer-zh-attr's passages asked in English: the median
  over questions), where English sentences on the topic sit at 0.3. Read as they were, English questions over
  Chinese passages were almost all declined (answering sentences at ~0.0 against a background of 0.3); read this
  way, they answer and decline about as the same questions asked in Chinese do. Within the Latin script there is no
  such distance to undo (an English question reads a French manual page's sentences as high as English ones: 0.43
  on crontab's), and raising the other way (a Chinese question over English pages only) answered one more question
  of the dev sets, wrongly (a synopsis line), and none rightly: both are left to the common median as before.
  With too few sentences of a language to say where it sits
  (:data:`~ragstep.retrieval.answer_span.MIN_BACKGROUND`), its similarities are left as they are.
* **Names.** A name asked in Latin letters is written in Chinese characters by a Chinese passage ("Mount Rainier" /
  "瑞尼尔山", "Sinosat-1" / "鑫诺一号"): across scripts only what a passage writes alike in any script is required
  of it -- numbers, acronyms ("SSH", "BCPL"), code identifiers (:func:`script_free_names`). Within the Latin
  script, names are written alike in every language and stay required.
* **Chinese counted words** (:mod:`ragstep.retrieval.answer_focus`: "多少员工" needs 员工) are Chinese words: a
  sentence in another language cannot hold them and is not asked to. The other way round, a count asked in English
  ("How many employees ...?") is answered by a Chinese sentence only with a count in a measure word ("3.2万人",
  "150头"), not a year or a date (:func:`~ragstep.retrieval.answer_focus.count_in_another_language`). The type of
  value asked for is read language-independently already (digits, units and number words of all five languages:
  :mod:`ragstep.retrieval.answer_types`).

What it does not do: a grounding of one short Chinese passage (fewer than
:data:`~ragstep.retrieval.answer_span.MIN_BACKGROUND` sentences) asked in English has too few sentences to show where
Chinese sits (:func:`aligned`), and unrelated sentences show no offset to borrow (e5 reads neutral English and
Chinese sentences alike from an English question; the distance is on the topic's sentences, ~0.6 for an answer in
English against ~0.2 in Chinese): such questions stay declined. Nor are names written in Latin letters checked
against a Chinese passage's transliteration (only what any script writes alike is).

A sentence's language is read from its own words when they say so (Han characters; at least :data:`MIN_EVIDENCE`
closed-class words, more of one language than of any other; options, paths and words in capitals are no evidence),
else from its passage's, else it is the question's (nothing changes where nothing says otherwise): a manual page's
option line ("-n, --number") is in its page's language, and a translated page's untranslated English paragraph is
English.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from ragstep.models.message_language import LETTERS, MessageLanguage
from ragstep.retrieval.answer_terms import FUNCTION_WORDS, Coverage, fold, identifiers, names, stems
from ragstep.retrieval.text import stopwords

#: A text is read as a language when it holds at least this many of its closed-class words (and letters only it
#: uses), more than of any other language's; one shared word ("a", "on", "die") is no evidence.
MIN_EVIDENCE = 2
#: The share of its question's weighted terms the sentence that answers holds when both are in one language: the
#: median over the correct answers of the English and Chinese sets (bench-sets/answer-en 0.30, answer-zh-attr 0.33,
#: answer-en-docs 0.45), rounded down. What a foreign sentence is credited for each term it cannot hold.
SHARED_BY_ANSWER = 0.3
#: Foreign sentences embedded per question besides the native budget (they cannot be ranked by shared words).
FOREIGN_SENTENCES = 16
#: Where the retrieved sentences that do not answer sit for a question in its own language, on the common scale
#: (:data:`~ragstep.retrieval.answer_span.DEFAULT_BACKGROUND`, read off answer-en): where Chinese sentences are
#: read from at least, asked in Latin letters with no sentence in the question's language (:func:`aligned`).
NATIVE_BACKGROUND = 0.3

_HAN = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_LATIN_WORD = re.compile(r"[^\W\d_]+")
# Options, addresses and paths are written alike in every language, in English words ("--show-all", "-vET"):
# they say nothing of the language of the sentence around them. Nor do a format's fields ("%y", "%Y": no Spanish
# "y") or Latin abbreviations ("e.g.": no Spanish "e").
_CODE = re.compile(
    r"(?<![\w])--?[\w][\w=\[\]-]*|<[^<>\s]+>|https?://\S+|\S*/\S+|%[-_0^#:]*[A-Za-z]|\b(?:e\.\s?g|i\.\s?e)\.",
    re.IGNORECASE,
)


def text_language(text: str) -> MessageLanguage | None:
    """``text``'s language when its words say so: Chinese when Han characters outnumber its Latin words, else the
    language of which it holds the most closed-class words (at least :data:`MIN_EVIDENCE`, strictly more than any
    other); None when they do not say."""
    han = len(_HAN.findall(text))
    text = _CODE.sub(" ", text)
    # A word in capitals is a placeholder or an acronym ("QUELLE ZIEL", "NUM"), not the sentence's grammar.
    words = [w for w in _LATIN_WORD.findall(text.replace("\u2019", "'")) if not (len(w) > 1 and w.isupper())]
    latin = [w.lower() for w in words if not _HAN.search(w)]
    if han and han >= len(latin):
        return "zh"
    english = stopwords()
    scores: dict[MessageLanguage, int] = {"en": sum(w in english for w in latin)}
    for language, closed in FUNCTION_WORDS.items():
        scores[language] = sum(fold(w) in closed for w in latin)
        scores[language] += sum(text.count(c) for c in LETTERS.get(language, ""))
    ranked = sorted(scores.items(), key=lambda kv: -kv[1])
    (best, top), (_, second) = ranked[0], ranked[1]
    return best if top >= MIN_EVIDENCE and top > second else None


def sentence_languages(
    sentences: Sequence[tuple[int, str]], passages: Sequence[str], default: MessageLanguage
) -> list[MessageLanguage]:
    """The language of each ``(passage number, sentence)``: its own words', else its passage's, else ``default``
    (the question's: a sentence nothing reads as another language is read as the question's, as before)."""
    of_passage: dict[int, MessageLanguage | None] = {}
    out: list[MessageLanguage] = []
    for n, text in sentences:
        language = text_language(text)
        if language is None:
            if n not in of_passage:
                of_passage[n] = text_language(passages[n - 1]) if n - 1 < len(passages) else None
            language = of_passage[n]
        out.append(language or default)
    return out


def embedding_budget(keys: Sequence[float], foreign: Sequence[bool], budget: int) -> list[int]:
    """Which candidates are embedded (in their order): the ``budget`` of highest ``keys`` (the share of the
    question's terms and the passage's score), and besides them up to :data:`FOREIGN_SENTENCES` foreign ones by
    the same key among themselves: a foreign sentence shares none of the question's words, so the key ranks it
    below every native sentence that shares one, however well its passage was retrieved."""
    order = sorted(range(len(keys)), key=lambda k: (-keys[k], k))
    kept = order[:budget]
    chosen = set(kept)
    kept += [k for k in order if foreign[k] and k not in chosen][:FOREIGN_SENTENCES]
    return sorted(kept)


def aligned(
    semantic: np.ndarray, languages: Sequence[MessageLanguage], question: MessageLanguage, minimum: int
) -> np.ndarray:
    """``semantic`` with each foreign language's similarities moved onto the question's language's scale: by the
    difference of the two languages' medians among these sentences (module docstring). The question's language
    is read from its own sentences when there are ``minimum`` of them, else from all, except for Chinese sentences
    read from a question in Latin letters with none in its language: those are raised to :data:`NATIVE_BACKGROUND`
    at least (module docstring). A language with fewer than ``minimum`` sentences is left as it is."""
    groups: dict[MessageLanguage, np.ndarray] = {}
    for language in dict.fromkeys(languages):
        groups[language] = np.array([lang == language for lang in languages])
    native = groups.get(question)
    if native is not None and int(native.sum()) >= minimum:
        reference = float(np.median(semantic[native]))
    elif len(semantic) >= minimum:
        reference = float(np.median(semantic))
    else:
        return semantic
    out = semantic.copy()
    for language, mask in groups.items():
        if language == question or int(mask.sum()) < minimum:
            continue
        median = float(np.median(semantic[mask]))
        if native is None and language == "zh":
            out[mask] += max(reference, NATIVE_BACKGROUND) - median
        else:
            out[mask] += reference - median
    return out


_ACRONYM = re.compile(r"^[A-Z0-9][A-Z0-9.+_-]*$")


def script_free_names(question: str, language: MessageLanguage) -> list[str]:
    """The names of ``question`` a passage in another script writes as the question does (case-folded): numbers,
    acronyms and words without a lower-case letter ("2008", "SSH", "BCPL"), code identifiers ("json.loads").
    A capitalised word ("Rainier", "Sinosat-1") is transliterated there, and not required."""
    written = {m.group(0).casefold(): m.group(0) for m in re.finditer(r"[\w][\w.+-]*[\w]|\w", question)}
    kept = [n for n in names(question, language) if _ACRONYM.match(written.get(n, n))]
    return kept + identifiers(question)


def naming_across(
    question: str,
    passages: Sequence[str],
    held: Sequence[bool],
    question_language: MessageLanguage,
) -> list[bool]:
    """Which passages hold the question's names (``held``: as
    :func:`~ragstep.retrieval.answer_terms.passages_naming` reads them), a Chinese passage asked by a question in
    Latin letters only for the names written alike in any script (:func:`script_free_names`): a Chinese question's
    names are the Latin words it writes as an English passage does, and stay required."""
    across: list[str] | None = None
    out = []
    for passage, ok in zip(passages, held, strict=True):
        if not ok and question_language != "zh" and text_language(passage) == "zh":
            if across is None:
                across = script_free_names(question, question_language)
            folded = passage.casefold()
            ok = all(n in folded for n in across)
        out.append(ok)
    return out


def unreadable_shares(
    coverage: Coverage,
    sentences: Sequence[frozenset[str]],
    languages: Sequence[MessageLanguage],
    question: MessageLanguage,
) -> dict[MessageLanguage, float]:
    """For each foreign language among ``languages`` (one per sentence's tokens in ``sentences``), the
    rarity-weighted share of the question's terms a sentence in it cannot be asked to hold: terms no retrieved
    sentence in that language holds (the question's own words, "fichier", "文件"; a word both languages write alike,
    "signal", is held and read as usual), numbers excepted (written alike everywhere; names are checked on their
    own: :func:`naming_across`)."""
    if not coverage.total:
        return {}
    held: dict[MessageLanguage, set[str]] = {}
    for tokens, language in zip(sentences, languages, strict=True):
        if language != question:
            held.setdefault(language, set()).update(stems(tokens, coverage.language) & coverage.terms)
    out: dict[MessageLanguage, float] = {}
    for language, terms in held.items():
        unreadable = [t for t in coverage.terms if t not in terms and not any(c.isdigit() for c in t)]
        out[language] = sum(coverage.weight[t] for t in unreadable) / coverage.total
    return out


def read_across(
    coverage: Coverage,
    sentences: Sequence[frozenset[str]],
    languages: Sequence[MessageLanguage],
    question: MessageLanguage,
) -> np.ndarray:
    """What each sentence's share of the question's weighted terms is credited for the terms its language cannot
    hold (:func:`unreadable_shares`): what an answering sentence in the question's own language holds of them,
    :data:`SHARED_BY_ANSWER`; 0 for a sentence in the question's language. Unread is not absent: without it, the
    decision declined a foreign sentence where the same sentence in the question's language would answer."""
    shares = unreadable_shares(coverage, sentences, languages, question)
    return np.array([SHARED_BY_ANSWER * shares.get(lang, 0.0) for lang in languages], dtype=np.float32)
