"""A Chinese count of a unit of measure ("多少毫克", "多少公里", "多少钱"), and what a sentence answering it holds: a
numeral followed by a unit of the same quantity, in any of its units ("0.5克" answers "多少毫克", "3千米" answers
"多少公里"), or a currency sign before the number for money.

"伊维菌素吃一次要多少毫克？" asks for a mass. Its type alone is "a number", which "售价约为0.12美金" (a
price) holds, and the sentence is close in meaning: the unit named after 多少 is what the answer is measured in, as
"how many mg" is in English (:data:`~ragstep.retrieval.answer_focus._UNIT_CLASSES`). A quantity is a closed class of
units, so this is general vocabulary, not a list fitted to questions. Not read: 度 (degrees of heat or of an angle),
倍 (a ratio), 年 / 月 (a count of years is :data:`~ragstep.retrieval.answer_focus._YEARS_COUNTED`; a month is also a
date, "10月9日").
"""

from __future__ import annotations

import re

# Units by the quantity they measure; each also written in Latin abbreviations after a number.
_QUANTITIES = (
    ("毫克 千克 公斤 克 斤 吨 磅 盎司", r"mg|kg|g|lbs?|oz"),
    ("毫米 厘米 公分 分米 千米 公里 公尺 米 英里 英尺 英寸 海里", r"mm|cm|km|m|mi|ft"),
    ("平方公里 平方千米 平方米 公顷 亩", r"km²|km2|m²|m2|ha"),
    ("毫升 立方米 升", r"ml|l|m³"),
    ("秒钟 秒 分钟 小时 天 周 星期 个月", r"s|sec|min|h|hrs?|d"),
    ("元 美元 港元 日元 日圆 欧元 英镑 人民币 块 钱 美金", r"usd|eur|rmb|cny"),
)
_NUMERAL = r"(?:\d[\d,.]*|[〇零一二两三四五六七八九十百千万亿半]+)"
_CURRENCY_SIGN = r"[$€£¥￥]\s*\d"


def _alternatives(words: str) -> str:
    return "|".join(sorted(words.split(), key=len, reverse=True))


def unit_count_pattern(after: str) -> re.Pattern[str] | None:
    """What a sentence answering a count holds when ``after`` (the question's text right after 多少) starts with a
    unit of measure: a numeral followed by any unit of the same quantity; None when it starts with none."""
    for chinese, latin in _QUANTITIES:
        unit = re.match(_alternatives(chinese), after)
        if unit is None:
            continue
        if unit.group() == "块" and after[1:2] and after[1:2] not in "钱？?。，,":
            return None  # "多少块地": 块 counts pieces, not money
        units = rf"(?:{_alternatives(chinese)}|(?:{latin})(?![A-Za-z]))"
        money = rf"|{_CURRENCY_SIGN}" if "元" in chinese else ""
        return re.compile(rf"{_NUMERAL}\s*(?:多|余|来)?\s*(?:[万亿千百]\s*)?{units}{money}", re.IGNORECASE)
    return None
