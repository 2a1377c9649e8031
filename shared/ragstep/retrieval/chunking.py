"""Structure-preserving text chunking (behaviour modelled on WeKnora's splitter).

The chunker cuts a document into chunks of at most ``chunk_size`` characters (Python ``str`` length, i.e. code
points) while keeping Markdown structure intact:

* **Protected spans** are atomic: fenced code blocks, ``$$`` math, table units (header + ``|---|`` row together,
  then one unit per body row), images, links and inline code. A span longer than ``max_protected`` (7,500) is
  force-split near the end of each window, at a newline, else a space, else a hard cut.
* **Cut choice.** A chunk that starts at ``s`` may end at any separator occurrence (the separator stays with the
  chunk it ends) in ``(s, s + budget]`` that is not strictly inside a protected span. Separators are tried in
  priority order and the *latest* occurrence of the first separator found wins, so a chunk is as full as the
  best available boundary allows. With no separator at all the chunk is cut at the window's end (snapped back
  to a space in the last eighth of the window so English words survive), or just before / after the protected
  span that straddles the window's end.
* **Overlap.** The next chunk restarts at the best boundary (paragraph > line > sentence end) inside the last
  ``overlap`` characters of the previous chunk, never inside a protected span; no boundary means no overlap.
* **Tables** that continue into a chunk get their header + separator rows repeated at its top
  (:attr:`TextChunk.repeated_header`); offsets always describe the original, non-repeated text.
* **Breadcrumbs**: the ATX headings in force where each chunk starts (``Guide > Install > Linux``), outside
  fenced code, for the embedder only; they are never put into ``content``.

Choices where the specification was silent:

* Chunk edges are trimmed: trailing whitespace is dropped, leading blank lines are dropped but the first line's
  indentation is kept (it matters in code). The gaps between consecutive chunks are therefore pure whitespace,
  and a whitespace-only text gives no chunks.
* A higher-priority separator is only preferred when it leaves the chunk at least a quarter full
  (``chunk_size // 4`` of new text); otherwise a tiny heading-only chunk would be emitted before every long
  paragraph. Below that fill the same priority order applies to the short region.
* The repeated table header counts against ``chunk_size`` (the chunk gets a smaller budget for original text), so
  the only chunks over ``chunk_size`` are a single protected span (≤ ``max_protected``) or, when one table
  row does not fit next to its header, header + that one row. A header + separator longer than
  ``chunk_size // 2`` is not repeated at all, since it would crowd out the rows it is meant to label.
* An unclosed code fence is not protected (one stray fence line would otherwise freeze the rest of the
  document into 7,500-character blocks); ``$$`` math may not span a blank line for the same reason.
* Separators are matched literally, so ``"\\n\\n"`` does not match ``"\\r\\n\\r\\n"``; CRLF text still splits at
  ``"\\n"``.
* A chunk never ends with heading lines when it has other text: the cut moves to just before them, so a
  heading starts the chunk of the section it opens instead of trailing the previous section. A chunk that
  is nothing but headings (they precede a paragraph too long to join them) keeps them together.
* In parent-child mode parents have no overlap, so every child belongs to exactly one parent.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from dataclasses import dataclass

from ragstep.errors import InputError

MIN_CHUNK_SIZE = 64
MAX_CHUNK_SIZE = 7500
MAX_PROTECTED_CHARS = 7500
DEFAULT_CHUNK_SIZE = 512
DEFAULT_CHUNK_OVERLAP = 80
DEFAULT_SEPARATORS: tuple[str, ...] = ("\n\n", "\n", "。", "！", "？", "；", ";")

# A separator must leave at least chunk_size // _MIN_FILL_DIVISOR new characters to beat a lower-priority one.
_MIN_FILL_DIVISOR = 4
# The last-resort cut looks for a space in the last chunk_size // _WORD_SNAP_DIVISOR characters of the window.
_WORD_SNAP_DIVISOR = 8
# A forced split of a giant span looks for a newline / space in the last 1/10 of each window.
_FORCE_SPLIT_NEAR_DIVISOR = 10
OnCut = Callable[[int, int], None]  # told (characters cut so far, characters in all) after each chunk

# Opening and closing lines of fenced code blocks; paired up in Python because the closing fence must use the
# same character and be at least as long as the opening one.
_FENCE_LINE_RE = re.compile(r"^[ \t]*(`{3,}|~{3,})([^\n]*)$", re.MULTILINE)
# A table separator row (| --- | :-: |); a pipe is required in Python so a plain "---" rule does not match.
# Every [ \t]* is followed by a token that cannot be whitespace, so a line of a million spaces fails in linear
# time instead of backtracking quadratically. The same care applies to every pattern below.
_TABLE_SEP_RE = re.compile(
    r"^[ \t]*(?:\|[ \t]*)?:?-+:?[ \t]*(?:\|[ \t]*(?::?-+:?[ \t]*)?)*\r?$",
    re.MULTILINE,
)
# A table body row: matched at the newline that ends the previous row; a blank line ends the table.
_TABLE_ROW_RE = re.compile(r"\n([^\n]*\|[^\n]*)")
# $$...$$ without a "$" inside and without crossing a blank line.
_MATH_RE = re.compile(r"\$\$(?:[^$\n]|\n(?![ \t]*\r?\n))+\$\$")
# Links and images (the optional "!" makes the image win over the link nested in it). Brackets and parentheses
# are excluded inside so that a line full of unclosed "[" is scanned once, not once per "[".
_LINK_RE = re.compile(r"!?\[[^\[\]\n]*\]\([^()\n]*\)")
_INLINE_CODE_RE = re.compile(r"``[^\n]+?``|`[^`\n]+`")
# ATX heading; the optional closing "###" is removed in Python (a regex for it backtracks on long blank runs).
_HEADING_RE = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]([^\n]*))?$", re.MULTILINE)
# Sentence ends for the overlap boundary; ASCII ones need whitespace after them (3.14, example.com are not ends).
_SENTENCE_END_RE = re.compile(r"[。！？；;]|[.!?](?=\s)")
_NON_SPACE_RE = re.compile(r"\S")
_OVERLAP_LINE_SEPARATORS = ("\n\n", "\n")


@dataclass(frozen=True, slots=True)
class TextChunk:
    """One chunk. ``text[start_at:end_at] == content[len(repeated_header):]`` always holds."""

    content: str
    start_at: int
    end_at: int
    chunk_index: int
    # Heading breadcrumb in force where the chunk starts, e.g. "Guide > Install > Linux"; for embedding only.
    context_header: str = ""
    # Table header + separator rows (with their newlines) prepended to ``content``; not part of the offsets.
    repeated_header: str = ""


@dataclass(frozen=True, slots=True)
class ChildChunk(TextChunk):
    """A child chunk of :func:`split_parent_child`; offsets are absolute in the original text."""

    parent_index: int = 0


@dataclass(frozen=True, slots=True)
class ParentChildChunks:
    parents: tuple[TextChunk, ...]
    children: tuple[ChildChunk, ...]


def _check_int(name: str, value: object, low: int, high: int) -> None:
    # bool is an int subclass; "chunk_size=True" is a bug, not a size of 1.
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{name} must be an integer between {low} and {high}, got {value!r}")
    if not low <= value <= high:
        raise InputError(f"{name} must be between {low} and {high}, got {value}")


@dataclass(frozen=True, slots=True)
class ChunkerConfig:
    """Validated chunker settings. ``chunk_overlap`` above ``chunk_size // 2`` is capped, not rejected."""

    chunk_size: int = DEFAULT_CHUNK_SIZE
    chunk_overlap: int = DEFAULT_CHUNK_OVERLAP
    separators: tuple[str, ...] = DEFAULT_SEPARATORS
    max_protected: int = MAX_PROTECTED_CHARS

    def __post_init__(self) -> None:
        # A tiny chunk_size multiplies the number of chunks (and embedding calls); WeKnora let 1 through.
        _check_int("chunk_size", self.chunk_size, MIN_CHUNK_SIZE, MAX_CHUNK_SIZE)
        _check_int("chunk_overlap", self.chunk_overlap, 0, self.chunk_size - 1)
        _check_int("max_protected", self.max_protected, self.chunk_size, MAX_PROTECTED_CHARS)
        if isinstance(self.separators, str):
            raise InputError(f"separators must be a list of strings, got the string {self.separators!r}")
        separators = tuple(self.separators)
        for sep in separators:
            if not isinstance(sep, str) or not sep:
                raise InputError(f"separators must be non-empty strings, got {sep!r}")
        object.__setattr__(self, "separators", separators)

    @property
    def effective_overlap(self) -> int:
        return min(self.chunk_overlap, self.chunk_size // 2)


DEFAULT_CONFIG = ChunkerConfig()


def _heading_title(raw: str) -> str:
    title = raw.strip()
    bare = title.rstrip("#")
    # A closing sequence counts only after a space ("# C#" keeps its "#"); "# ##" is an empty heading.
    if bare != title and (not bare or bare[-1] in " \t"):
        title = bare.rstrip()
    return title


def _fence_spans(text: str) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    opening: re.Match[str] | None = None
    for m in _FENCE_LINE_RE.finditer(text):
        fence, info = m.group(1), m.group(2)
        if opening is None:
            # CommonMark: a backtick fence's info string cannot contain a backtick (that is inline code).
            if fence[0] == "`" and "`" in info:
                continue
            opening = m
        else:
            open_fence = opening.group(1)
            if fence[0] == open_fence[0] and len(fence) >= len(open_fence) and not info.strip():
                spans.append((opening.start(), m.end()))
                opening = None
    return spans


def _table_spans(text: str) -> tuple[list[tuple[int, int]], dict[int, str]]:
    """Table units, and for each body row's start the header + separator text to repeat above it."""
    spans: list[tuple[int, int]] = []
    row_header: dict[int, str] = {}
    table_end = -1
    for m in _TABLE_SEP_RE.finditer(text):
        sep_start = m.start()
        if sep_start == 0 or sep_start <= table_end or "|" not in m.group():
            continue
        head_start = text.rfind("\n", 0, sep_start - 1) + 1
        head = text[head_start : sep_start - 1]
        if "|" not in head or not head.strip():
            continue
        spans.append((head_start, m.end()))
        header = text[head_start : m.end()] + "\n"
        pos = m.end()
        while (row := _TABLE_ROW_RE.match(text, pos)) is not None:
            spans.append((row.start(1), row.end(1)))
            row_header[row.start(1)] = header
            pos = row.end(1)
        table_end = pos
    return spans, row_header


def _force_split(text: str, start: int, end: int, limit: int) -> list[tuple[int, int]]:
    pieces: list[tuple[int, int]] = []
    near = max(1, limit // _FORCE_SPLIT_NEAR_DIVISOR)
    while end - start > limit:
        window_end = start + limit
        i = text.rfind("\n", window_end - near, window_end)
        if i < 0:
            i = text.rfind(" ", window_end - near, window_end)
        cut = i + 1 if i >= 0 else window_end
        pieces.append((start, cut))
        start = cut
    pieces.append((start, end))
    return pieces


def find_protected_spans(
    text: str, max_protected: int = MAX_PROTECTED_CHARS
) -> tuple[list[tuple[int, int]], dict[int, str]]:
    """Sorted, non-overlapping ``(start, end)`` atomic spans, and ``{table row start: header to repeat}``."""
    tables, row_header = _table_spans(text)
    candidates = _fence_spans(text) + tables
    for regex in (_MATH_RE, _LINK_RE, _INLINE_CODE_RE):
        candidates.extend(m.span() for m in regex.finditer(text))
    # Earliest first, longest first on ties; anything overlapping an accepted span is nested in it (a link in a
    # code block, inline code in a table row) or malformed, and is dropped.
    candidates.sort(key=lambda span: (span[0], -span[1]))
    spans: list[tuple[int, int]] = []
    last_end = -1
    for start, end in candidates:
        if start < last_end:
            continue
        last_end = end
        if end - start > max_protected:
            spans.extend(_force_split(text, start, end, max_protected))
        else:
            spans.append((start, end))
    kept = {start for start, _ in spans}
    return spans, {start: header for start, header in row_header.items() if start in kept}


class _Splitter:
    """The analysis of one text (spans, table rows, headings), reusable for parent and child passes."""

    __slots__ = ("ends", "heading_starts", "headings", "progress", "row_header", "starts", "text")

    def __init__(self, text: str, max_protected: int, progress: OnCut | None = None) -> None:
        self.text, self.progress = text, progress
        spans, self.row_header = find_protected_spans(text, max_protected)
        self.starts = [start for start, _ in spans]
        self.ends = [end for _, end in spans]
        # "# comment" lines inside a fenced shell block are not headings.
        self.headings = [
            (m.start(), m.end(), len(m.group(1)), _heading_title(m.group(2) or ""))
            for m in _HEADING_RE.finditer(text)
            if self._inside(m.start()) < 0
        ]
        self.heading_starts = [heading[0] for heading in self.headings]

    def _inside(self, pos: int) -> int:
        """Index of the protected span strictly containing ``pos`` (a cut there would split it), else -1."""
        j = bisect_left(self.starts, pos) - 1
        if j >= 0 and self.ends[j] > pos:
            return j
        return -1

    def _first_non_space(self, pos: int, end: int) -> int:
        m = _NON_SPACE_RE.search(self.text, pos, end)
        return end if m is None else m.start()

    def _content_start(self, start: int, end: int) -> int:
        """Skip leading blank lines but keep the first line's indentation."""
        text = self.text
        first = self._first_non_space(start, end)
        if first == start:
            return start
        newline = text.rfind("\n", start, first)
        if newline >= 0:
            return newline + 1
        if start == 0 or text[start - 1] == "\n":
            return start
        return first

    def _content_end(self, start: int, end: int) -> int:
        text = self.text
        while end > start and text[end - 1].isspace():
            end -= 1
        return end

    def _last_cut(self, sep: str, low: int, high: int) -> int:
        """The latest end of ``sep`` in ``(low, high]`` that is not inside a protected span, else -1."""
        width = len(sep)
        floor = max(low - width + 1, 0)
        end = high
        while end - floor >= width:
            i = self.text.rfind(sep, floor, end)
            if i < 0:
                return -1
            j = self._inside(i + width)
            if j < 0:
                return i + width
            end = self.starts[j]  # retry with occurrences that end at or before the span
        return -1

    def _best_cut(self, low: int, high: int, min_fill: int, separators: tuple[str, ...]) -> int:
        preferred = low + min_fill
        if preferred < high:
            for sep in separators:
                cut = self._last_cut(sep, preferred, high)
                if cut >= 0:
                    return cut
            high = preferred
        for sep in separators:
            cut = self._last_cut(sep, low, high)
            if cut >= 0:
                return cut
        return -1

    def _hard_cut(self, low: int, high: int, snap: int) -> int:
        i = self.text.rfind(" ", max(low + 1, high - snap), high)
        if i >= 0 and self._inside(i + 1) < 0:
            return i + 1
        j = self._inside(high)
        if j < 0:
            return high
        # Never cut a protected span: stop before it, or, when the chunk starts with it, take all of it.
        return self.starts[j] if self.starts[j] > low else self.ends[j]

    def _overlap_start(self, low: int, high: int) -> int:
        """The earliest best boundary (paragraph > line > sentence end) in ``[low, high)``, else -1."""
        text = self.text
        for sep in _OVERLAP_LINE_SEPARATORS:
            width = len(sep)
            pos = max(low - width, 0)
            while (i := text.find(sep, pos, high - 1)) >= 0:
                if self._inside(i + width) < 0:
                    return i + width
                pos = i + 1
        for m in _SENTENCE_END_RE.finditer(text, max(low - 1, 0), high):
            b = m.end()
            if low <= b < high and self._inside(b) < 0:
                return b
        return -1

    def _next_chunk(
        self, start: int, done: int, last: int, size: int, separators: tuple[str, ...]
    ) -> tuple[int, int, str] | None:
        """``(content start, cut, repeated header)`` for a chunk starting at ``start`` that must consume text
        after ``done``; None when an overlap tail (``start < done``) leaves no valid room."""
        content_start = self._content_start(start, last)
        fresh = self._first_non_space(done, last)
        header = self.row_header.get(content_start, "")
        if len(header) > size // 2:
            header = ""
        budget = size - len(header)
        high = content_start + budget
        if high >= last:
            return content_start, last, header
        if high <= fresh:
            if start < done:
                return None
            # Indentation longer than the whole budget: drop it rather than emit a whitespace-only chunk.
            content_start = fresh
            header = ""
            budget = size
            high = fresh + size
            if high >= last:
                return content_start, last, header
        cut = self._best_cut(fresh, high, size // _MIN_FILL_DIVISOR, separators)
        if cut < 0:
            cut = self._hard_cut(fresh, high, size // _WORD_SNAP_DIVISOR)
        if cut - content_start > budget:
            if start < done:
                return None  # an oversized protected span follows: it goes alone, without an overlap tail
            # The chunk is one oversized span; indentation before it would push it past max_protected.
            j = bisect_right(self.starts, fresh) - 1
            if j >= 0 and self.ends[j] > fresh:
                content_start = max(content_start, self.starts[j])
        return content_start, self._before_trailing_headings(fresh, cut), header

    def _before_trailing_headings(self, fresh: int, cut: int) -> int:
        """Move headings that would end a chunk into the next one: they open the section that follows.

        A chunk of nothing but headings keeps them (moving them would only make an even smaller chunk)."""
        moved = cut
        k = bisect_left(self.heading_starts, cut) - 1
        while k >= 0:
            start, end, _, _ = self.headings[k]
            if end > moved or self._first_non_space(end, moved) != moved:
                break  # not trailing: text follows this heading
            if start <= fresh:
                return cut  # headings only
            moved = start  # a heading starts a line, so this is a "\n" boundary outside any span
            k -= 1
        return moved

    def ranges(self, low: int, high: int, config: ChunkerConfig) -> list[tuple[int, int, str]]:
        """``(start, end, repeated header)`` of each chunk of ``text[low:high]``, in document order."""
        size, overlap, separators = config.chunk_size, config.effective_overlap, config.separators
        last = self._content_end(low, high)
        out: list[tuple[int, int, str]] = []
        done = low  # everything before ``done`` is in some chunk already
        start = low  # where the next chunk begins: ``done``, or earlier when it re-reads an overlap tail
        while done < last:
            chunk = self._next_chunk(start, done, last, size, separators)
            if chunk is None:
                chunk = self._next_chunk(done, done, last, size, separators)
                assert chunk is not None  # without an overlap tail there is always room
            content_start, cut, header = chunk
            content_end = self._content_end(content_start, cut)
            out.append((content_start, content_end, header))
            done = start = cut
            if self.progress is not None:
                self.progress(done - low, high - low)
            if overlap and cut < last:
                boundary = self._overlap_start(max(content_start + 1, content_end - overlap), content_end)
                if boundary >= 0:
                    start = boundary
        return out

    def breadcrumbs(self, starts: list[int]) -> list[str]:
        """The heading path in force at each of ``starts`` (ascending)."""
        stack: list[tuple[int, str]] = []
        out: list[str] = []
        headings = self.headings
        k = 0
        for pos in starts:
            while k < len(headings) and headings[k][0] <= pos:
                _, _, level, title = headings[k]
                while stack and stack[-1][0] >= level:
                    stack.pop()
                stack.append((level, title))
                k += 1
            out.append(" > ".join(title for _, title in stack if title))
        return out


def _require_text(text: object) -> str:
    if not isinstance(text, str):
        raise InputError(f"text must be a str, got {type(text).__name__}")
    return text


def split_text(text: str, config: ChunkerConfig = DEFAULT_CONFIG, progress: OnCut | None = None) -> list[TextChunk]:
    """Split ``text`` into chunks; see the module docstring for the rules. ``progress``: told as the cutting goes."""
    text = _require_text(text)
    if not text:
        return []
    splitter = _Splitter(text, config.max_protected, progress)
    ranges = splitter.ranges(0, len(text), config)
    crumbs = splitter.breadcrumbs([start for start, _, _ in ranges])
    return [
        TextChunk(header + text[start:end], start, end, index, crumb, header)
        for index, ((start, end, header), crumb) in enumerate(zip(ranges, crumbs, strict=True))
    ]


def split_parent_child(
    text: str,
    parent_size: int = 4096,
    child_size: int = 384,
    child_overlap: int | None = None,
    separators: tuple[str, ...] = DEFAULT_SEPARATORS,
) -> ParentChildChunks:
    """Large parents (no overlap) for answer context, small children (overlap ``child_size // 5`` by default)
    for retrieval. Child offsets are absolute in ``text``; ``chunk_index`` runs over all children."""
    text = _require_text(text)
    _check_int("parent_size", parent_size, MIN_CHUNK_SIZE, MAX_CHUNK_SIZE)
    _check_int("child_size", child_size, MIN_CHUNK_SIZE, parent_size)
    if child_overlap is None:
        child_overlap = child_size // 5
    _check_int("child_overlap", child_overlap, 0, child_size - 1)
    parent_config = ChunkerConfig(parent_size, 0, separators)
    child_config = ChunkerConfig(child_size, child_overlap, separators)
    if not text:
        return ParentChildChunks((), ())
    splitter = _Splitter(text, MAX_PROTECTED_CHARS)
    parent_ranges = splitter.ranges(0, len(text), parent_config)
    child_ranges: list[tuple[int, int, str, int]] = []
    for parent_index, (start, end, _) in enumerate(parent_ranges):
        child_ranges.extend((*r, parent_index) for r in splitter.ranges(start, end, child_config))
    parent_crumbs = splitter.breadcrumbs([start for start, _, _ in parent_ranges])
    child_crumbs = splitter.breadcrumbs([start for start, _, _, _ in child_ranges])
    parents = tuple(
        TextChunk(header + text[start:end], start, end, index, crumb, header)
        for index, ((start, end, header), crumb) in enumerate(zip(parent_ranges, parent_crumbs, strict=True))
    )
    children = tuple(
        ChildChunk(header + text[start:end], start, end, index, crumb, header, parent)
        for index, ((start, end, header, parent), crumb) in enumerate(zip(child_ranges, child_crumbs, strict=True))
    )
    return ParentChildChunks(parents, children)
