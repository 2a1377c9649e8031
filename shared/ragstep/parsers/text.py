"""Plain text and Markdown: decoding, and words a formatter hyphenated at a line's end joined again (the chunker
reads Markdown as it is).

Decoding (:func:`read_text`), for a text that declares no encoding: UTF-16 when it starts with its byte order mark;
else UTF-8 (with or without BOM); else, for a text mostly in UTF-8 -- more characters beyond ASCII read as UTF-8 than
bytes fail to: a changelog whose older entries were pasted in Latin-1 -- UTF-8 with those bytes read as windows-1252
(the note says how many); else GB18030 (mainland China; a superset of GBK) or Big5 (Taiwan, Hong Kong; as Windows
writes it, code page 950) when one of them reads it as Chinese; else windows-1252, the 8-bit encoding of old Western
text (Latin-1 files, Windows Notepad's "ANSI", ``/usr/share/doc`` files from the 1990s), with the note
:data:`WINDOWS_1252_NOTE`. Every byte decodes in windows-1252 but five it leaves undefined, read as Latin-1 reads
them (the C1 controls, as WHATWG's windows-1252 decoder does), so no 8-bit text is refused. A text holding NUL bytes
is refused instead: no 8-bit text encoding writes them, binary content does.

A Chinese file cut mid-character, or with a stray byte, is still read as Chinese, those bytes shown as U+FFFD and
counted in the note.

"Reads it as Chinese": the same bytes often decode in several of these encodings -- every Big5 text is also valid
GB18030 (into kana, Cyrillic and rare ideographs), much GBK text is valid Big5, and a Latin-1 "ü" or "°" before a
letter is a GBK or Big5 character ("Jürgen" -> "J黵gen", "40°C" -> "40蚓"). That a decoding succeeds says little;
whether its result is plausible Chinese says which it is. Each reading (GB18030, then Big5; the bytes it cannot
decode become U+FFFD and count against it) is scored by the share of its characters beyond ASCII (in its first
:data:`_SAMPLE_CHARS`) that are

* common Chinese: in the common set of one of the two standards -- GB2312's 6763 ideographs (the Simplified
  characters in common use) or Big5's first level, its 5401 "frequently used" ones (the Traditional) -- or their
  punctuation, numerals and full-width forms (GB2312's rows 1-3, Big5's rows 0xA1-0xA2). Chinese text is written
  almost entirely in them; a misreading lands mostly elsewhere: rare ideographs, Big5's second level, kana,
  Cyrillic, undecodable bytes;
* in a run: next to another character beyond ASCII, or itself two bytes beyond ASCII. Chinese is written without
  spaces, and most of its characters are two such bytes (read as windows-1252, pairs of accented capitals and
  symbols: "³¤³Ç" for 长城); a Western text's accented letters and symbols stand one at a time between ASCII
  letters, digits and spaces, so the character a misreading makes of one with the ASCII letter after it ("°C",
  "Ärzte", "«Bonjour") stands alone.

The reading with the larger share is taken when that share is more than half (GB18030 on a tie); else the text is
not Chinese. So a Big5 file is read as Big5 although it also decodes in GB18030, a GBK file as GBK although it also
decodes in Big5, and a Latin-1 file's "40°C" stays "40°C". A Chinese text of a character or two can still read
as either: too few characters to tell.
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
#: How many characters of a Chinese reading are looked at to tell Chinese from a misread 8-bit text.
_SAMPLE_CHARS = 20_000
_ASCII_RUNS = re.compile(r"[\x00-\x7f]+")
#: The Chinese encodings tried, in order (the first wins a tie), with the name a note gives them.
_CHINESE = (("gb18030", "GB18030"), ("cp950", "Big5"))
#: Common Chinese (module docstring), as the codes of the standard that defines each set: GB2312's punctuation,
#: numeral and full-width rows and its ideographs; Big5's punctuation and symbol rows and its first level.
_COMMON_CHINESE = (
    ("gb2312", ((0xA1A1, 0xA3FE), (0xB0A1, 0xF7FE))),
    ("big5", ((0xA140, 0xA2FE), (0xA440, 0xC67E))),
)


def decode_text(data: bytes, name: str) -> str:
    """The text of ``data`` (:func:`read_text` without its note)."""
    return read_text(data, name)[0]


def read_text(data: bytes, name: str) -> tuple[str, str]:
    """``(text, note)``: ``data`` decoded as the module docstring says, the note saying how when it was not plain
    UTF-16, UTF-8, GB18030 or Big5 ("" for those). Refused: a UTF-16 byte order mark before what is not UTF-16, and NUL
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
    chinese = _read_as_chinese(data)
    if chinese is not None:
        text, label = chinese
        bad = text.count("\ufffd")
        return text, f"read as {label}, {_bytes(bad)} not {label} shown as \ufffd" if bad else ""
    return data.decode("latin-1").translate(_WINDOWS_1252), WINDOWS_1252_NOTE


def _bytes(count: int) -> str:
    return "the one byte that is" if count == 1 else f"the {count} bytes that are"


def _read_as_chinese(data: bytes) -> tuple[str, str] | None:
    """``(text, encoding's name)`` of ``data`` read as Chinese, None when it does not read as Chinese (module
    docstring). Leniently: a Chinese file cut mid-character (or with a bad byte) is still Chinese, its bad bytes
    shown as U+FFFD and counted against the reading."""
    head = data[: 2 * _SAMPLE_CHARS]  # the sample's bytes: two a character at most (GB18030's rare 4-byte ones aside)
    best, best_share = None, 0.5
    for codec, label in _CHINESE:
        share = _chinese_share(head.decode(codec, "replace"), codec)
        if share > best_share:
            best, best_share = (codec, label), share
    return None if best is None else (data.decode(best[0], "replace"), best[1])


def _chinese_share(text: str, codec: str) -> float:
    """The share of the characters of ``text`` (read in ``codec``) beyond ASCII that are common Chinese in a run
    (module docstring)."""
    sample = text[:_SAMPLE_CHARS]
    known: dict[str, tuple[bool, bool]] = {}
    total = chinese = 0
    for i, char in enumerate(sample):
        if char < "\x80":
            continue
        total += 1
        if char not in known:  # (common Chinese, its second byte beyond ASCII)
            known[char] = (_common_chinese(char), char.encode(codec, "ignore")[-1:] >= b"\x80")
        common, two_high = known[char]
        if common and (two_high or sample[i - 1 : i] >= "\x80" or sample[i + 1 : i + 2] >= "\x80"):
            chinese += 1
    return chinese / total if total else 0.0


def _common_chinese(char: str) -> bool:
    for codec, ranges in _COMMON_CHINESE:
        try:
            code = int.from_bytes(char.encode(codec), "big")
        except UnicodeEncodeError:
            continue
        if any(low <= code <= high for low, high in ranges):
            return True
    return False


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
