"""What a question asks for, read from its words alone: the kind of value that answers it (:func:`expected_answer`),
the sentences that say it best (:func:`preferred_answer`: who wrote it -> the by-line), whether it asks how to do
something (:func:`asks_how`). Its names and terms are :mod:`ragstep.retrieval.answer_terms`.

The model-free answerer (:mod:`ragstep.retrieval.answer_span`) selects and decides with these. They are general
patterns of English, Chinese, French, German and Spanish questions (how often / 多久一次 / à quelle fréquence / wie
oft: a frequency; how deep / 多深: a length; which year / 哪一年 / in welchem Jahr: a date; how many / 多少 /
combien / wie viele / cuántos: a number), not lists fitted to a set's questions. "How much" + a word in -er asks
how much more only when the question compares ("than") or the word is an irregular comparative (more, less, better,
worse): "how much butter / water / power" asks an amount, as "how much sugar" does. "How far in advance / ahead /
back" asks a time before, not a distance ("at least two weeks in advance"); "by when" / 什么时候之前 / 多久之内 / bis
wann asks a deadline, a date or a time limit ("15个工作日内", "within 30 days")."""

from __future__ import annotations

import re

#: The question text read (a longer one is cut: a rewritten query of 100,000 characters must not cost more).
MAX_QUESTION_CHARS = 2000

# What a question asks for, and what a sentence that answers it holds. The first kind that matches decides.
_EN_NUMBER_WORDS = (
    r"one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|thirty|forty|fifty|hundred|"
    r"thousand|million|billion|half|dozen|single|double|triple|twice|thrice|several|few"
    # French, German and Spanish number words ("un", "ein", "uno" are articles too; "dos", "mil", "cent", "sept" are
    # English words or abbreviations too: only in lower case, as numbers are written inside a sentence).
    r"|deux|trois|quatre|cinq|huit|neuf|dix|douze|vingt|trente|mille|zwei|drei|vier|fünf|sechs|sieben|acht|neun"
    r"|zehn|zwölf|zwanzig|hundert|tausend|tres|cuatro|cinco|seis|siete|ocho|nueve|diez|doce|veinte|cien"
    r"|(?-i:dos|mil|cent|sept)"
)
# A digit glued to a word's letters is part of a name ("sha256", "ext4", "pbkdf2_hmac"), not a number; nor is a
# manual's section in a reference to a page ("shuf(1)", "TIMEOUT(1)": which book, not how many).
_NUMBER = rf"(?<![A-Za-z_\d])(?<![A-Za-z_\d]\()\d|[零一二两三四五六七八九十百千万亿半]|\b(?:{_EN_NUMBER_WORDS})\b"
_DURATION_UNITS = (
    r"second|minute|hour|day|night|week|month|year|decade|century|ms\b|秒|分钟|小时|钟头|天|日|周|星期|个月|年|世纪"
    # French, German, Spanish.
    r"|heure|\bjours?\b|semaine|\bmois\b|année|siècle|sekunde|stunde|woche|monat|jahr"
    r"|segundo|minuto|\bhoras?\b|\bd[ií]as?\b|semana|\baños?\b|siglo"
)
# Units that are also English words ("an", a "tag", "mes"): a duration only after a number ("3 ans", "2 Tage").
_NUMBERED_UNITS = r"\bans\b|\btag(?:e|en)?\b|\bmes(?:es)?\b"
_COUNTED_TIME = rf"(?:{_NUMBER}).{{0,12}}(?:{_DURATION_UNITS}|{_NUMBERED_UNITS})"
# A unit alone ("a minute", "every second") starts a word: "ms" ends "schemes" and "day" ends "today", and neither is
# a duration there.
_DURATION = rf"{_COUNTED_TIME}|\b(?:{_DURATION_UNITS})|秒|分钟|小时|钟头|天|日|周|星期|个月|年|世纪"
_FREQUENCY = (
    r"once|twice|times|daily|weekly|monthly|yearly|annually|hourly|every|each|per\b|always|never|often|"
    r"whenever|regularly|每|次|经常|总是"
    # French, German, Spanish ("tous les", "alle", "por" + a number or a unit: "tous les fichiers" is no frequency).
    r"|\bfois\b|chaque|quotidien|toujours|jamais|souvent|\bmal\b|jede[nrs]?\b|täglich|wöchentlich|immer|\bnie\b"
    r"|\boft\b|\bveces\b|\bcada\b|diario|siempre|nunca|\b(?:tou(?:s|tes)\s+les|alle|por)\s+(?:\d|heure|jour|semaine"
    r"|mois|an|minute|seconde|stunde|tag|woche|monat|jahr|minute|sekunde|hora|d[ií]a|semana|mes|año|minuto|segundo)"
)
# A length is a number directly followed by a unit of length: "4,583 km²" and "4583平方公里" are areas, not depths.
_LENGTH = (
    r"(?:\d[\d.,]*|\b(?:" + _EN_NUMBER_WORDS + r"))\s*-?\s*(?:mm|cm|m|km|metres?|meters?|kilometres?|kilometers?|"
    r"feet|foot|ft|inch(?:es)?|miles?|yards?|nm)\b(?![²³2^])|[\d零一二两三四五六七八九十百千万]\s*(?:毫米|厘米|公分|米|公里|千米|英尺|英里|海里)"
)
# On a screen or in a file a length is counted in its cells: "130 print columns", "half of the screen", "72 characters".
_TEXT_LENGTH = (
    r"(?:\d[\d.,]*|\b(?:" + _EN_NUMBER_WORDS + r"))\)?\s*(?:\w+\s+)?"
    r"(?:columns?|characters?|chars?|lines?|rows?|pixels?|px|cells?|screens?|pages?)\b"
    r"|\bhalf\s+(?:of\s+)?(?:the|a)\s+(?:screen|page|window)"
)
_WEIGHT = (
    r"(?:\d[\d.,]*|\b(?:" + _EN_NUMBER_WORDS + r"))\s*-?\s*"
    r"(?:mg|g|kg|grams?|kilograms?|kilos?|tons?|tonnes?|pounds?|lbs?|ounces?|oz)\b|[\d零一二两三四五六七八九十百千万]\s*(?:毫克|克|公斤|千克|斤|吨)"
)
# Not a year: part of a digit code ("1100-048 Lisboa"). Not a month: a word it begins ("Augusta"), or "may" (a verb).
_YEAR = r"(?<!\d{3}-)\b(?:1[0-9]{3}|20[0-9]{2})\b(?!-\d{3}(?!\d))|[0-9〇零一二三四五六七八九十]{2,4}\s*年|世纪|年代|朝"
_DATE = (
    _YEAR + r"|\b(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|(?-i:May)|june?|july?|aug(?:ust)?"
    r"|sept?(?:ember)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\b|\b\d{1,2}[/-]\d{1,2}\b"
    r"|[0-9一二三四五六七八九十]+\s*[月日号]"
    r"|\b(?:ago|since|yesterday|today|tomorrow)\b|时期|期间|之前|之后|以前|以后|时候"
    # A time of year or of day answers "when" as a date does ("before the Qingming festival", "in spring", "at dusk").
    r"|\b(?:spring|summer|autumn|winter|season|morning|afternoon|evening|night|dusk|dawn|noon|midnight)s?\b"
    r"|节前|节后|节气|季节|[春夏秋冬][季天]|早晨|清晨|上午|中午|下午|傍晚|晚上|夜间|凌晨|月初|月中|月底|[上中下]旬"
)
_KINDS: tuple[tuple[re.Pattern[str], re.Pattern[str]], ...] = tuple(
    (re.compile(question, re.IGNORECASE), re.compile(answer, re.IGNORECASE))
    for question, answer in (
        # Which option / flag / switch: a command line's option ("-h, --human-readable", "--max-depth=N").
        (
            r"\b(?:which|what)\s+(?:[\w.+-]+\s+){0,2}(?:option|flag|switch)s?\b|哪个选项|什么选项|哪个参数"
            r"|\bquel(?:le)?s?\s+(?:option|paramètre|drapeau)|\bwelche[rs]?\s+(?:option|schalter|parameter)"
            r"|\b(?:qu[ée]|cu[áa]l(?:es)?)\s+(?:opci[óo]n|par[áa]metro)",
            r"(?:^|[\s\[(`'\"])(?:--?[A-Za-z]|-\d\b)|^(?:`[^`\n]+`|[a-z][\w.-]*[_.][\w.-]*)\s+—\s",
        ),
        # Who wrote / maintains / created it: a sentence that says by whom ("maintained by Antonio Diaz Diaz",
        # "written by ...", an author line, a copyright holder, an address), not one that only describes the thing.
        (
            r"\bwho\s+(?:wrote|writes|created|creates|develop(?:s|ed)|maintain(?:s|ed)|invent(?:s|ed)|found(?:s|ed)|"
            r"design(?:s|ed)|made|makes|built|builds|authored|started|discover(?:s|ed))\b"
            r"|\bwho\s+(?:is|was|are|were)\s+(?:the\s+)?(?:authors?|maintainers?|developers?|creators?|founders?|"
            r"inventors?|designers?|discoverers?)\b|(?:谁|什么人)(?:写|开发|编写|创|发明|维护|设计|提出|发现)|作者是谁|作者是"
            r"|\bqui\s+(?:a|ont)\s+(?:écrit|développé|créé|conçu)|\bqui\s+(?:maintient|développe)\b"
            r"|\bwer\s+hat\b.*\b(?:geschrieben|entwickelt|erstellt)\b|\bwer\s+(?:pflegt|entwickelt|schrieb)\b"
            r"|\bqui[eé]n(?:es)?\s+(?:\w+\s+)?(?:escribi[oó]|desarroll[oó]|cre[oó]|mantiene)\b"
            # "who is the author", in French, German, Spanish.
            r"|\bqui\s+(?:est|sont)\s+(?:l'|les\s+)auteurs?\b|\bwer\s+(?:ist|sind)\s+(?:der|die)\s+autor(?:en)?\b"
            r"|\bqui[eé]n(?:es)?\s+(?:es|son)\s+(?:el|los)\s+autor(?:es)?\b",
            r"\bby\s+(?:(?-i:[A-Z])[\w.'-]*\s*){1,4}|\b(?:authors?|maintainers?|copyright)\b|©|\([cC]\)"
            r"|[<⟨][^<>⟨⟩@\s]+@[^<>⟨⟩\s]+[>⟩]|\b(?:wrote|schrieb|escribi[oó])\b"
            r"|作者|编写|开发者|创始人|创立|创建|发明|设计者|维护者|由\S{1,16}(?:开发|编写|创建|创立|发明|设计|维护|提出|发现)"
            r"|发现|\bdiscover"
            # "par", "von", "por" + a name: two capitalised words ("von Mike Parker"); German capitalises every
            # noun ("Kopieren von QUELLE nach ZIEL", "von Dateien und Verzeichnissen" name no one).
            r"|\b(?:auteurs?|autor(?:es|en)?|écrit\s+par|geschrieben\s+von|escrito\s+por)"
            r"|\b(?:par|von|por)\s+(?-i:[A-Z])[\w.'-]+\s+(?-i:[A-Z])",
        ),
        # Which setting / variable / key: a name as configuration writes it ("`gui.insecureSkipHostcheck`",
        # "POETRY_INSTALLER_MAX_WORKERS", "warn_timeout", "insecureSkipHostcheck"), not prose about the setting.
        (
            r"\b(?:which|what)\s+(?:[\w.+-]+\s+){0,2}(?:setting|config(?:uration)?\s+(?:option|key|setting)|"
            r"(?:environment\s+)?variable|env\s+var|key|directive|parameter)s?\b"
            r"|哪个(?:配置项?|环境变量|变量)|什么(?:配置项?|环境变量|变量)",
            r"(?-i:`[^`\n]+`|\b[a-z][a-z0-9]*(?:[._][a-zA-Z0-9]+)+\b|\b[a-z]+[A-Z]\w*\b|\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b"
            r"|(?:^|\s)--?[A-Za-z]|\w+\s*=\s*\S)",
        ),
        # How much faster / smaller / better: a ratio or a difference ("60-70%", "twice", "3 times", "2x", "两倍");
        # "身高多少" asks a height, not how much higher. A word in -er after "how much" is a comparative only when
        # the question compares ("than") or it is an irregular one: "how much butter / water / power" asks an
        # amount of a noun, as "how much sugar" does.
        (
            r"\bhow\s+much\s+(?:more|less|better|worse)\b|\bhow\s+much\s+\w+er\b(?=.*\bthan\b)"
            r"|快多少|慢多少|大多少|小多少|(?<!身)高多少|低多少",
            r"(?<![A-Za-z_])\d[\d.,]*\s*(?:%|percent|per\s*cent|times\b|x\b|×|倍)|\b(?:twice|half|double|triple)\b"
            r"|[一二两三四五六七八九十几]\s*倍|百分之",
        ),
        (
            r"\bhow\s+often\b|\bhow\s+frequently\b|多久一次|多长时间一次|几次|频率"
            r"|\bà\s+quelle\s+fréquence\b|\bcombien\s+de\s+fois\b|\bwie\s+(?:oft|häufig)\b"
            r"|\bcon\s+qu[ée]\s+frecuencia\b|\bcada\s+cu[áa]nto\b|\bcu[áa]ntas\s+veces\b",
            # A bare number is no frequency ("periodic_e2scrub=1"): a frequency is counted per something.
            _FREQUENCY + "|" + _COUNTED_TIME,
        ),
        # "How far in advance / ahead / back": how long before (a number of days, weeks... or a date), not a distance.
        (
            r"\bhow\s+far\s+(?:in\s+advance|ahead|beforehand|before|back|ago)\b|\bhow\s+(?:long|much\s+time)\s+"
            r"(?:in\s+advance|ahead|beforehand)\b",
            _COUNTED_TIME + "|" + _DATE,
        ),
        (
            r"\bhow\s+(?:deep|tall|wide|far)\b|\bwhat\s+(?:depth|height|width|distance)\b|多深|多宽|多远|深度|宽度",
            _LENGTH + "|" + _TEXT_LENGTH,
        ),
        (r"\bhow\s+high\b|多高|海拔", _LENGTH + r"|%|percent|百分"),
        (r"\bhow\s+heavy\b|\bhow\s+much\s+does\s+\S+\s+weigh\b|多重|重量", _WEIGHT),
        (r"\bhow\s+long\s+(?:is|are|was|were)\b|多长(?!时间)", _LENGTH + "|" + _DURATION),
        (
            # "..., in milliseconds?": the unit the answer is asked in is a unit of time.
            r"\bhow\s+long\b|\bfor\s+how\s+long\b|多久|多长时间|几个小时|几天|几年|多少天|多少年|多少小时"
            r"|\bin\s+(?:(?:milli|micro|nano)?seconds|minutes|hours|days|weeks|months|years|ms)\s*[?？.]?\s*$"
            r"|\bcombien\s+de\s+temps\b|\bpendant\s+combien\b|\bwie\s+lange\b|\bcu[áa]nto\s+(?:tiempo|dura)\b",
            _DURATION,
        ),
        # By when / 什么时候之前 / 多久之内 / bis wann: a deadline, stated as a date or as a time limit ("within 30
        # days", "15个工作日内").
        (
            r"\bby\s+when\b|\bhow\s+soon\b|\bbis\s+wann\b|\bpara\s+cu[áa]ndo\b|\bd['’]ici\s+quand\b"
            r"|(?:什么时候|何时|哪天|几号|几月几[日号])(?:之前|以前|前)|多久(?:之内|以内|内)",
            _DATE + "|" + _COUNTED_TIME,
        ),
        # Which year: a year ("since", "in spring" or "before the festival" answer "when", not "in what year").
        (
            r"\b(?:what|which)\s+year\b|哪一年|哪年|何年|\ben\s+quelle\s+année\b|\bin\s+welchem\s+jahr\b"
            r"|\ben\s+qu[ée]\s+año\b",
            _YEAR,
        ),
        (
            r"\bwhat\s+date\b|\bwhen\s+(?:was|were|did)\b"
            r"|哪一年|哪年|何年|哪个年代|什么年代|什么时候|何时|几月|哪天|哪一天"
            r"|\ben\s+quelle\s+année\b|\bin\s+welchem\s+jahr\b|\ben\s+qu[ée]\s+año\b|\bseit\s+wann\b",
            _DATE,
        ),
        (
            r"\bhow\s+(?:many|much|old|big|large|fast)\b|\bwhat\s+(?:percentage|percent|number|size|age)\b"
            # "What is the size of CHUNK?", "what's the number of ...": the noun asks for a quantity as "how many" does.
            r"|\bwhat(?:'s|\s+is|\s+are)\s+the\s+(?:size|number|count|amount|total)\s+of\b"
            r"|多少|多大|几"
            r"|\bcombien\b|\bwie\s+viele?\b|\bwieviele?\b|\bcu[áa]nt[oa]s?\b",
            _NUMBER,
        ),
    )
)


# Of the sentences that say who wrote a program, the by-line does more than a copyright holder or an address: a manual
# page's licence paragraph ("Copyright (C) 2022 Free Software Foundation", "Licence GPLv3+ ... <https://...>") is
# about the same program and reads as close to "who wrote it?" as its AUTHOR line ("Written by Paul Rubin, David
# MacKenzie ..."), which says it. Grammar of a by-line, English, French, German, Spanish and Chinese.
_BY_LINE = re.compile(
    r"\b(?:written|maintained|developed|created|designed)\s+by\b|\b(?:wrote|schrieb|escribi[oó])\b"
    r"|\bécrit\s+par\b|\bgeschrieben\s+von\b|\bescrito\s+por\b|^\s*(?:authors?|auteurs?|autor(?:en|es)?)\s*:"
    r"|作者[是为:：]|由\S{1,16}(?:开发|编写|创建|设计|维护)",
    re.IGNORECASE,
)


def preferred_answer(question: str) -> re.Pattern[str] | None:
    """Among the sentences holding what ``question`` asks for, those that say it best, when its kind has such:
    "who wrote X?" -> the by-line, before a copyright holder or an address. None otherwise."""
    return _BY_LINE if _KINDS[1][0].search(question) else None


# Asked for a default, a setting's section states it as a field ("**Default**: `origin`", "Default: 80", "Defaults to
# "5s".") under the setting's description: that field is the answer, read with the description (answer_candidates).
# "What ... if I don't pass -F?", "... unless I say otherwise", "... without -days", "没写 port 的话……" ask for a
# default without the word.
_ASKS_DEFAULT = re.compile(
    r"\bdefaults?\b|默认|缺省|par\s+défaut|standardmäßig|voreingestellt|por\s+defecto|predeterminad"
    r"|\b(?:if|when)\s+(?:i|you|we|one)\s+(?:don'?t|do\s+not|never)\s+(?:pass|give|specify|set|say|provide|supply"
    r"|use|choose|pick|tell)\b|\bunless\s+(?:(?:i|you|we)\s+(?:say|specify|tell|set)|told)\b"
    r"|\bwithout\s+(?:passing|giving|specifying|setting|-{1,2}\w)"
    r"|(?:不|没|没有|未)(?:写|配|配置|设置|设|指定|填|传|给)[^，,。？?]{0,30}(?:的话|时|情况下)",
    re.IGNORECASE,
)
_DEFAULT_FIELD = re.compile(r"^\W*default(?:\s+value)?\W*[:：=]\s*\S|^defaults?\s+to\b", re.IGNORECASE)


def default_field(question: str) -> re.Pattern[str] | None:
    """What a setting's field stating its default holds, when ``question`` asks for a default; None otherwise."""
    return _DEFAULT_FIELD if _ASKS_DEFAULT.search(question[:MAX_QUESTION_CHARS]) else None


# "How do I ...?" asks for a way to do something; asked of a manual page, the way is an option ("-q, --quiet Keine
# Kopfzeilen mit den Dateinamen ausgeben"), while the sentences around it that read as close describe what the
# program does. Grammar of such a question, English, French, German, Spanish (after an opening "and" / "so").
_ASKS_HOW = re.compile(
    r"^\W*(?:(?:and|so|et|und|y)\s+)?(?:how\s+(?:do|can|could|should|would)\s+(?:i|you|we|one)\b|how\s+to\b"
    r"|comment\b|wie\b|c[óo]mo\b)",
    re.IGNORECASE,
)
_OPTION_ENTRY = re.compile(r"^--?[A-Za-z0-9]")


def asks_how(question: str) -> bool:
    """``question`` asks how to do something ("How do I ...?", "Comment ...", "Wie ...", "¿Cómo ...?")."""
    return bool(_ASKS_HOW.match(question[:MAX_QUESTION_CHARS]))


def asks_option(question: str) -> bool:
    """``question`` asks which command-line option does something ("Which option prints ...?", "What flag ...")."""
    return bool(_KINDS[0][0].search(question[:MAX_QUESTION_CHARS]))


def is_option_entry(sentence: str) -> bool:
    """``sentence`` opens a command-line option's entry ("-q, --quiet ...", "--sparse=WHEN ...")."""
    return bool(_OPTION_ENTRY.match(sentence))


# A record: a line of "Key: value" fields ("Column: section Data file: packages.csv Type: VARCHAR Distinct values:
# 24 Sample values: admin, gnome, libs", a data file's column summary; "Rows: 331"). Its values say what its keys
# name: the 24 there counts the column's distinct values, not the packages in section libs.
_FIELD_KEY = re.compile(r"(?:^|(?<=\s))([A-Z][A-Za-z]*(?:\s[a-z]+){0,2}(?:\s\(\d+\))?):\s")
#: A sentence of at least this many fields is a record.
MIN_RECORD_FIELDS = 3
_KEY_WORD = re.compile(r"[a-z]{3,}")


_URL = re.compile(r"\b(?:https?|ftp)://\S+|\bwww\.\S+")


def holds_asked(expected: re.Pattern[str], sentence: str, question: str) -> bool:
    """``sentence`` holds the kind of value ``expected`` (:func:`expected_answer`) asks for; in a record (a line of
    "Key: value" fields), only in a field whose key the question names ("how many rows" is answered by "Rows: 331",
    "how many packages are in section libs" by no field of a column summary). A URL's digits are part of an address,
    no value ("https://www.openssl.org/docs/man1.1.1/" states no version)."""
    sentence = _URL.sub(" ", sentence)
    keys = list(_FIELD_KEY.finditer(sentence))
    if len(keys) < MIN_RECORD_FIELDS:
        return bool(expected.search(sentence))
    asked = {w[:4] for w in _KEY_WORD.findall(question.casefold())}
    for k, key in enumerate(keys):
        value = sentence[key.end() : keys[k + 1].start() if k + 1 < len(keys) else len(sentence)]
        named = any(w[:4] in asked for w in _KEY_WORD.findall(key.group(1).casefold()))
        if named and expected.search(value):
            return True
    return False


def expected_answer(question: str) -> re.Pattern[str] | None:
    """What a sentence that answers ``question`` must hold, when its type says (how often: a frequency; how long /
    多久: a duration; how many / 多少: a number; when: a time), else None."""
    for asks, holds in _KINDS:
        if asks.search(question):
            return holds
    return None


# "What is X?" / "What does X do?" / "X是什么？" asks for a definition: the sentence that says what X is ("bc is a
# language that supports arbitrary precision numbers ..."), or a manual page's or a glossary's line "X - what it is".
# Grammar of a definition, English and Chinese; the subject comes from the question. Up to four words of it are
# read and its last word is the head ("GNU bc" defines "bc").
_ASKS_DEFINITION = re.compile(
    r"^\s*(?:so\s+|and\s+)?what(?:'s|\s+is|\s+are)\s+(?:an?\s+|the\s+)?(?P<en>[\w.+#-]+(?:\s+[\w.+#-]+){0,3}?)"
    r"(?:\s+(?:for|used\s+for))?\s*[?？.]?\s*$"
    r"|^\s*what\s+does\s+(?P<does>[\w.+#-]+(?:\s+[\w.+#-]+){0,3}?)\s+do\s*[?？.]?\s*$"
    r"|^\s*(?:什么是|何为|何谓)(?P<zh1>[^\s？?，,。]{1,16}?)[？?。]?\s*$"
    r"|^\s*(?P<zh2>[^\s？?，,。]{1,16}?)(?:是什么|是啥|指什么|是干什么的|有什么用)(?:东西|意思)?[？?。]?\s*$",
    re.IGNORECASE,
)


# Words that make "what is ..." ask about something of the subject (a value, a relation), not the subject itself.
_NOT_A_TERM = frozenset(
    "in of on for with by to from at about between when where if after before than my your its their our this "  # noqa: SIM905
    "that these those default best difference".split()
)


def defined_subject(question: str) -> str | None:
    """The subject of a "what is X?" / "X是什么？" question ("GNU bc"), else None (also when it asks for a value of
    a thing: "what is the default scale in bc?", "漠河机场的三字代码是什么？")."""
    match = _ASKS_DEFINITION.match(question[:MAX_QUESTION_CHARS])
    if match is None:
        return None
    subject = next(g for g in match.groups() if g)
    if _NOT_A_TERM.intersection(subject.casefold().split()) or "的" in subject:
        return None
    return subject


# "Where should Python modules be installed?" / "Where does crontab keep each user's table?" asks for a place in the
# file system: the sentence that names a path ("... must be installed in ... /usr/lib/python3/dist-packages") says
# it, while sentences about installing in general read as close. Asked where something is installed, stored, kept,
# saved, located or placed (English, French, German, Spanish); "where does the keeper log ships?" asks no such thing.
_ASKS_PLACE = re.compile(
    r"\bwhere\b.{0,80}?\b(?:install(?:s|ed)?|stor(?:e|es|ed)|sav(?:e|es|ed)|kept|keeps?|locat(?:e|es|ed)|placed?"
    r"|live|lives|written)\b"
    r"|\boù\b.{0,80}?\b(?:install|stock|enregistr|rang|conserv|sauvegard|plac)\w*"
    r"|\bwo(?:hin)?\b.{0,80}?\b(?:install|gespeichert|speicher|abgelegt|liegen|liegt|befinde)\w*"
    r"|\bd[óo]nde\b.{0,80}?\b(?:instal|guard|almacen|ubica|encuentr)\w*",
    re.IGNORECASE,
)
_PATH = re.compile(
    r"(?:^|[\s`'\"(=:])(?:~|\$\{?[A-Z_]+\}?|%[A-Z_]+%)?/[\w.@+-]+/[\w.@+/-]*"
    r"|(?:^|[\s`'\"(=:])/(?:etc|var|usr|tmp|opt|home|dev|proc|srv|run|lib|srv)\b|(?:^|\s)[A-Za-z]:\\\w"
    r"|(?:^|[\s`'\"(])~/\S|\$\{?(?:HOME|XDG_[A-Z_]+)\b"
)


def place_of(question: str) -> re.Pattern[str] | None:
    """What a sentence naming the place ``question`` asks for holds (a path), when it asks where something is
    installed, stored or kept; else None. The answerer prefers such a sentence and requires none (a place may be
    named without a path)."""
    return _PATH if _ASKS_PLACE.search(question[:MAX_QUESTION_CHARS]) else None


# An option a question names: "what does the -r option of grep do?", "is --preserve-status needed?".
_NAMED_OPTION = re.compile(r"(?<![\w-])(--[A-Za-z0-9][\w-]*|-[A-Za-z0-9][\w-]*)(?![\w-])")


# ...and asks about the option itself (what it does, means, is for; "and -i?"), not about something else under it
# ("What status does flock exit with when ... I used -n?").
_ABOUT_OPTION = re.compile(
    r"\b(?:option|flag|switch)\b|\b(?:do|does|mean|means|for)\W*$|^\W*(?:(?:and|what\s+about)\s+)?-x\W*$", re.I
)


def named_option(question: str) -> re.Pattern[str] | None:
    """What the entry of an option ``question`` names holds ("-r, --recursive Read all files ..." for "what does
    the -r option do?"), else None: the answerer prefers that entry to the other options' entries, which read as
    close to a question about an option, and requires none (the option may be described in prose)."""
    question = question[:MAX_QUESTION_CHARS]
    named = _NAMED_OPTION.findall(question)
    if not named or not _ABOUT_OPTION.search(_NAMED_OPTION.sub(" -x ", question)):
        return None
    alternatives = "|".join(re.escape(o) for o in dict.fromkeys(named))
    return re.compile(rf"^(?:--?[^\s,]+,?\s+){{0,3}}?(?:{alternatives})(?![\w-])")


def definition_of(question: str) -> re.Pattern[str] | None:
    """What a sentence defining the subject of a "what is X?" question holds, else None: "X is a / an / the ...",
    "X (1) - ...", "X: ..." (English), "X是 / 为 / 指 ..." (Chinese)."""
    subject = defined_subject(question)
    if subject is None:
        return None
    if subject.isascii():
        head = re.escape(subject.split()[-1])
        return re.compile(
            rf"(?<![\w-]){head}(?![\w-])(?:\s*\([0-9a-z]+\))?\s*(?:,[^,]{{1,60}},\s*)?"
            r"(?:(?:is|are|was|were)\s+(?:a|an|the|one)\b|\s-{1,2}\s|[-–—:]\s+\S|means\b|refers\s+to\b|stands\s+for\b)",
            re.IGNORECASE,
        )
    return re.compile(re.escape(subject) + r"(?:是|为|指|即)")


def asks_when(question: str) -> bool:
    """Whether ``question`` asks for a date or a year (which year, when was / did ...)."""
    expected = expected_answer(question)
    return expected is not None and expected.pattern in (_YEAR, _DATE)
