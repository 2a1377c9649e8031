"""What a count question counts or measures, when it names it: the word a sentence answering it must hold (Chinese
first; English below).

"一汽现在有多少员工？" asks for a number of employees. The passage about the company states numbers -- 18 departments,
16 subsidiaries, 8 people under investigation -- and each is a number, close in meaning to the question: the type
check (a number) passes, the threshold cannot tell, and the answer quotes the departments. Asked of a subject the
passage describes, a question about an attribute the passage never states ("《食品与生物加工技术》的影响因子是多少？",
"达特穆尔国家公园每年有多少游客？") was answered four times in five (a set of 20 such questions over CMRC 2018
passages). What the question counts is named in its own words, next to 多少 / 几:

* after it, the thing counted: "多少员工", "几部电梯", "多少张唱片" (a classifier between them is skipped);
* before it, when nothing is counted after it, the attribute: "X的影响因子是多少", "身高多少", "常住人口有多少".

A sentence that answers holds that word, or for a word of three characters or more one of its two-character parts
("藏书量" -> "藏书 81.6 万册", "人口数量" -> "人口"). Not read as a focus: a unit or a classifier ("多少米", "多少
分钟": the type already asks for it), a word of one character, and the measured attributes
(:func:`~ragstep.retrieval.answer_attributes.stated_attributes` has their other words: 人口 is also 居民, 万人).

A count is given in its measure word: "多少张唱片" is answered by "录了 30 张", "几季" by "共 4 季", "活到多少岁" by
"享年 72 岁". When 多少 / 几 is followed by a classifier, a sentence that answers holds a numeral followed by that
classifier, by one that stands for it (人 / 名 / 位, 次 / 回 / 趟, 家 / 间 / 所, 本 / 册 / 部), or by the general
个 where the classifier counts things: "1956 年开始灌录唱片" states no number of records, and "5 条道路" no number of
cars. A count of years ("多少年", "几年") is not a calendar year: "1951 年" does not say how long something lived.
A count of a unit of measure ("多少米", "多少毫克") is stated in a unit of the same quantity
(:mod:`ragstep.retrieval.answer_units`), and the general 个 is left to the word it counts.

Asked in another language ("How many employees does FAW have?", "Combien de passes ...?", "Wie viele ...?",
"¿Cuántos ...?"), the counted word is not Chinese and a Chinese sentence cannot be asked for it; but a count in Chinese
is still written in its measure word, whatever is counted (a numeral alone does not count nouns in Chinese):
"150头", "47层", "18次", "5万余人", "4至6只"; and a count of a unit ("how many kilometres") in the unit. A
calendar year or a date ("1996年", "10月9日") or a numbered name ("谍中谍3") counts nothing, and a count of years
is :data:`_YEARS_COUNTED` (:func:`count_in_another_language`).

A count in a verbal classifier (次 / 回 / 趟 / 遍) counts an action, written before it: "迟到几次会扣全勤奖？" counts
the times late ("迟到超过3次"); what follows it is the rest of the sentence ("会扣"), or the event counted ("开了多少次
会议"). Either word answers (:func:`_action`).

**English** ("How many vacation days do part-time employees get?", :func:`english_count_held`). "How many" takes a
plural: the counted noun is the first plural of the phrase after it (up to a function word: "vacation days"; "lines" of
"how many lines end up ..."), else its last word. A sentence answers only when a number in it counts that noun or a word
qualifying it (within :data:`COUNTED_WITHIN` words after the number: "25 days", "5 unused vacation days", "3 consecutive
'X's"; a unit of measure counted is given in any unit of the same quantity: "two weeks" for days, "4 kg (8.8 lb)" for
pounds), or counts no word at all (it ends a clause or a function word follows: "Serves 6.", "instead of the default
(3)": a paraphrase of the noun is common; a share, "27-30%", counts no noun asked). "How many eggs are in the crumble?"
is not answered by "bake for 40 minutes": that number counts minutes; nor by a time of day ("before 10:00"). The words
that qualify the noun ("sick" of "sick days") and the question's hyphenated qualifiers (English writes a compound
modifier with hyphens: "part-time", "read-only") must be held too, when a retrieved sentence holds them: "25 days of
paid vacation" does not say how many sick days when another sentence is about being sick, nor "Full-time employees
receive 25 days" what part-time employees get when another is about them. A qualifier no sentence holds is a detail the
sources leave out, and asks nothing. Not read: "how many times" (a frequency: "twice" answers), "how many of them" (no
noun).

Only count questions are read. "什么" / "哪一年" / "谁" questions name what they ask in words an answer rephrases
(职务 -> "任 ... 副部长", 颜色 -> "呈银灰色", 出生 -> "生于"): as the same gate, a quarter of CMRC 2018's own
questions about such words would have been declined, against one in twenty of its count questions (the rest are
paraphrases: 孩子 / 子女).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ragstep.retrieval.answer_subject import asked_group
from ragstep.retrieval.answer_terms import question_language
from ragstep.retrieval.answer_units import unit_count_pattern
from ragstep.retrieval.text import jieba_tokenizer, stopwords

# Classifiers and units: what 多少 / 几 is followed by when it counts in a unit, not a thing.
_CLASSIFIERS = "个次张部座位名岁年天号季种条家本辆人只头件所间台架艘颗枚项届场份层米元块斤吨度倍期集章首篇册行列页字"
_UNIT_WORDS = (
    "分钟 小时 秒钟 秒 天 周 星期 个月 月 年 岁 米 厘米 公分 毫米 公里 千米 英里 英尺 英寸 海里 "
    "公斤 千克 克 毫克 吨 斤 元 美元 港元 日元 日圆 欧元 英镑 人民币 钱 块 度 倍 "
    "平方公里 平方米 平方 公顷 亩 立方米 升 毫升 人次 万 亿 千 百"
)
_UNITS = frozenset(_UNIT_WORDS.split())
# Words around 多少 that say how, not what: "大约 / 一共 / 现在 有多少".
_FILLER_WORDS = (
    "的 了 呢 吗 啊 呀 吧 是 有 要 能 会 可以 大概 大约 一共 总共 共 约 达 现在 目前 如今 已 已经 "
    "一般 通常 平均 最多 最少 每年 每天 每次 一次 一年 一天 当年 当时 还 又 都 就 也 在 被 把 将 为 "
    "分别 各 各自 左右 上下 以上 以下"
)
_FILLERS = frozenset(_FILLER_WORDS.split())
# Classifiers a count is given in (units and the general 个 excepted), the ones that stand for each other, and those
# that count things, which the general 个 may count too.
# 行 / 列 / 页 / 字 count a table's rows and columns, a document's pages, a text's characters ("多少行": "65536行").
_MEASURE_WORDS = "张部座位名岁次季种条家本辆人只头件所间台架艘颗枚项届场份层期集章首篇册号倍回趟遍行列页字"
_VERBAL = "次回趟遍"
_STANDS_FOR = ("人名位", "次回趟遍", "家间所", "本册部")
_COUNTS_THINGS = frozenset("张部座位名条家本辆人只头件所间台架艘颗枚项场份首篇册种")
_NUMERAL = r"(?:\d[\d,.]*|[〇零一二两三四五六七八九十百千万亿]+)"
# A head count is also written as a number of people without a classifier: "人数达 3 万", "员工 3000".
_PEOPLE = r"|人数|人口|员工"
# How many years: a number of years, not a calendar year ("1951年"): at most three digits, or Chinese numerals with
# a place (二十, 一百) or a single one (三年); 半年, 数十年 too.
_YEARS_COUNTED = re.compile(
    r"(?<![\d〇零一二两三四五六七八九十百千])(?:\d{1,3}(?:\.\d+)?|[一二两三四五六七八九十百千数几]*[十百千万][一二两三四五六七八九十百千]*"
    r"|[一二两三四五六七八九半])\s*(?:多|余|来)?\s*(?:个)?\s*年(?!代|级|间|度|初|底|末|号)"
)
_COUNT = re.compile(rf"(?<![哪第])(?:多少|几(?=[{_CLASSIFIERS}]))")
_CLAUSE_END = re.compile(r"[，,。；;！!？?]")
_LEADING_CLASSIFIER = re.compile(rf"^[{_CLASSIFIERS}](?![{_CLASSIFIERS}])")
_HAN = re.compile(r"[\u4e00-\u9fff]")


def _words(text: str) -> list[str]:
    return [w for w in jieba_tokenizer().cut(text) if _HAN.search(w) and w not in _FILLERS]


def counted(question: str) -> str | None:
    """The word a Chinese count question counts or measures (module docstring), None when it names none."""
    match = _COUNT.search(question)
    if match is None:
        return None
    clause_start = max((m.end() for m in _CLAUSE_END.finditer(question, 0, match.start())), default=0)
    before = question[clause_start : match.start()]
    after = _CLAUSE_END.split(question[match.end() :], maxsplit=1)[0]
    unit = _LEADING_CLASSIFIER.sub("", after)
    after_words = _words(unit)
    # 多少 counts in a unit when a classifier or unit is all that follows ("多少年", "多少公里"), not a thing
    # ("多少张唱片": the classifier's noun is what is counted).
    in_units = (not after_words and unit != after) or (bool(after_words) and after_words[0] in _UNITS)
    head, _, attribute = before.rpartition("的")
    if after_words and not in_units:
        word = after_words[0]
    elif in_units and not head:
        # "能活多少年", "跑多少公里": the word before a unit is the verb measured, which an answer rephrases
        # ("寿命约 20 年"); only an attribute named after the subject's 的 is read ("X的体长约是多少公分").
        return None
    else:
        # The attribute before it: after the subject's 的 ("X的影响因子是多少"), else the last word when the
        # subject is before it ("李晨身高多少"); a lone word is the subject ("一汽有多少?").
        before_words = _words(attribute)
        if not before_words or (not head and len(before_words) < 2):
            return None
        word = before_words[-1]
    return None if len(word) < 2 or word in _UNITS else word


# A count asked in English, French, German or Spanish ("how many times", "combien de temps": how often, how long, which
# the answer's type reads; "wie viel", "combien d'argent": how much); of years, when it counts years.
_ASKS_COUNT = re.compile(
    r"\bhow\s+many\b(?!\s+times\b)|\bcombien\s+d(?:e\s+|')(?!temps\b|fois\b|argent\b)|\bwie\s*viele\b(?!\s+male?\b)"
    r"|\bcu[áa]nt[oa]s\b(?!\s+veces\b)",
    re.IGNORECASE,
)
_ASKS_YEARS = re.compile(
    r"\bhow\s+many\s+years\b|\bcombien\s+d(?:'|e\s+)ann[ée]es\b|\bwie\s*viele\s+jahre\b|\bcu[áa]ntos\s+años\b",
    re.IGNORECASE,
)
# What a count is written in: a classifier (the general 个 included) or a unit; not 年 / 月 / 号 (a year, a month, a
# day of the month: dates), nor 万 / 亿 (part of the numeral).
_COUNT_UNITS = "|".join(sorted(_UNITS - {"年", "月", "万", "亿", "千", "百"}, key=len, reverse=True))
_COUNTED_IN = "".join(sorted(set(_MEASURE_WORDS + "个") - set("年号")))
# The count is the sentence's own: the answerer searches a sentence after its lead (its passage's opening,
# :mod:`ragstep.retrieval.answer_span`), and the lead's count (a company's number of subsidiaries) says nothing of
# what this sentence counts. So the count is followed by the rest of one sentence only.
_IN_LAST_SENTENCE = r"(?=[^。！？!?]*[。！？!?]?[\s\"'”’」』）)]*$)"
_ANY_COUNT = re.compile(
    rf"(?:(?<![\d.,])(?:{_NUMERAL})\s*(?:[多余来]\s*)?(?:[万亿]\s*)?(?:[多余来]\s*)?[{_COUNTED_IN}]"
    rf"|{_YEARS_COUNTED.pattern}){_IN_LAST_SENTENCE}"
)
_ANY_MEASURE = re.compile(
    rf"(?:(?<![\d.,])(?:{_NUMERAL})\s*(?:[多余来]\s*)?(?:[万亿]\s*)?(?:[多余来]\s*)?(?:[{_COUNTED_IN}]|{_COUNT_UNITS})"
    rf"|{_YEARS_COUNTED.pattern}){_IN_LAST_SENTENCE}"
)
# "How many kilometres / yuan / hours", "combien de mètres", "wie viele Stunden", "cuántos kilos": a count of a unit of
# measure, stated in the unit; any other noun counted is a thing, counted in a classifier ("1318公里" counts no
# passengers).
_ASKS_UNITS = re.compile(
    r"\b(?:how\s+many|combien\s+d(?:e\s+|')|wie\s*viele?|cu[áa]nt[oa]s)\s*(?:\w+\s+)?"
    r"(?:(?:square|cubic|carr[ée]s?|quadrat)\s*)?"
    r"(?:(?:kilo|centi|milli)?(?:met(?:er|re)s?|mètres?|metros?)|km|miles?|feet|foot|inch(?:es)?|yards?|hectares?|acres?"
    r"|(?:kilo|milli)?(?:grams?|grammes?|gramm|gramos)|kilos?|tons?|tonnes?|tonnen|toneladas|pounds?|ounces?"
    r"|(?:milli)?(?:lit(?:er|re)s?|litros?)|yuan|dollars?|d[oó]lares|euros?|yen|degrees?|degrés|grad(?:e|os)?"
    r"|seconds?|secondes?|sekunden|segundos|minutes?|minuten|minutos|hours?|heures?|stunden|horas|days?|jours?|tage"
    r"|d[ií]as|weeks?|semaines?|wochen|semanas|months?|mois|monate|meses|calories|kalorien|calor[ií]as)\b",
    re.IGNORECASE,
)
_ANY_YEARS = re.compile(rf"(?:{_YEARS_COUNTED.pattern}){_IN_LAST_SENTENCE}")


def count_in_another_language(question: str) -> re.Pattern[str] | None:
    """What a Chinese sentence answering ``question``, a count asked in English, French, German or Spanish, holds: a
    count in a measure word or a unit (a count of years when it asks years: :data:`_YEARS_COUNTED`); None when
    ``question`` is Chinese or asks no count (module docstring)."""
    if _HAN.search(question) or not _ASKS_COUNT.search(question):
        return None
    if _ASKS_YEARS.search(question):
        return _ANY_YEARS
    return _ANY_MEASURE if _ASKS_UNITS.search(question) else _ANY_COUNT


def counted_patterns(question: str) -> list[re.Pattern[str]]:
    """What a sentence answering ``question`` holds of what it counts (:func:`counted`): the word, or one of its
    two-character parts when it has three characters or more; and the count in its measure word when the question
    counts in one (:func:`measure_word_pattern`); asked in another language, a count in any measure word
    (:func:`count_in_another_language`). Empty when the question names neither. Asked of Chinese sentences only."""
    across = count_in_another_language(question)
    if across is not None:
        return [across]
    patterns = []
    word = counted(question)
    if word is not None:
        parts = {word} | ({word[i : i + 2] for i in range(len(word) - 1)} if len(word) >= 3 else set())
        parts |= _action(question)
        patterns.append(re.compile("|".join(re.escape(p) for p in sorted(parts, key=len, reverse=True))))
    measure = measure_word_pattern(question)
    return patterns if measure is None else [*patterns, measure]


def _action(question: str) -> set[str]:
    """The action a count in a verbal classifier (次 / 回 / 趟 / 遍) counts, written before it ("迟到几次": the times
    late), as a word of two characters or more; empty otherwise. What follows such a count is the rest of the
    sentence ("迟到几次会扣全勤奖": "会扣" counts nothing), or the event counted ("开了多少次会议")."""
    match = _COUNT.search(question)
    if match is None or question[match.end() : match.end() + 1] not in _VERBAL:
        return set()
    clause_start = max((m.end() for m in _CLAUSE_END.finditer(question, 0, match.start())), default=0)
    words = _words(question[clause_start : match.start()])
    return {words[-1]} if words and len(words[-1]) >= 2 else set()


def measure_word_pattern(question: str) -> re.Pattern[str] | None:
    """A numeral in the measure word ``question`` counts in ("多少张唱片": "30 张", "30 个"), None when it counts in
    none, in a unit, or in the general 个 (module docstring)."""
    match = _COUNT.search(question)
    if match is None:
        return None
    after = question[match.end() : match.end() + 2]
    classifier = after[:1]
    if classifier == "年":
        return _YEARS_COUNTED
    if (
        not classifier or classifier not in _MEASURE_WORDS or (len(after) == 2 and after in _UNITS)
    ):  # "多少人次": a unit; "多少毫克": a unit of a quantity, in any of its units
        return unit_count_pattern(question[match.end() :])
    words = next((group for group in _STANDS_FOR if classifier in group), classifier)
    if classifier in _COUNTS_THINGS:
        words += "个"
    # "是一份…的报纸" is "a newspaper": 一 and a classifier after a copula is an article, no count.
    return re.compile(
        rf"(?!(?<=[是为])一[{words}]){_NUMERAL}\s*(?:多|余|来)?\s*(?:[万亿]\s*)?[{words}]"
        + (_PEOPLE if "人" in words else "")
    )


# English count questions ("How many vacation days do part-time employees get?"): module docstring.
# "How many X", and asked as a noun: "what is the (maximum) number of X".
_HOW_MANY = re.compile(
    r"\bhow\s+many\s+((?:[A-Za-z][\w'-]*\s*){1,4})|\bwhat(?:'s|’s|\s+is|\s+are)\s+the\s+(?:(?:max(?:imum)?|min(?:imum)?"
    r"|total|default|usual|largest|smallest|highest|lowest)\s+)?number\s+of\s+((?:[A-Za-z][\w'-]*\s*){1,4})",
    re.IGNORECASE,
)
# Modal verbs that end the counted phrase beside the stopwords ("how many retries must ...").
_MODALS = frozenset({"must", "may", "might", "shall", "need", "ought"})
# Units of measure by what they measure: a count of days is also given in weeks ("two weeks"), of pounds in kg
# ("4 kg (8.8 lb)"): any unit of the same quantity answers (a closed class, abbreviations included).
_UNIT_CLASSES = tuple(
    re.compile(rf"(?:{units})", re.IGNORECASE)
    for units in (
        r"(?:second|minute|hour|day|night|week|month|year|decade)s?|secs?|mins?|hrs?|ms|h|d",
        r"(?:pound|ounce|gram|gramme|kilogram|kilo|milligram|ton|tonne)s?|lbs?|oz|g|kg|mg|t",
        r"(?:met(?:er|re)|kilomet(?:er|re)|centimet(?:er|re)|millimet(?:er|re)|mile|foot|feet|inch|inche|yard)s?"
        r"|m|km|cm|mm|mi|ft|in|yd",
        r"(?:lit(?:er|re)|millilit(?:er|re)|gallon|pint|quart)s?|l|ml|gal",
        r"(?:byte|kilobyte|megabyte|gigabyte|terabyte|bit)s?|b|kb|mb|gb|tb|kib|mib|gib",
    )
)
_TOKEN = re.compile(r"[A-Za-z][\w'’-]*|\d(?:[\d.,:]*\d)?|[^\w\s]")
_CLAUSE_MARK = re.compile(r"[.,;:!?()\[\]{}]")
_EN_WORD = re.compile(r"[A-Za-z][\w'-]*|\d[\d.,:]*")
# English numerals (a closed class), as a count writes them ("two weeks", "a dozen eggs").
_NUMBER_WORDS = frozenset(
    "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen "  # noqa: SIM905
    "eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety hundred thousand million billion "
    "dozen half twice several".split()
)
_HYPHENATED = re.compile(r"\b[A-Za-z]+(?:-[A-Za-z]+)+\b")
#: A number counts the noun at most this many words after it ("5 unused vacation days").
COUNTED_WITHIN = 3


def _norm(word: str) -> str:
    """``word`` as a count's noun is compared: lower case, without a plural's ending ("days" / "day", "batteries" /
    "battery", "employees" / "employee")."""
    w = word.casefold().strip("'’").removesuffix("'s").removesuffix("’s")
    if w.endswith("ies") and len(w) > 4:
        return w[:-3] + "y"
    if w.endswith("s") and not w.endswith("ss") and len(w) > 3:
        w = w[:-1]
    return w.removesuffix("e") if len(w) > 3 else w


def english_count(question: str) -> tuple[str, list[str], list[str]] | None:
    """What an English "how many" question counts: its noun (the phrase after "how many", up to a function word,
    has it as its first plural, else as its last word), the words qualifying that noun ("vacation" of "vacation
    days") and the hyphenated qualifiers of the question ("part-time"); None when it counts no noun ("how many
    times": a frequency; "how many of them")."""
    match = _HOW_MANY.search(question)
    if match is None:
        return None
    stop = stopwords() | _MODALS
    phrase = []
    for word in (match.group(1) or match.group(2)).split():
        if word.casefold() in stop or not word[0].isalpha():
            break
        phrase.append(word)
    # "How many" counts a plural: the first plural of the phrase is its noun ("how many lines end up ...": "end" is
    # the verb); else its last word ("how many people").
    head = next((k for k, w in enumerate(phrase) if w.endswith("s") and not w.endswith("ss")), len(phrase) - 1)
    if not phrase or phrase[head].casefold() in {"time", "times", "one", "ones"}:
        return None
    qualifiers = [w.casefold() for w in _HYPHENATED.findall(question) if w.casefold() not in stop]
    return phrase[head], [w.casefold() for w in phrase[:head]], qualifiers


def _counts(sentence: str, noun: str, modifiers: Sequence[str]) -> bool:
    """A number in ``sentence`` counts ``noun`` (or one of its ``modifiers``: "3 consecutive 'X's" for "how many X
    characters") within :data:`COUNTED_WITHIN` words after it (a unit of measure: any unit of the same quantity, "two
    weeks" answering "how many days", "4 kg" "how many pounds"), or counts no word at all: it ends a clause or is
    followed by a function word ("Serves 6.", "instead of the default (3)"). A number followed by another noun counts
    that noun ("bake for 40 minutes"), and a time of day ("10:00") counts nothing asked."""
    tokens = _TOKEN.findall(sentence)
    unit = next((u for u in _UNIT_CLASSES if u.fullmatch(noun)), None)
    wanted = {_norm(noun)} | {_norm(m) for m in modifiers}
    for k, token in enumerate(tokens):
        if not ((token[0].isdigit() and ":" not in token) or token.casefold() in _NUMBER_WORDS):
            continue
        after: list[str] = []
        for t in tokens[k + 1 : k + 1 + COUNTED_WITHIN]:
            if _CLAUSE_MARK.fullmatch(t) or (t in "%‰" and not after):  # "27-30%" counts a share
                break
            if t[0].isalnum():
                after.append(t)
        if any(_norm(t) in wanted or (unit is not None and unit.fullmatch(t)) for t in after):
            return True
        if not after and k + 1 < len(tokens) and tokens[k + 1] in "%‰":
            continue
        # "one" alone is a pronoun or a partitive ("one of the repositories", "one can"): it counts only a noun; a
        # decimal alone ("in 10.11 we still recommend") is a version or a measure, no count of things.
        decimal = "." in token.rstrip(".")
        if (not after or after[0].casefold() in stopwords()) and token.casefold() != "one" and not decimal:
            return True
    return False


def english_count_held(question: str, texts: Sequence[str]) -> list[bool] | None:
    """Which of ``texts`` (English sentences, each with its lead) give what the English count ``question`` counts
    (:func:`english_count`): a number counting its noun (:func:`_counts`), and each qualifier of the noun or of the
    question's subject unless no text holds it ("25 days of paid vacation" does not say how many sick days, when
    another sentence is about sickness; "Full-time employees receive 25 days" not what part-time employees get,
    when another sentence is about them). None when the question counts no noun."""
    asked = english_count(question)
    if asked is None:
        return None
    noun, modifiers, qualifiers = asked
    group = asked_group(question)  # whom the count is asked of ("do part-time employees get"), its noun too
    qualifiers = qualifiers + ([w.casefold() for w in (*group.qualifiers, group.head)] if group else [])
    held = [{_norm(w) for w in _EN_WORD.findall(t)} for t in texts]
    said = [q for q in dict.fromkeys(modifiers + qualifiers) if any(_norm(q) in h for h in held)]
    return [_counts(t, noun, modifiers) and all(_norm(q) in h for q in said) for t, h in zip(texts, held, strict=True)]


#: A sentence is about a group when the group's noun is within its first this many words (its subject).
SUBJECT_WORDS = 4


def group_rule_held(question: str, sentences: Sequence[str]) -> list[bool] | None:
    """Which of ``sentences`` (English, each alone) state the rule by which the group a count question asks about
    (:func:`~ragstep.retrieval.answer_subject.asked_group`) gets what it counts: the group is the sentence's subject
    (its noun, with each of its qualifiers, within the first :data:`SUBJECT_WORDS` words) and what is counted follows
    (the counted noun or a word qualifying it). "Part-time employees receive vacation pro rata to their contracted
    hours." answers "How many vacation days do part-time employees get?": the document gives no number because there
    is none to give. Read only when no sentence states a number for that group (:func:`focus_held`'s caller); None
    when the question asks no count of a group."""
    asked, group = english_count(question), asked_group(question)
    if asked is None or group is None:
        return None
    noun, modifiers, _ = asked
    counted_words = {_norm(w) for w in (noun, *modifiers)}
    head, qualifiers = _norm(group.head), {_norm(q) for q in group.qualifiers}
    out = []
    for sentence in sentences:
        words = [_norm(w) for w in _EN_WORD.findall(sentence)]
        at = words.index(head) if head in words[:SUBJECT_WORDS] else -1
        out.append(at >= 0 and qualifiers <= set(words[:at]) and bool(counted_words & set(words[at + 1 :])))
    return out


def focus_held(
    question: str, candidates: Sequence[tuple[int, int, str, str]], leads: Sequence[str], languages: Sequence[str]
) -> list[bool] | None:
    """Which candidate sentences (``(passage, position, sentence, embedded)``, each read after its lead;
    ``languages``: each one's) hold what the count ``question`` counts: a Chinese sentence the Chinese focus
    (:func:`counted_patterns`), an English sentence an English question's (:func:`english_count_held`); sentences in
    other languages are not asked. None when the question names nothing counted."""
    texts = [f"{lead} {c[2]}" for c, lead in zip(candidates, leads, strict=True)]
    counted = counted_patterns(question)
    english = english_count_held(question, texts) if question_language(question) == "en" else None
    if not counted and english is None:
        return None
    return [
        (language != "zh" or all(p.search(t) for p in counted)) and (language != "en" or english is None or english[k])
        for k, (t, language) in enumerate(zip(texts, languages, strict=True))
    ]
