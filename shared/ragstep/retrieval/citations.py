"""Citations in answers: ``[n]`` markers that point at the numbered context passages (``[1]`` = the first).

Two sources of markers, one shape out:

* **Prompted** -- the model was asked to cite. Models get the shape wrong in known ways, so :class:`MarkerRepair`
  rewrites ``[ID:3]``, ``(ID:3)``, ``【3】``, ``［３］``, ``[^3]``, ``ref3``, ``[1, 2]`` and full-width digits to
  ``[3]`` / ``[1][2]``, drops markers to passages that do not exist, and collapses a run of markers that repeats a
  passage (``[1] [2][1]`` -> ``[1][2]``). It works on a stream: text that may be the start of a marker (``[I``,
  ``re``, a backtick that may open code) is held back until
  the next chunk decides it, so no half marker ever reaches a reader. Code (fenced blocks, inline spans) is never
  touched: ``arr[9]`` is not a citation.
* **Inserted** -- the model wrote none: :func:`insert_citations` (RAGFlow's ``insert_citations``) cites each
  sentence-sized piece of the answer with the passages most similar to it.

Pure functions: no I/O, no models; the caller hands in the embedder as a function.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from ragstep.models.scale import COMMON_SCALE, ScoreScale
from ragstep.retrieval.text import token_set

# -- the marker grammar ---------------------------------------------------------------------------------------

_D = "[0-9\uff10-\uff19]+"  # ASCII or full-width digits (int() reads both)
_LIST = rf"{_D}(?:\s*[,，、]\s*{_D})*"
_REF = "(?i:ref)"
#: A marker in any shape models write, with the spaces or tabs before it (dropped with a dropped marker).
MARKER = re.compile(
    rf"(?P<ws>[ \t]*)(?:"
    rf"[\[(（【［]\s*(?i:id)\s*[:：]\s*(?P<id>{_LIST})\s*[\])）】］]"  # [ID:3] (ID:3) 【ID:3】 [ID:1, 2]
    rf"|\[\^(?P<foot>{_D})\]"  # [^3]
    rf"|[\[【［]\s*(?P<plain>{_LIST})\s*[\]】］]"  # [3] 【3】 ［３］ [1, 2]
    rf"|[\[(（]\s*{_REF}\s*(?P<bref>{_D})\s*[\])）]"  # [ref3] (ref 3)
    rf"|[\[【［]\s*(?P<label>(?:FAQ|DOC)-{_D})\s*[\]】］]"  # [FAQ-1] [DOC-2]: the FAQ-first layout's labels
    rf"|(?<![A-Za-z]){_REF}(?P<ref>{_D})(?![0-9A-Za-z\uff10-\uff19])"  # ref3
    rf")"
)
_GROUPS = ("id", "foot", "plain", "bref", "ref")
#: What may still become a marker at the end of a chunk: an opening bracket not closed yet (within a marker's
#: length, on the same line) or a lone ``r``/``re``/``ref`` + digits, with the spaces before it (dropped with a
#: dropped marker), and one or two backticks (a fence being written). Plain trailing spaces are not held: chunks
#: keep their boundaries, and a dropped marker right after a chunk that ended in a space leaves that space.
_UNSETTLED = re.compile(
    r"(?:[ \t]*(?:[\[(（【［][^\])）】］\n]{0,24}|(?<![A-Za-z])(?i:r|re|ref\s?[0-9\uff10-\uff19]*))"
    r"|(?<!`)`{1,2})\Z"
)
#: An inline code span opened on the current line and not closed yet is held back up to this many characters.
_MAX_OPEN_CODE = 200
_FENCE = "```"
_INLINE_CODE = re.compile(r"(`[^`\n]*`)")
#: A canonical marker (after repair).
CANONICAL = re.compile(r"\[(\d+)\]")


def _numbers(match: re.Match[str], labels: dict[str, int]) -> list[int]:
    label = match.group("label")
    if label is not None:
        kind, _, number = label.partition("-")
        return [labels.get(f"{kind}-{int(number)}", 0)]  # 0: no such passage (dropped)
    for name in _GROUPS:
        value = match.group(name)
        if value is not None:
            return [int(v) for v in re.split(r"\s*[,，、]\s*", value.strip())]
    return []


def marker(numbers: Sequence[int]) -> str:
    return "".join(f"[{n}]" for n in numbers)


def _settled(buffer: str) -> int:
    """Where the part of ``buffer`` that may still change meaning begins (``len(buffer)`` when none does)."""
    cut = len(buffer)
    tail = _UNSETTLED.search(buffer)
    if tail is not None:
        cut = tail.start()
    line_start = buffer.rfind("\n", 0, cut) + 1
    line = buffer[line_start:cut].replace(_FENCE, "")
    if line.count("`") % 2:  # an inline code span is open: a marker-like text in it must not be repaired
        opened = buffer.rfind("`", 0, cut)
        if len(buffer) - opened <= _MAX_OPEN_CODE:
            cut = opened
    return cut


@dataclass
class MarkerRepair:
    """Repairs the markers of an answer fed chunk by chunk; ``feed`` returns what may be shown now, ``flush`` the
    rest at the end. ``passages`` is how many passages ``[n]`` may point at."""

    passages: int
    #: Layout labels ("FAQ-1", "DOC-2") -> passage number.
    labels: dict[str, int] = field(default_factory=dict)
    repaired: int = 0  # markers rewritten into the canonical shape
    dropped: int = 0  # references to passages that do not exist
    collapsed: int = 0  # repeated passages in one run of markers
    _pending: str = ""
    _in_fence: bool = False
    _group: frozenset[int] | None = None  # the passages of the marker run the output ends with

    def feed(self, text: str) -> str:
        buffer = self._pending + text
        cut = _settled(buffer)
        self._pending = buffer[cut:]
        return self._process(buffer[:cut])

    def flush(self) -> str:
        rest, self._pending = self._pending, ""
        return self._process(rest)

    def _process(self, text: str) -> str:
        if not text:
            return ""
        out: list[str] = []
        for i, part in enumerate(text.split(_FENCE)):
            if i:
                self._in_fence = not self._in_fence
                self._group = None
                out.append(_FENCE)
            if self._in_fence:
                out.append(part)
                continue
            for j, span in enumerate(_INLINE_CODE.split(part)):
                if j % 2:
                    self._group = None
                    out.append(span)
                elif span:
                    out.append(self._repair(span))
        return "".join(out)

    def _repair(self, text: str) -> str:
        out: list[str] = []
        pos = 0
        for match in MARKER.finditer(text):
            between = text[pos : match.start()]
            if between:
                out.append(between)
                self._group = None
            numbers = _numbers(match, self.labels)
            valid = list(dict.fromkeys(n for n in numbers if 1 <= n <= self.passages))
            self.dropped += len([n for n in numbers if not 1 <= n <= self.passages])
            group = self._group
            new = [n for n in valid if group is None or n not in group]
            self.collapsed += len(numbers) - len(set(numbers)) + len(valid) - len(new)
            canonical = marker(new)
            if canonical and canonical != match.group(0).strip():
                self.repaired += 1
            if new:
                out.append(("" if group is not None else match.group("ws")) + canonical)
                self._group = (group or frozenset()) | frozenset(new)
            pos = match.end()
        tail = text[pos:]
        if tail:
            out.append(tail)
            if tail.strip(" \t"):  # spaces alone do not end a run of markers: "[1] " then "[1]" is one run
                self._group = None
        return "".join(out)


def repair_markers(text: str, passages: int, labels: dict[str, int] | None = None) -> tuple[str, MarkerRepair]:
    """The whole answer with its markers repaired (and the repair's counts)."""
    repair = MarkerRepair(passages, dict(labels or {}))
    return repair.feed(text) + repair.flush(), repair


def prose_spans(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) of the parts of ``text`` outside code (fenced blocks and inline spans)."""
    pos = 0
    in_fence = False
    for part in text.split(_FENCE):
        if not in_fence:
            offset = pos
            for j, span in enumerate(_INLINE_CODE.split(part)):
                if not j % 2:
                    yield offset, offset + len(span)
                offset += len(span)
        pos += len(part) + len(_FENCE)
        in_fence = not in_fence


def cited_positions(answer: str) -> dict[int, list[int]]:
    """Passage number -> the offsets in ``answer`` of the canonical markers citing it (code is not searched)."""
    found: dict[int, list[int]] = {}
    for start, end in prose_spans(answer):
        for match in CANONICAL.finditer(answer, start, end):
            found.setdefault(int(match.group(1)), []).append(match.start())
    return found


def has_markers(answer: str) -> bool:
    return bool(cited_positions(answer))


# -- inserted citations (RAGFlow's insert_citations) ----------------------------------------------------------

TOKEN_WEIGHT = 0.1
VECTOR_WEIGHT = 0.9
START_THRESHOLD = 0.63
THRESHOLD_DECAY = 0.8
MIN_THRESHOLD = 0.3
NEAR_BEST = 0.99
MAX_CITATIONS = 4
MIN_PIECE_CHARS = 5

_CODE_BLOCK = re.compile(r"(```.*?(?:```|\Z))", re.DOTALL)
# A piece ends after CJK or ASCII terminal punctuation (with any closing quote or bracket), after an English full
# stop followed by a space (RAGFlow: ``[a-z][.?;!][ \n]``; not "2.5" or "e.g" inside a word), or at line breaks.
# "!" before "[" is a Markdown image, not an exclamation.
_PIECE_END = re.compile(r"(?:[。！？；?;]|!(?!\[))+[”’\"')）]*|(?<=[a-z0-9)\]])\.(?=\s)|\n+")
_ASCII_END = re.compile(r"[\x21-\x7e]\Z")

Embed = Callable[[Sequence[str]], np.ndarray]


def split_pieces(answer: str) -> list[str]:
    """The answer in pieces that join back into it exactly: code blocks whole, prose at sentence ends."""
    pieces: list[str] = []
    for i, part in enumerate(_CODE_BLOCK.split(answer)):
        if not part:
            continue
        if i % 2:
            pieces.append(part)
            continue
        start = 0
        for match in _PIECE_END.finditer(part):
            pieces.append(part[start : match.end()])
            start = match.end()
        if start < len(part):
            pieces.append(part[start:])
    return pieces


def citable(piece: str) -> bool:
    """Pieces under :data:`MIN_PIECE_CHARS` characters (a list bullet, a lone line break) get no citation, nor do
    pieces that already carry one."""
    return len(piece.strip()) >= MIN_PIECE_CHARS and not has_markers(piece)


def token_similarity(piece: str, passage: str) -> float:
    """Share of the piece's distinct terms (the search tokenizer's, stopwords dropped) that the passage holds."""
    terms = token_set(piece)
    if not terms:
        return 0.0
    return len(terms & token_set(passage)) / len(terms)


def similarity_matrix(
    pieces: Sequence[str],
    passages: Sequence[str],
    piece_vectors: np.ndarray | None = None,
    passage_vectors: np.ndarray | None = None,
    cosine_scale: ScoreScale = COMMON_SCALE,
) -> np.ndarray:
    """pieces x passages hybrid similarity: token 0.1 / vector 0.9 with both vectors (rows L2-normalised), token
    similarity alone without them. Cosines are read on the common scale (``cosine_scale``: the embedding model's
    declared one), where the thresholds are written: e5's raw cosine of unrelated text, ~0.77, alone cleared the
    0.63 start."""
    tokens = np.array([[token_similarity(p, d) for d in passages] for p in pieces], dtype=np.float64)
    if piece_vectors is None or passage_vectors is None:
        return tokens.reshape(len(pieces), len(passages))
    cosines = np.asarray(piece_vectors, dtype=np.float64) @ np.asarray(passage_vectors, dtype=np.float64).T
    if cosine_scale != COMMON_SCALE:
        cosines = np.clip((cosines - cosine_scale.zero) / cosine_scale.span, 0.0, 1.0)
    return TOKEN_WEIGHT * tokens + VECTOR_WEIGHT * cosines


def choose_citations(similarity: np.ndarray) -> tuple[dict[int, list[int]], float]:
    """Piece index -> cited passage indexes (0-based, ascending), and the threshold that cited them.

    The threshold starts at 0.63 and is lowered x0.8 per round while it stays above 0.3, until some piece is cited.
    A piece is cited when 0.99 x its best score reaches the threshold; it cites the passages scoring above 0.99 x
    its best (RAGFlow's rule), the best four at most.
    """
    threshold = START_THRESHOLD
    while threshold > MIN_THRESHOLD and similarity.size:
        cites: dict[int, list[int]] = {}
        for i, row in enumerate(similarity):
            near = float(row.max()) * NEAR_BEST
            if near < threshold:
                continue
            close = [j for j in np.argsort(-row, kind="stable") if row[j] > near][:MAX_CITATIONS]
            if close:
                cites[i] = sorted(int(j) for j in close)
        if cites:
            return cites, threshold
        threshold *= THRESHOLD_DECAY
    return {}, threshold


@dataclass(frozen=True)
class Inserted:
    answer: str
    #: Piece index -> cited passage numbers (1-based: the ``[n]`` written).
    cites: dict[int, list[int]] = field(default_factory=dict)
    threshold: float = START_THRESHOLD
    pieces: int = 0


def _with_marker(piece: str, numbers: Sequence[int]) -> str:
    body = piece.rstrip()
    gap = " " if _ASCII_END.search(body) else ""
    return body + gap + marker(numbers) + piece[len(body) :]


def insert_citations(
    answer: str,
    passages: Sequence[str],
    *,
    embed: Embed | None = None,
    passage_vectors: np.ndarray | None = None,
    cosine_scale: ScoreScale = COMMON_SCALE,
) -> Inserted:
    """``answer`` with ``[n]`` inserted after each piece that is similar enough to passages (see
    :func:`choose_citations`). ``embed`` embeds texts (one batch for the pieces; also the passages when
    ``passage_vectors`` is None); without it, token similarity alone decides, with the same thresholds.
    ``cosine_scale``: the embedder's declared score scale (:func:`similarity_matrix`)."""
    pieces = split_pieces(answer)
    candidates = [i for i, p in enumerate(pieces) if citable(p)]
    if not candidates or not passages:
        return Inserted(answer, pieces=len(candidates))
    texts = [pieces[i] for i in candidates]
    piece_vectors = None
    if embed is not None:
        piece_vectors = embed(texts)
        if passage_vectors is None:
            passage_vectors = embed(list(passages))
    vectors = passage_vectors if embed is not None else None
    sims = similarity_matrix(texts, passages, piece_vectors, vectors, cosine_scale)
    chosen, threshold = choose_citations(sims)
    cites = {candidates[k]: [j + 1 for j in v] for k, v in chosen.items()}
    out = [_with_marker(p, cites[i]) if i in cites else p for i, p in enumerate(pieces)]
    return Inserted("".join(out), cites, threshold, len(candidates))
