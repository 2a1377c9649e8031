"""The language of the fixed texts a user reads beside an answer: a decline, the empty response, the notes.

The prompts come in English and Chinese (:func:`ragstep.models.chat.language_of` picks them; a model asked in
French answers in French anyway). A fixed text has no model to translate it: a French question answered "The
retrieved passages do not answer this question." reads as a failure of the product. So those texts also come in
French, German and Spanish, the languages ragstep's users most often ask in besides those two, and this picks one.

How: Chinese as :func:`~ragstep.models.chat.language_of` says; otherwise each language scores the question's words
found among its closed-class words (articles, prepositions, pronouns, question words: the same for every topic)
plus the letters only it uses (ñ, ¿, ß, ç ...), and the best score wins over English's only when strictly higher.
A question of product names and code ("rm -rf?") has no such word: English, the default.
"""

from __future__ import annotations

import re
from typing import Literal

from ragstep.models.chat import Language, language_of

MessageLanguage = Literal["en", "zh", "fr", "de", "es"]

# Each language's closed-class words, space-separated (split once below).
_WORD_LISTS: dict[MessageLanguage, str] = {
    "en": "the is are was what how do does did i to of and can which where why when who it in on for with my this "
    "that an be should will would there",
    "fr": "le la les l des du un une est sont que qu qui quoi quel quelle quels quelles comment pourquoi où combien "
    "je il elle nous vous ce cette ces dans pour avec sans pas ne et ou sur faut peut mon ma mes d au aux c de en "
    "quand par si y",
    "de": "der die das den dem des ein eine einen einem einer ist sind wie was wer wo warum wann welche welcher "
    "welches ich kann muss wird werden mit von zu zum zur im auf für aus bei nicht und oder es sie man mich mein "
    "meine dass gibt in an als auch wenn",
    "es": "el la los las un una unos unas del al de es son qué cómo cuál cuáles dónde cuándo cuánto por para con "
    "sin se y o hay puedo mi mis está están como que lo le su en",
}
_WORDS = {lang: frozenset(words.split()) for lang, words in _WORD_LISTS.items()}
_OTHERS: tuple[MessageLanguage, ...] = ("fr", "de", "es")
#: Letters only that language uses among the five (ñ, ¿, ß, ç ...): evidence of it as its closed-class words are.
LETTERS: dict[MessageLanguage, str] = {"fr": "çœèêàùâîôûëï", "de": "ßäöü", "es": "ñ¿¡áíóú"}
_WORD = re.compile(r"[^\W\d_]+")


def message_language_of(text: str, language: Language | None = None) -> MessageLanguage:
    """``text``'s language among the five the fixed texts are written in; English when it is none of the others.

    ``language``: the one a pipeline already chose for its prompts (``state.chat.language``), which then decides
    between Chinese and the rest, so the texts never disagree with the prompts."""
    if (language or language_of(text)) == "zh":
        return "zh"
    lowered = text.lower().replace("\u2019", "'")
    words = _WORD.findall(lowered)
    scores = {lang: sum(w in vocabulary for w in words) for lang, vocabulary in _WORDS.items()}
    for lang, letters in LETTERS.items():
        scores[lang] += sum(lowered.count(ch) for ch in letters)
    best = max(_OTHERS, key=lambda lang: scores[lang])
    return best if scores[best] > scores["en"] else "en"
