"""Plain text and Markdown: decoding, and words a formatter hyphenated at a line's end joined again (the chunker
reads Markdown as it is).

Decoding (:func:`read_text`), for a text that declares no encoding: UTF-16 when it starts with its byte order mark;
else UTF-8 (with or without BOM); else, for a text mostly in UTF-8 -- more characters beyond ASCII read as UTF-8 than
bytes fail to: a changelog whose older entries were pasted in Latin-1 -- UTF-8 with those bytes read as windows-1252
(the note says how many); else GB18030 (a superset of GBK) when that reads it as Chinese; else windows-1252, the
8-bit encoding of old Western text (Latin-1 files, Windows Notepad's "ANSI", ``/usr/share/doc`` files from the 1990s),
with the note :data:`WINDOWS_1252_NOTE`. Every byte decodes in windows-1252 but five it leaves undefined, read
as Latin-1 reads them (the C1 controls, as WHATWG's windows-1252 decoder does), so no 8-bit text is refused. A text
holding NUL bytes is refused instead: no 8-bit text encoding writes them, binary content does.

A Chinese file cut mid-character, or with a stray byte, is still read as GB18030, those bytes shown as U+FFFD and
counted in the note.

"Reads it as Chinese": bytes that are not UTF-8 often decode in GB18030 too -- a Latin-1 "ü" before a letter is a
GBK character -- into rare ideographs ("Jürgen" -> "J黵gen"). Chinese text is written almost entirely in the 6763
common characters of GB2312, which such a misreading rarely hits; so GB18030 is taken when more than half of the
characters it decodes beyond ASCII are GB2312's.
"""

from __future__ import annotations

import codecs
import re

from ragstep.errors import InputError

# Windows tools ("Unicode" in Notepad, PowerShell's Out-File, Excel's "Unicode text") write UTF-16 with a byte order
# mark; the mark is what makes it safe to read: UTF-16 without one is not told apart from other bytes, so it is refused.
_UTF16_MARKS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


#: The note of a text read as windows-1252 (what the ingest row says, so a wrong guess can be seen and fixed).
WINDOWS_1252_NOTE = "read as windows-1252 (not valid UTF-8)"
# windows-1252's characters for 0x80-0x9F, where it differs from Latin-1 (decoded first: every byte decodes in it);
# its five undefined bytes keep Latin-1's C1 control.
_WINDOWS_1252 = {b: bytes([b]).decode("cp1252", "ignore") or chr(b) for b in range(0x80, 0xA0)}
# The same characters for the stand-ins (U+DC80-U+DCFF) the "surrogateescape" handler leaves for the bytes that are
# not UTF-8.
_STRAY_BYTES = {0xDC00 + b: _WINDOWS_1252.get(b, chr(b)) for b in range(0x80, 0x100)}
_STRAY = re.compile("[\udc80-\udcff]")
#: How many characters of a GB18030 reading are looked at to tell Chinese from a misread 8-bit text.
_SAMPLE_CHARS = 20_000
_ASCII_RUNS = re.compile(r"[\x00-\x7f]+")


def decode_text(data: bytes, name: str) -> str:
    """The text of ``data`` (:func:`read_text` without its note)."""
    return read_text(data, name)[0]


def read_text(data: bytes, name: str) -> tuple[str, str]:
    """``(text, note)``: ``data`` decoded as the module docstring says, the note saying how when it was not plain
    UTF-16, UTF-8 or GB18030 ("" for those). Refused: a UTF-16 byte order mark before what is not UTF-16, and NUL
    bytes in what is neither UTF-16 nor UTF-8."""
    if data.startswith(_UTF16_MARKS):
        try:
            return data.decode("utf-16"), ""
        except UnicodeDecodeError:
            raise InputError(
                f"{name}: starts with a UTF-16 byte order mark but is not UTF-16; convert it to UTF-8"
            ) from None
    try:
        return data.decode("utf-8-sig"), ""
    except UnicodeDecodeError:
        pass
    if b"\0" in data:
        raise InputError(
            f"{name}: cannot decode the text: not UTF-8, UTF-16 (with its byte order mark) or GB18030, and it holds NUL"
            " bytes, which no 8-bit text has (binary content?); convert it to UTF-8"
        )
    mixed = data.decode("utf-8", "surrogateescape").removeprefix("\ufeff")
    strays = len(_STRAY.findall(mixed))
    if len(_ASCII_RUNS.sub("", mixed)) - strays > strays:  # more characters read as UTF-8 than bytes failed to
        return mixed.translate(_STRAY_BYTES), f"read as UTF-8, {_bytes(strays)} not UTF-8 read as windows-1252"
    # Leniently: a Chinese file cut mid-character (or with one bad byte) is still Chinese, its bad bytes shown as such.
    chinese = data.decode("gb18030", "replace")
    if _reads_as_chinese(chinese):
        bad = chinese.count("\ufffd")
        return chinese, f"read as GB18030, {_bytes(bad)} not GB18030 shown as \ufffd" if bad else ""
    return data.decode("latin-1").translate(_WINDOWS_1252), WINDOWS_1252_NOTE


def _bytes(count: int) -> str:
    return "the one byte that is" if count == 1 else f"the {count} bytes that are"


def _reads_as_chinese(text: str) -> bool:
    """More than half of the characters of ``text`` beyond ASCII are GB2312's (module docstring)."""
    beyond = _ASCII_RUNS.sub("", text[:_SAMPLE_CHARS])
    common = len(beyond.encode("gb2312", "ignore")) // 2  # two bytes each
    return 2 * common > len(beyond)


# A letter, U+2010 HYPHEN or U+00AD SOFT HYPHEN ending the line (trailing blanks allowed), the next line's indentation.
_HYPHEN_BREAK = re.compile(r"(?<=[^\W\d_])[\u2010\u00ad][ \t]*\r?\n[ \t]*(?=[^\W\d_])")


def join_hyphenated(text: str) -> str:
    """Words a formatter hyphenated at a line's end made one again: ``"com\u2010\n       press"`` -> ``"compress"``.

    groff (a manual page rendered by ``man -P cat``) and typesetters break a word with U+2010 HYPHEN (or a soft
    hyphen, U+00AD); indexed as written, the halves are two words and a search for the word misses that line. The
    break is joined when the next line goes on in lower case, the rule the answerer's sentence reader follows
    (:func:`ragstep.retrieval.sentences`): a capital after it is a compound that happened to end a line ("MS\u2010" /
    "DOS") and keeps its hyphen and line break. A plain ``-`` at a line's end is left as it is: it is as often a real
    hyphen ("well-" / "known", "x86-" / "64") as a break, and nothing in the text tells them apart."""
    if "\u2010" not in text and "\u00ad" not in text:
        return text
    return _HYPHEN_BREAK.sub(_joined, text)


def _joined(match: re.Match[str]) -> str:
    after = match.string[match.end() : match.end() + 1]
    return "" if after.islower() else match.group(0)
