"""Text that is not UTF-8, ingested as a user does (``ragstep ingest``): Chinese saved in Big5 (Taiwan, Hong Kong)
or GBK / GB18030 (mainland China) is read in its own encoding, not as windows-1252 mojibake, while Latin-1 /
windows-1252 Western text still reads as windows-1252 (:mod:`ragstep.parsers.text`); and every file read as
windows-1252 -- CSV, JSON, JSON Lines, FAQ files too -- says so in its row's note, as a text file does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragstep.parsers import parse
from ragstep.parsers.text import WINDOWS_1252_NOTE, read_text
from test_ingest_pipeline import Cli, stored, write

TRADITIONAL = (
    "臺北市的捷運系統非常方便，每天有數十萬人搭乘。\n"
    "圖書館週末開放到晚上九點，歡迎民眾借閱書籍。\n"
    "請記得在離開會議室之前關燈並鎖門。\n"
)
TRADITIONAL_2 = "經濟發展與環境保護應該兼顧。\n這份報告說明了過去一年的營運狀況。\n"
TRADITIONAL_3 = "颱風過後，志工們協助清理街道與公園。\n醫療團隊也到災區為居民檢查身體。\n"
SIMPLIFIED = (
    "北京的地铁系统非常方便，每天有数百万人乘坐。\n"
    "图书馆周末开放到晚上九点，欢迎市民借阅书籍。\n"
    "请记得在离开会议室之前关灯并锁门。\n"
)
SIMPLIFIED_2 = "长城是中国古代的军事防御工程，绵延万里。\n春节期间，火车站的人流量比平时多了三倍。\n"


@pytest.fixture(autouse=True)
def _plain_environment(plain_environment: None) -> None:
    pass


@pytest.fixture
def cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Cli:
    cli = Cli(tmp_path / "data", capsys)
    cli.ok("kb", "create", "docs", "--embedding-model", "none")
    return cli


def rows_of(cli: Cli, *args: str) -> dict[str, dict]:
    run = cli("ingest", *args, "--json")
    assert "Traceback" not in run.err
    return {Path(r["path"]).name: r for r in json.loads(run.out)}


def test_chinese_in_big5_gbk_and_gb18030_is_stored_as_written_and_found(cli: Cli, tmp_path: Path) -> None:
    """Each file's stored text is the sentences as written, with no note (as GB18030 text had none), and a Chinese
    keyword query finds it; Western files beside them still read as windows-1252, with the note."""
    docs = tmp_path / "docs"
    files = {
        "臺北捷運.txt": (TRADITIONAL, "big5"),  # also valid GB18030: must not be read as that either
        "營運報告.md": (TRADITIONAL_2, "big5"),
        "經濟.txt": (TRADITIONAL_2, "gbk"),  # Traditional characters saved as GBK (a mainland Windows)
        "颱風.txt": (TRADITIONAL_3, "big5"),
        "北京地铁.txt": (SIMPLIFIED, "gbk"),
        "长城.txt": (SIMPLIFIED_2, "gb18030"),
    }
    for name, (text, codec) in files.items():
        write(docs, name, text.encode(codec))
    write(docs, "sensor.txt", "Operating range -40°C to 85°C, pitch 5 µm, «Bonjour».\n".encode("latin-1"))
    write(docs, "menu.txt", "Crème brûlée \u2013 8 \u20ac, Ärzte empfehlen Ångström-Filter.\n".encode("cp1252"))

    rows = rows_of(cli, str(docs), "--kb", "docs")
    assert {name: row["status"] for name, row in rows.items()} == dict.fromkeys(rows, "indexed"), rows
    assert {name: rows[name]["note"] for name in files} == dict.fromkeys(files, "")
    assert rows["sensor.txt"]["note"] == rows["menu.txt"]["note"] == WINDOWS_1252_NOTE

    ctx = cli.ctx()
    for name, (text, _) in files.items():
        (chunk,) = stored(ctx, rows[name]["knowledge_id"])
        assert chunk.content == text.strip(), name
    (chunk,) = stored(ctx, rows["sensor.txt"]["knowledge_id"])
    assert chunk.content == "Operating range -40°C to 85°C, pitch 5 µm, «Bonjour»."

    for query, expected in (
        ("捷運系統", "臺北捷運.txt"),
        ("志工 清理街道", "颱風.txt"),
        ("地铁系统", "北京地铁.txt"),
        ("军事防御工程", "长城.txt"),
    ):
        found = cli.json("search", query, "--kb", "docs")["results"]  # type: ignore[call-overload]
        assert found and found[0]["knowledge_filename"] == expected, (query, found)
    found = cli.json("search", "環境保護", "--kb", "docs")["results"]  # type: ignore[call-overload]
    assert found and found[0]["knowledge_filename"] in ("營運報告.md", "經濟.txt"), found  # the same text twice


def test_the_reading_is_chosen_by_plausible_text_not_by_what_decodes() -> None:
    """Big5 bytes decode in GB18030 too, GBK bytes often in Big5, and a Latin-1 symbol or capital before a letter is
    a Big5 character: the reading taken is the one that is common Chinese side by side, else windows-1252."""
    for text in (TRADITIONAL, TRADITIONAL_2, "姓名,性別\n張三,男\n李四,女\n", "日期,產品,數量\n2024年3月5日,蘋果,10\n"):
        data = text.encode("big5")
        data.decode("gb18030")  # valid GB18030 as well: only plausibility tells them apart
        assert read_text(data, "x.txt") == (text, "")
    for text in (SIMPLIFIED, SIMPLIFIED_2, "日期,产品,数量\n2024年3月5日,苹果,10\n2024年3月6日,香蕉,12\n"):
        assert read_text(text.encode("gbk"), "x.txt") == (text, "")
    short = "长城是中国古代的军事防御工程。".encode("gbk")
    short.decode("big5")  # valid Big5 too
    assert read_text(short, "x.txt") == ("长城是中国古代的军事防御工程。", "")
    for western in (
        "Temperature 25°C\n",
        "Operating range -40°C to 85°C, accuracy ±0.5°C, pitch 5 µm.\n",
        "«Bonjour», dit-il. Où est la gare? À bientôt, Chloé!\n",
        "¿Qué tal? ¡Hola, señor Muñoz!\n",
        "Ärzte und Ökonomen grüßen Ångström. ÜBER ALLES\n",
        "AÇÃO, INFORMAÇÕES, ÉCOLE, CÔTE D'IVOIRE\n",
        "Prices: £5, ¥300, §12, ½ cup, Nº 3, 1ª\n",
        "Don\u2019t forget: the café opens at 8 \u20ac. \u201cQuoted\u201d \u2014 dash\u2026\n",
    ):
        assert read_text(western.encode("cp1252"), "x.txt") == (western, WINDOWS_1252_NOTE), western
    # A Big5 file cut mid-character: still Big5, the stray byte shown and counted.
    assert (
        read_text(TRADITIONAL.encode("big5")[:-2], "x.txt")
        == (  # "。\n" without its last two bytes
            TRADITIONAL[:-2] + "\ufffd",
            "read as Big5, the one byte that is not Big5 shown as \ufffd",
        )
    )


def test_csv_json_and_jsonl_read_as_windows_1252_say_so(cli: Cli, tmp_path: Path) -> None:
    """As a text file's row does: the note says the file was read as windows-1252, before what else it says."""
    docs = tmp_path / "docs"
    write(docs, "prix.csv", "plat,prix\nCrème brûlée,8\nCafé crème,3\n".encode("cp1252"))
    write(docs, "menu.json", '{"plat": "Crème brûlée", "prix": "8 €"}\n'.encode("cp1252"))
    write(docs, "menu.jsonl", '{"plat": "Café crème"}\n{"plat": "Soupe à l\'oignon"}\n'.encode("cp1252"))
    write(docs, "chinese.csv", "城市,人口\n臺北,260萬\n高雄,270萬\n".encode("big5"))

    rows = rows_of(cli, str(docs), "--kb", "docs")
    assert {name: row["status"] for name, row in rows.items()} == dict.fromkeys(rows, "indexed"), rows
    assert rows["prix.csv"]["note"] == WINDOWS_1252_NOTE
    assert rows["menu.json"]["note"] == f"{WINDOWS_1252_NOTE}; JSON read as text"
    assert rows["menu.jsonl"]["note"] == f"{WINDOWS_1252_NOTE}; JSON Lines: 2 records, one a paragraph"
    assert rows["chinese.csv"]["note"] == ""
    found = cli.json("search", "Crème brûlée", "--kb", "docs")["results"]  # type: ignore[call-overload]
    assert {"prix.csv", "menu.json"} <= {hit["knowledge_filename"] for hit in found}
    found = cli.json("search", "臺北 人口", "--kb", "docs")["results"]  # type: ignore[call-overload]
    assert found[0]["knowledge_filename"] == "chinese.csv" and "臺北" in found[0]["content"]
    # An HTML page without a charset, read as windows-1252 as browsers read it: the same note.
    page = parse(b"<html><body><p>Caf\xe9 cr\xe8me</p></body></html>", "menu.html")
    assert (page.text, page.metadata["note"]) == ("Café crème", WINDOWS_1252_NOTE)


def test_faq_files_read_as_windows_1252_say_so(cli: Cli, tmp_path: Path) -> None:
    cli.ok("kb", "create", "faq", "--type", "faq")
    faq = tmp_path / "faq"
    entries = [{"standard_question": "Où est le café ?", "answers": ["Au rez-de-chaussée, près de l'entrée."]}]
    write(faq, "faq.json", json.dumps(entries, ensure_ascii=False).encode("cp1252"))
    write(faq, "horaires.csv", "standard_question,answers\nQuand ouvre la crèche ?,À 7 h 30.\n".encode("cp1252"))
    write(faq, "常見問題.csv", "standard_question,answers\n圖書館幾點開門？,每天早上九點開門。\n".encode("big5"))

    rows = rows_of(cli, str(faq), "--kb", "faq")
    assert {name: row["status"] for name, row in rows.items()} == dict.fromkeys(rows, "indexed"), rows
    assert rows["faq.json"]["note"] == rows["horaires.csv"]["note"] == WINDOWS_1252_NOTE
    assert rows["常見問題.csv"]["note"] == ""
    found = cli.json("search", "crèche", "--kb", "faq")["results"]  # type: ignore[call-overload]
    assert "À 7 h 30." in found[0]["content"]
    found = cli.json("search", "圖書館開門", "--kb", "faq")["results"]  # type: ignore[call-overload]
    assert "每天早上九點開門。" in found[0]["content"]


def test_bad_input_is_one_clear_error_and_nothing_is_half_written(cli: Cli, tmp_path: Path) -> None:
    """Binary content under a text name, and a FAQ CSV whose header is misread: refused with what to do, exit 2,
    no traceback, nothing of the file in the catalog or the scratch store."""
    cli.ok("kb", "create", "faq", "--type", "faq")
    bad = write(tmp_path / "bad", "data.csv", b"name,size\n\xa4\xa4\x00\x01,3\n")
    run = cli("ingest", str(bad), "--kb", "docs")
    assert run.code == 2 and "Traceback" not in run.out + run.err
    assert "data.csv: cannot decode the text" in run.out and "convert it to UTF-8" in run.out
    faq = write(tmp_path / "bad", "faq.csv", "question,réponse\nA,B\n".encode("cp1252"))
    run = cli("ingest", str(faq), "--kb", "faq", "--json")
    (row,) = json.loads(run.out)
    assert run.code == 2 and "Traceback" not in run.err
    assert row["error"].startswith("faq.csv: unknown column 'question' in the header; FAQ CSV columns are ")
    ctx = cli.ctx()
    for kb in ("docs", "faq"):
        assert ctx.catalog.list_knowledge(ctx.require_kb(kb).id) == []
    assert ctx.blobs.list("ingest/") == []
