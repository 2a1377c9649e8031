"""The words a question and the sentence that answers it share, in any of the languages people ask in: the lexical
side of the model-free answerer (:mod:`ragstep.retrieval.answer_span`).

Keyword tokens (:func:`~ragstep.retrieval.text.query_terms`) drop English and Chinese function words only, and
English is the only language whose inflections are undone. A French, German or Spanish question read that way keeps
its question words and articles as terms ("comment", "les", "wie", "einen", "cómo", "que"), terms no sentence holds
and that the passages' rarity weighting counts as the rarest of all; and "lignes" / "ligne", "Zeilen" / "Zeile",
"muestro" / "muestra" count as different words. Its sentences then share a fraction of what an English question
shares with an English sentence, and the decision, read off English and Chinese sets, declines them. So, in the
question's language (:func:`~ragstep.models.message_language.message_language_of`):

* its **function words** are not terms (articles, pronouns, prepositions, conjunctions, auxiliaries and question
  words: closed classes of the grammar, the same for every topic, :data:`FUNCTION_WORDS`);
* French, German and Spanish words are compared by their first :data:`TRUNCATE` letters, accents folded: truncation
  to a word's first five characters is as good a stemmer for these languages as the rule-based ones (McNamee and
  Mayfield, "Character N-gram Tokenization for European Language Text Retrieval", Information Retrieval 2004; and
  later work on truncation stemming), and needs no rule per language; English keeps its suffix rule.

**Names** (:func:`names`) are what a question asks about by name: a capitalised word inside the question, a word
with a digit. German writes every noun with a capital ("Ordner", "Zeilen"): there a capital marks a name only when
the word is not written as a noun is (an acronym "SSH", an inner capital "McKenzie", a digit).

**Across languages** (an English question over a French manual page) a sentence shares only what no language
translates (names, options, numbers, borrowed words: "kill", "crontab"); the lexical share stays low there and the
semantic similarity carries the choice. Reading such a sentence over the shareable terms alone was tried: with the
language of a manual page's chunk read from its words (option lists are half English) and the shareable terms
often one or two, it made a single shared word a full match and answered unanswerable questions; and reading such
a sentence's missing share as what a sentence in the question's language typically shares (0.27 on answer-en)
turned declines into wrong answers on the newcomer's pages (crontab) and answered no more of the dev set's
cross-language questions: left out.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence

from ragstep.models.message_language import LETTERS, MessageLanguage, message_language_of
from ragstep.retrieval.latin_fold import fold_word
from ragstep.retrieval.text import query_terms, token_set

#: French, German and Spanish words are compared by this many first letters (module docstring).
TRUNCATE = 5

# Closed-class words of each language, accents as written (folded below to match the keyword tokens, which fold
# them too). English and Chinese ones are keyword search's own stopwords already.
_FUNCTION_WORDS: dict[MessageLanguage, str] = {
    "fr": "le la les l un une des du de d au aux à a ai as avons avez ont est es sont suis été être avoir ce cet "
    "cette ces c ça cela ceci celui celle ceux se s sa son ses leur leurs mon ma mes ton ta tes notre nos votre vos "
    "je tu il elle on nous vous ils elles me m te t lui y en que qu qui quoi quel quelle quels quelles lequel "
    "laquelle comment pourquoi où quand combien et ou mais donc or ni car dans par pour avec sans sous sur "
    "entre vers chez ne n pas plus moins très tout tous toute toutes peut peux pouvez faut dois doit faire "
    "fait si non oui",
    "de": "mache machen macht der die das den dem des ein eine einen einem "
    " einer eines kein keine keinen keinem keiner ich du er sie "
    "viel viele vielen "
    "es wir ihr man mich mir dich dir sich uns euch mein meine meinen meinem meiner sein seine seinen ihre ihren "
    "dein deine wie was wer wen wem wessen wo woher wohin warum weshalb wann welche welcher welches welchen welchem "
    "wieso ob ist sind bin bist war waren sein wird werden wurde wurden hat habe hast haben hatte kann kannst "
    "können muss musst müssen soll sollte darf will lässt lasse lassen und oder aber denn doch sondern dass mit "
    "von vom zu zum zur im in ins an am auf aus bei für über unter um nach vor ohne durch gegen bis nicht auch nur "
    "noch schon so da dann hier dort dies diese dieser dieses diesen diesem jede jeder jedes alle allen es",
    "es": "el la lo los las un una unos unas al del de a ante con contra hago hacer hace "
    " desde en entre hacia hasta para por "
    "según sin sobre tras y e o u ni pero sino que qué quién quiénes cuál cuáles cómo cuándo dónde cuánto cuánta "
    "cuántos cuántas por qué porque es son soy eres está están estoy fue ser estar hay ha han he has haber puedo "
    "puede pueden debo debe se me te le les nos os mi mis tu tus su sus yo él ella ellos ellas usted ustedes este "
    "esta estos estas ese esa esos esas esto eso no sí muy más menos todo todos toda todas cada si como lo",
}


def fold(word: str) -> str:
    """``word`` with its Latin letters' accents folded ("répertoires" -> "repertoires", "ß" -> "ss") as keyword
    tokens fold them (:func:`~ragstep.retrieval.latin_fold.fold_word`): the question's words, its sentences' tokens
    and the function words compare alike, and other scripts keep their marks as the tokens do."""
    return word if word.isascii() else fold_word(word)


FUNCTION_WORDS: dict[MessageLanguage, frozenset[str]] = {
    lang: frozenset(fold(w) for w in words.split()) for lang, words in _FUNCTION_WORDS.items()
}
#: The languages whose words are compared by truncation (module docstring).
_TRUNCATED: frozenset[MessageLanguage] = frozenset({"fr", "de", "es"})

_SUFFIX = re.compile(r"(?<=[a-z]{3})(?:ing|ed|es|s)$")

#: An attribute is asked with its adjective and stated with its noun ("how deep" / "an average depth of"): both
#: count as one term.
_ATTRIBUTES = {
    "deep": "depth",
    "high": "height",
    "tall": "height",
    "wide": "width",
    "long": "length",
    "heavy": "weight",
    "weigh": "weight",
    "old": "age",
    "far": "distance",
    "fast": "speed",
    "big": "size",
    "large": "size",
    "often": "frequency",
    "strong": "strength",
}


def stems(tokens: Iterable[str], language: MessageLanguage = "en") -> frozenset[str]:
    """The tokens as the question and its answer share them: accents folded; English words without their commonest
    inflection ("logs" / "log", "stayed" / "stay") and an attribute's adjective as its noun ("deep" / "depth");
    French, German and Spanish words (``language``: the question's) cut to their first :data:`TRUNCATE` letters
    ("lignes" / "ligne", "Zeilen" / "Zeile", "muestro" / "muestra"). Other scripts are left as they are."""
    out = set()
    truncate = language in _TRUNCATED
    for t in tokens:
        t = fold(t)
        if t.isascii():
            if truncate and t.isalpha():
                t = t[:TRUNCATE]
            else:
                t = _SUFFIX.sub("", t)
                t = _ATTRIBUTES.get(t, t)
        out.add(t)
    return frozenset(out)


def question_terms(question: str, language: MessageLanguage) -> frozenset[str]:
    """The question's terms (keyword tokens without ``language``'s function words), stemmed."""
    words = FUNCTION_WORDS.get(language, frozenset())
    return stems((t for t in query_terms(question) if fold(t) not in words), language)


_NAME = re.compile(r"[\w][\w.+-]*[\w]|\w")


def names(question: str, language: MessageLanguage | None = None) -> list[str]:
    """The names a question asks about (case-folded): words written with a capital inside the question ("Docker",
    "SSH", "Liwx", "Btrfs") and words with a digit ("ext4", "2025", "7"). A passage that does not hold one of them
    is about something else, however close its meaning: "How do I use it with Docker?" is not answered by a
    sentence about the same tool without Docker. The question's first word is capitalised as any sentence's is;
    in German (``language``, else read from the question) every noun is, so there only a capital a noun does not
    have marks a name (an acronym, an inner capital)."""
    german = (language or question_language(question)) == "de"
    out = []
    for k, match in enumerate(_NAME.finditer(question)):
        word = match.group(0)
        if word == "I" or not fold(word).isascii():
            continue
        capital = k > 0 and any(c.isupper() for c in word)
        if german and capital:
            capital = any(c.isupper() for c in word[1:])
        if any(c.isdigit() for c in word) or capital:
            out.append(word.casefold())
    return list(dict.fromkeys(out))


#: A question is read as French, German or Spanish when it holds at least this many of that language's function
#: words (:data:`FUNCTION_WORDS`) and letters only it uses (ñ, ¿, ß ...): one word several languages spell alike
#: ("mit" in "MIT OpenCourseWare", "die", "son") is no evidence, and reading an English question as German would
#: drop its words and take its nouns for names.
MIN_EVIDENCE = 2
_HAN = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_WORD = re.compile(r"[^\W\d_]+")


def question_language(question: str) -> MessageLanguage:
    """The language a question's words are read in: Chinese when it holds a Han character (its Latin words are
    names: "MIT OpenCourseWare指什么？"); French, German or Spanish when
    :func:`~ragstep.models.message_language.message_language_of` says so and it holds :data:`MIN_EVIDENCE` of the
    language's function words and letters; else English."""
    if _HAN.search(question):
        return "zh"
    language = message_language_of(question)
    if language in _TRUNCATED:
        words = FUNCTION_WORDS[language]
        lowered = question.lower().replace("\u2019", "'")
        held = sum(fold(w) in words for w in _WORD.findall(lowered)) + sum(c in LETTERS[language] for c in lowered)
        return language if held >= MIN_EVIDENCE else "en"
    return language


def term_weights(terms: frozenset[str], passages: Sequence[frozenset[str]]) -> dict[str, float]:
    """Each term's rarity among the passages: an IDF over the grounding (a term none holds weighs the most)."""
    n = len(passages)
    return {t: math.log(1 + (n + 1) / (sum(t in p for p in passages) + 0.5)) for t in terms}


class Coverage:
    """The rarity-weighted share of the question's terms a text holds (0 when the question has no terms), read in
    the question's language (module docstring)."""

    def __init__(self, question: str, passages: Sequence[str]) -> None:
        self.language = question_language(question)
        self.terms = question_terms(question, self.language)
        self.passage_terms = [stems(token_set(p), self.language) for p in passages]
        self.weight = term_weights(self.terms, self.passage_terms)
        self.total = sum(self.weight.values())
        self.by_passage = [self.of(terms) for terms in self.passage_terms]

    def of(self, tokens: frozenset[str]) -> float:
        if not self.total:
            return 0.0
        return sum(self.weight[t] for t in self.terms & stems(tokens, self.language)) / self.total
