"""What keyword search asks for a question in Spanish: the forms documents write of its first-person verb.

Keyword tokens undo no language's inflections (:mod:`ragstep.retrieval.text`; a local index matches a word's
English inflections at search time, :mod:`ragstep.retrieval.inflection`). A Spanish question puts its verb in
the first person ("¿cómo **busco** archivos por nombre?", "¿cómo **cambio** la fecha?", "¿cómo **ordeno**
números?"), a form documents never write: a manual page or a tool's description says what it does in the infinitive
or the third person ("find - **buscar** archivos", "**busca** por nombre", "**cambia** la fecha"). The one word
naming the task met nothing, and the pages sharing the question's nouns ("archivos", "nombre": the page of ``ls``)
came first. English has no such gap: "how do I search" asks with the form documents write too; French writes its
first and third persons alike ("je cherche" / "il cherche").

So a question read as Spanish (:func:`~ragstep.retrieval.answer_terms.question_language`: two of its function words
or letters at least, so an English question with one "con" in it stays English) also asks, for each of its words
ending in the first person's ``-o`` (not a function word), for the stem plus ``-ar``, ``-er``, ``-ir`` (the
infinitive of each conjugation) and ``-a``, ``-e`` (the third person singular): the word alone does not say its
conjugation. A form no document holds adds nothing to BM25; a noun in ``-o`` ("archivo") asks for its verb's forms
("archivar"), the same topic. A stem that changes ("cuento" / "contar") meets its third person ("cuenta") only.

A Spanish or French question does not ask for the German umlauts its words' "ue" / "oe" / "ae" might spell
(:func:`~ragstep.retrieval.latin_fold.umlaut_forms`): in "puede" and "juego" they are a diphthong, and "pude" and
"jugo" other words. The names it gives keep them ("¿Quién es Mueller?" asks for "Müller" too).

Measured with ``ragstep bench quality --vectors e5`` (the default pipeline's nDCG@10, before -> after): twenty
first-person "¿Cómo ...?" questions over Debian's Spanish manual pages a-l 0.733 -> 0.886 (recall@10 0.90 ->
0.975); a held-out set of 34 manual-page questions in French, German, Spanish and English unchanged (0.863); the
accent sets of :mod:`ragstep.bench.accent_sets` unchanged (0.932; their hybrid run 0.944 -> 0.934, one question).
Leaving the question's function words out too ("cómo", "por") was tried: +0.02 on the multilingual set, -0.05 on
the first-person set, -0.01 on the accent sets: not kept.
"""

from __future__ import annotations

from ragstep.retrieval.answer_terms import FUNCTION_WORDS, names, question_language
from ragstep.retrieval.latin_fold import umlaut_forms
from ragstep.retrieval.text import keyword_terms, query_terms

#: The infinitive (three conjugations) and third-person singular endings a Spanish stem in ``-o`` takes.
SPANISH_ENDINGS = ("ar", "er", "ir", "a", "e")
#: A first-person form has a stem of at least this many letters ("uso", "veo", "leo" are too short to tell apart).
MIN_STEM = 3
#: Words ending in ``-o`` a question holds that are not its verb, besides the function words.
NOT_VERBS = frozenset((
    "cuanto", "donde", "todo", "algo", "mismo", "tanto", "poco", "mucho", "solo", "nuevo", "otro", "cuyo", "dicho",
    "ello", "aquello", "ninguno", "alguno", "primero", "segundo", "tercero", "cero", "uno", "dentro", "fuera",
    "encima", "debajo", "tampoco", "luego", "pronto",
))  # fmt: skip


def question_keyword_terms(query: str) -> list[str]:
    """What a search asks the index's keyword search for: :func:`~ragstep.retrieval.text.keyword_terms` (the
    query's tokens and their other spellings) and, for a Spanish question, the forms documents write of its
    first-person verbs (module docstring)."""
    asked = keyword_terms(query)
    terms = query_terms(query)
    spelled = set(umlaut_forms(terms)).difference(terms)
    if not spelled and not any(t[-1:] == "o" for t in terms):
        return asked
    language = question_language(query)
    if language in ("es", "fr"):
        # "ue" in a Spanish word is a diphthong ("puede", "juego"), not a German "ü" spelled out: "pude" and "jugo"
        # are other words. A name the question gives may be German all the same ("¿Quién es Mueller?").
        spelled -= set(umlaut_forms(names(query, language)))
        asked = [t for t in asked if t not in spelled]
    if language != "es":
        return asked
    function_words = FUNCTION_WORDS["es"]
    forms = spanish_verb_forms([t for t in terms if t not in function_words])
    return list(dict.fromkeys([*asked, *forms]))


def spanish_verb_forms(terms: list[str]) -> list[str]:
    """The infinitive and third-person forms of the words of ``terms`` that may be a first-person verb."""
    verbs = [t for t in terms if t.endswith("o") and len(t) > MIN_STEM and t.isalpha() and t not in NOT_VERBS]
    return [t[:-1] + ending for t in verbs for ending in SPANISH_ENDINGS]
