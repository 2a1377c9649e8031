"""Process-wide configuration from ``RAGSTEP_*`` environment variables.

The retrieval knobs are flat (``RAGSTEP_EMBEDDING_TOP_K=20``) and are the defaults that each request may override
(see :class:`ragstep.models.RetrievalOverrides`). Everything else picks adapters and their connection details.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from .models import RetrievalSettings


class Settings(RetrievalSettings, BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RAGSTEP_", extra="ignore", env_ignore_empty=True)

    # Where the embedded backends keep their files.
    data_dir: Path = Path(".ragstep")

    # Adapters. "local" are the embedded defaults; the AWS adapters are chosen on Lambda by the template.
    index_backend: Literal["local", "opensearch"] = "local"
    history_backend: Literal["sqlite", "dynamodb"] = "sqlite"
    blob_backend: Literal["local", "s3"] = "local"
    catalog_backend: Literal["sqlite", "dynamodb"] = "sqlite"

    # Embedding provider for new knowledge bases: none | openai | bedrock (| precomputed, for benchmarks).
    embedder: str = "none"
    embedding_model: str = ""
    embedding_base_url: str = "https://api.openai.com/v1"
    embedding_api_key: SecretStr | None = None
    embedding_dimensions: int | None = None
    embedding_batch_size: Annotated[int, Field(ge=1, le=2048)] = 64
    provider_timeout_s: Annotated[float, Field(gt=0, le=600)] = 30.0
    provider_max_retries: Annotated[int, Field(ge=0, le=10)] = 4
    aws_region: str | None = None

    # Ingestion: files above this size are refused (per file, with a clear error; the batch goes on).
    max_file_bytes: Annotated[int, Field(ge=1)] = 50 * 1024 * 1024

    # Transport limit of the state between stages (Step Functions allows 256 KiB per payload).
    state_limit_bytes: Annotated[int, Field(ge=4096)] = 256 * 1024

    def retrieval_defaults(self) -> RetrievalSettings:
        return RetrievalSettings.model_validate(self.model_dump(include=set(RetrievalSettings.model_fields)))
