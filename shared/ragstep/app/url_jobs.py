"""Web pages ingested on AWS: each page one execution of the ingest state machine, which fetches it.

On Lambda the HTTP route cannot fetch and ingest before answering (API Gateway gives it 29 s, and a frozen
execution environment keeps no background worker), so ``POST /v1/knowledge-bases/{kb}/urls`` asks the ingest state
machine instead (``RAGSTEP_INGEST_STATE_MACHINE_ARN``):

1. :func:`queue_url_ingestion` (the API): a sitemap -- a URL whose path ends in ``.xml`` -- is read at once and
   stands for its pages (``max_pages`` in all); for every page a ``queued`` ingestion job is recorded and an
   execution started with ``{"ragstep_url": {...}}`` as its input (:data:`URL_REQUEST`). The route answers with the
   jobs (``GET /v1/ingestion-jobs/{id}`` follows each).
2. :func:`state_from_url_request` (the first stage, ``ingest_parse``): the page is fetched under the same rules as
   everywhere (public addresses only, robots.txt, size caps, pictures inlined), stored as the document's original,
   and becomes the ingest state. The execution takes the queued job first, as an upload's does
   (:func:`ragstep.app.s3_jobs.start_for_execution`), so a page that cannot be fetched fails the job with the reason.

The knowledge id comes from the knowledge base and the URL, as on a laptop, so asking again replaces the page, and a
page whose bytes did not change ends ``unchanged`` by its content hash. (The ETag / Last-Modified shortcut of the
local path is not used: the bytes are fetched again.)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ragstep.adapters.web.pages import sitemap_urls
from ragstep.app.ingest import knowledge_id_for, new_ingest_state
from ragstep.app.s3_jobs import fail_job, queue_upload, stage_error_line, start_for_execution
from ragstep.app.urls import fetcher_for, page_filename, store_page
from ragstep.context import Clients, Context
from ragstep.errors import InputError, RagstepError
from ragstep.models import IngestState, KnowledgeBase
from ragstep.models.catalog import IngestionJob

if TYPE_CHECKING:
    from ragstep.adapters.web.pages import PageFetcher

#: The key of an ingest execution's input that asks for a web page.
URL_REQUEST = "ragstep_url"
#: Starts one execution: ``(input, name)`` -> its ARN.
Starter = Callable[[dict[str, Any], str], str]


def is_url_request(event: Any) -> bool:
    return isinstance(event, dict) and set(event) == {URL_REQUEST} and isinstance(event[URL_REQUEST], dict)


def queue_url_ingestion(
    ctx: Context,
    kb: KnowledgeBase,
    urls: list[str],
    *,
    max_pages: int,
    tag_id: str = "",
    start: Starter | None = None,
    fetcher: PageFetcher | None = None,
) -> list[IngestionJob]:
    """One queued job and one started execution per page (sitemaps read here); see the module docstring."""
    start = start or execution_starter(ctx.settings.ingest_state_machine_arn)
    pages: list[str] = []
    for url in urls:
        if urlsplit(url).path.lower().endswith(".xml"):
            sitemap = (fetcher or fetcher_for(ctx)).fetch(url)  # a refusal is the request's 4xx
            pages += sitemap_urls(sitemap.body, max_pages)
        else:
            pages.append(url)
    jobs = []
    for url in list(dict.fromkeys(pages))[:max_pages]:
        kid = knowledge_id_for(kb, url)
        job = queue_upload(ctx, kb, filename=page_filename(url, ".html"), blob_key=url, knowledge_id=kid, size=0)
        request = {"url": url, "knowledge_base_id": kb.id, "tenant_id": ctx.tenant_id, "tag_id": tag_id}
        start({URL_REQUEST: request}, job.id)
        jobs.append(job)
    return jobs


def state_from_url_request(event: dict[str, Any], clients: Clients, execution_arn: str = "") -> IngestState:
    """The ingest state of the page an execution was asked to fetch, with the job it takes (see the module
    docstring); a page that cannot be fetched fails the job with the reason, then raises it."""
    request = event[URL_REQUEST]
    url, tenant = str(request.get("url") or ""), str(request.get("tenant_id") or "")
    ctx = clients.context(tenant) if tenant else clients.context()
    kb = ctx.require_kb(str(request.get("knowledge_base_id") or ""))
    kid = knowledge_id_for(kb, url)
    tag_id = str(request.get("tag_id") or "")
    asked = new_ingest_state(
        kb, knowledge_id=kid, blob_key=url, filename=page_filename(url, ".html"), uri=url, tenant_id=ctx.tenant_id
    )
    job_id = start_for_execution(ctx, asked, execution_arn).job_id
    try:
        fetcher = fetcher_for(ctx)
        page = fetcher.fetch(url)
        if page.extension == ".xml":
            raise InputError(f"{url}: a sitemap; give it with a path ending in .xml, so each of its pages is ingested")
        if not page.body.strip():
            raise InputError(f"{url}: the page is empty")
        stored = store_page(page, kb, kid, ctx, fetcher)
    except RagstepError as exc:
        fail_job(ctx, job_id, stage_error_line("ingest_parse", exc))
        raise
    state = new_ingest_state(
        kb,
        knowledge_id=kid,
        blob_key=stored.key,
        filename=stored.filename,
        uri=url,
        content_hash=stored.digest,
        size=stored.size,
        tag_id=tag_id,
        tenant_id=ctx.tenant_id,
        request_id=asked.request_id,
    )
    return state.model_copy(update={"job_id": job_id})


def execution_starter(state_machine_arn: str) -> Starter:
    """``StartExecution`` on the ingest state machine (named by the job id: a retried start cannot run it twice)."""
    if not state_machine_arn:
        raise InputError(
            "ingesting web pages here needs the ingest state machine: set RAGSTEP_INGEST_STATE_MACHINE_ARN "
            "(template.yaml sets it for the API function)"
        )
    from ragstep.adapters._aws import aws_client

    region = state_machine_arn.split(":")[3] if state_machine_arn.count(":") > 3 else None
    client = aws_client("stepfunctions", region=region or None)

    def start(payload: dict[str, Any], name: str) -> str:
        response = client.start_execution(stateMachineArn=state_machine_arn, name=name, input=json.dumps(payload))
        return str(response["executionArn"])

    return start
