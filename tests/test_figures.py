"""Pictures inside documents: extracted from PDF, DOCX and HTML, stored (served over HTTP), OCR'd, and captioned by a
vision model on a real HTTP server on 127.0.0.1 that checks the picture is in the request. Fixtures are made here:
text rendered to pictures with Pillow and the system's fonts, placed in documents by reportlab and python-docx."""

from __future__ import annotations

import base64
import hashlib
import io
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from ragstep.adapters.web.pages import FetchRefused, PageFetcher
from ragstep.app.chat import run_chat
from ragstep.app.ingest import ingest_file
from ragstep.app.search import knowledge_search
from ragstep.app.urls import ingest_urls
from ragstep.context import Clients, Context
from ragstep.models import ChatRequest, ChunkType, KnowledgeBase, SearchRequest
from ragstep.parsers import parse
from ragstep.parsers.figures import big_enough, sniff
from ragstep.settings import Settings
from support.api_server import api_server
from support.scripted_http import RecordedRequest, ScriptedHTTPServer, ScriptedResponse

pytest.importorskip("PIL", reason="Pillow (dev extra) renders the fixtures")
from PIL import Image, ImageDraw, ImageFont

LATIN_FONT = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
FIGURE_TEXT = "Lighthouse visits peaked in August"
CAPTION = "A bar chart with one bar for every month of the year."


def picture(text: str = FIGURE_TEXT, size: tuple[int, int] = (900, 110), kind: str = "PNG") -> bytes:
    image = Image.new("RGB", size, "white")
    if text:
        ImageDraw.Draw(image).text((30, 30), text, font=ImageFont.truetype(str(LATIN_FONT), 40), fill="black")
    out = io.BytesIO()
    image.save(out, kind)
    return out.getvalue()


def pdf_with_figure(figure: bytes, icon: bytes) -> bytes:
    from reportlab.lib.utils import ImageReader
    from reportlab.pdfgen import canvas

    out = io.BytesIO()
    pdf = canvas.Canvas(out)
    pdf.drawString(72, 760, "The harbour report has a text layer on its first page.")
    pdf.showPage()
    pdf.drawString(72, 760, "Figure 1 shows the visits of the season.")
    pdf.drawImage(ImageReader(io.BytesIO(figure)), 72, 500, width=450, height=55)
    pdf.drawImage(ImageReader(io.BytesIO(icon)), 72, 400, width=12, height=12)
    pdf.showPage()
    pdf.save()
    return out.getvalue()


def docx_with_figure(figure: bytes, icon: bytes) -> bytes:
    docx = pytest.importorskip("docx")
    document = docx.Document()
    document.add_paragraph("The keeper's notes come with a chart.")
    document.add_picture(io.BytesIO(figure))
    document.add_picture(io.BytesIO(icon))
    document.add_paragraph("The chart ends the notes.")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def html_with_figure(figure: bytes, icon: bytes) -> bytes:
    uri = base64.b64encode(figure).decode()
    small = base64.b64encode(icon).decode()
    return (
        "<html><body><h1>Keeper's page</h1><p>Before the chart.</p>"
        f'<p><img alt="visits chart" src="data:image/png;base64,{uri}"></p>'
        f'<p><img src="data:image/png;base64,{small}"> After the chart.</p></body></html>'
    ).encode()


def test_picture_headers_give_kind_and_size_and_tiny_ones_are_decorative() -> None:
    for kind, media_type in (
        ("PNG", "image/png"),
        ("JPEG", "image/jpeg"),
        ("WEBP", "image/webp"),
        ("GIF", "image/gif"),
    ):
        assert sniff(picture("", (321, 47), kind)) == (media_type, 321, 47), kind
    assert sniff(b"<svg xmlns='http://www.w3.org/2000/svg'/>") is None
    assert not big_enough(32, 32) and not big_enough(600, 8) and big_enough(300, 40)


@pytest.mark.parametrize("kind", ["pdf", "docx", "html"])
def test_each_document_format_hands_over_its_pictures_but_not_its_icons(kind: str) -> None:
    figure, icon = picture(), picture("", (24, 24))
    made = {"pdf": pdf_with_figure, "docx": docx_with_figure, "html": html_with_figure}[kind](figure, icon)
    doc = parse(made, f"report.{kind}")
    assert len(doc.figures) == 1, doc.figures
    found = doc.figures[0]
    assert f"]({found.ref})" in doc.text  # its placeholder is where the picture is
    assert found.media_type == "image/png" and (found.width, found.height) == (900, 110)
    if kind == "pdf":
        assert found.page == 2 and found.ref.startswith("pdf://page/2/")
    elif kind == "docx":
        assert found.data == figure and found.ref.startswith("docx://word/media/")
    else:
        assert found.data == figure and found.alt == "visits chart"


def vision(seen: list[RecordedRequest], status: int = 200) -> Any:
    def answer(request: RecordedRequest) -> ScriptedResponse:
        seen.append(request)
        if status != 200:
            return ScriptedResponse(status, {"error": {"message": "the vision model is down"}})
        return ScriptedResponse(200, {"choices": [{"message": {"role": "assistant", "content": CAPTION}}]})

    return answer


def make_kb(ctx: Context) -> KnowledgeBase:
    kb = KnowledgeBase(id=uuid.uuid4().hex, name="keeper", embedding_model="none", created_at=time.time())
    return ctx.catalog.create_kb(kb)


@pytest.mark.skipif(shutil.which("tesseract") is None or not LATIN_FONT.is_file(), reason="needs tesseract + fonts")
def test_a_figure_is_stored_ocrd_captioned_searchable_cited_and_served(tmp_path: Path) -> None:
    figure = picture()
    seen: list[RecordedRequest] = []
    with ScriptedHTTPServer(fallback=vision(seen)) as server:
        url = server.url + "/v1"
        # English only: loading the Chinese model too would double the OCR time of this one picture.
        settings = Settings(
            data_dir=tmp_path / "data", vision_model="gpt-4o-mini", vision_base_url=url, ocr_languages="eng"
        )
        clients = Clients(settings)
        ctx = clients.context()
        kb = make_kb(ctx)
        path = tmp_path / "report.pdf"
        path.write_bytes(pdf_with_figure(figure, picture("", (24, 24))))
        assert ingest_file(path, kb, ctx).status == "indexed"

    # The vision model got the picture itself, as an OpenAI image_url content part.
    assert len(seen) == 1 and seen[0].path == "/v1/chat/completions"
    parts = seen[0].json["messages"][0]["content"]
    image = next(p for p in parts if p["type"] == "image_url")["image_url"]["url"]
    assert image.startswith("data:image/png;base64,")
    stored = base64.b64decode(image.split(",", 1)[1])
    assert sniff(stored) == ("image/png", 900, 110)
    name = hashlib.sha256(stored).hexdigest() + ".png"

    # The OCR'd text of the figure is found, in a passage that points at the stored picture.
    found = knowledge_search(SearchRequest(query="when did lighthouse visits peak", knowledge_base_ids=[kb.id]), ctx)
    ocr = next(r for r in found.final_results if r.chunk_type != ChunkType.IMAGE_CAPTION)
    assert "<!-- ocr page 2 image " + name in ocr.content and "August" in ocr.content
    url = ocr.image_info[0].url
    assert f"![image]({url})" in ocr.content  # the placeholder links the stored picture
    assert url == f"/v1/knowledge-bases/{kb.id}/images/{ocr.knowledge_id}/{name}"
    assert ocr.image_info[0].caption == CAPTION and "August" in ocr.image_info[0].ocr_text

    # The caption is a chunk of its own, and an answer cites it.
    found = knowledge_search(
        SearchRequest(query="bar chart with a bar for every month", knowledge_base_ids=[kb.id]), ctx
    )
    caption = next(r for r in found.final_results if r.chunk_type == ChunkType.IMAGE_CAPTION)
    assert caption.content == CAPTION and caption.metadata["page"] == 2 and caption.image_info[0].url == url
    state = run_chat(ChatRequest(query="Which chart has a bar for every month?", knowledge_base_ids=[kb.id]), ctx)
    cited = [r for r in state.chat.references if r.cited]
    assert any(r.chunk_type == ChunkType.IMAGE_CAPTION for r in cited), state.chat.references

    # A client fetches the picture at its URL; anything else under the route is a 404.
    with api_server(clients) as base:
        response = httpx.get(base + url)
        assert response.status_code == 200 and response.content == stored
        assert response.headers["content-type"] == "image/png"
        other = f"/v1/knowledge-bases/{kb.id}/images/{ocr.knowledge_id}/"
        for wrong in ("0" * 64 + ".png", "..%2Fsources.png", name.replace(".png", ".txt")):
            assert httpx.get(base + other + wrong).status_code == 404, wrong
        assert httpx.get(base + f"/v1/knowledge-bases/nope/images/{ocr.knowledge_id}/{name}").status_code == 404


def test_without_a_working_vision_model_pictures_are_kept_without_captions(tmp_path: Path) -> None:
    seen: list[RecordedRequest] = []
    with ScriptedHTTPServer(fallback=vision(seen, status=500)) as server:
        settings = Settings(
            data_dir=tmp_path / "data",
            ocr_engine="none",  # pictures stored and captioned only: this test is about the caption failing
            vision_model="gpt-4o-mini",
            vision_base_url=server.url + "/v1",
        )
        ctx = Clients(settings).context()
        kb = make_kb(ctx)
        path = tmp_path / "page.html"
        more = b"".join(b'<p><img src="data:image/png;base64,' + base64.b64encode(picture(t)) + b'"></p>' for t in "AB")
        page = html_with_figure(picture(), picture("", (24, 24)))
        path.write_bytes(page.replace(b"</body>", more + b"</body>"))
        result = ingest_file(path, kb, ctx)
    assert result.status == "indexed" and result.error in (None, "")
    # Two pictures' captions tried (one retry each), then the third is not sent: the model is down.
    assert len(seen) == 4
    found = knowledge_search(SearchRequest(query="before the chart", knowledge_base_ids=[kb.id]), ctx)
    hit = found.final_results[0]
    assert all(r.chunk_type != ChunkType.IMAGE_CAPTION for r in found.final_results)
    assert hit.image_info and hit.image_info[0].caption == "" and "/images/" in hit.image_info[0].url
    assert f"({hit.image_info[0].url})" in hit.content  # the placeholder now links the stored picture


def test_a_fetch_connects_to_the_address_it_checked_with_the_original_host() -> None:
    asked: list[str] = []

    def resolver(host: str, port: int) -> list[str]:
        asked.append(host)  # a second lookup (by httpx) would be a chance to answer differently
        return ["127.0.0.1"] if host == "pages.test" else ["93.184.216.34", "10.0.0.5"]

    page = ScriptedResponse(200, "<html><p>Pinned.</p></html>", headers={"Content-Type": "text/html"})
    with ScriptedHTTPServer(fallback=page) as server:
        port = server.url.rsplit(":", 1)[1]
        fetcher = PageFetcher(timeout_s=10, allowed_hosts=frozenset({"pages.test"}), resolver=resolver)
        # pages.test is in no DNS: the page only arrives if the request went to the address the resolver gave.
        assert fetcher.fetch(f"http://pages.test:{port}/a.html", robots=False).body == b"<html><p>Pinned.</p></html>"
        assert asked == ["pages.test"]
        assert server.requests[0].headers["host"] == f"pages.test:{port}" and server.requests[0].path == "/a.html"
        # Every address of a name is checked, not only the one connected to.
        with pytest.raises(FetchRefused, match=r"a private address \(10\.0\.0\.5\)"):
            fetcher.fetch(f"http://mixed.test:{port}/a.html", robots=False)
        assert len(server.requests) == 1


def test_a_web_page_takes_its_same_site_pictures_along(tmp_path: Path) -> None:
    chart = picture()
    pages = {
        "/page.html": ScriptedResponse(
            200,
            '<html><body><h1>Visits</h1><p>The season in one chart.</p><img src="/img/chart.png" alt="chart">'
            '<img src="http://elsewhere.invalid/ad.png"></body></html>',
            headers={"Content-Type": "text/html; charset=utf-8"},
        ),
        "/img/chart.png": ScriptedResponse(200, chart, headers={"Content-Type": "image/png"}),
    }
    missing = ScriptedResponse(404, "missing", headers={"Content-Type": "text/plain"})
    with ScriptedHTTPServer(fallback=lambda r: pages.get(r.path, missing)) as server:
        settings = Settings(data_dir=tmp_path / "data", url_allowed_hosts=["127.0.0.1"], ocr_engine="none")
        ctx = Clients(settings).context()
        kb = make_kb(ctx)
        [result] = list(ingest_urls([server.url + "/page.html"], kb, ctx))
        assert result.status == "indexed", result.error
        assert [r.path for r in server.requests if r.path.startswith("/img")] == ["/img/chart.png"]
    found = knowledge_search(SearchRequest(query="the season in one chart", knowledge_base_ids=[kb.id]), ctx)
    [info] = found.final_results[0].image_info
    name = hashlib.sha256(chart).hexdigest() + ".png"
    assert info.url.endswith(f"/images/{result.knowledge_id}/{name}")
    assert "http://elsewhere.invalid/ad.png" in found.final_results[0].content  # another site's stays a link


@pytest.mark.skipif(shutil.which("tesseract") is None or not LATIN_FONT.is_file(), reason="needs tesseract + fonts")
def test_the_ingest_progress_hears_each_scanned_page(tmp_path: Path) -> None:
    from ragstep.ingest_notes import listening

    heard: list[tuple[int, int]] = []

    class Listener:
        def chunking(self, done: int, total: int) -> None:
            pass

        def chunked(self, count: int) -> None:
            heard.append((-1, count))

        def embedded(self, count: int) -> None:
            pass

        def indexing(self, done: int, total: int) -> None:
            pass

        def ocr_page(self, done: int, total: int) -> None:
            heard.append((done, total))

    pages = [Image.open(io.BytesIO(picture(f"Scanned page number {n}", (700, 90)))).convert("RGB") for n in (1, 2)]
    out = io.BytesIO()
    pages[0].save(out, "PDF", save_all=True, append_images=pages[1:])
    (tmp_path / "scan.pdf").write_bytes(out.getvalue())
    ctx = Clients(Settings(data_dir=tmp_path / "data", ocr_languages="eng")).context()
    with listening(Listener()):
        assert ingest_file(tmp_path / "scan.pdf", make_kb(ctx), ctx).status == "indexed"
    assert heard[:2] == [(1, 2), (2, 2)] and heard[2][0] == -1  # pages while parsing, then the chunks


def test_the_progress_line_shows_the_scanned_pages_until_the_chunks_come() -> None:
    from ragstep.entry.cli.ingest import Progress

    progress = Progress([1000], embeds=False, stream=io.StringIO())
    progress.start("scan.pdf")
    progress.ocr_page(3, 20)
    assert progress.line().endswith("OCR page 3/20")
    progress.chunked(12)
    assert "OCR page" not in progress.line()


def test_the_bedrock_vision_model_sends_the_picture_as_a_converse_image_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ragstep.adapters.vision.bedrock import BedrockVisionModel
    from ragstep.errors import ProviderError

    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_BEARER_TOKEN_BEDROCK", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    answer = {"output": {"message": {"role": "assistant", "content": [{"text": f" {CAPTION} "}]}}}
    figure = picture("", (120, 80))
    with ScriptedHTTPServer(ScriptedResponse(200, answer)) as server:
        model = BedrockVisionModel("amazon.nova-lite-v1:0", region="us-east-1", endpoint_url=server.url, timeout_s=5)
        assert model.describe(figure, "image/png", "caption it", max_tokens=50) == CAPTION
        with pytest.raises(ProviderError, match="does not read image/tiff"):
            model.describe(figure, "image/tiff", "caption it", max_tokens=50)
    request = server.requests[0]
    assert request.path == "/model/amazon.nova-lite-v1:0/converse"
    image, text = request.json["messages"][0]["content"]
    assert image["image"]["format"] == "png" and base64.b64decode(image["image"]["source"]["bytes"]) == figure
    assert text == {"text": "caption it"} and request.json["inferenceConfig"]["maxTokens"] == 50


def test_a_chunk_made_of_a_picture_s_text_is_image_ocr_with_its_page_and_picture() -> None:
    from ragstep.models import Knowledge
    from ragstep.parsers.ocr import wrap
    from ragstep.retrieval.chunking import ChunkerConfig
    from ragstep.stages.ingest.chunkers import mark_ocr, text_chunks
    from ragstep.stages.ingest.figures import StoredFigure, attach_figures, caption_chunks

    name = "a" * 64 + ".png"
    url = f"/v1/knowledge-bases/kb1/images/doc1/{name}"
    read = "\n".join(f"Row {n}: the tide table for day {n} gives high water at {n % 12 + 1}." for n in range(12))
    text = f"Intro paragraph.\n\n![chart]({url})\n\n{wrap(read, 4, name)}\n\nClosing paragraph."
    kb = KnowledgeBase(id="kb1", name="k", embedding_model="none", created_at=0.0)
    knowledge = Knowledge(id="doc1", knowledge_base_id="kb1", filename="tides.pdf")
    figure = StoredFigure(name, url, 4, "chart", ocr_text=read, caption="A table of tides.", model="openai:m")
    chunks = attach_figures(mark_ocr(text_chunks(kb, knowledge, text, ChunkerConfig(300, 0)), text), [figure])
    ocr = [c for c in chunks if c.chunk_type == ChunkType.IMAGE_OCR]
    assert ocr and all(c.metadata["page"] == 4 and c.metadata["image"] == url for c in ocr)
    assert all(c.image_info[0].url == url and c.image_info[0].caption == "A table of tides." for c in ocr)
    assert all(text[c.start_at : c.end_at] == c.content for c in chunks)  # offsets point into the stored text
    [caption] = caption_chunks(kb, knowledge, text, chunks, [figure])
    assert caption.chunk_type == ChunkType.IMAGE_CAPTION and caption.content == "A table of tides."
    assert text[caption.start_at : caption.end_at] == f"![chart]({url})"
    assert caption.parent_id == next(c.id for c in chunks if url in c.content)
    assert caption.chunk_index == chunks[-1].chunk_index + 2
