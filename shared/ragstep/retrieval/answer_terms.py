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
  later work on truncation stemming), and needs no rule per language; English keeps its suffix rule. German is the
  exception: it writes compounds as one word, and a compound's first five letters are often a word of their own
  ("Dateiname" / "Datei", "Unterordner" / "unter", "Speicherplatz" / "Speicher"), so German words lose their
  inflectional ending instead (a light stemmer in the manner of Savoy's, "Light Stemming Approaches for the French,
  Portuguese, German and Hungarian Languages", SAC 2006: "Zeilen" / "Zeile", "Dateien" / "Datei", "Ordnern" /
  "Ordner", and "Dateinamen" / "Dateiname" but not "Datei").

**Names** (:func:`names`) are what a question asks about by name: a capitalised word inside the question, a word
with a digit. German writes every noun with a capital ("Ordner", "Zeilen"): there a capital marks a name only when
the word is not written as a noun is (an acronym "SSH", an inner capital "McKenzie", a digit). English writes the
days of the week and the months with a capital too; they are ordinary words (:data:`CALENDAR_WORDS`, a closed
class): "Are the offices open on Saturday?" is answered by "closed on weekends". A number is the same name whatever
its thousands' grouping: "1000" is held by "1,000", "1 000", "1.000" and "1'000", and "1,000" by "1000" (the mark
read as a grouping only before three digits and not before a decimal part: "1.000,50" is not 1000).

**Transliterated names** (:func:`transliterated`): Chinese writes a foreign person's name in Han characters, its
parts joined by a middle dot ("约翰·史密斯", "琴娜·杜普洛", "卡尔·路德维希·冯·贝塔郎非"; ·, •, ‧ and ・ are all used).
Nothing capitalises it, so :func:`names` cannot see it; the dot marks it instead. A Chinese passage answering a
question about the person writes the family name (the part after the last dot; later sentences of a biography write
it alone: "卡利尼奇是..."), and when it writes a full name with that family name, the given name is the question's:
"琴娜·杜普洛的身高是多少？" is not answered by a passage about another person, nor "约翰·史密斯" by one about
"威尔·史密斯".
A passage without Han characters writes the name in Latin letters and is not asked for it.

**Across languages** (an English question over a French manual page) a sentence shares only what no language
translates (names, options, numbers, borrowed words: "kill", "crontab"); the lexical share stays low there and the
semantic similarity carries the choice. Reading such a sentence over the shareable terms alone was tried: with the
language of a manual page's chunk read from its words (option lists are half English) and the shareable terms
often one or two, it made a single shared word a full match and answered unanswerable questions; and reading such
a sentence's missing share as what a sentence in the question's language typically shares (0.27 on answer-en)
turned declines into wrong answers on the newcomer's pages (crontab) and answered no more of the dev set's
cross-language questions: left out. What is done instead: :mod:`ragstep.retrieval.answer_language`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence

from ragstep.models.message_language import LETTERS, MessageLanguage, message_language_of
from ragstep.retrieval.answer_subject import group_names
from ragstep.retrieval.english_stem import english_stem
from ragstep.retrieval.latin_fold import fold_word, umlaut_forms
from ragstep.retrieval.text import jieba_tokenizer, query_terms, token_set

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
# The same, between the words' English stems (:func:`~ragstep.retrieval.english_stem.english_stem`).
_STEMMED_ATTRIBUTES = {english_stem(adjective): english_stem(noun) for adjective, noun in _ATTRIBUTES.items()}


# A day of the week is also the part of the week it falls in: "Are the offices open on Saturday?" is answered by "the
# buildings are closed on weekends", "Hat die Kantine samstags offen?" by "am Wochenende geschlossen", "周六开门吗？" by
# "周末关闭". A closed class of each language (English, German, French and Chinese; Spanish writes the weekend in three
# words), read as the day's word and its part of the week both: a sentence naming the day itself holds more.
_WEEK_PARTS = (
    ("saturday sunday", "weekend"),
    ("monday tuesday wednesday thursday friday", "weekday"),
    ("samstag sonntag sonnabend", "wochenend"),
    ("montag dienstag mittwoch donnerstag freitag", "werktag wochentag"),
    ("samed diman", "weeke"),
    ("周六 周日 星期六 星期日 星期天 礼拜六 礼拜日 礼拜天", "周末"),
    ("周一 周二 周三 周四 周五 星期一 星期二 星期三 星期四 星期五", "工作日"),
)
_PART_OF_WEEK = {day: tuple(parts.split()) for days, parts in _WEEK_PARTS for day in days.split()}


_GERMAN_S_ENDING = frozenset("bdfghklmnrt")
_GERMAN_ST_ENDING = frozenset("bdfghklmnt")


def german_stem(word: str) -> str:
    """``word`` (folded, lower case) without its German inflectional ending (module docstring): a plural's or a
    case's ending (-ern, -em, -en, -er, -es, -e, -s), then a comparative's or a verb's (-est, -er, -en, -st)."""
    w = word
    if len(w) > 5 and w.endswith("ern"):
        w = w[:-3]
    elif len(w) > 4 and w.endswith(("em", "en", "er", "es")):
        w = w[:-2]
    elif (len(w) > 3 and w.endswith("e")) or (len(w) > 3 and w.endswith("s") and w[-2] in _GERMAN_S_ENDING):
        w = w[:-1]
    if len(w) > 5 and w.endswith("est"):
        w = w[:-3]
    elif (len(w) > 4 and w.endswith(("er", "en"))) or (len(w) > 5 and w.endswith("st") and w[-3] in _GERMAN_ST_ENDING):
        w = w[:-2]
    if len(w) > 4 and w.endswith("i") and word.startswith(w + "er"):
        # A verb in -ieren is a loan word's, and its stem is the loan word ("ignoriere" / "--ignore-case",
        # "sortieren" / "sort"): "ignorier" has lost its "-er", the "i" goes too.
        w = w[:-1]
    return w


def stems(tokens: Iterable[str], language: MessageLanguage = "en") -> frozenset[str]:
    """The tokens as the question and its answer share them: accents folded; English words as one form of their
    inflections ("logs" / "log", "carried" / "carry", "frozen" / "freeze": :mod:`ragstep.retrieval.english_stem`)
    and an attribute's adjective as its noun ("deep" / "depth"); a day of the week also as its part of the week
    ("Saturday": "weekend", "samstags": "Wochenende", "周六": "周末");
    French and Spanish words (``language``: the question's) cut to their first :data:`TRUNCATE` letters ("lignes" /
    "ligne", "muestro" / "muestra"), German ones without their ending (:func:`german_stem`: "Zeilen" / "Zeile") and
    with an umlaut spelled out read as the umlaut ("Groesse" / "Größe"). Other scripts are left as they are."""
    out = set()
    truncate = language in _TRUNCATED
    for t in tokens:
        t = fold(t)
        if t.isascii():
            if truncate and t.isalpha():
                # German spelled without umlauts ("Kuehlhalle", "fuer"), as a keyboard without them writes it,
                # meets the folded umlaut ("Kühlhalle" -> "kuhlhalle"): on both sides, so the two spellings meet.
                t = german_stem(next(iter(umlaut_forms([t])), t)) if language == "de" else t[:TRUNCATE]
            else:
                t = english_stem(t)
                t = _STEMMED_ATTRIBUTES.get(t, t)
        out.add(t)
        out.update(_PART_OF_WEEK.get(t, ()))
    return frozenset(out)


def question_terms(question: str, language: MessageLanguage) -> frozenset[str]:
    """The question's terms (keyword tokens without ``language``'s function words), stemmed."""
    words = FUNCTION_WORDS.get(language, frozenset())
    return stems((t for t in query_terms(question) if fold(t) not in words), language)


# A number written with its thousands grouped ("1,000", "1.000", "10 000" with a narrow or no-break space) is one
# name; then any other word.
_NAME = re.compile(r"(?<![\w.,])\d{1,3}(?:([,.\u00a0\u202f])\d{3})(?:\1\d{3})*(?![\w.,]*\w)|[\w][\w.+-]*[\w]|\w")
#: The days of the week and the months are written with a capital in English and are ordinary words, no names: "Are
#: the offices open on Saturday?" is answered by "closed on weekends" (a closed class of the language).
CALENDAR_WORDS = frozenset(
    "monday tuesday wednesday thursday friday saturday sunday january february march april may june july august "  # noqa: SIM905
    "september october november december".split()
)
_GROUPING = re.compile(r"(?<=\d)[,.\u00a0\u202f](?=\d{3}(?!\d))")


def names(question: str, language: MessageLanguage | None = None) -> list[str]:
    """The names a question asks about (case-folded): words written with a capital inside the question ("Docker",
    "SSH", "Liwx", "Btrfs") and words with a digit ("ext4", "2025", "7"). A passage that does not hold one of them
    is about something else, however close its meaning: "How do I use it with Docker?" is not answered by a
    sentence about the same tool without Docker. The question's first word is capitalised as any sentence's is (and
    a second sentence's: "hwclock --debug got deprecated. Replacement?"); a number that counts a word in lower case
    ("the first 20 lines") or is an option's value ("-n 5") is what the user asks for, not a name; in German
    (``language``, else read from the question) every noun is capitalised, so there only a capital a noun does not
    have marks a name (an acronym, an inner capital)."""
    language = language or question_language(question)
    german = language == "de"
    out = []
    for k, match in enumerate(_NAME.finditer(question)):
        word = match.group(0)
        if word == "I" or word.casefold() in CALENDAR_WORDS:
            continue
        if not fold(word).isascii() or _is_setting(question, match.start(), word):
            continue
        if word.isdigit() and _QUANTITY.match(question, match.end()):
            continue  # "the first 20 lines", "20 premières lignes": how many the user wants, not a name
        opens = k == 0 or _SENTENCE_END.search(question, 0, match.start()) is not None
        capital = not opens and any(c.isupper() for c in word)
        if german and capital:
            capital = any(c.isupper() for c in word[1:])
        if any(c.isdigit() for c in word) or capital:
            out.append(word.casefold())
    return list(dict.fromkeys(out))


_IDENTIFIER = re.compile(r"(?<![\w.])[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?![\w.]*\w)|(?<!\w)[A-Za-z]\w*_\w*")
#: A dotted identifier's last part names it when at least this long ("json.loads": "loads"); a shorter one is a file's
#: extension ("zpipe.c"), and a passage on the file's code seldom names the file.
MIN_MEMBER = 3


def identifiers(question: str) -> list[str]:
    """The code identifiers ``question`` names in lower case ("json.loads", "token_hex"), as a passage about them
    holds them: a dotted name by its last part ("loads": a module's page writes its functions' names alone). A
    passage that does not hold one is about other code ("What is the maximum nesting depth json.loads can decode?"
    is not answered by pprint's "depth The maximum depth to print out nested structures.")."""
    out = []
    for match in _IDENTIFIER.finditer(question):
        word = match.group(0).casefold()
        if all(len(part) < 2 for part in word.split(".")):
            continue  # "e.g", "i.e": abbreviations
        last = word.rsplit(".", 1)[-1]
        if "_" in word or len(last) >= MIN_MEMBER:  # "zpipe.c": a file, which a passage on its code may not name
            out.append(last if len(last) >= MIN_MEMBER else word)
    return list(dict.fromkeys(out))


def passages_naming(question: str, passages: Sequence[str], language: MessageLanguage | None = None) -> list[bool]:
    """Which passages hold every name of ``question`` (:func:`names`). A name that qualifies the subject of a "what
    is X?" question ("What is GNU bc?": GNU qualifies bc) tells which bc is meant, and a page says so once: the
    passage that defines bc ("bc - An arbitrary precision calculator language") need not repeat it, as long as a
    retrieved passage holds it (the same page's licence or author section). The group an English quantity question
    asks about ("do interns get") is asked as a name is, in the singular or the plural
    (:mod:`ragstep.retrieval.answer_subject`)."""
    folded = [p.casefold() for p in passages]
    persons = transliterated(question)
    held = [not _HAN.search(p) or all(_names_person(p, given, family) for given, family in persons) for p in folded]
    wanted = names(question, language) + identifiers(question)
    forms: dict[str, re.Pattern[str]] = {}
    if (language or question_language(question)) == "en":
        wanted += [w for w in owners(question) if _written_as_code(w, folded)]
        forms = group_names(question)  # the group a quantity is asked of, in the singular or the plural
        wanted += list(forms)
    from ragstep.retrieval.answer_types import defined_subject  # here: keyword search reads this module's words

    subject = defined_subject(question)
    qualifiers = {w.casefold() for w in subject.split()[:-1]} if subject else set()
    anywhere = {n for n in wanted if n in qualifiers and any(n in p for p in folded)}
    forms.update({n: number for n in wanted if (number := _number_pattern(n)) is not None})
    return [
        ok and all(n in anywhere or holds_name(p, n, forms) for n in wanted) for p, ok in zip(folded, held, strict=True)
    ]


def holds_name(passage: str, name: str, forms: Mapping[str, re.Pattern[str]]) -> bool:
    """``passage`` (case-folded) holds ``name`` as written, or in one of its other forms (``forms``: a number's
    groupings, a group's singular)."""
    form = forms.get(name)
    return name in passage or (form is not None and bool(form.search(passage)))


def _number_pattern(name: str) -> re.Pattern[str] | None:
    """A whole number of four digits or more, as a passage may write it with its thousands grouped ("1000", "1,000",
    "1 000", "1.000", "1'000"; the question's own grouping undone), else None. "1.000" read as a grouping is read
    only where it is one: three digits after each mark, no other mark after."""
    digits = _GROUPING.sub("", name)
    if not digits.isdigit() or len(digits) < 4:
        return None
    head = len(digits) % 3 or 3
    groups = [digits[:head]] + [digits[k : k + 3] for k in range(head, len(digits), 3)]
    mark = r"[,.\s\u00a0\u202f'’]?"
    return re.compile(r"(?<![\d.,])" + mark.join(groups) + r"(?![\d]|[.,]\d)")


#: The middle dots that join the parts of a transliterated name (·, •, ‧, ・, ･).
NAME_DOTS = "\u00b7\u2022\u2027\u30fb\uff65"
_HAN_RUN = r"[\u3400-\u9fff\uf900-\ufaff]+"
_DOTTED = re.compile(rf"{_HAN_RUN}(?:\s*[{NAME_DOTS}]\s*{_HAN_RUN})+")
_DOT = re.compile(rf"\s*[{NAME_DOTS}]\s*")
#: A name's part is read as at least this many characters: jieba cuts an unknown name into pieces ("莫/德里奇",
#: "奥/朗德"), and one character is no name.
MIN_FAMILY = 2


def transliterated(question: str) -> list[tuple[str, str]]:
    """The transliterated person names ``question`` writes in Han characters (module docstring), each as the end of
    its given name and the start of its family name, as a passage naming the person holds them. jieba does not know
    most such names: it cuts them into pieces ("莫/德里奇") and reads the words around them into them ("杜普洛因
    /什么", "高登现/效力"). So the family name is the words after the last dot joined until they are
    :data:`MIN_FAMILY` characters long, less their last character when longer (what jieba may have read in); the
    given name is the last :data:`MIN_FAMILY` characters of the word before the first dot (a word before it may have
    been read in: "小艾瑞克"). Empty when it writes none."""
    out = []
    for match in _DOTTED.finditer(question):
        parts = _DOT.split(match.group(0))
        before = [w for w in jieba_tokenizer().cut(parts[0]) if w.strip()]
        family = ""
        for word in jieba_tokenizer().cut(parts[-1]):
            if len(family) >= MIN_FAMILY:
                break
            family += word
        if before and len(family) >= MIN_FAMILY:
            out.append((before[-1][-MIN_FAMILY:], family[: max(MIN_FAMILY, len(family) - 1)]))
    return list(dict.fromkeys(out))


def _names_person(passage: str, given: str, family: str) -> bool:
    """``passage`` names the person ``given`` ``family`` (:func:`transliterated`): it holds the family name, and when
    it writes full names with that family name, one of them ends its given name as the question does (not another
    person of the same family name)."""
    if family not in passage:
        return False
    full = [_DOT.split(m.group(0)) for m in _DOTTED.finditer(passage)]
    same_family = [parts for parts in full if any(part.startswith(family) for part in parts[1:])]
    return not same_family or any(parts[0].endswith(given) for parts in same_family)


# "What is zstd's maximum compression level?": what the question asks about is the owner of what it asks for; a
# passage about gzip's maximum compression does not answer it. A tool's name is written in lower case as a common
# noun is ("each user's table", "each option's default"): the owner is a name when the documents write it as code,
# in backticks or as a manual page's name ("`zstd`", "zstd(1)").
_POSSESSIVE = re.compile(r"(?<=\w)['’]s\b")
_NOT_OWNERS = frozenset(
    "what who where when why how that it there here let one nobody somebody someone everybody everyone anybody "  # noqa: SIM905
    "anyone".split()
)
# A number the question sets as an option's value ("with -n 5", "--lines=5", "-n5"): a value the user chose, not a name
# the passage must hold.
_SETTING = re.compile(r"(?:^|\s)--?[A-Za-z][\w-]*[ =]$")


# A question of two sentences capitalises the second's first word as the first's ("hwclock --debug got deprecated.
# Replacement?", "... have the bugs. What option do I need?"): a capital there is no name.
_SENTENCE_END = re.compile(r"[.?!¿¡]\s*[\"'(]?$")
# A number counting what follows it in lower case ("20 lines", "5 seconds", "20 premières lignes") is a quantity the
# user asks for; one after a noun or before a capital ("Room 12", "version 7 UUID") names a thing.
_QUANTITY = re.compile(r"\s+[^\W\d_A-Z]", re.UNICODE)


def owners(question: str) -> list[str]:
    """The lower-case words ``question`` asks about as an owner ("zstd's", "crontab's"), case-folded (English)."""
    out = []
    for match in _POSSESSIVE.finditer(question):
        word = re.findall(r"[\w.+-]+$", question[: match.start()])
        if word and word[0].casefold() not in _NOT_OWNERS and word[0].islower():
            out.append(word[0].casefold())
    return list(dict.fromkeys(out))


def _written_as_code(word: str, folded: Sequence[str]) -> bool:
    """Some passage writes ``word`` as a program's name: in backticks or as a manual page's name ("zstd(1)")."""
    return any(f"`{word}`" in p or f"{word}(1)" in p or f"{word}(8)" in p for p in folded)


def _is_setting(question: str, start: int, word: str) -> bool:
    """``word`` (at ``start``) is a number given as a command-line option's value ("-n 5", "--lines=5")."""
    return word.isdigit() and bool(_SETTING.search(question[max(0, start - 40) : start]))


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


def _as_written(terms: frozenset[str], passages: Sequence[str], held: Sequence[frozenset[str]]) -> frozenset[str]:
    """``terms`` with a number no passage holds as the question writes it read as a passage writes it, its thousands
    grouped: "1000" as the tokens of "1,000" ("1", "000"), a term every sentence of it would otherwise lack."""
    out = set(terms)
    for term in terms:
        number = _number_pattern(term) if term.isdigit() and not any(term in h for h in held) else None
        found = next((m for p in passages if number is not None and (m := number.search(p))), None)
        if found is not None:
            out.discard(term)
            out.update(token_set(found.group(0)))
    return frozenset(out)


class Coverage:
    """The rarity-weighted share of the question's terms a text holds (0 when the question has no terms), read in
    the question's language (module docstring)."""

    def __init__(self, question: str, passages: Sequence[str]) -> None:
        self.language = question_language(question)
        self.passage_terms = [stems(token_set(p), self.language) for p in passages]
        self.terms = _as_written(question_terms(question, self.language), passages, self.passage_terms)
        self.weight = term_weights(self.terms, self.passage_terms)
        self.total = sum(self.weight.values())
        self.by_passage = [self.of(terms) for terms in self.passage_terms]

    def of(self, tokens: frozenset[str]) -> float:
        if not self.total:
            return 0.0
        return sum(self.weight[t] for t in self.terms & stems(tokens, self.language)) / self.total
