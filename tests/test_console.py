"""The web console in a real browser: headless Chromium (Debian's ``chromium`` package, driven by Playwright's Python
package; nothing downloads a browser) against the HTTP API served by uvicorn on 127.0.0.1.

The scenario is a person's: create a knowledge base, drop two files on it, wait for them to be indexed, search, ask in
English and in Chinese, open a citation and the trace, then delete the knowledge base. Then a server with API keys
(no key: the page asks; a wrong key: it says so), a model that fails, and a server that answers 500. Each step leaves
a screenshot under ``test-artifacts/console/`` (git-ignored; CI keeps it as an artifact of the run).

``./dev test`` installs Chromium with apt-get when it is missing and apt-get is there (``ensure_browser``); elsewhere
these tests skip and say why.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ragstep.app.keys import create_key
from ragstep.context import Clients
from ragstep.settings import Settings
from support.api_server import api_server, seed_docs
from support.llm_server import LLMServer, Reply, streamed

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts" / "console"
#: The flags of a browser that must not touch the network on its own (no updates, sync, QUIC probing).
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: Generous: these waits are for a page on a busy machine, not a performance target.
WAIT_MS = 30_000

if not Path(CHROMIUM).is_file():
    pytest.skip(
        "no Chromium at /usr/bin/chromium: `apt-get install chromium` (./dev test does it where apt-get exists)",
        allow_module_level=True,
    )
sync_api = pytest.importorskip("playwright.sync_api", reason="the browser tests need `pip install playwright`")
sync_api.expect.set_options(timeout=WAIT_MS)

DOCS = {
    "lambda.md": "# Lambda\n\nAWS Lambda runs code without servers. Cold starts happen when a new execution "
    "environment starts and loads the code. Provisioned concurrency keeps environments initialised and warm.\n",
    "北京.md": "# 北京\n\n北京是中华人民共和国的首都，也是全国的政治和文化中心。故宫位于北京市中心。\n",
}


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One Chromium for the module (Playwright gives each launch a fresh, temporary profile)."""
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


class Page:
    """A browser tab on the console, saving a screenshot per step and failing on any script error."""

    def __init__(self, browser: Any, base: str, name: str, *, locale: str = "en-US", width: int = 1280) -> None:
        self.context = browser.new_context(locale=locale, viewport={"width": width, "height": 860})
        self.context.set_default_timeout(WAIT_MS)
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self.page.on("console", lambda msg: msg.type == "error" and self.errors.append(msg.text))
        self.page.on(
            "response", lambda r: r.status >= 400 and self.errors.append(f"{r.status} {r.request.method} {r.url}")
        )
        self.name = name
        self.step = 0
        self.page.goto(base + "/")

    def shot(self, what: str) -> Path:
        self.step += 1
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{self.name}-{self.step:02d}-{what}.png"
        self.page.screenshot(path=str(path))
        return path

    def close(self) -> None:
        self.context.close()


def _clients(tmp_path: Path, **settings: Any) -> Clients:
    # Keyword search only: the scenario is about the page, not about loading the embedding model.
    return Clients(Settings(data_dir=tmp_path / "data", embedder="none", **settings))


def _drop(page: Any, selector: str, files: dict[str, str]) -> None:
    """Drop ``files`` on ``selector`` as a person dragging them from a file manager would."""
    transfer = page.evaluate_handle(
        """(files) => {
            const dt = new DataTransfer();
            for (const [name, text] of Object.entries(files)) {
                dt.items.add(new File([text], name, {type: "text/markdown"}));
            }
            return dt;
        }""",
        files,
    )
    page.dispatch_event(selector, "drop", {"dataTransfer": transfer})


def patched(response: Any) -> bool:
    """A document's PATCH answered: what the page changed is stored."""
    return "/v1/documents/" in response.url and response.request.method == "PATCH"


def _ask(page: Any, question: str) -> Any:
    """Ask, wait for the answer to finish (or fail); its turn."""
    sync_api.expect(page.locator("#question")).to_be_enabled()  # the page is ready to ask
    before = page.locator(".turn").count()
    page.fill("#question", question)
    page.press("#question", "Enter")
    turn = page.locator(".turn").nth(before)
    sync_api.expect(turn).not_to_have_attribute("data-state", "streaming")
    return turn


def test_the_console_scenario(browser: Any, tmp_path: Path) -> None:
    clients = _clients(tmp_path)
    with api_server(clients) as base:
        tab = Page(browser, base, "scenario")
        page = tab.page
        expect = sync_api.expect
        expect(page.locator("#whoami")).to_have_text("local server, no key needed")
        tab.shot("opened")

        # A knowledge base, created in the page.
        page.click("#nav-kbs")
        page.fill("#kb-create input[name=name]", "handbook")
        page.fill("#kb-create input[name=description]", "the team's handbook")
        page.click("#kb-create button[type=submit]")
        row = page.locator("#kb-rows tr[data-kb=handbook]")
        expect(row).to_be_visible()
        tab.shot("created")

        # Two files dropped on it, each followed until indexed.
        row.locator("button.link").click()
        expect(page.locator("#kb-title")).to_have_text("handbook")
        _drop(page, "#drop", DOCS)
        expect(page.locator("#uploads li[data-status=indexed]")).to_have_count(2)
        expect(page.locator("#doc-rows tr[data-status=indexed]")).to_have_count(2)
        tab.shot("indexed")

        # A search, with its scores, match types and trace.
        page.fill("#search-query", "cold start")
        page.click("#search-form button[type=submit]")
        expect(page.locator("#search-results tr").first).to_contain_text("lambda.md")
        page.click("#search-trace")
        expect(page.locator("#dlg-trace")).to_be_visible()
        expect(page.locator("#trace-body tbody tr").first).to_be_visible()
        tab.shot("search-trace")
        page.click("#dlg-trace button[value=close]")

        # A disabled document is kept but never found; enabled again, it is.
        lambda_row = page.locator('#doc-rows tr[data-doc="lambda.md"]')
        with page.expect_response(patched):
            lambda_row.locator("input[type=checkbox]").uncheck()
        page.click("#search-form button[type=submit]")
        expect(page.locator("#search-results")).to_contain_text("No results.")
        with page.expect_response(patched):
            lambda_row.locator("input[type=checkbox]").check()
        expect(lambda_row.locator("input[type=checkbox]")).to_be_checked()

        # Re-tagged: the file is ingested again, its job followed to the end.
        beijing_row = page.locator('#doc-rows tr[data-doc="北京.md"]')
        beijing_row.locator("button", has_text="Re-tag").click()
        page.fill("#confirm-input", "geo")
        page.press("#confirm-input", "Enter")
        expect(beijing_row.locator("td").nth(3)).to_have_text("geo")
        expect(beijing_row).to_have_attribute("data-status", "indexed")

        # The list counts what the upload made.
        page.click("#kb-back")
        expect(row.locator("td").nth(3)).to_have_text("2")

        # A question in English: streamed, cited, the extractive note, a citation opened, the trace.
        page.click("#nav-chat")
        expect(page.locator("#kb-picker input:checked")).to_have_count(1)
        turn = _ask(page, "When do cold starts happen?")
        expect(turn.locator(".answer")).to_contain_text("Cold starts happen")
        expect(turn.locator(".note")).to_contain_text("extractive answerer")
        expect(turn.locator(".sources li").first).to_contain_text("lambda.md")
        tab.shot("answer-en")
        tab.context.grant_permissions(["clipboard-read", "clipboard-write"])
        turn.locator(".actions button", has_text="Copy").click()
        expect(turn.locator(".actions button", has_text="Copied")).to_be_visible()
        assert page.evaluate("navigator.clipboard.readText()") == turn.locator(".answer").text_content()
        turn.locator(".cite").first.click()
        expect(page.locator("#dlg-passage")).to_be_visible()
        expect(page.locator("#passage-file")).to_have_text("lambda.md")
        expect(page.locator("#passage-text mark", has_text="Cold starts happen")).to_be_visible()
        tab.shot("citation")
        page.keyboard.press("Escape")
        expect(page.locator("#dlg-passage")).to_be_hidden()
        turn.locator(".actions button", has_text="Trace").click()
        expect(page.locator("#trace-body")).to_contain_text("chunk_search")
        expect(page.locator("#trace-body")).to_contain_text("chat_completion_stream")
        tab.shot("answer-trace")
        page.keyboard.press("Escape")
        timings = {
            "en": {"first_token_ms": turn.get_attribute("data-ttft"), "total_ms": turn.get_attribute("data-total")}
        }

        # An elliptical follow-up: searched with the previous question's words, and the answer's note says so.
        turn = _ask(page, "And how are they avoided?")
        expect(turn.locator(".note")).to_contain_text("(note: searched as a follow-up of the previous question, with:")

        # A follow-up in Chinese, in the same session, with the interface in Chinese.
        page.click("#lang")
        expect(page.locator("#nav-chat")).to_have_text("对话")
        turn = _ask(page, "北京是哪个国家的首都？")
        expect(turn.locator(".answer")).to_contain_text("中华人民共和国的首都")
        timings["zh"] = {
            "first_token_ms": turn.get_attribute("data-ttft"),
            "total_ms": turn.get_attribute("data-total"),
        }
        expect(turn.locator(".note")).to_contain_text("抽取式回答器")
        turn.locator(".cite").first.click()
        expect(page.locator("#passage-file")).to_have_text("北京.md")
        expect(page.locator("#passage-text mark", has_text="中华人民共和国的首都")).to_be_visible()
        expect(page.locator("#passage-text")).to_contain_text("故宫位于北京市中心")
        page.keyboard.press("Escape")
        expect(page.locator("#sessions li")).to_have_count(1)
        expect(page.locator("#sessions li").first).to_contain_text("3 轮")
        tab.shot("answer-zh")
        page.emulate_media(color_scheme="dark")
        assert page.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(21, 22, 26)"
        tab.shot("dark")
        page.emulate_media(color_scheme="light")
        page.click("#lang")

        # The session, opened again from the list, shows its turns with their sources.
        page.click("#new-chat")
        expect(page.locator(".turn")).to_have_count(0)
        page.locator("#sessions .session").first.click()
        expect(page.locator(".turn")).to_have_count(3)
        expect(page.locator(".turn").first.locator(".cite").first).to_be_visible()

        # A document deleted, after saying yes; then the knowledge base.
        page.click("#nav-kbs")
        row.locator("button.link").click()
        lambda_row.locator("button.danger").click()
        expect(page.locator("#confirm-text")).to_contain_text("lambda.md")
        page.click("#confirm-ok")
        expect(lambda_row).to_have_count(0)
        expect(page.locator("#doc-rows tr")).to_have_count(1)
        page.click("#kb-back")
        expect(row.locator("td").nth(3)).to_have_text("1")
        row.locator("button.danger").click()
        expect(page.locator("#confirm-text")).to_contain_text("handbook")
        page.click("#confirm-ok")
        expect(row).to_have_count(0)
        tab.shot("deleted")
        assert not tab.errors, tab.errors
        tab.close()
    assert clients.context().catalog.get_kb("handbook") is None
    # As the page measures them (performance.now() from Enter to the first answer token, and to the end): README.
    (ARTIFACTS / "timings.json").write_text(json.dumps(timings))


def test_a_server_with_keys_asks_for_one_and_shows_what_its_scopes_allow(browser: Any, tmp_path: Path) -> None:
    clients = _clients(tmp_path)
    seed_docs(clients.context(), tmp_path / "docs")
    key = create_key(clients.keys, "default", ["search", "chat"], name="reader").secret
    with api_server(clients) as base:
        tab = Page(browser, base, "keys")
        page, expect = tab.page, sync_api.expect
        urls: list[str] = []
        page.on("request", lambda request: urls.append(request.url))
        expect(page.locator("#dlg-key")).to_be_visible()  # no key: the page asks
        expect(page.locator("#key-error")).to_be_hidden()
        tab.shot("asked")

        page.fill("#key-input", "rsk_00000000_" + "x" * 43)
        page.press("#key-input", "Enter")
        expect(page.locator("#key-error")).to_contain_text("The server refused this key")
        expect(page.locator("#dlg-key")).to_be_visible()
        tab.shot("wrong-key")

        page.fill("#key-input", key)
        page.click("#dlg-key button[value=ok]")
        expect(page.locator("#dlg-key")).to_be_hidden()
        expect(page.locator("#whoami")).to_contain_text(key.split("_")[1])
        expect(page.locator("#whoami")).to_contain_text("search, chat")
        # Kept for the tab only, never in an address.
        assert page.evaluate("sessionStorage.getItem('ragstep.key')") == key
        assert not any(key in url for url in urls), urls

        # Search and chat, but no ingest: nothing offered that would be refused.
        turn = _ask(page, "When do cold starts happen?")
        expect(turn.locator(".answer")).to_contain_text("Cold starts happen")
        page.click("#nav-kbs")
        expect(page.locator("#kb-rows tr[data-kb=docs]")).to_be_visible()
        expect(page.locator("#kb-create")).to_be_hidden()
        expect(page.locator("#kb-rows button.danger")).to_have_count(0)
        page.locator("#kb-rows tr[data-kb=docs] button.link").click()
        expect(page.locator("#upload")).to_be_hidden()
        expect(page.locator("#doc-rows input[type=checkbox]").first).to_be_disabled()
        tab.shot("read-only")

        # Readable at a phone's width.
        page.set_viewport_size({"width": 390, "height": 800})
        page.click("#nav-chat")
        expect(page.locator(".turn")).to_have_count(1)
        tab.shot("phone")
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        assert not [e for e in tab.errors if "401" not in e], tab.errors
        tab.close()


def test_each_dropped_file_is_ingested_or_refused_on_its_own(browser: Any, tmp_path: Path) -> None:
    """A folder dropped with one file the API refuses: the others are ingested, and only that file's line says why."""
    clients = _clients(tmp_path)
    seed_docs(clients.context(), tmp_path / "docs")
    with api_server(clients) as base:
        tab = Page(browser, base, "drop-mixed")
        page, expect = tab.page, sync_api.expect
        page.click("#nav-kbs")
        page.locator("#kb-rows tr[data-kb=docs] button.link").click()
        orchard = "# Orchard\n\nThe queue timeout is 45 minutes.\n"
        dropped = {"orchard.md": orchard, "notes.rtf": "{\\rtf1}", "plan.txt": "Q3"}
        _drop(page, "#drop", {**dropped, "CHANGES": "Version 2.4: the queue timeout went to 45 minutes."})
        expect(page.locator("#uploads li[data-status=indexed]")).to_have_count(3)  # CHANGES: text, no extension
        refused = page.locator('#uploads li[data-file="notes.rtf"]')
        expect(refused).to_have_attribute("data-status", "failed")
        expect(refused.locator(".error")).to_contain_text("notes.rtf: unsupported file type .rtf")
        for name in ("orchard.md", "plan.txt", "CHANGES"):
            expect(page.locator(f'#uploads li[data-file="{name}"] .error')).to_be_hidden()
        expect(page.locator('#doc-rows tr[data-doc="orchard.md"]')).to_have_attribute("data-status", "indexed")
        tab.shot("dropped")
        assert [e for e in tab.errors if "400" not in e] == [], tab.errors
        tab.close()


def test_a_cited_passage_is_shown_whole_with_dots_inside_its_words(browser: Any, tmp_path: Path) -> None:
    """Versions, file names and addresses (ASN.1, 4.19.0, libtasn1.h) hold dots that end no sentence: the passage
    dialog shows every character of the passage and marks the sentence cited; a PDF's page markers show as pages."""
    passage = (
        "Libtasn1\nAbstract Syntax Notation One (ASN.1) library, version 4.19.0 (help-libtasn1@gnu.org)\n\n"
        "The header file of this library is libtasn1.h. Some functions need an errorDescription argument."
    )
    cited = "The header file of this library is libtasn1.h."
    with api_server(_clients(tmp_path)) as base:
        tab = Page(browser, base, "passage")
        shown, marked = tab.page.evaluate(
            """async ([passage, cited]) => {
                const ui = await import("./console/ui.js");
                const nodes = ui.markedPassage(passage, cited);
                return [nodes.map((n) => n.textContent).join(""),
                        nodes.filter((n) => n.nodeName === "MARK").map((n) => n.textContent)];
            }""",
            [passage, cited],
        )
        # A PDF's page markers (ragstep.parsers.pdf, .ocr) read as the page they open, in the page's language.
        pdf = "Libtasn1 manual.\n\n<!-- page 2 -->\n\n<!-- ocr page 2 -->Scanned text.<!-- /ocr -->"
        readable = tab.page.evaluate('async (text) => (await import("./console/ui.js")).readable(text)', pdf)
        tab.close()
    assert shown == passage
    assert [m.strip() for m in marked] == [cited]
    assert readable == "Libtasn1 manual.\n\n[page 2]\n\n[page 2]Scanned text."


def test_a_streaming_model_can_be_stopped_and_a_failing_one_is_said(browser: Any, tmp_path: Path) -> None:
    words = [f"word{i} " for i in range(60)]
    slow = Reply(chunks=streamed(*words), chunk_delay_s=0.15)
    failing = Reply(500, {"error": {"message": "the model is overloaded", "type": "server_error"}})
    with LLMServer(slow, fallback=failing) as llm:
        clients = _clients(
            tmp_path, chat_provider="openai", chat_base_url=llm.url, chat_model="scripted", chat_max_retries=0
        )
        seed_docs(clients.context(), tmp_path / "docs")
        with api_server(clients) as base:
            tab = Page(browser, base, "model")
            page, expect = tab.page, sync_api.expect
            expect(page.locator("#kb-picker input:checked")).to_have_count(1)
            page.fill("#question", "When do cold starts happen?")
            page.press("#question", "Enter")
            turn = page.locator(".turn").first
            # Token by token: part of the answer is on the page while the model is still writing.
            expect(turn.locator(".answer")).to_contain_text("word3")
            assert turn.get_attribute("data-state") == "streaming"
            tab.shot("streaming")
            page.click("#stop")
            expect(turn).to_have_attribute("data-state", "stopped")
            expect(page.locator("#status")).to_contain_text("Stopped")
            assert llm.hung_up.wait(timeout=WAIT_MS / 1000), "the model's stream was not closed"
            assert "word59" not in (turn.locator(".answer").text_content() or "")
            tab.shot("stopped")

            page.click("#new-chat")
            turn = _ask(page, "What does provisioned concurrency do?")
            expect(turn).to_have_attribute("data-state", "error")
            expect(turn.locator(".error")).to_contain_text("The answer failed")
            expect(turn.locator(".error")).to_contain_text("500")
            tab.shot("model-failed")
            tab.close()


def test_a_failing_server_is_said_not_left_blank(browser: Any, tmp_path: Path) -> None:
    clients = _clients(tmp_path)
    seed_docs(clients.context(), tmp_path / "docs")
    with api_server(clients) as base:
        tab = Page(browser, base, "server")
        page, expect = tab.page, sync_api.expect
        expect(page.locator("#kb-picker input:checked")).to_have_count(1)

        # A 500 on the answer's route (what a crashed handler or a proxy in front sends): its message is shown.
        internal = {"error": "internal_error", "message": "POST /v1/knowledge-chat: internal error; see the server log"}
        page.route("**/v1/knowledge-chat/**", lambda route: route.fulfill(status=500, json=internal))
        turn = _ask(page, "When do cold starts happen?")
        expect(turn).to_have_attribute("data-state", "error")
        expect(turn.locator(".error")).to_contain_text("The server failed (500)")
        expect(turn.locator(".error")).to_contain_text("see the server log")
        tab.shot("500")
        page.unroute("**/v1/knowledge-chat/**")

        # The server gone: the page says it cannot reach it.
        page.click("#new-chat")
    turn = _ask(page, "When do cold starts happen?")
    expect(turn).to_have_attribute("data-state", "error")
    expect(turn.locator(".error")).to_contain_text("Cannot reach the server")
    tab.shot("gone")
    tab.close()


def test_answers_stream_from_the_chat_url_when_the_api_buffers(browser: Any, tmp_path: Path) -> None:
    """As on AWS: the page comes from the API (which buffers there), its answers from the streaming chat function's
    app on another origin (RAGSTEP_CONSOLE_CHAT_URL), whose Function URL answers CORS as the template configures it."""
    from starlette.middleware.cors import CORSMiddleware

    from ragstep.entry.http.chat_app import create_chat_app

    chat_clients = _clients(tmp_path, auth="required")
    seed_docs(chat_clients.context(), tmp_path / "docs")
    key = create_key(chat_clients.keys, "default", ["search", "chat"]).secret

    def function_url(clients: Clients) -> Any:  # the Cors of ChatStreamFunction's FunctionUrlConfig
        app = create_chat_app(clients)
        return CORSMiddleware(
            app, allow_origins=["*"], allow_methods=["POST"], allow_headers=["authorization", "content-type"]
        )

    with api_server(chat_clients, function_url) as chat_base:
        clients = _clients(tmp_path, auth="required", console_chat_url=f"{chat_base}/")
        with api_server(clients) as base:
            tab = Page(browser, base, "chat-url")
            page, expect = tab.page, sync_api.expect
            answered_from: list[str] = []
            page.on("request", lambda r: "/v1/knowledge-chat/" in r.url and answered_from.append(r.url))
            expect(page.locator("#dlg-key")).to_be_visible()
            page.fill("#key-input", key)
            page.press("#key-input", "Enter")
            turn = _ask(page, "When do cold starts happen?")
            expect(turn).to_have_attribute("data-state", "done")
            expect(turn.locator(".answer")).to_contain_text("Cold starts happen")
            expect(turn.locator(".sources li").first).to_contain_text("lambda.md")
            assert answered_from and all(url.startswith(chat_base + "/") for url in answered_from), answered_from
            tab.shot("answered")
            assert not [e for e in tab.errors if "401" not in e], tab.errors
            tab.close()
