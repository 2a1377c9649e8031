"""The model-free answerer's reading of text and questions, without a model: option terms joined to their
descriptions (manual pages), a passage's title line, measured attributes a question names, the "which option" type,
and the trade-off curve ``ragstep bench answer --curve`` reports."""

from __future__ import annotations

import pytest

from ragstep.bench.answer_curve import Sample, curve, operating_point
from ragstep.retrieval import answer_span
from ragstep.retrieval.answer_attributes import stated_attributes
from ragstep.retrieval.answer_span import Assessment, Quote
from ragstep.retrieval.answer_types import definition_of, expected_answer
from ragstep.retrieval.sentences import is_option_term, sentences_in_units, split_sentences

MANUAL = """OPTIONS
-t --test
Check integrity of the specified file(s), but don't decompress them.

-k, --kill-after=DURATION

also send a KILL signal if COMMAND is still running

--help display this help and exit
-E, --conflict-exit-code number
The exit status used when the lock exists. The default value is 1.
"""


def test_an_option_term_is_read_with_its_description() -> None:
    """A manual page's option and its description (next line, or after a blank line) are one unit, the option's
    other sentences after it ("The default value is 1." belongs to -E)."""
    units = sentences_in_units(MANUAL)
    assert [s for _, _, s in units] == [
        "-t --test Check integrity of the specified file(s), but don't decompress them.",
        "-k, --kill-after=DURATION also send a KILL signal if COMMAND is still running",
        "--help display this help and exit",
        "-E, --conflict-exit-code number The exit status used when the lock exists.",
        "The default value is 1.",
    ]
    assert units[-1][1] == units[-2][1] and units[-1][0] == "OPTIONS"


@pytest.mark.parametrize(
    ("line", "term"),
    [
        ("-t --test", True),
        ("-I[FMT], --iso-8601[=FMT]", True),
        ("-E, --conflict-exit-code number", True),
        ("--help display this help and exit", False),
        ("- a list item", False),
        ("-20 is the most favourable niceness.", False),
    ],
)
def test_what_an_option_term_is(line: str, term: bool) -> None:
    assert is_option_term(line) is term


def test_a_markdown_list_item_is_still_its_own_sentence() -> None:
    assert split_sentences("Steps:\n- Open the lid.\n- Pour the water.") == [
        "Steps:",
        "Open the lid.",
        "Pour the water.",
    ]


def test_a_passage_title_line_is_context_not_an_answer() -> None:
    passage = "timeout(1) manual: run a command with a time limit\n\nEXIT status: 124 if COMMAND times out."
    texts = [q.text for q in answer_span.fits("What exit code does timeout give?", [passage])]
    assert texts == ["EXIT status: 124 if COMMAND times out."]
    # A one-sentence passage that ends like a sentence is an answer.
    assert [q.text for q in answer_span.fits("Who logs ships?", ["The keeper logs ships."])] == [
        "The keeper logs ships."
    ]


def test_a_named_attribute_must_be_stated() -> None:
    (area,) = stated_attributes("青海湖的面积有多大？")
    assert area.search("面积4583平方公里") and area.search("It covers 4,583 km²") and not area.search("人口约10万")
    (population,) = stated_attributes("What is the population of Xining?")
    assert population.search("about 2.5 million inhabitants") and not population.search("It lies at 2,275 m.")
    assert stated_attributes("How can I speed up compression?") == []
    # "How deep" names the depth as well as asking a length: 120 km of a river's length does not say it.
    (depth,) = stated_attributes("How deep is the lake?")
    assert depth.search("It is 21 m deep at its deepest point.") and not depth.search("It is 120 km long.")


def test_a_passage_without_the_attribute_asked_is_not_an_answer_even_by_words() -> None:
    passage = "西宁市是青海省的省会。西宁市人口约246万。"
    assert answer_span.choose("西宁市的面积是多少？", [passage]) == []
    f = answer_span.features("西宁市的人口是多少？", [passage])
    assert f is not None and f.expects and f.typed.tolist() == [False, True]


def test_digits_inside_a_name_are_no_number() -> None:
    amount = expected_answer("How many iterations should I use with pbkdf2_hmac?")
    assert amount is not None and amount.search("use 600,000 iterations") and amount.search("at least 3 'X's")
    assert not amount.search("pbkdf2_hmac(hash_name, password, salt)") and not amount.search("ext4 and sha256")


def test_how_much_faster_asks_for_a_ratio() -> None:
    ratio = expected_answer("How much smaller does gzip make source code?")
    assert ratio is not None and ratio.search("reduced by 60-70%") and ratio.search("about twice as fast")
    assert not ratio.search("md5(), sha1(), sha256()") and ratio.search("快两倍")


def test_a_time_of_year_or_day_answers_when() -> None:
    when = expected_answer("龙井茶什么时候采摘最好？")
    assert when is not None and when.search("采摘时间以清明节前为最佳") and when.search("春季采摘")
    assert expected_answer("When was the lighthouse built?") is not None
    assert when.search("The keeper lights the lamp at dusk") and not when.search("冲泡龙井茶宜用80℃左右的水")


def test_who_wrote_it_asks_for_by_whom() -> None:
    who = expected_answer("who wrote GNU ed?")
    assert who is not None and who.search("Since 2006 GNU ed is maintained by Antonio Diaz Diaz.")
    assert not who.search("GNU ed is a line-oriented text editor.") and not who.search("It is enabled by default.")
    for question in (
        "Qui a écrit ce programme ?",
        "Wer hat cp geschrieben?",
        "¿Quién lo escribió?",
        "这个软件是谁开发的？",
    ):
        asked = expected_answer(question)
        assert asked is not None and asked.search("Écrit par Paul Rubin et David MacKenzie."), question
    assert expected_answer("who uses ed today?") is None


def test_what_is_x_asks_for_its_definition() -> None:
    bc = definition_of("what is GNU bc?")
    assert bc is not None and bc.search("bc - An arbitrary precision calculator language")
    assert bc.search("bc  is a language that supports arbitrary precision numbers")
    assert not bc.search("bc starts by processing code from all the files") and not bc.search("GNU bc can be compiled")
    tea = definition_of("龙井茶是什么？")
    assert tea is not None and tea.search("龙井茶是中国十大名茶之一")
    assert (
        definition_of("what is the default scale in bc?") is None
        and definition_of("漠河机场的三字代码是什么？") is None
    )


def test_which_option_asks_for_an_option() -> None:
    option = expected_answer("Which option prints the time in ISO 8601 format?")
    assert option is not None
    assert option.search("-I[FMT], --iso-8601[=FMT] output date/time in ISO 8601 format.")
    assert not option.search("Example: Mon, 14 Aug 2006 02:34:56 -0600")


def _sample(refs: tuple[str, ...] | None, relevant: bool = True) -> Sample:
    return Sample("q", ("p",), (1.0,), (relevant,), refs)


def _assessment(text: str, support: float, eligible: bool = True) -> Assessment:
    return Assessment([Quote(1, 0, text, support)], eligible, support, True)


def test_the_curve_trades_answers_for_declines() -> None:
    samples = [_sample(("blue ledger",)), _sample(("two nights",)), _sample(("once a day",), False), _sample(None)]
    assessments = [
        _assessment("He logs ships in a blue ledger.", 1.0),
        _assessment("He stayed in a twin room.", 0.7),  # answered at a low threshold, wrongly
        _assessment("Feed it once a day.", 0.9, eligible=False),  # never answered: the checks fail
        _assessment("Unrelated.", 0.8),  # the unanswerable question
    ]
    points = {p["threshold"]: p for p in curve(samples, assessments, thresholds=(0.6, 0.85, 1.1))}
    assert points[0.6]["answered"] == 0.6667 and points[0.6]["answered_correctly"] == 0.3333
    assert points[0.6]["declined_unanswerable"] == 0.0 and points[0.6]["citation_precision"] == 1.0
    assert points[0.85]["answered_correctly"] == 0.3333 and points[0.85]["declined_unanswerable"] == 1.0
    assert points[0.85]["answered_correctly_retrieved"] == 0.5  # two of the three had their source given
    assert points[1.1]["answered"] == 0.0 and points[1.1]["citation_precision"] is None
    assert operating_point(list(points.values())) == 0.85
    assert operating_point([{"threshold": 0.5, "declined_unanswerable": None}]) is None
