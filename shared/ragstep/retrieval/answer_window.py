"""How much around a chosen sentence the model-free answerer quotes: the sentence, and the sentence of the same
unit (paragraph, list item, option with its description) it cannot be read without.

:mod:`ragstep.retrieval.answer_span` chooses sentences; a sentence is the smallest span that answers only when it
can be read alone. Two kinds cannot, and both are read from the text's own grammar and layout, not from any set:

* A sentence that **leans back** -- it opens with a connective or a pronoun that points at the sentence before
  ("However, for each symbolic link listed ...", "Otherwise, all such characters are escaped", "It is ...",
  "但是……", "它……") -- is quoted with the sentence before it in its unit: that is what "however" contrasts and
  "it" names. So is a clause after a semicolon that opens in lower case ("... on weekdays; the buildings are closed
  on weekends."): the splitter cut its sentence in two, and the clause before it says what it is about.
* A sentence that **leads in** is quoted with the sentence after it in its unit: one that announces what follows
  (it ends with a colon); a clause that a semicolon joins to the rest of its sentence (the splitter cuts at ";" and
  "；", so "... creates its clients once;" would end a quote mid-sentence); or the head of a definition entry, the
  first sentence of an option's or a function's description ("-E, --conflict-exit-code number The exit status used
  when ... The default value is 1.", "close(self, /) Close the database connection. Any pending transaction is not
  committed implicitly."), which names the thing and says what it is while the details the question asks about
  follow.

* A sentence whose **next one leans back on it** (the next sentence of its unit opens with "It", "This",
  "Thus", "That's because", "其", "它" ...) is quoted with that next sentence: the unit goes on about what this one
  introduced, and that is where an FAQ or a description states the detail ("... the use of sudo is preferred over
  such highly-privileged accounts." / "It had uid 37."; "... a new lzma tool written by Ville Koskinen." / "It was
  written in C++"). The same grammar as the rule above, read from the other side.

* A configuration file's comment and the setting under it ("How many days a packed archive is kept in the spool
  before it is removed." / "spool_days = 12") are quoted together, whichever was chosen: the comment says what the
  setting sets, the setting its value.

* A unit's last sentence that ends with a colon is quoted with the next unit's first sentence, which it announces
  ("... to make sure it terminates when your session ends with:" / "gpgconf --kill gpg-agent"), also when it is
  the sentence quoted after the chosen one ("make sure these packages are installed;" / "Debian systems do not add
  them by default:" / "$ sudo apt install python3-venv python3-pip"): a command in a code block after a sentence
  that announces it is a unit (:mod:`ragstep.retrieval.sentences`).

* A later sentence of an option's description ("Example: 2006-08-14T02:34:56-06:00" under "-I[FMT], --iso-8601[=FMT]
  output date/time in ISO 8601 format.") is quoted from the option's term: what it says is said of that option.

* Asked why, a sentence that gives no reason ("If you hit the "Print Screen" key while in a Linux console, your
  current application will likely dump core.") is quoted with the sentence after it in its unit, or, when it closes
  its paragraph, with the next paragraph of its section: it restates what the question describes, and the text
  after it explains ("The kernel maps that key to ^\\, which generates a SIGQUIT by default."). A sentence with a
  reason's grammar ("because", "so that", "due to", "由于", "为了" ...) is quoted alone. Asked what to do about a
  problem ("sudo pipx says command not found, what do I do?", "怎么办"), the same holds of a sentence that gives no
  remedy ("... fails with "command not found"." / "Use the full path ...").

Otherwise one sentence each way at most: a window, not the paragraph (the answer stays the smallest span that reads
on its own, and within ``max_chars``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from ragstep.retrieval.sentences import is_setting

# Openings that point at the sentence before: connectives (contrast, consequence, alternative) and pronouns or
# determiners whose referent is there. English, Chinese, French, German and Spanish grammar words, not words of any
# document.
_LEANS_BACK = re.compile(
    r"^(?:however|otherwise|but|instead|also|then|thus|therefore|hence|nevertheless|conversely|likewise|"
    r"this|that|these|those|it|its|they|them|their|such|in\s+(?:that|this|either|both)\s+cases?|if\s+(?:so|not))\b"
    r"|^(?:但是|但|然而|否则|因此|所以|因而|此外|另外|同时|这|那|它|其|该|此)"
    # French, German, Spanish: the same connectives and pronouns (not their articles: German "Das" and "Die", Spanish
    # "El" open most sentences as articles).
    r"|^(?:cependant|toutefois|sinon|donc|ainsi|alors|aussi|par\s+conséquent|en\s+revanche|de\s+même|ce|cela|ceci"
    r"|ces|cette|cet|il|elle|ils|elles|celui|celle|ceux)\b"
    r"|^(?:jedoch|allerdings|aber|sonst|andernfalls|daher|deshalb|deswegen|somit|also|außerdem|ebenso|dies|diese[rsnm]?"
    r"|es|sie)\b"
    r"|^(?:sin\s+embargo|no\s+obstante|pero|de\s+lo\s+contrario|si\s+no|por\s+(?:lo\s+tanto|eso|ello)|así|además"
    r"|también|este|esta|esto|estos|estas|ese|esa|eso|esos|esas|ello|él|ella|ellos|ellas)(?!\w)",
    re.IGNORECASE,
)
# The head of a definition entry: a command-line option ("-E, --conflict-exit-code ...") or a call signature
# ("close(self, /) ...", "json.dumps(obj, ...) ...").
_ENTRY_HEAD = re.compile(r"^(?:--?[A-Za-z0-9]|[A-Za-z_][\w.]*\([^)]*\)\s)")
# An option's term, heading its description: a later sentence of the description is read with it.
_OPTION_HEAD = re.compile(r"^--?[A-Za-z0-9]")


def leans_back(sentence: str) -> bool:
    """``sentence`` opens with a word that points at the sentence before it."""
    return bool(_LEANS_BACK.match(sentence.lstrip("\"'“‘(（ ")))


def leads_in(sentence: str, *, first: bool) -> bool:
    """``sentence`` announces the sentence after it: it ends with a colon, or a semicolon continues it, or it heads a
    definition entry (``first``: it opens its unit)."""
    return sentence.rstrip().endswith((":", "：", ";", "；")) or (first and bool(_ENTRY_HEAD.match(sentence)))


# A question asking why, and the grammar of a reason (English, Chinese, French, German, Spanish).
_ASKS_WHY = re.compile(
    # 为什么 after a verb taking 为 ("称为什么", "表现为什么": called / shown as what) asks what, not why.
    r"\bwhy\b|\bhow\s+come\b|\bwhat'?s\s+going\s+on\b|\bwhat\s+is\s+going\s+on\b"
    r"|\bwhat\s+(?:causes|caused)\b|\bwhat(?:'s|\s+is)\s+the\s+(?:reason|cause)\b"
    r"|(?<![称成作现名认视定列改选封誉任升分变转译化])为什么|为何|怎么回事|什么原因|啥原因|原因是什么|原因是啥|\bpourquoi\b"
    r"|\bwarum\b|\bwieso\b|\bweshalb\b|\bpor\s*qu[ée]",
    re.IGNORECASE,
)
_REASON = re.compile(
    r"\b(?:because|since|due\s+to|owing\s+to|so\s+that|in\s+order\s+to|as\s+a\s+result|reasons?|caus(?:e|es|ed|ing)"
    r"|therefore|thus|hence|prevents?|avoids?|parce\s+que|car|afin|weil|denn|damit|deshalb|wegen|porque|debido"
    r"|para\s+que)\b|因为|由于|所以|因此|为了|以便|以防|以免|导致|原因|因而|是为",
    re.IGNORECASE,
)


#: What a sentence that explains holds (:func:`explanation_asked`), or None: the question asks for no explanation.
Explains = Callable[[str], bool] | None

# A question about a problem asking what to do ("... cannot find -lc. What's missing?", "怎么办"), and the grammar of
# a remedy: what to do, need or use (English, Chinese, French, German, Spanish).
_ASKS_REMEDY = re.compile(
    r"\bwhat'?s\s+(?:missing|wrong|the\s+fix|the\s+solution)\b|\bwhat\s+(?:do|should|can)\s+i\s+do\b"
    r"|\bhow\s+(?:do|can|should)\s+i\s+(?:fix|solve|resolve|repair)\b|\bhow\s+to\s+(?:fix|solve|resolve)\b"
    r"|怎么办|如何解决|怎么解决|怎么处理|如何处理|\bque\s+faire\b|\bwas\s+tun\b|\bqu[ée]\s+hago\b",
    re.IGNORECASE,
)
_REMEDY = re.compile(
    r"\b(?:need|needs|must|should|have\s+to|has\s+to|install|use|run|set|try|add|remove|upgrade|enable|disable"
    r"|make\s+sure|ensure|fix|solution|workaround|instead)\b|需要|请|应该|应当|可以|安装|设置|执行|运行|使用|修改|添加|删除"
    r"|升级|确认|检查|il\s+faut|installez|müssen|installieren|hay\s+que|instale",
    re.IGNORECASE,
)


def explanation_asked(question: str) -> Explains:
    """What a sentence answering ``question`` holds when it asks for an explanation: a reason's grammar (asked why:
    :func:`gives_reason`) or a remedy's (asked what to do about a problem); None when it asks for neither."""
    if asks_why(question):
        return gives_reason
    if _ASKS_REMEDY.search(question):
        return gives_remedy
    return None


def gives_remedy(sentence: str) -> bool:
    """``sentence`` has a remedy's grammar ("You need to install ...", "use --follow=name", "请执行 ...")."""
    return bool(_REMEDY.search(sentence))


def asks_why(question: str) -> bool:
    """``question`` asks for a reason ("Why ...?", "... what's going on?", "为什么……", "Pourquoi ...")."""
    return bool(_ASKS_WHY.search(question))


def gives_reason(sentence: str) -> bool:
    """``sentence`` has a reason's grammar ("because", "so that", "due to", "由于", "为了" ...)."""
    return bool(_REASON.search(sentence))


# Text written without spaces between sentences: CJK characters and their full-width punctuation.
_UNSPACED = re.compile(r"[\u3000-\u303f\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af\uff00-\uffef]")


def joined(sentences: Sequence[str]) -> str:
    """``sentences`` as one quote: a space between two only where the text puts one (none after "；" or before
    "谷雨前...": Chinese and Japanese write sentences together)."""
    text = ""
    for sentence in sentences:
        if text and not (_UNSPACED.match(text[-1]) and _UNSPACED.match(sentence[:1])):
            text += " "
        text += sentence
    return text


def window(units: Sequence[tuple[str, int, str]], position: int, *, explains: Explains = None) -> tuple[int, int]:
    """The first and last position (inclusive) quoted for the sentence at ``position`` of ``units`` (the passage's
    ``sentences_in_units``): with the sentence before it in its unit when it leans back (from the unit's first when
    that is an option's term), the one after when it leads in, or when the question asks for an explanation the
    sentence does not give (``explains``: :func:`explanation_asked`)."""
    _, unit, sentence = units[position]
    start = end = position
    same_before = position > 0 and units[position - 1][1] == unit
    if same_before and (
        leans_back(sentence) or (units[position - 1][2].rstrip().endswith(";") and sentence[:1].islower())
    ):
        start = position - 1  # ...or it is a clause after a semicolon: the rest of its sentence is before it
    head = position
    while head > 0 and units[head - 1][1] == unit:
        head -= 1
    if head < start and _OPTION_HEAD.match(units[head][2]):  # a sentence of an option's description: its option
        start = head
    if same_before and is_setting(sentence) and not is_setting(units[position - 1][2]):
        start = min(start, position - 1)  # a setting with the comment above it, which says what it sets
    if position + 1 < len(units) and units[position + 1][1] == unit:
        after = units[position + 1][2]
        if leads_in(sentence, first=not same_before) or (is_setting(after) and not is_setting(sentence)):
            end = position + 1  # ...and a comment with the setting it describes
        elif leans_back(after):
            end = position + 1  # the next sentence goes on with this one: "... such accounts." / "It had uid 37."
        elif explains is not None and not explains(sentence):
            end = position + 1  # asked why, a sentence without a reason restates; its paragraph goes on to explain
    elif (
        explains is not None
        and not explains(sentence)
        and position + 1 < len(units)
        and units[position + 1][0] == units[position][0]
    ):
        end = position + 1  # ...or, closing its paragraph, the next paragraph of its section does
    last = units[end]  # the quote's last sentence, when it ends its unit with a colon, announces the next unit
    if end + 1 < len(units) and units[end + 1][1] == last[1] + 1 and last[2].rstrip().endswith((":", "：")):
        end += 1  # "... ends with:" / a command; "... installed; Debian systems do not add them:" / the command
    return start, end
