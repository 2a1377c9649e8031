"""Sentences of Markdown-ish text, each with the heading it is under: the units the model-free answerer
(:mod:`ragstep.retrieval.answer_span`) chooses from and quotes. Headings, table rows and code fences are not
sentences; hard-wrapped lines are joined back (without a space between CJK characters); a "." inside a word or a
number, after an initial or "e.g.", and the "!" of a Markdown image link do not end a sentence.
"""

from __future__ import annotations

import re

# A sentence ends at CJK or Latin terminal punctuation (kept) or at a line break. A "." inside a word or number
# (2.5, a URL), after a name's initial ("Andrew L. Moore", "P. J. Plauger": a capital letter alone, a capitalised
# word next), after "e.g." / "i.e." / "vs." / "cf.", and the "!" of a Markdown image link do not end one.
_SENTENCE = re.compile(
    r"(?:\b[A-Z]\.(?=[ \t]+[A-Z])|\b(?:e\.g|i\.e|vs|cf)\.(?=[ \t])|[^。！？!?；;.\n]|\.(?!\s|$)|!(?=\[))+"
    r"(?:[。！？!?；;]+|\.+(?=\s|$))?"
)
_ITEM = re.compile(r"^(?:[-*+]|\d+[.)])\s+")
# A command-line option's term on a line of its own ("-k, --keep", "--max-depth=N", "-s, --signal=SIGNAL"): manual
# pages and --help texts put the option's description on the next line or after a blank line.
_OPTION = re.compile(r"^--?[A-Za-z0-9?][\w?-]*(?:\[?=?[\w<>\[\]|-]*\]?)?,?$")
#: An option term is at most this long (a longer line is a sentence that starts with a dash).
_MAX_OPTION_TERM = 60
#: CJK ideographs, CJK punctuation and full-width forms (code point ranges). Compared as numbers: the same class as
#: a regular expression costs ~3 ms to compile, in every new environment before its first answer.
_HAN_RANGES = ((0x3400, 0x9FFF), (0xF900, 0xFAFF), (0x3000, 0x303F), (0xFF00, 0xFFEF))


def _units(text: str) -> list[tuple[str, str]]:
    """Paragraphs and list items of Markdown-ish text, with hard-wrapped lines joined back together, each with the
    heading it is under ("" before any); headings, table rows and code fences are not units (a title is not an
    answer, but it says what the sentences under it are about)."""
    units: list[tuple[str, str]] = []
    current: list[str] = []
    indents: list[int] = []  # each line's indentation: a description indented under its signature continues it
    heading = ""

    def close() -> None:
        if current:
            units.append((heading, _join(current, indents)))
            current.clear()
            indents.clear()

    in_code = False
    term = False  # the unit open is an option's term, waiting for its description
    raws = text.splitlines()
    lines = [raw.strip() for raw in raws]
    comments = _comment_lines(lines)
    announced = False  # the unit before a code block ends with a colon: the block is what it announces
    shown = 0  # the announced block's lines quoted so far
    for k, line in enumerate(lines):
        if line.startswith("```"):
            close()
            announced = not in_code and bool(units) and units[-1][1].endswith((":", "："))  # "执行：" too
            in_code = not in_code
            shown = 0
            continue
        if in_code and announced and line and shown < _MAX_SHOWN_LINES and not _CODE_COMMENT.match(line):
            units.append((heading, line))  # "Use the full path:" / "$ sudo ~/.local/bin/pipx ensurepath"
            shown += 1  # (a comment line is not what was announced: the quote runs on to the command)
            continue
        if not in_code and (_RST_MARKUP.match(line) or _ADORNMENT.match(line)):
            close()  # reStructuredText markup (".. code-block:: console", ".. _label:") and heading rules ("=====")
            continue
        if not in_code and line and k + 1 < len(lines) and _ADORNMENT.match(lines[k + 1]) and not current:
            heading = line  # a title over its rule ("Debian and Ubuntu issues" / "************")
            continue
        if not in_code and k in comments:
            if _commented_out(line):  # a setting or a command commented out ("#DSHELL=/bin/bash"): alone
                close()
                units.append((heading, line))
                continue
            line = line.lstrip("#").strip()  # a comment's text is prose, a blank one ends its paragraph...
            if not line and k + 1 < len(lines) and k + 1 not in comments and lines[k + 1]:
                continue  # ...unless the setting it comments follows ("#" / "LOGIN_TIMEOUT 60")
        elif not in_code and (line.startswith("#") or _is_plain_heading(line)):
            close()
            heading = line.lstrip("#").strip()
            continue
        if not in_code and not line and term:  # the blank line between an option's term and its description
            continue
        if in_code or not line or line.startswith("|"):
            close()
            term = False
            continue
        if term:  # the description joins its option's term: "-k --keep Keep (don't delete) input files."
            term = False
        elif _ITEM.match(line) or is_option_term(line):  # a list item or an option starts a unit of its own
            close()
            line = _ITEM.sub("", line) if _ITEM.match(line) else line
            term = is_option_term(line)
        current.append(line)
        indents.append(len(raws[k]) - len(raws[k].lstrip()))
    close()
    return units


# reStructuredText markup lines: a directive (".. code-block:: console", ".. note::"), a target (".. _label:"), a
# bare comment marker; and a heading's rule, a line of one repeated punctuation mark ("=====", "*****", "-----").
_RST_MARKUP = re.compile(r"^\.\.(?:\s+(?:[\w-]+::.*|_[^:]+:.*|\|[^|]+\|.*))?$")
_ADORNMENT = re.compile(r"^([=*~^#+\-`'\":._])\1{2,}$")
# A comment line of a code block ("// 2.0版本的引入方式", "# for Debian").
_CODE_COMMENT = re.compile(r"^(?://|#(?!!)|--\s|/\*|\*)")
#: Lines of a fenced code block (its comments aside) quoted as the units a sentence ending with a colon announces.
_MAX_SHOWN_LINES = 3


def _commented_out(line: str) -> bool:
    """``line`` is code with a "#" before it, not a comment's prose: "#DSHELL=/bin/bash", "#!/bin/sh", "#reclevel =
    5" -- but not "#This file sets the resource limits ..." (a comment written without a space)."""
    rest = line[1:]
    if not rest or rest[0].isspace() or rest[0] == "#":
        return False
    word = rest.strip()  # one word of code ("#!/bin/sh"), not a comment's last word ("#file.")
    return is_setting(rest) or (" " not in word and not word.rstrip(".,;:").isalpha())


def _comment_lines(lines: list[str]) -> set[int]:
    """The lines of a configuration file's or a script's comments, not Markdown headings: a "#" line next to
    another one ("# The login shell to be used for all new users." over "# Default: DSHELL=/bin/bash": Markdown puts
    a heading on a line of its own), a "#" line that ends as a sentence does, and a "#" with no space after it
    ("#DSHELL=/bin/bash", "#!/bin/sh": never a heading). Read as headings, a configuration file's comments -- what
    each setting does, its default -- were no sentences at all."""
    hashed = [line.startswith("#") for line in lines]
    out = set()
    for k, line in enumerate(lines):
        if not hashed[k]:
            continue
        bare = len(line) > 1 and not line[1].isspace() and line[1] != "#"
        sentence = line.endswith(".") and not line.endswith("..")  # a heading is no sentence
        if bare or sentence or (k > 0 and hashed[k - 1]) or (k + 1 < len(lines) and hashed[k + 1]):
            out.add(k)
    return out


def comment_lines(lines: list[str]) -> set[int]:
    """The indexes of ``lines`` (stripped) that are a configuration file's or a script's comments, not Markdown
    headings (:func:`_comment_lines`)."""
    return _comment_lines(lines)


# A manual page's running header or footer ends with the page's name in capitals and its section: "TIMEOUT(1)
# Commandes de l'utilisateur TIMEOUT(1)", "GNU coreutils 9.1 Septembre 2022 TOUCH(1)". A reference inside the text
# names another page in lower case ("see shuf(1)").
_PAGE_FURNITURE = re.compile(r"(?:^|\s)[A-Z][A-Z0-9_.+-]*\(\d[a-z]*\)$")


def is_page_furniture(sentence: str) -> bool:
    """A manual page's running header or footer line: it tells the page's name, section, source and date, and
    answers no question (its section and date would pass for the number or the year a question asks for)."""
    return bool(_PAGE_FURNITURE.search(sentence.rstrip()))


def is_option_term(line: str) -> bool:
    """``line`` is a command-line option's term alone, its description to follow: options ("-t --test",
    "-k, --kill-after=DURATION", "-I[FMT], --iso-8601[=FMT]") and at most one argument's name after them
    ("-E, --conflict-exit-code number"); "--help display this help and exit" is a term with its description."""
    if len(line) > _MAX_OPTION_TERM or not line.startswith("-"):
        return False
    words = line.split()
    options = [w for w in words if _OPTION.match(w)]
    return bool(options) and words[: len(options)] == options and len(words) - len(options) <= 1


def _is_plain_heading(line: str) -> bool:
    """A plain-text heading: a short line of capitals without terminal punctuation ("EXIT STATUS", "NOTES"), the
    way manual pages and text files title their sections."""
    letters = [c for c in line if c.isalpha()]
    capitals = len(letters) >= 3 and all(c.isupper() for c in letters)
    return 0 < len(line) <= 40 and capitals and line[-1] not in ".!?。" and not _SPACED_SETTING.match(line)


def _join(lines: list[str], indents: list[int]) -> str:
    """The unit's lines as one text: a line the formatter wrapped continues on the next, a line its writer ended
    ends its sentence (:func:`_ended`). A writer who ends lines ends most of them so (a list of one-liners); in a
    wrapped paragraph a short line before a capital or a number is a break the writer chose mid-sentence ("each
    chunk scores" / "0.7 / (60 + vector rank) ..."): the breaks are read as ended only when most of the unit's are."""
    width = _width(lines)
    ended = [_ended(lines[k - 1], lines[k], width) and indents[k] <= indents[k - 1] for k in range(1, len(lines))]
    listed = 2 * sum(ended) > len(ended)
    out = lines[0]
    for k in range(1, len(lines)):
        line = lines[k]
        if is_setting(line) or (listed and ended[k - 1]):
            out += "\n" + line
            continue
        if out.endswith("\u2010") and line[:1].islower():
            # A word the formatter hyphenated at the line's end (groff's U+2010 in a rendered manual page: "inter‐
            # / active"): one word again.
            out = out[:-1] + line
            continue
        # Chinese wraps without a space (either side of the break in CJK); other scripts had one there.
        out += line if _is_han(out[-1:]) or _is_han(line[:1]) else " " + line
    return out


def _width(lines: list[str]) -> int:
    """The width a unit's lines were wrapped at, as far as they tell: the longest one's length. (A line that runs
    over, a URL, makes every other line look short; a line read as ended there mostly ends a sentence anyway.)"""
    return max(len(line) for line in lines)


# A setting: a key as configuration files write one (no space in it, "net.ipv4.ip_forward", "inode_size",
# "[fs_types]" excluded), "=" or ": ", and a value ("region = \"eu-west-3\"", "net.ipv4.ip_forward=1",
# "retention_days: 35").
_SETTING = re.compile(r"^[A-Za-z_][\w.-]*\s*(?:=|:\s)\s*\S")
# ...or, as login.defs writes them, a key in capitals and one value after spaces ("LOGIN_TIMEOUT 60", "MAIL_DIR
# /var/mail"): a key with an underscore, or a value with a digit or a slash (a heading "SEE ALSO" has neither).
_SPACED_SETTING = re.compile(r"^(?:[A-Z][A-Z0-9]*_[A-Z0-9_]*\s+\S+|[A-Z][A-Z0-9_]*\s+\S*[\d/]\S*)$")


def is_setting(sentence: str) -> bool:
    """``sentence`` is a configuration file's setting ("spool_days = 12", "Default: PFORMAT=zpack")."""
    return bool(_SETTING.match(sentence) or _SPACED_SETTING.match(sentence))


def _ended(prev: str, line: str, width: int) -> bool:
    """``prev`` was ended by its writer, not wrapped by a formatter: the next line starts anew (a capital, a digit)
    and its first word would have fit on ``prev``. A list of one-line tips or settings ("To record callchains for
    each sample: perf record -g" / "To record every process run by a user: perf record -u <user>") breaks where
    each ends; joined, they were one sentence of a whole page that answered nothing. An option's term and a line
    ending in a colon lead into the next line; a setting (``key = value``) is a line of its own; and a line
    indented under another continues it (a signature's description: "close(self, /)" over "    Close the
    database connection.": :func:`_join`)."""
    if is_setting(line):  # a configuration file's setting is a line of its own
        return True
    word = line.split(maxsplit=1)[0] if line else ""
    starts_anew = word[:1].isupper() or word[:1].isdigit()
    leads_in = prev.endswith((":", "：")) or is_option_term(prev)  # "EXIT status:" / "124 if COMMAND times out"
    return starts_anew and not leads_in and len(prev) + 1 + len(word) <= width


def _is_han(char: str) -> bool:
    """``char`` (one character, or none) is in :data:`_HAN_RANGES`."""
    return bool(char) and any(lo <= ord(char) <= hi for lo, hi in _HAN_RANGES)


def sentences_under_headings(text: str) -> list[tuple[str, str]]:
    """The sentences of ``text``, each with the Markdown heading it is under ("" before any); Markdown image links
    and bare URLs stay inside their sentence."""
    return [(heading, sentence) for heading, _, sentence in sentences_in_units(text)]


def sentences_in_units(text: str) -> list[tuple[str, int, str]]:
    """The sentences of ``text``, each with its heading and the number of its unit (paragraph, list item, or an
    option with its description): the unit's first sentence is the context of the others ("-E, --conflict-exit-code
    number The exit status used when ... The default value is 1.")."""
    out: list[tuple[str, int, str]] = []
    for k, (heading, unit) in enumerate(_units(text)):
        for match in _SENTENCE.finditer(unit):
            sentence = match.group(0).strip(" \t").lstrip("> \t")  # a quotation's marker, not "<dir>"'s end
            if sentence:
                out.append((heading, k, sentence))
    return out


# A line of code that gives a name its value: a C macro ("#define CHUNK 16384"), an assignment or a declaration with
# an initial value that is a literal ("MAX_RETRIES = 5", "const int BUFSIZE = 4096;", "timeout: int = 30"). Prose
# around code seldom repeats the value ("CHUNK is simply the buffer size ...": the size is in the code).
_CODE_DEFINITION = re.compile(
    r"^\s*(?:#\s*define\s+(?P<macro>[A-Za-z_]\w*)\s+(?P<mvalue>\S.*?)"
    r"|(?:(?:const|static|final|let|var|val|constexpr|export|public|private|readonly|unsigned|signed|long|short|int"
    r"|size_t|char|float|double|bool|auto|uint\w*|int\w*)\s+)*(?P<name>[A-Za-z_][\w.]*)\s*(?::\s*[\w\[\]., ]+?)?\s*"
    r":?=\s*(?P<value>-?(?:0[xX][0-9a-fA-F]+|\d[\d_.]*[a-zA-Z]*)|\"[^\"]*\"|'[^']*'|true|false|True|False|None)\s*;?)"
    r"\s*(?:(?://|/\*|#).*)?$"
)
#: A code definition is a candidate answer only when this short (a longer line is program logic, not a value).
_MAX_CODE_DEFINITION = 120


def code_definitions(text: str) -> list[tuple[str, str, str]]:
    """The lines of ``text``'s code blocks that give a name a literal value (:data:`_CODE_DEFINITION`), each as
    (heading it is under, the name, the line): the answer to "What is the size of CHUNK?" when only the code says
    it. A code block's other lines are no sentences (:func:`sentences_in_units`)."""
    out: list[tuple[str, str, str]] = []
    heading = ""
    in_code = False
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("```"):
            in_code = not in_code
            continue
        if not in_code:
            if line.startswith("#") or _is_plain_heading(line):
                heading = line.lstrip("#").strip()
            continue
        match = _CODE_DEFINITION.match(line) if len(line) <= _MAX_CODE_DEFINITION else None
        if match:
            out.append((heading, match.group("macro") or match.group("name"), line))
    return out


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text`` (:func:`sentences_under_headings` without the headings)."""
    return [sentence for _, sentence in sentences_under_headings(text)]
