"""Settings of newer concerns, kept beside :mod:`ragstep.settings` (whose :class:`~ragstep.settings.Settings`
inherits them, so they are read from ``RAGSTEP_*`` like every other): where documents come from besides files (web
pages, OCR), what a request may cost and how it is kept (profiles, records, prices), and how ``ragstep ingest``
shows its progress."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, SecretStr

from ragstep.models.base import empty_list


class DocumentSourceSettings(BaseModel):
    # Web pages ingested by URL (ragstep.adapters.web.pages): connect/read timeout (the whole page gets twice it), the
    # largest page read, and hosts allowed although they resolve to a loopback/private/link-local address (JSON list).
    url_timeout_s: Annotated[float, Field(gt=0, le=300)] = 15.0
    url_max_bytes: Annotated[int, Field(ge=1024)] = 10 * 1024 * 1024
    url_allowed_hosts: list[str] = Field(default_factory=empty_list)
    # On AWS: the ingest state machine POST /v1/knowledge-bases/{kb}/urls starts, one execution per page, which fetches
    # it (ragstep.app.url_jobs); template.yaml sets it for the API function. Empty: pages are fetched in-process.
    ingest_state_machine_arn: str = ""
    # OCR of images and scanned PDF pages (ragstep.parsers.ocr): the engine (tesseract, or none to refuse such
    # files), Tesseract's languages, the time one image may take, and the most pages of one file OCR may read.
    ocr_engine: Literal["tesseract", "none"] = "tesseract"
    ocr_languages: Annotated[str, Field(pattern=r"^[a-z_]+(\+[a-z_]+)*$")] = "eng+chi_sim"
    ocr_timeout_s: Annotated[float, Field(gt=0, le=600)] = 60.0
    ocr_max_pages: Annotated[int, Field(ge=1, le=2000)] = 50
    # Pictures inside documents (ragstep.parsers.figures): the most of one file stored, OCR'd and captioned (0: none;
    # icons and rules do not count).
    image_max_per_file: Annotated[int, Field(ge=0, le=1000)] = 50
    # The largest same-site picture a page fetched by URL takes along (inlined; all of them within url_max_bytes).
    image_max_bytes: Annotated[int, Field(ge=1024)] = 5 * 1024 * 1024
    # Captions of pictures (IMAGE_CAPTION chunks): the provider of the vision-capable chat model (openai: an
    # OpenAI-compatible /chat/completions with image_url parts; bedrock: Converse with image blocks).
    vision_provider: Literal["openai", "bedrock"] = "openai"
    # The vision model; empty (the default): no captions.
    vision_model: str = ""
    # Its base URL and API key (openai); empty: the chat model's (chat_base_url, chat_api_key).
    vision_base_url: str = ""
    vision_api_key: SecretStr | None = None
    # The most pictures of one file captioned.
    vision_max_images: Annotated[int, Field(ge=0, le=1000)] = 20
    # The time one caption may take, and all of one file's captions: one that fails or runs out of time is left out
    # with a warning in the ingest trace, never an error.
    vision_timeout_s: Annotated[float, Field(gt=0, le=600)] = 30.0
    vision_max_s: Annotated[float, Field(gt=0, le=3600)] = 120.0


class IngestProgressSettings(BaseModel):
    # `ragstep ingest`'s progress on a stderr that is not a terminal (a log, CI): a plain line at most every this
    # many seconds, none for a shorter run; 0: a line for every note the stages send (many: one per chunk cut).
    ingest_progress_every_s: Annotated[float, Field(ge=0, le=3600)] = 10.0


class RequestControlSettings(BaseModel):
    # Profiles a request may name besides quick, standard and deep (ragstep.models.profiles), JSON
    # {name: {description, retrieval: {...}, chat: {...}, skip: [stages]}}.
    profiles: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # Requests recorded for `ragstep replay` (ragstep.pipeline.recording): 0 none, 1 all, in between a sample by
    # request id; and how long a record is kept (seconds; the passages of deleted documents leave with it).
    record_rate: Annotated[float, Field(ge=0, le=1)] = 0.0
    record_retention_s: Annotated[float, Field(gt=0)] = 7 * 24 * 3600.0
    # A price table for cost receipts (ragstep.app.cost), a JSON file shaped as ragstep/data/prices/aws-us-east-1.json;
    # empty: the shipped us-east-1 table.
    price_table: str = ""
