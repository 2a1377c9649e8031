"""The structure-preserving chunker: every rule of ``ragstep.retrieval.chunking`` pinned, plus randomized invariants."""

from __future__ import annotations

import random
import re
import time
from bisect import bisect_right
from itertools import pairwise

import pytest

from ragstep.errors import InputError
from ragstep.retrieval.chunking import (
    DEFAULT_SEPARATORS,
    ChildChunk,
    ChunkerConfig,
    TextChunk,
    find_protected_spans,
    split_parent_child,
    split_text,
)

# ---------------------------------------------------------------------------------------------------------------
# Helpers


def _core(text: str, start: int, end: int) -> tuple[int, int]:
    """A span without surrounding whitespace: chunk edges are trimmed, so that is what a chunk must hold whole."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def _tail_boundary(text: str, spans: list[tuple[int, int]], previous: TextChunk, overlap: int) -> int | None:
    """A plain re-statement of the overlap rule: the earliest best boundary in the previous chunk's tail."""
    low, high = max(previous.start_at + 1, previous.end_at - overlap), previous.end_at

    def outside(b: int) -> bool:
        return not any(s < b < e for s, e in spans)

    for sep in ("\n\n", "\n"):
        for b in range(low, high):
            if text[b - len(sep) : b] == sep and outside(b):
                return b
    for b in range(low, high):
        ch = text[b - 1]
        if (ch in "。！？；;" or (ch in ".!?" and text[b].isspace())) and outside(b):
            return b
    return None


def check_invariants(text: str, chunks: list[TextChunk], config: ChunkerConfig) -> None:
    """Everything that must hold for any input."""
    spans, row_header = find_protected_spans(text, config.max_protected)
    assert [c.chunk_index for c in chunks] == list(range(len(chunks)))
    if not text.strip():
        assert chunks == []
        return
    assert chunks, "non-blank text must give chunks"
    previous: TextChunk | None = None
    for chunk in chunks:
        body = chunk.content[len(chunk.repeated_header) :]
        assert chunk.content.startswith(chunk.repeated_header)
        assert text[chunk.start_at : chunk.end_at] == body
        assert body.strip(), "no whitespace-only chunks"
        assert not body[-1].isspace(), "trailing whitespace is trimmed"
        assert not body.startswith("\n"), "leading blank lines are trimmed"
        if chunk.repeated_header:
            assert row_header[chunk.start_at] == chunk.repeated_header
            assert chunk.repeated_header.endswith("\n") and chunk.repeated_header.count("\n") >= 2
        if len(chunk.content) > config.chunk_size:
            # Only one atomic unit may exceed the size: a protected span, or header + one table row.
            core_start, core_end = _core(text, chunk.start_at, chunk.end_at)
            assert any(_core(text, s, e) == (core_start, core_end) for s, e in spans), chunk
            assert chunk.end_at - chunk.start_at <= config.max_protected
        if previous is None:
            assert not text[: chunk.start_at].strip()
        else:
            assert chunk.start_at > previous.start_at
            assert chunk.end_at > previous.end_at
            if chunk.start_at >= previous.end_at:
                assert not text[previous.end_at : chunk.start_at].strip(), "only whitespace may be dropped"
            else:
                assert previous.end_at - chunk.start_at <= config.effective_overlap
                boundary = _tail_boundary(text, spans, previous, config.effective_overlap)
                assert boundary is not None, "overlap needs a boundary"
                assert boundary <= chunk.start_at and not text[boundary : chunk.start_at].strip()
        previous = chunk
    assert not text[chunks[-1].end_at :].strip()
    # No protected span is ever cut: a chunk holds a span's core whole or not at all.
    ends = [c.end_at for c in chunks]  # ascending, as checked above
    for s, e in spans:
        core_start, core_end = _core(text, s, e)
        i = bisect_right(ends, core_start)  # the first chunk that ends after the span's start
        while i < len(chunks) and chunks[i].start_at < core_end:
            assert chunks[i].start_at <= core_start and core_end <= chunks[i].end_at, (s, e, chunks[i])
            i += 1


EN_WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "the",
    "pipeline",
    "indexes",
    "every",
    "document",
]
ZH = "检索增强生成系统会把文档切分成较小的片段然后计算向量并写入索引以便快速召回"


def _paragraph(rng: random.Random) -> str:
    if rng.random() < 0.5:
        words = [rng.choice(EN_WORDS) for _ in range(rng.randint(3, 160))]
        return " ".join(words) + rng.choice([".", "!", "?", "", "; ok"])
    sentences = []
    for _ in range(rng.randint(1, 25)):
        i = rng.randint(0, len(ZH) - 5)
        sentences.append(ZH[i : i + rng.randint(3, 30)] + rng.choice("。！？；;，"))
    return "".join(sentences)


def _block(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.10:
        return "#" * rng.randint(1, 6) + " Heading " + str(rng.randint(1, 99)) + rng.choice(["", " ##"])
    if r < 0.20:
        rows = "\n".join(
            f"| {rng.randint(0, 99999)} | {_paragraph(rng)[: rng.randint(1, 90)]} | `x|y` |"
            for _ in range(rng.randint(0, 30))
        )
        return "| id | text | code |\n|---|:---:|---:|" + ("\n" + rows if rows else "")
    if r < 0.28:
        fence = rng.choice(["```", "~~~", "````"])
        lines = [f"  value_{i} = f({i});  # [a](b) `c`" for i in range(rng.randint(0, 80))]
        body = "\n".join(lines) + ("\n\n# not a heading\n\n" if rng.random() < 0.3 else "\n")
        return f"{fence}python\n{body}{fence}"
    if r < 0.33:
        return (
            f"See $$\\sum_{{i}} x_i. y;$$ and ![an image. yes](http://x/{rng.randint(0, 9)}.png) "
            f"plus [a link; here](http://a.b/c) and `inline; code. here` end."
        )
    if r < 0.35:
        return "x" * rng.randint(100, 3000)  # no separator at all: last-resort cuts
    if r < 0.37:
        return "$$" + "\n".join("y" * rng.randint(50, 400) for _ in range(rng.randint(1, 60))) + "$$"
    if r < 0.39:
        return "```\n" + ("z" * rng.randint(10, 12000)) + "\n```"  # maybe a giant, unbreakable span
    if r < 0.40:
        return "```unclosed\n" + _paragraph(rng)
    if r < 0.42:
        return " " * rng.randint(1, 8) + "- indented " + _paragraph(rng)
    return _paragraph(rng)


def _document(rng: random.Random, blocks: int) -> str:
    parts = []
    for _ in range(blocks):
        parts.append(_block(rng))
        parts.append(rng.choice(["\n\n", "\n\n", "\n", "\n\n\n", "\r\n\r\n", "\n   \n", " "]))
    return rng.choice(["", "\n\n", "  "]) + "".join(parts)


CONFIGS = [
    ChunkerConfig(),
    ChunkerConfig(chunk_size=64, chunk_overlap=0),
    ChunkerConfig(chunk_size=64, chunk_overlap=63),
    ChunkerConfig(chunk_size=200, chunk_overlap=60),
    ChunkerConfig(chunk_size=1000, chunk_overlap=200, max_protected=2000),
    ChunkerConfig(chunk_size=300, chunk_overlap=50, separators=("\n",)),
    ChunkerConfig(chunk_size=150, chunk_overlap=30, separators=()),
]


# ---------------------------------------------------------------------------------------------------------------
# Configuration and validation


def test_defaults_match_the_specification() -> None:
    config = ChunkerConfig()
    assert config.chunk_size == 512
    assert config.chunk_overlap == 80
    assert config.separators == ("\n\n", "\n", "。", "！", "？", "；", ";") == DEFAULT_SEPARATORS
    assert config.max_protected == 7500
    assert config.effective_overlap == 80


def test_overlap_is_capped_at_half_the_chunk_size() -> None:
    config = ChunkerConfig(chunk_size=100, chunk_overlap=90)
    assert config.effective_overlap == 50
    text = "\n".join(f"line {i:03d} of the test" for i in range(200))
    chunks = split_text(text, config)
    overlaps = [a.end_at - b.start_at for a, b in pairwise(chunks)]
    assert max(overlaps) <= 50
    assert max(overlaps) > 20, "lines give boundaries, so overlap must actually happen"


def test_separators_list_becomes_an_immutable_tuple() -> None:
    config = ChunkerConfig(separators=["\n", "."])  # type: ignore[arg-type]
    assert config.separators == ("\n", ".")


@pytest.mark.parametrize(
    ("kwargs", "fragments"),
    [
        ({"chunk_size": 63}, ["chunk_size", "64", "7500", "63"]),
        ({"chunk_size": 1}, ["chunk_size", "64", "7500", "got 1"]),
        ({"chunk_size": 7501}, ["chunk_size", "64", "7500", "7501"]),
        ({"chunk_size": True}, ["chunk_size", "64", "7500", "True"]),
        ({"chunk_size": "512"}, ["chunk_size", "'512'"]),
        ({"chunk_overlap": -1}, ["chunk_overlap", "0", "511", "-1"]),
        ({"chunk_overlap": 512}, ["chunk_overlap", "0", "511", "512"]),
        ({"chunk_size": 100, "chunk_overlap": 150}, ["chunk_overlap", "99", "150"]),
        ({"chunk_size": 1000, "max_protected": 999}, ["max_protected", "1000", "7500", "999"]),
        ({"max_protected": 7501}, ["max_protected", "7500", "7501"]),
        ({"separators": ["\n", ""]}, ["separators", "''"]),
        ({"separators": "\n"}, ["separators", "string"]),
    ],
)
def test_invalid_config_is_rejected_with_value_and_range(kwargs: dict, fragments: list[str]) -> None:
    with pytest.raises(InputError) as info:
        ChunkerConfig(**kwargs)
    for fragment in fragments:
        assert fragment in info.value.message


@pytest.mark.parametrize(
    "kwargs",
    [
        {"chunk_size": 64, "chunk_overlap": 63},  # the default overlap of 80 would be >= 64
        {"chunk_size": 7500},
        {"chunk_overlap": 0},
        {"chunk_overlap": 511},
        {"chunk_size": 64, "chunk_overlap": 0, "max_protected": 64},
        {"separators": ()},
    ],
)
def test_limits_themselves_are_accepted(kwargs: dict) -> None:
    config = ChunkerConfig(**kwargs)
    check_invariants("a b c。\n" * 300, split_text("a b c。\n" * 300, config), config)


@pytest.mark.parametrize(
    ("kwargs", "fragments"),
    [
        ({"parent_size": 63}, ["parent_size", "64", "7500", "63"]),
        ({"parent_size": 9000}, ["parent_size", "7500", "9000"]),
        ({"parent_size": 500, "child_size": 600}, ["child_size", "64", "500", "600"]),
        ({"child_size": 32}, ["child_size", "64", "32"]),
        ({"child_size": 384, "child_overlap": 384}, ["child_overlap", "0", "383", "384"]),
        ({"child_overlap": -5}, ["child_overlap", "-5"]),
    ],
)
def test_invalid_parent_child_sizes_are_rejected(kwargs: dict, fragments: list[str]) -> None:
    with pytest.raises(InputError) as info:
        split_parent_child("some text", **kwargs)
    for fragment in fragments:
        assert fragment in info.value.message


def test_non_string_text_is_rejected() -> None:
    with pytest.raises(InputError, match="text must be a str"):
        split_text(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="text must be a str"):
        split_parent_child(None)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------------------
# Basic shape


@pytest.mark.parametrize("text", ["", " ", "\n\n\t \r\n"])
def test_blank_text_gives_no_chunks(text: str) -> None:
    assert split_text(text) == []
    assert split_parent_child(text).parents == ()
    assert split_parent_child(text).children == ()


def test_short_text_is_one_trimmed_chunk() -> None:
    text = "\n\n  Hello world.\n\n"
    [chunk] = split_text(text)
    # Leading blank lines go, the first line's indentation stays, trailing whitespace goes.
    assert chunk == TextChunk(content="  Hello world.", start_at=2, end_at=16, chunk_index=0)
    assert text[chunk.start_at : chunk.end_at] == chunk.content


def test_paragraph_separator_beats_line_separator() -> None:
    config = ChunkerConfig(chunk_size=200, chunk_overlap=0)
    first = "\n".join(["a" * 40] * 3)  # 122 chars with line breaks
    second = "\n".join(["b" * 40] * 3)
    chunks = split_text(first + "\n\n" + second, config)
    # A "\n" cut at 163 would fill the chunk more, but the "\n\n" after the first paragraph wins.
    assert [c.content for c in chunks] == [first, second]


def test_tiny_higher_priority_cut_loses_to_a_fuller_lower_priority_one() -> None:
    config = ChunkerConfig(chunk_size=256, chunk_overlap=0)  # min fill: 256 // 4 = 64
    lines = "\n".join(f"line {i:02d} " + "x" * 50 for i in range(10))
    chunks = split_text("# Title\n\n" + lines, config)
    # The "\n\n" after the 7-char heading would leave a heading-only chunk; a line break further on wins.
    assert chunks[0].content.startswith("# Title\n\nline 00")
    assert chunks[0].content.endswith("x" * 50)
    assert len(chunks[0].content) <= 256


def test_cut_keeps_the_separator_with_the_chunk_it_ends() -> None:
    config = ChunkerConfig(chunk_size=64, chunk_overlap=0, separators=(";",))
    text = ";".join(["abcdefghij"] * 20)
    chunks = split_text(text, config)
    assert all(c.content.endswith(";") for c in chunks[:-1])
    assert "".join(c.content for c in chunks) == text


def test_last_resort_is_a_character_split() -> None:
    config = ChunkerConfig(chunk_size=100, chunk_overlap=20)
    chunks = split_text("x" * 1000, config)
    assert [len(c.content) for c in chunks] == [100] * 10
    assert [c.start_at for c in chunks] == list(range(0, 1000, 100)), "no boundary, so no overlap"


def test_last_resort_cut_snaps_back_to_a_space() -> None:
    config = ChunkerConfig(chunk_size=100, chunk_overlap=0)
    text = " ".join(f"word{i:03d}" for i in range(200))  # no separator, spaces only
    chunks = split_text(text, config)
    words = set(text.split())
    for chunk in chunks:
        assert set(chunk.content.split()) <= words, "no word is cut in two"
        assert len(chunk.content) <= 100


def test_chinese_sentence_separators() -> None:
    config = ChunkerConfig(chunk_size=64, chunk_overlap=0)
    sentence = "检索增强生成把文档切成片段并写入索引"  # 18 chars
    text = "".join(sentence + p for p in "。！？；" * 6)
    chunks = split_text(text, config)
    assert len(chunks) > 3
    assert "".join(c.content for c in chunks) == text
    for chunk in chunks[:-1]:
        assert chunk.content[-1] in "。！？；"


def test_chinese_full_stop_has_priority_over_exclamation_mark() -> None:
    config = ChunkerConfig(chunk_size=64, chunk_overlap=0)
    text = "甲" * 20 + "。" + "乙" * 20 + "！" + "丙" * 40
    first = split_text(text, config)[0]
    assert first.content == "甲" * 20 + "。", "a later '！' loses to the higher-priority '。'"


# ---------------------------------------------------------------------------------------------------------------
# Protected spans


def test_code_fence_is_never_split() -> None:
    config = ChunkerConfig(chunk_size=128, chunk_overlap=20)
    fence = "```python\n" + "\n\n".join(f"x{i} = '句子。结束；'" for i in range(12)) + "\n```"
    text = "Intro paragraph.\n\n" + fence + "\n\nOutro paragraph."
    chunks = split_text(text, config)
    holding = [c for c in chunks if "x0 =" in c.content or "x11 =" in c.content]
    assert [c.content for c in holding] == [fence], "one chunk, exactly the fence, though it exceeds 128"
    check_invariants(text, chunks, config)


def test_tilde_fence_and_longer_closing_fence_are_recognised() -> None:
    text = "~~~\na\n\nb\n~~~~\n\nafter\n\n````\n```\ninner\n```\n````"
    spans, _ = find_protected_spans(text)
    assert (0, text.index("~~~~") + 4) in spans
    outer = text.index("````")
    assert (outer, len(text)) in spans, "an inner ``` does not close a ```` fence"


def test_unclosed_fence_is_not_protected() -> None:
    text = "```python\n" + "\n".join(f"line {i}" for i in range(100))
    assert find_protected_spans(text) == ([], {})
    chunks = split_text(text, ChunkerConfig(chunk_size=128, chunk_overlap=0))
    assert all(len(c.content) <= 128 for c in chunks)


@pytest.mark.parametrize(
    "span",
    [
        "`inline; code. with。separators`",
        "``double `tick` code;``",
        "![alt; text. here](http://example.com/a;b.png)",
        "[link; text. here](http://example.com/x;y)",
        "$$a; b. c。 d$$",
    ],
)
def test_inline_spans_are_never_split(span: str) -> None:
    config = ChunkerConfig(chunk_size=64, chunk_overlap=30)
    # Separators inside the span are the only ones around: they must not be used.
    text = ("filler " * 5 + span + " ") * 30
    chunks = split_text(text, config)
    assert sum(c.content.count(span) for c in chunks) >= 30
    check_invariants(text, chunks, config)
    spans, _ = find_protected_spans(text)
    assert len(spans) == 30


def test_nested_spans_collapse_into_the_outer_one() -> None:
    text = "```\n[a](b) `c` $$d$$\n```\n| h | `x|y` |\n|---|---|\n| [l](u) | 2 |"
    spans, row_header = find_protected_spans(text)
    fence_end = text.index("```\n|") + 3
    assert spans == [(0, fence_end), (fence_end + 1, text.index("\n| [")), (text.index("| ["), len(text))]
    assert row_header == {text.index("| ["): "| h | `x|y` |\n|---|---|\n"}


def test_giant_protected_span_is_force_split_at_newlines() -> None:
    lines = [f"row {i:05d} " + "v" * 40 for i in range(500)]  # ~25,000 chars
    fence = "```\n" + "\n".join(lines) + "\n```"
    spans, _ = find_protected_spans(fence)
    assert len(spans) == 4
    assert spans[0][0] == 0 and spans[-1][1] == len(fence)
    for (_, end), (start, _) in pairwise(spans):
        assert end == start
        assert fence[end - 1] == "\n", "cut right after a newline"
    for start, end in spans:
        assert end - start <= 7500
        assert start == 0 or end - start > 7500 - 750 or end == len(fence), "cut near the window's end"
    chunks = split_text(fence)
    assert [c.end_at - c.start_at for c in chunks][:3] == [e - s - 1 for s, e in spans[:3]]
    check_invariants(fence, chunks, ChunkerConfig())


def test_giant_span_without_newline_falls_back_to_space_then_hard_cut() -> None:
    spaced = "$$" + " ".join(["word"] * 4000) + "$$"
    spans, _ = find_protected_spans(spaced)
    assert all(spaced[end - 1] == " " for _, end in spans[:-1])
    solid = "`" + "z" * 20000 + "`"
    spans, _ = find_protected_spans(solid)
    assert [end - start for start, end in spans] == [7500, 7500, 5002]
    chunks = split_text(solid)
    assert [len(c.content) for c in chunks] == [7500, 7500, 5002]


def test_a_protected_span_is_force_split_only_above_7500_characters() -> None:
    def fence(size: int) -> str:
        lines = [f"line {i:04d} " + "c" * 60 for i in range(size // 71 + 1)]
        body = "\n".join(lines)[: size - 8]
        return "```\n" + body + "\n```"

    whole = fence(7500)
    assert len(whole) == 7500
    assert [c.content for c in split_text("Intro.\n\n" + whole + "\n\nOutro.")] == ["Intro.", whole, "Outro."]
    over = fence(7501)
    assert len(over) == 7501
    spans, _ = find_protected_spans(over)
    assert len(spans) == 2
    cut = spans[0][1]
    assert over[cut - 1] == "\n" and 7500 - 750 <= cut <= 7500, "at a newline near the end of the window"
    chunks = split_text(over)
    assert [c.content for c in chunks] == [over[: cut - 1], over[cut:]]
    check_invariants(over, chunks, ChunkerConfig())


def test_max_protected_is_configurable() -> None:
    config = ChunkerConfig(chunk_size=256, chunk_overlap=0, max_protected=1000)
    text = "`" + "q" * 2500 + "`"
    assert [len(c.content) for c in split_text(text, config)] == [1000, 1000, 502]


# ---------------------------------------------------------------------------------------------------------------
# Tables


def _table(rows: int, width: int = 30) -> tuple[str, str, list[str]]:
    header = "| id | name |\n|---|:---|"
    body = [f"| {i:03d} | {'n' * width} |" for i in range(rows)]
    return header, header + "\n" + "\n".join(body), body


def test_table_header_is_repeated_in_continuation_chunks() -> None:
    config = ChunkerConfig(chunk_size=256, chunk_overlap=0)
    header, table, rows = _table(40)
    text = "Before the table.\n\n" + table + "\n\nAfter the table."
    chunks = split_text(text, config)
    continued = [c for c in chunks if c.repeated_header]
    assert len(continued) >= 4
    for chunk in continued:
        assert chunk.repeated_header == header + "\n"
        assert chunk.content.startswith(header + "\n| ")
        assert text[chunk.start_at : chunk.end_at] == chunk.content[len(header) + 1 :]
        assert len(chunk.content) <= 256, "the repeated header counts against chunk_size"
    # Every row is whole in exactly one chunk (no overlap configured).
    for row in rows:
        assert sum(row in c.content for c in chunks) == 1
    # The header and separator row are never separated.
    first = next(c for c in chunks if "|---|" in c.content and not c.repeated_header)
    assert header in first.content
    check_invariants(text, chunks, config)


def test_table_header_is_repeated_after_an_overlap_tail_too() -> None:
    config = ChunkerConfig(chunk_size=256, chunk_overlap=80)
    header, table, _ = _table(40)
    chunks = split_text(table, config)
    assert all(c.repeated_header == header + "\n" for c in chunks[1:])
    assert all(b.start_at < a.end_at for a, b in pairwise(chunks)), "rows overlap"
    check_invariants(table, chunks, config)


def test_huge_table_header_is_not_repeated() -> None:
    config = ChunkerConfig(chunk_size=128, chunk_overlap=0)
    header = "| " + " | ".join(f"column{i}" for i in range(8)) + " |\n|" + "---|" * 8  # > 128 // 2
    text = header + "\n" + "\n".join(f"| {i} |" + " x |" * 7 for i in range(30))
    chunks = split_text(text, config)
    assert len(chunks) > 2
    assert all(c.repeated_header == "" for c in chunks)
    check_invariants(text, chunks, config)


@pytest.mark.parametrize(
    ("separator", "is_table"),
    [
        ("|---|---|", True),
        ("| :--- | :---: | ---: |", True),
        ("---|---", True),
        ("  |-|", True),
        ("|---|---|  \r", True),
        ("---", False),  # a thematic break, not a table
        ("- - -", False),
        ("| a | b |", False),
        ("|===|===|", False),
    ],
)
def test_table_separator_row_forms(separator: str, is_table: bool) -> None:
    text = f"| h1 | h2 |\n{separator}\n| 1 | 2 |"
    _, row_header = find_protected_spans(text)
    assert (text.rindex("| 1") in row_header) is is_table


def test_pipe_text_without_separator_row_is_not_a_table() -> None:
    text = "a | b\nc | d\n---\ne | f"
    assert find_protected_spans(text) == ([], {})


def test_table_inside_code_fence_is_only_code() -> None:
    text = "```\n| a | b |\n|---|---|\n| 1 | 2 |\n```"
    assert find_protected_spans(text) == ([(0, len(text))], {})


# ---------------------------------------------------------------------------------------------------------------
# Overlap


def test_overlap_starts_at_the_best_boundary_in_the_window() -> None:
    config = ChunkerConfig(chunk_size=100, chunk_overlap=40)
    # The first chunk is cut at the "\n" at 95; its last 40 chars hold a sentence end and a line break.
    text = "a" * 60 + "。bbbb\ncccccccccccccccccccccccccc\n" + "d" * 80
    chunks = split_text(text, config)
    first, second = chunks[0], chunks[1]
    assert first.content == text[: text.rindex("\n")]
    # "\n" (line) beats "。" (sentence) even though the sentence end would give a longer tail.
    assert second.start_at == text.index("\n") + 1
    assert second.content.startswith("cccc")


def test_overlap_prefers_a_paragraph_boundary_to_a_longer_line_tail() -> None:
    config = ChunkerConfig(chunk_size=100, chunk_overlap=40)
    text = "a" * 50 + "\n" + "b" * 10 + "\n\n" + "c" * 10 + "\n\n" + "d" * 100
    first, second = split_text(text, config)[:2]
    assert first.end_at == text.index("c") + 10
    # The "\n" before the b's would give a longer tail; the paragraph break after them wins.
    assert second.start_at == text.index("c")
    assert second.content.startswith("c" * 10 + "\n\nddd")


def test_overlap_prefers_the_earliest_boundary_of_the_best_kind() -> None:
    config = ChunkerConfig(chunk_size=100, chunk_overlap=40)
    text = "a" * 70 + "。bb。cc。dd。ee。ff\n" + "g" * 80
    first, second = split_text(text, config)[:2]
    window_start = first.end_at - 40
    expected = min(i + 1 for i, ch in enumerate(text) if ch == "。" and window_start <= i + 1 < first.end_at)
    assert second.start_at == expected


def test_english_sentence_end_is_an_overlap_boundary_but_decimal_point_is_not() -> None:
    config = ChunkerConfig(chunk_size=100, chunk_overlap=40)
    text = "w" * 62 + " pi is 3.14 and e. Then more\n" + "z" * 90
    first, second = split_text(text, config)[:2]
    assert second.content.startswith("Then more"), "after 'e.' and its space, not after '3.'"
    assert second.start_at > first.start_at


def test_no_boundary_in_window_means_no_overlap() -> None:
    config = ChunkerConfig(chunk_size=100, chunk_overlap=40)
    text = "。".join(["字" * 99] * 5)  # every sentence end is at least 99 chars before a chunk end
    chunks = split_text(text, config)
    assert len(chunks) >= 5
    for a, b in pairwise(chunks):
        assert b.start_at >= a.end_at


def test_overlap_never_starts_inside_a_protected_span() -> None:
    config = ChunkerConfig(chunk_size=100, chunk_overlap=48)
    link = "[one. two. three. four](http://example.com)"
    text = ("z" * 40 + " " + link + "\n") * 20
    chunks = split_text(text, config)
    spans, _ = find_protected_spans(text)
    for chunk in chunks[1:]:
        assert not any(s < chunk.start_at < e for s, e in spans)
        assert not chunk.content.startswith("two")
    check_invariants(text, chunks, config)


def test_zero_overlap_gives_disjoint_chunks_that_rebuild_the_text() -> None:
    config = ChunkerConfig(chunk_size=128, chunk_overlap=0)
    text = "Line one here.\nLine two here.\n\n" * 40
    chunks = split_text(text, config)
    assert all(b.start_at >= a.end_at for a, b in pairwise(chunks))
    rebuilt = "".join(text[a.end_at : b.start_at] + b.content for a, b in pairwise(chunks))
    assert chunks[0].content + rebuilt == text.strip()


# ---------------------------------------------------------------------------------------------------------------
# Breadcrumbs


def test_breadcrumbs_follow_the_heading_tree() -> None:
    config = ChunkerConfig(chunk_size=64, chunk_overlap=0)
    para = "Some words in a paragraph that is long enough."
    text = (
        f"# Guide\n\n{para}\n\n## Install ##\n\n{para}\n\n### Linux\n\n{para}\n\n"
        f"```sh\n# not a heading\n```\n\n{para}\n\n## Use\n\n{para}\n\n# Appendix\n\n{para}"
    )
    chunks = split_text(text, config)
    assert [(c.content.split("\n")[0], c.context_header) for c in chunks] == [
        ("# Guide", "Guide"),
        ("## Install ##", "Guide > Install"),  # closing hashes are not part of the title
        ("### Linux", "Guide > Install > Linux"),
        ("```sh", "Guide > Install > Linux"),
        (para, "Guide > Install > Linux"),  # the "# not a heading" line in the fence changes nothing
        ("## Use", "Guide > Use"),  # a sibling replaces "Install" and drops its child
        ("# Appendix", "Appendix"),
    ]
    assert all(not c.content.startswith("Guide") for c in chunks), "breadcrumbs never go into content"


def test_a_chunk_does_not_end_with_a_heading() -> None:
    config = ChunkerConfig(chunk_size=64, chunk_overlap=0)
    para = "Some words in a paragraph that is long."
    text = f"{para}\n\n## Next\n\n{para}"
    chunks = split_text(text, config)
    # "\n\n" after "## Next" (at 50) is the latest paragraph cut, but the heading belongs to the next section.
    assert [c.content for c in chunks] == [para, f"## Next\n\n{para}"]
    assert [c.context_header for c in chunks] == ["", "Next"]


def test_a_run_of_headings_before_a_long_paragraph_stays_together() -> None:
    config = ChunkerConfig(chunk_size=64, chunk_overlap=0)
    text = "# A\n\n## B\n\n" + "word " * 40
    first = split_text(text, config)[0]
    assert first.content == "# A\n\n## B"
    assert first.context_header == "A", "only headings at or before the chunk's start are in force"


@pytest.mark.parametrize(
    ("line", "title"),
    [("## Title ##", "Title"), ("## C#", "C#"), ("##   spaced   ", "spaced"), ("## ##", ""), ("##\tTab #  ", "Tab")],
)
def test_heading_titles_drop_only_a_closing_hash_sequence(line: str, title: str) -> None:
    chunk = split_text("# Root\n" + line + "\n" + "x" * 600)[-1]
    # An empty heading still counts as a level (it would close a deeper one) but adds nothing to the path.
    assert chunk.context_header == ("Root > " + title if title else "Root")


def test_breadcrumb_ignores_hash_without_space_and_seven_hashes() -> None:
    text = "# Top\n#hashtag\n####### seven\n" + "x" * 600
    assert all(c.context_header == "Top" for c in split_text(text))


# ---------------------------------------------------------------------------------------------------------------
# Parent-child


def test_parent_child_offsets_are_absolute_and_nested() -> None:
    rng = random.Random(11)
    text = _document(rng, 300)
    result = split_parent_child(text, parent_size=2048, child_size=256)
    parents, children = result.parents, result.children
    assert len(parents) > 3 and len(children) > len(parents)
    check_invariants(text, list(parents), ChunkerConfig(chunk_size=2048, chunk_overlap=0))
    assert all(b.start_at >= a.end_at for a, b in pairwise(parents)), "no parent overlap"
    assert [c.chunk_index for c in children] == list(range(len(children)))
    for child in children:
        assert isinstance(child, ChildChunk)
        parent = parents[child.parent_index]
        assert parent.start_at <= child.start_at < child.end_at <= parent.end_at
        assert text[child.start_at : child.end_at] == child.content[len(child.repeated_header) :]
    assert [c.parent_index for c in children] == sorted(c.parent_index for c in children)
    assert {c.parent_index for c in children} == set(range(len(parents)))
    # Children of one parent follow all chunking rules, with the default overlap of 256 // 5.
    for index in range(len(parents)):
        own = [c for c in children if c.parent_index == index]
        for a, b in pairwise(own):
            assert b.start_at > a.start_at and b.end_at > a.end_at
            assert a.end_at - b.start_at <= 256 // 5


def test_parent_child_default_sizes_and_overlap() -> None:
    text = "\n".join(f"Sentence number {i} of the manual." for i in range(800))
    result = split_parent_child(text)
    assert all(len(p.content) <= 4096 for p in result.parents)
    assert all(len(c.content) <= 384 for c in result.children)
    overlaps = [a.end_at - b.start_at for a, b in pairwise(result.children)]
    assert max(overlaps) <= 384 // 5
    assert max(overlaps) > 0


def test_parent_child_breadcrumbs_see_headings_before_the_parent() -> None:
    text = "# Manual\n\n## Setup\n\n" + "\n".join(f"step {i} " + "s" * 60 for i in range(200))
    result = split_parent_child(text, parent_size=1024, child_size=128, child_overlap=0)
    assert result.children[-1].context_header == "Manual > Setup"
    assert result.parents[-1].context_header == "Manual > Setup"


# ---------------------------------------------------------------------------------------------------------------
# Randomized invariants (fixed seeds: reproducible, no hypothesis dependency)


@pytest.mark.parametrize("seed", range(40))
def test_random_documents_keep_every_invariant(seed: int) -> None:
    rng = random.Random(seed)
    text = _document(rng, rng.randint(1, 120))
    config = CONFIGS[seed % len(CONFIGS)]
    check_invariants(text, split_text(text, config), config)


def test_random_character_soup_keeps_every_invariant() -> None:
    rng = random.Random(1234)
    alphabet = [*"ab |-`$[]()!~#\n\n\n  。！？；;.:*>\t\r", "```", "~~~", "$$", "\n\n", "|---|", "# "]
    for _ in range(150):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 3000)))
        config = CONFIGS[rng.randrange(len(CONFIGS))]
        check_invariants(text, split_text(text, config), config)


def test_invariant_checker_catches_a_broken_chunk() -> None:
    # Guards the guard: the checker used above must fail on a lost character.
    text = "alpha beta\n\ngamma delta"
    chunks = split_text(text, ChunkerConfig(chunk_size=64, chunk_overlap=0))
    broken = [TextChunk("alpha", 0, 5, 0)]
    check_invariants(text, chunks, ChunkerConfig(chunk_size=64, chunk_overlap=0))
    with pytest.raises(AssertionError):
        check_invariants(text, broken, ChunkerConfig(chunk_size=64, chunk_overlap=0))


# ---------------------------------------------------------------------------------------------------------------
# Throughput


@pytest.mark.parametrize(
    "text",
    [
        " " * 100_000 + "x",  # one blank line: table / fence patterns must not backtrack over it
        "[" * 100_000,
        "[a](" * 25_000,
        "![" * 50_000,
        "|" + " " * 100_000 + "x",
        "| --- |" + " " * 100_000 + "x",
        "# " + " " * 100_000 + "x",
        "-" * 100_000 + "x",
        "`" * 100_000,
        "$$" + "a" * 100_000,
        "~~~\n" * 25_000,
        "a|b\n|-|\n" + "|\n" * 50_000,
    ],
    ids=lambda text: repr(text[:8]),
)
def test_pathological_inputs_take_linear_time(text: str) -> None:
    started = time.perf_counter()
    chunks = split_text(text)
    # Linear work is ~10-100 ms here; a quadratic regex would take minutes.
    assert time.perf_counter() - started < 3.0
    check_invariants(text, chunks, ChunkerConfig())


def test_throughput_is_megabytes_per_second() -> None:
    rng = random.Random(5)
    text = _document(rng, 2500)
    assert len(text) > 500_000
    started = time.perf_counter()
    chunks = split_text(text)
    elapsed = time.perf_counter() - started
    # Measured ~15 M chars/s on a laptop core; 1 M chars/s leaves a wide margin for slow CI runners.
    assert len(text) / elapsed > 1_000_000, f"{len(text) / elapsed / 1e6:.2f} M chars/s"
    assert re.sub(r"\s", "", chunks[-1].content)
