"""What the model-free answerer reads of a default asked without the word, of an option's metavariable, of a reason,
of a port and of an amount of memory (issue: answers that quote a sentence of another kind, or a restatement of the
question instead of its explanation)."""

from __future__ import annotations

import pytest

from ragstep.adapters.chat.extractive import NO_ANSWER
from ragstep.adapters.embedders.local import LocalEmbedder
from ragstep.retrieval.answer_attributes import (
    default_keys,
    stated_attributes,
    states_default,
    states_value,
)
from ragstep.retrieval.answer_focus import counted_patterns
from ragstep.retrieval.answer_subject import asked_version_of, other_version
from ragstep.retrieval.answer_types import default_field, expected_answer
from ragstep.retrieval.answer_window import asks_why, explanation_asked, gives_reason, gives_remedy, window
from ragstep.retrieval.sentences import sentences_in_units
from support.extractive import answer


@pytest.fixture(scope="module")
def encoder() -> LocalEmbedder:
    return LocalEmbedder()


def _declined(encoder: LocalEmbedder, question: str, passages: list[str], reason: str, language: str = "en") -> None:
    """The answerer declines ``question`` over ``passages``, saying ``reason``."""
    content, decline = answer(encoder, question, passages)
    assert content == NO_ANSWER[language], content
    assert decline is not None and decline["reason"] == reason, decline


@pytest.mark.parametrize(
    "question",
    [
        "What sampling frequency does perf record use if I don't pass -F?",
        "which port does ssh connect to if I don't give -p?",
        "how wide are the lines textwrap.fill produces unless told otherwise",
        "what permission bits does Path.mkdir use unless I say otherwise",
        "For how many days is a certificate valid if I create it with openssl req without -days?",
        "用 sftp 协议读文件、没写 port 的话会连哪个端口？",
    ],
)
def test_what_applies_when_nothing_is_given_asks_for_a_default(question: str) -> None:
    assert default_field(question) is not None


def test_a_question_about_something_else_asks_for_no_default() -> None:
    assert default_field("How do I keep following a log file that gets rotated?") is None
    assert default_field("Can I hook valgrind onto a process that's already running?") is None


def test_an_options_metavariable_is_no_value_and_states_no_default() -> None:
    # "--line-length=N" names the option's argument; it sets nothing.
    assert not states_value("-l N, --line-length=N")
    assert not states_default("sed [-n] [--expression=script] [--line-length=N]")
    # A value, or an assignment of a setting, still is one.
    assert states_value("-n, --iterations=N overwrite N times instead of the default (3)")
    assert states_default("ArgumentParser(prog=None, usage=None)")
    assert states_default("log_format = json")


def test_standard_in_an_english_sentence_is_no_default() -> None:
    # German "standardmäßig" says "by default"; English "non-standard" does not.
    assert not states_default("Use --symfs <dir> if your symbol files are in non-standard locations.")
    assert states_default("Die Ausgabe ist standardmäßig farbig.")


def test_a_metavariable_is_declined_when_a_default_is_asked(encoder: LocalEmbedder) -> None:
    sed = (
        "sed(1): stream editor\n\n-l N, --line-length=N\nspecify the desired line-wrap length for the `l' command\n\n"
        "-n, --quiet, --silent\nsuppress automatic printing of pattern space"
    )
    _declined(encoder, "default line wrap length for the sed l command?", [sed], "kind_not_stated")


def test_a_default_asked_without_the_word_is_the_value_of_the_kind_asked(encoder: LocalEmbedder) -> None:
    # Asked "if I don't tell it", the sentence stating the count answers; a sentence of another passage saying
    # "unless" (what applies when nothing is given) but no count does not replace it.
    tail = "tail(1): output the last part of files\n\nPrint the last 10 lines of each FILE to standard output."
    uniq = "uniq(1): omit repeated lines\n\nNote: 'uniq' does not detect repeated lines unless they are adjacent."
    content, decline = answer(encoder, "How many lines does tail print if I don't tell it?", [tail, uniq])
    assert decline is None and "last 10 lines" in content and "[1]" in content, (content, decline)


@pytest.mark.parametrize(
    ("question", "why"),
    [
        ("Why does ps print a warning when I type ps -aux?", True),
        ("My program dumps core when I press a key. What's going on?", True),
        ("为什么四氟化碳不会破坏臭氧层", True),
        ("Pourquoi le serveur redémarre-t-il ?", True),
        # 为什么 after a verb taking 为 asks what: "shown as what", "called what".
        ("对亚硫酸盐过敏的反应表现为什么？", False),
        ("锦地罗又被称为什么？", False),
        ("How do I keep following a log file that gets rotated?", False),
    ],
)
def test_what_asks_why(question: str, why: bool) -> None:
    assert asks_why(question) is why


def test_the_grammar_of_a_reason() -> None:
    assert gives_reason("That's because it must be encoded in the mount parameters during earliest boot.")
    assert gives_reason("由于牠们每季都大量繁殖，破坏了生活环境而被认为是害虫。")
    assert not gives_reason("If you hit the key while in a console, your current application will likely dump core.")


def test_asked_why_a_sentence_without_a_reason_is_quoted_with_the_one_explaining_it() -> None:
    faq = (
        "If you leave the printer on overnight, it prints a blank page at midnight.\n\n"
        "The cleaning cycle starts at midnight and feeds one sheet to clear the nozzles.\n\n"
        "## Paper\n\nUse paper of 80 g/m2."
    )
    units = sentences_in_units(faq)
    assert window(units, 0) == (0, 0)  # not asked why: the sentence alone
    assert window(units, 0, explains=gives_reason) == (0, 1)  # asked why: the next paragraph of its section explains it
    # A sentence that gives the reason itself is quoted alone; a section's end is not crossed.
    reason = sentences_in_units("The page is blank because the cleaning cycle feeds one sheet.\n\nUse 80 g/m2 paper.")
    assert window(reason, 0, explains=gives_reason) == (0, 0)
    assert window(units, 1, explains=gives_reason) == (1, 1)


def test_asked_why_the_answer_says_why(encoder: LocalEmbedder) -> None:
    faq = (
        "# Printer FAQ\n\n"
        "If you leave the printer on overnight, it prints a blank page at midnight.\n\n"
        "The cleaning cycle starts at midnight and feeds one sheet to clear the nozzles.\n\n"
        "## Paper\n\nUse paper of 80 g/m2. Thicker paper jams the rear tray."
    )
    content, decline = answer(encoder, "Why does my printer print a blank page at midnight?", [faq])
    assert decline is None and "cleaning cycle" in content and "[1]" in content, (content, decline)


def test_a_port_is_stated_as_its_number() -> None:
    (port,) = stated_attributes("Apollo 自带的 smtp 邮件服务默认用哪个端口发信？")
    assert port.search("SMTP 服务默认使用端口 25 发信。")
    assert not port.search("**email.enabled** 设置为true即可启用默认的smtp邮件服务")
    assert port.search("默认值：若传输协议是sftp协议，默认值是22")  # a Chinese character is no part of the number
    (udp,) = stated_attributes("what UDP port does syncthing need open for discovery?")
    assert udp.search("Port **21027/UDP**: for discovery broadcasts on IPv4")
    assert not udp.search("Syncthing 1.2.3 adds discovery over IPv6.")  # a version is no port


def test_an_amount_of_memory_is_stated_in_a_unit_of_data() -> None:
    (memory,) = stated_attributes("宝塔面板部署 Apollo 至少需要多大内存？")
    assert memory.search("服务器至少需要 2G 内存。") and memory.search("至少需要2GB内存")
    assert not memory.search("仅适用于宝塔面板9.2.0及以上版本")
    (ram,) = stated_attributes("How much RAM does bunzip2 need in its low-memory mode?")
    assert ram.search("bunzip2 can decompress in about 2300k of memory.")
    assert not ram.search("bunzip2 has an option to decompress using less memory.")


def test_the_default_of_a_configuration_key_is_said_of_that_key(encoder: LocalEmbedder) -> None:
    keys = default_keys("sentinel-transport-simple-http 不配 csp.sentinel.api.port 的话默认用哪个端口？")
    assert keys is not None and keys.search("csp.sentinel.api.port 默认为 8719")
    assert not keys.search("其中 `-Dserver.port=8080` 指定服务端启动端口为 `8080`。")
    assert default_keys("What is the default value of e.g. the timeout?") is None  # an abbreviation is no key
    assert default_keys("Which file does app.config read?") is None  # no default asked
    doc = (
        "# 启动参数\n\n其中 `-Dserver.port=8080` 用于指定服务端启动端口为 `8080`。\n\n"
        "`csp.sentinel.api.port` 用于指定客户端监控 API 的端口。"
    )
    content, _ = answer(encoder, "不配 csp.sentinel.api.port 的话默认用哪个端口？", [doc])
    assert "8080" not in content, content


def test_the_longest_is_a_maximum_and_the_shortest_a_minimum() -> None:
    (longest,) = [a for a in stated_attributes("sentinel 控制台上的监控数据最多能保存多长时间") if a.search("最大")]
    assert longest.search("监控最长存储时间为 5 分钟，控制台重启后数据丢失。")
    assert not longest.search("控制台重启后监控数据丢失。")
    (shortest,) = [a for a in stated_attributes("最少要等多久才能重试？") if a.search("最小")]
    assert shortest.search("两次重试的间隔最短为 3 秒。")


def test_a_signal_a_package_and_an_encoding_are_named_as_one() -> None:
    (signal,) = stated_attributes("Which signal is sent to the child when I call terminate() on a Popen object?")
    assert signal.search("terminate(self) Terminate the process with SIGTERM")
    assert signal.search("Upon timeout, send the TERM signal to COMMAND")
    assert not signal.search("__init__(self, args, bufsize=-1, executable=None)")
    (package,) = stated_attributes("Building valgrind dies with 'cannot find -lc'. Which package fixes it?")
    assert package.search("You need to install the glibc-static-devel package.")
    assert not package.search("When building Valgrind, 'make' fails with this: /usr/bin/ld: cannot find -lc")
    (encoding,) = stated_attributes("Which encoding does csv.writer use for the file it writes?")
    assert encoding.search("The file is written as UTF-8.") and encoding.search("文件以 GBK 编码写出。")
    assert not encoding.search("csv_writer = csv.writer(fileobj [, dialect='excel'] [optional keyword args])")


def test_a_version_of_another_program_does_not_answer() -> None:
    assert asked_version_of("What's the minimum python version pipx supports?") == "python"
    assert asked_version_of("canal-adapter 的 ES 适配器支持 Elasticsearch 哪个版本") == "Elasticsearch"
    assert asked_version_of("Which version of the SQLite library does the sqlite3 module ship with?") == "SQLite"
    assert other_version(
        "What's the minimum python version pipx supports?", "Minimum supported rust version is now 1.77.2"
    )
    assert other_version(
        "canal-adapter 的 ES 适配器支持 Elasticsearch 哪个版本", "基本说明canal 1.1.1版本之后, 增加适配"
    ) == (
        "Elasticsearch",
        "canal",
    )
    # The program asked about named, or a number after a function word, is no other program's version.
    assert other_version("What's the minimum python version pipx supports?", "pipx needs Python 3.9 or later.") is None
    assert other_version("Which python version added the walrus?", "It was added in 3.8 and kept since 3.8.1.") is None


def test_a_version_of_another_program_is_declined_saying_so(encoder: LocalEmbedder) -> None:
    readme = (
        "## 基本说明\n\ncanal 1.1.1版本之后, 增加客户端数据落地的适配及启动功能。\n\n"
        "适配器有 ES (Elasticsearch)、HBase 和 RDB。"
    )
    _declined(encoder, "canal-adapter 的 ES 适配器支持 Elasticsearch 哪个版本", [readme], "about_another", "zh")


def test_a_value_the_question_writes_is_no_answer_to_it(encoder: LocalEmbedder) -> None:
    # "新版本支持 jdk21" holds a version only because the question names jdk21: it does not say which release.
    notes = "## 更新说明\n\n- 新版本支持 jdk21。\n- 修复了读取公式时的空指针异常。"
    _declined(encoder, "easyexcel 哪个版本开始支持 jdk21", [notes], "kind_not_stated", "zh")


def test_a_count_of_rows_pages_or_characters_is_stated_in_its_measure_word() -> None:
    (rows,) = counted_patterns("EasyExcel 单个 sheet 最多能写多少行")
    assert rows.search("xlsx 格式单个 sheet 最多 1048576 行。")
    assert not rows.search("一般不会超过50M(大概率就30M)，剩下临时的GC会很快回收。")
    (pages,) = counted_patterns("这份手册一共有多少页？")
    assert pages.search("手册共 120 页。") and not pages.search("手册于 2020 年出版。")


def test_what_reason_asks_why() -> None:
    assert asks_why("本地跑 apollo，portal 一直提示 Env is down，一般是啥原因")
    assert asks_why("What causes the 'Env is down' message?")
    assert not asks_why("报错的原因码在哪里查？")


def test_a_code_block_a_chinese_colon_announces_is_quoted_after_it(encoder: LocalEmbedder) -> None:
    doc = (
        "## 缺少 DTO 类怎么办？\n\n如果本地开发时发现 DTO 类消失，请先执行一次 Maven 编译触发代码生成：\n\n"
        "```bash\n# 在仓库根目录执行\nmvn clean compile -pl portal -am\n```\n\n命令完成后 DTO 会重新生成。"
    )
    texts = [text for _, _, text in sentences_in_units(doc)]
    # The block's comment is not what the colon announces: the command is, right after it.
    assert texts[1] == "mvn clean compile -pl portal -am", texts
    assert window(sentences_in_units(doc), 0) == (0, 1)
    content, _ = answer(encoder, "本地开发时发现 DTO 类消失了怎么办？", [doc])
    assert "mvn clean compile -pl portal -am" in content and "[1]" in content, content


def test_asked_what_to_do_a_sentence_stating_the_problem_is_quoted_with_the_remedy() -> None:
    assert explanation_asked("sudo pipx says command not found, what do I do?") is gives_remedy
    assert explanation_asked("启动报错 Env is down 怎么办？") is gives_remedy
    assert explanation_asked("Why does ps print a warning?") is gives_reason
    assert explanation_asked("How many lines does tail print?") is None
    assert gives_remedy("You need to install the glibc-static-devel package.") and gives_remedy("请执行 mvn clean。")
    faq = (
        "## sudo pipx not found\n\nRoot's PATH does not include that directory, so sudo pipx fails with "
        '"command not found". Use the full path of the binary instead.\n\n## Other issues\n\nSee the FAQ.'
    )
    units = sentences_in_units(faq)
    assert window(units, 0) == (0, 0)
    assert window(units, 0, explains=gives_remedy) == (0, 1)  # the problem, then what to do about it


def test_a_bare_number_is_no_frequency() -> None:
    often = expected_answer("How often does e2scrub_all run once periodic scrubbing is switched on?")
    assert often is not None
    assert not often.search(
        "Uncomment to enable automatic periodic runs (either via cron or a timer) periodic_e2scrub=1"
    )
    assert often.search("It runs once a week.") and often.search("The check runs every 30 days.")
    assert often.search("每周运行一次。")
