"""What a question asks for, read from its words alone: the kind of value that answers it (:func:`expected_answer`),
the names it asks about (:func:`names`) and its terms in a form the answering sentence shares (:func:`stems`).

The model-free answerer (:mod:`ragstep.retrieval.answer_span`) selects and decides with these. They are general
patterns of English and Chinese questions (how often / 多久一次: a frequency; how deep / 多深: a length; which year /
哪一年: a date; how many / 多少: a number), not lists fitted to a set's questions.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

#: The question text read (a longer one is cut: a rewritten query of 100,000 characters must not cost more).
MAX_QUESTION_CHARS = 2000

# What a question asks for, and what a sentence that answers it holds. The first kind that matches decides.
_EN_NUMBER_WORDS = (
    r"one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|thirty|forty|fifty|hundred|"
    r"thousand|million|billion|half|dozen|single|double|several|few"
)
# A digit glued to a word's letters is part of a name ("sha256", "ext4", "pbkdf2_hmac"), not a number.
_NUMBER = rf"(?<![A-Za-z_\d])\d|[零一二两三四五六七八九十百千万亿半]|\b(?:{_EN_NUMBER_WORDS})\b"
_DURATION_UNITS = (
    r"second|minute|hour|day|night|week|month|year|decade|century|ms\b|秒|分钟|小时|钟头|天|日|周|星期|个月|年|世纪"
)
_DURATION = rf"(?:{_NUMBER}).{{0,12}}(?:{_DURATION_UNITS})|{_DURATION_UNITS}"
_FREQUENCY = (
    r"once|twice|times|daily|weekly|monthly|yearly|annually|hourly|every|each|per\b|always|never|often|"
    r"whenever|regularly|每|次|经常|总是"
)
# A length is a number directly followed by a unit of length: "4,583 km²" and "4583平方公里" are areas, not depths.
_LENGTH = (
    r"(?:\d[\d.,]*|\b(?:" + _EN_NUMBER_WORDS + r"))\s*-?\s*(?:mm|cm|m|km|metres?|meters?|kilometres?|kilometers?|"
    r"feet|foot|ft|inch(?:es)?|miles?|yards?|nm)\b(?![²³2^])|[\d零一二两三四五六七八九十百千万]\s*(?:毫米|厘米|公分|米|公里|千米|英尺|英里|海里)"
)
_WEIGHT = (
    r"(?:\d[\d.,]*|\b(?:" + _EN_NUMBER_WORDS + r"))\s*-?\s*"
    r"(?:mg|g|kg|grams?|kilograms?|kilos?|tons?|tonnes?|pounds?|lbs?|ounces?|oz)\b|[\d零一二两三四五六七八九十百千万]\s*(?:毫克|克|公斤|千克|斤|吨)"
)
_YEAR = r"\b(?:1[0-9]{3}|20[0-9]{2})\b|[0-9〇零一二三四五六七八九十]{2,4}\s*年|世纪|年代|朝"
_DATE = (
    _YEAR + r"|\b(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\b|\b\d{1,2}[/-]\d{1,2}\b"
    r"|[0-9一二三四五六七八九十]+\s*[月日号]"
    r"|\b(?:ago|since|yesterday|today|tomorrow)\b|时期|期间|之前|之后|以前|以后|时候"
)
_KINDS: tuple[tuple[re.Pattern[str], re.Pattern[str]], ...] = tuple(
    (re.compile(question, re.IGNORECASE), re.compile(answer, re.IGNORECASE))
    for question, answer in (
        # Which option / flag / switch: a command line's option ("-h, --human-readable", "--max-depth=N").
        (
            r"\b(?:which|what)\s+(?:(?:command[- ]line|cli)\s+)?(?:option|flag|switch)s?\b|哪个选项|什么选项|哪个参数",
            r"(?:^|[\s\[(`'\"])(?:--?[A-Za-z]|-\d\b)",
        ),
        # How much faster / smaller / better: a ratio or a difference ("60-70%", "twice", "3 times", "2x", "两倍").
        (
            r"\bhow\s+much\s+(?:\w+er|more|less|better|worse)\b|快多少|慢多少|大多少|小多少|高多少|低多少",
            r"(?<![A-Za-z_])\d[\d.,]*\s*(?:%|percent|per\s*cent|times\b|x\b|×|倍)|\b(?:twice|half|double|triple)\b"
            r"|[一二两三四五六七八九十几]\s*倍|百分之",
        ),
        (r"\bhow\s+often\b|\bhow\s+frequently\b|多久一次|多长时间一次|几次|频率", _FREQUENCY + "|" + _NUMBER),
        (
            r"\bhow\s+(?:deep|tall|wide|far)\b|\bwhat\s+(?:depth|height|width|distance)\b|多深|多宽|多远|深度|宽度",
            _LENGTH,
        ),
        (r"\bhow\s+high\b|多高|海拔", _LENGTH + r"|%|percent|百分"),
        (r"\bhow\s+heavy\b|\bhow\s+much\s+does\s+\S+\s+weigh\b|多重|重量", _WEIGHT),
        (r"\bhow\s+long\s+(?:is|are|was|were)\b|多长(?!时间)", _LENGTH + "|" + _DURATION),
        (
            r"\bhow\s+long\b|\bfor\s+how\s+long\b|多久|多长时间|几个小时|几天|几年|多少天|多少年|多少小时",
            _DURATION,
        ),
        (
            r"\bwhat\s+year\b|\bwhich\s+year\b|\bin\s+what\s+year\b|\bwhat\s+date\b|\bwhen\s+(?:was|were|did)\b"
            r"|哪一年|哪年|何年|哪个年代|什么年代|什么时候|何时|几月|哪天|哪一天",
            _DATE,
        ),
        (
            r"\bhow\s+(?:many|much|old|big|large|fast)\b|\bwhat\s+(?:percentage|percent|number|size|age)\b"
            r"|多少|多大|几",
            _NUMBER,
        ),
    )
)


def expected_answer(question: str) -> re.Pattern[str] | None:
    """What a sentence that answers ``question`` must hold, when its type says (how often: a frequency; how long /
    多久: a duration; how many / 多少: a number; when: a time), else None."""
    for asks, holds in _KINDS:
        if asks.search(question):
            return holds
    return None


# Measured attributes a question may name, and what a sentence stating one holds: the attribute's own word or a unit
# only that attribute is measured in. "What is the area of Qinghai Lake?" / "青海湖的面积有多大" is not answered by
# the passage's population, however close in meaning: when the question names the attribute, the sentence (or the
# option or paragraph it belongs to) must state it. General vocabulary of measurement, English and Chinese.
_MEASURED: tuple[tuple[str, str], ...] = (
    (r"\barea\b|面积", r"\barea\b|面积|占地|square|sq\.?\s|km²|km2|m²|平方|公顷|亩|\bacres?\b|\bhectares?\b"),
    (r"\bpopulation\b|人口", r"population|inhabitants|residents|people|人口|居民|万人|\d\s*人"),
    (
        r"\baltitude\b|\belevation\b|海拔",
        r"altitude|elevation|above sea level|海拔|\d\s*(?:m|metres?|meters?|feet|ft)\b|\d\s*米",
    ),
    (r"\bheight\b|高度|身高", r"height|tall|\bhigh\b|高|\d\s*(?:m|cm|metres?|meters?|feet|ft)\b|\d\s*(?:米|厘米)"),
    (r"\bdepth\b|深度", r"depth|\bdeep\b|深"),
    (r"\bwidth\b|宽度", r"width|\bwide\b|宽"),
    (r"\blength\b|长度|全长", r"length|\blong\b|长"),
    (r"\bdiameter\b|直径", r"diameter|直径"),
    (r"\btemperature\b|温度|气温", r"temperature|°|℃|degrees|温|摄氏|华氏"),
    (r"\bspeed\b(?!\s+up)|速度|时速", r"speed|km/h|mph|速|\bfast\b"),
    (r"\bprice\b|\bcost\b|价格|票价|费用|售价", r"price|cost|\$|€|£|¥|dollars?|euros?|yuan|价|费|元"),
    (r"\bage\b|年龄|岁数", r"\bage\b|\bold\b|年龄|岁"),
    (r"\bvolume\s+of\b|\bcapacity\b|容量|体积|容积", r"volume|capacity|litres?|liters?|容量|体积|容积|升|立方"),
)
_ATTRIBUTE_KINDS = tuple((re.compile(a, re.IGNORECASE), re.compile(h, re.IGNORECASE)) for a, h in _MEASURED)


def stated_attributes(question: str) -> list[re.Pattern[str]]:
    """What a sentence must hold for each measured attribute ``question`` names (its area, 人口, its price...): the
    attribute's word or a unit it alone is measured in. Empty when it names none."""
    return [holds for asks, holds in _ATTRIBUTE_KINDS if asks.search(question[:MAX_QUESTION_CHARS])]


_NAME = re.compile(r"[\w][\w.+-]*[\w]|\w")


def names(question: str) -> list[str]:
    """The names a question asks about (case-folded): words written with a capital inside the question ("Docker",
    "SSH", "Liwx", "Btrfs") and words with a digit ("ext4", "2025", "7"). A passage that does not hold one of them
    is about something else, however close its meaning: "How do I use it with Docker?" is not answered by a
    sentence about the same tool without Docker. The question's first word is capitalised as any sentence's is."""
    out = []
    for k, match in enumerate(_NAME.finditer(question[:MAX_QUESTION_CHARS])):
        word = match.group(0)
        if not word.isascii() or word == "I":
            continue
        if any(c.isdigit() for c in word) or (k > 0 and any(c.isupper() for c in word)):
            out.append(word.casefold())
    return list(dict.fromkeys(out))


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


def stems(tokens: Iterable[str]) -> frozenset[str]:
    """English words without their commonest inflection ("logs" / "log", "ships" / "ship", "stayed" / "stay"), and
    an attribute's adjective as its noun ("deep" / "depth"): a question and its answer seldom use the same form.
    Other scripts are left as they are."""
    out = set()
    for t in tokens:
        if t.isascii():
            t = _SUFFIX.sub("", t)
            t = _ATTRIBUTES.get(t, t)
        out.add(t)
    return frozenset(out)
