"""Web pages as documents: fetch a URL (or a sitemap's pages) and ingest it with the URL as its source.

A page's knowledge id comes from its knowledge base and its URL, so ingesting the URL again replaces the page
(searches see the old version until the new one is indexed, as for files). Whether it changed is asked of the server
first (the ETag and Last-Modified of the previous fetch, kept in the blob store under ``urls/<kb id>/<knowledge
id>.json``): a 304 is ``unchanged`` without a download; a page that answers 200 with the same bytes is ``unchanged``
by its content hash, as a file is.

A page's same-site pictures (``<img src>`` on the page's scheme, host and port) are fetched with it, under the same
rules (robots.txt, the address checks, ``RAGSTEP_IMAGE_MAX_BYTES`` each, at most ``RAGSTEP_IMAGE_MAX_PER_FILE``), and
inlined as ``data:`` URIs, as a browser's "save as one file" does: the stored page is self-contained, so parsing it
(on AWS, in a function without a route to the site) needs no network, and its pictures are stored, OCR'd and
captioned like a document's (:mod:`ragstep.stages.ingest.figures`). Pictures on other sites are left as links.
"""

from __future__ import annotations

import base64
import codecs
import hashlib
import html
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import unquote, urljoin, urlsplit

from ragstep.adapters.web.pages import IMAGE_TYPES, FetchRefused, Page, PageFetcher, sitemap_urls
from ragstep.app.ingest import IngestResult, ingest_blob, knowledge_id_for
from ragstep.context import Context
from ragstep.models import IngestOptions, KnowledgeBase
from ragstep.stages.ingest.products import source_blob_key

#: Pages one sitemap may add unless the caller says otherwise (``--max-pages``).
DEFAULT_MAX_PAGES = 50
_UNSAFE = re.compile(r"[^\w.\-]+")
_IMG_SRC = re.compile(rb"""(<img\b[^>]*?\bsrc\s*=\s*)(["'])([^"'<>]*)\2""", re.IGNORECASE)


def is_url(text: str) -> bool:
    return text.startswith(("http://", "https://"))


def fetcher_for(ctx: Context) -> PageFetcher:
    settings = ctx.settings
    return PageFetcher(
        timeout_s=settings.url_timeout_s,
        max_bytes=settings.url_max_bytes,
        allowed_hosts=frozenset(settings.url_allowed_hosts),
    )


def page_filename(url: str, extension: str) -> str:
    """A file name for the page (its parser is chosen by the extension): the path's last segment, or the host."""
    parts = urlsplit(url)
    last = unquote(parts.path.rstrip("/").rsplit("/", 1)[-1])
    stem = last.rsplit(".", 1)[0] if "." in last else last
    stem = _UNSAFE.sub("-", stem or parts.hostname or "page").strip("-.") or "page"
    return stem[:80] + extension


def inline_pictures(page: Page, fetcher: PageFetcher, limit: int, max_bytes: int, total_bytes: int) -> bytes:
    """The HTML ``page`` with its same-site pictures as ``data:`` URIs (at most ``limit`` fetched, each at most
    ``max_bytes``, all together at most ``total_bytes``); a picture that cannot be fetched keeps its link."""
    if limit <= 0 or page.body.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return page.body
    origin = urlsplit(page.final_url)[:2]
    inlined: dict[str, bytes | None] = {}
    left = [total_bytes]

    def replace(match: re.Match[bytes]) -> bytes:
        src = html.unescape(match.group(3).decode("utf-8", "replace")).strip()
        url = urljoin(page.final_url, src) if src and not src.startswith("data:") else ""
        if not url or urlsplit(url)[:2] != origin:
            return match.group(0)
        if url not in inlined:
            cap = min(max_bytes, left[0] * 3 // 4)  # base64 takes 4 bytes for 3
            if len(inlined) >= limit or cap <= 0:
                return match.group(0)
            try:
                picture = fetcher.fetch(url, accepted=IMAGE_TYPES, max_bytes=cap)
                encoded = base64.b64encode(picture.body)
                inlined[url] = f"data:{picture.content_type};base64,".encode() + encoded
                left[0] -= len(encoded)
            except FetchRefused:
                inlined[url] = None
        data = inlined[url]
        return match.group(0) if data is None else match.group(1) + match.group(2) + data + match.group(2)

    return _IMG_SRC.sub(replace, page.body)


@dataclass(frozen=True, slots=True)
class StoredPage:
    """A fetched page kept as its document's original (``sources/...``), pictures inlined."""

    key: str
    filename: str
    digest: str
    size: int


def store_page(page: Page, kb: KnowledgeBase, knowledge_id: str, ctx: Context, fetcher: PageFetcher) -> StoredPage:
    """Keep ``page`` (its same-site pictures inlined when it is HTML) where its document's original goes."""
    body = page.body
    if page.extension == ".html":
        settings = ctx.settings
        # All pictures together stay within the page's own cap, and the page within the file size limit.
        room = min(settings.url_max_bytes, settings.max_file_bytes - len(body))
        body = inline_pictures(page, fetcher, settings.image_max_per_file, settings.image_max_bytes, room)
    digest = hashlib.sha256(body).hexdigest()
    name = page_filename(page.final_url, page.extension)
    key = source_blob_key(kb.id, knowledge_id, digest, name)
    if not ctx.blobs.exists(key):
        ctx.blobs.put(key, body, page.content_type or "text/html")
    return StoredPage(key, name, digest, len(body))


def _validators_key(kb: KnowledgeBase, knowledge_id: str) -> str:
    return f"urls/{kb.id}/{knowledge_id}.json"


def _fetch(fetcher: PageFetcher, url: str, ctx: Context, kb: KnowledgeBase, knowledge_id: str) -> Page:
    """``url``, asked with the previous fetch's validators while its page is still indexed."""
    key = _validators_key(kb, knowledge_id)
    data: dict[str, str] = {}
    if ctx.blobs.exists(key) and ctx.catalog.get_knowledge(knowledge_id) is not None:
        try:
            data = json.loads(ctx.blobs.get(key))
        except (ValueError, OSError):
            data = {}
    return fetcher.fetch(url, etag=str(data.get("etag", "")), last_modified=str(data.get("last_modified", "")))


def ingest_url(
    url: str,
    kb: KnowledgeBase,
    ctx: Context,
    fetcher: PageFetcher,
    *,
    tag_id: str = "",
    options: IngestOptions | None = None,
    page: Page | None = None,
) -> IngestResult:
    """Fetch ``url`` (unless ``page`` is it already) and ingest it; a refusal or failure is the result's error."""
    kid = knowledge_id_for(kb, url)
    try:
        if page is None:
            page = _fetch(fetcher, url, ctx, kb, kid)
    except FetchRefused as exc:
        return IngestResult(url, kid, "failed", error=str(exc))
    if page.not_modified:
        return IngestResult(url, kid, "unchanged")
    if not page.body.strip():
        return IngestResult(url, kid, "failed", error=f"{url}: the page is empty")
    stored = store_page(page, kb, kid, ctx, fetcher)
    result = ingest_blob(
        kb,
        ctx,
        knowledge_id=kid,
        blob_key=stored.key,
        filename=stored.filename,
        content_hash=stored.digest,
        size=stored.size,
        tag_id=tag_id,
        options=options,
        uri=url,
    )
    result = IngestResult(url, result.knowledge_id, result.status, result.chunks, result.error, result.note)
    if result.status in ("indexed", "updated", "unchanged") and (page.etag or page.last_modified):
        validators = {"etag": page.etag, "last_modified": page.last_modified}
        ctx.blobs.put(_validators_key(kb, kid), json.dumps(validators).encode(), "application/json")
    return result


def ingest_urls(
    urls: list[str],
    kb: KnowledgeBase,
    ctx: Context,
    *,
    max_pages: int = DEFAULT_MAX_PAGES,
    tag_id: str = "",
    options: IngestOptions | None = None,
    fetcher: PageFetcher | None = None,
) -> Iterator[IngestResult]:
    """Each URL ingested in turn; a sitemap (an XML page of ``<urlset>``) ingests its pages instead, at most
    ``max_pages`` of them in all."""
    fetcher = fetcher or fetcher_for(ctx)
    budget = max_pages
    for url in urls:
        kid = knowledge_id_for(kb, url)
        try:
            page = _fetch(fetcher, url, ctx, kb, kid)
        except FetchRefused as exc:
            yield IngestResult(url, kid, "failed", error=str(exc))
            continue
        if page.extension == ".xml":
            try:
                pages = sitemap_urls(page.body, budget)
            except FetchRefused as exc:
                yield IngestResult(url, kid, "failed", error=f"{url}: {exc}")
                continue
            for child in pages:
                budget -= 1
                yield ingest_url(child, kb, ctx, fetcher, tag_id=tag_id, options=options)
            continue
        if budget <= 0:
            yield IngestResult(url, kid, "failed", error=f"{url}: over the limit of {max_pages} pages (--max-pages)")
            continue
        budget -= 1
        yield ingest_url(url, kb, ctx, fetcher, tag_id=tag_id, options=options, page=page)
