"""A knowledge base of a few documents ingested through the CLI as a user would, and a conversation over it: the
follow-up tests ask through the chat use case the CLI and the API share."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from ragstep.app.chat import chat_response, run_chat
from ragstep.context import Clients, Context
from ragstep.entry.cli.main import main
from ragstep.models import ChatRequest
from ragstep.settings import Settings


def ingested(root: Path, documents: Mapping[str, str]) -> Iterator[Context]:
    """A context over knowledge base "docs" holding ``documents`` (file name -> text), ingested with the default
    settings (no ``RAGSTEP_`` variable of the environment applies)."""
    docs = root / "docs"
    docs.mkdir()
    for name, text in documents.items():
        (docs / name).write_text(text, encoding="utf-8")
    with pytest.MonkeyPatch.context() as mp:
        for key in [k for k in os.environ if k.startswith("RAGSTEP_")]:
            mp.delenv(key)
        data = str(root / "data")
        assert main(["--data-dir", data, "kb", "create", "docs"]) == 0
        assert main(["--data-dir", data, "ingest", str(docs), "--kb", "docs"]) == 0
        yield Clients(Settings(data_dir=Path(data))).context()


def conversation(ctx: Context, *questions: str) -> dict[str, Any]:
    """The last answer of a session that asked ``questions`` in turn (the CLI's and the API's use case)."""
    session = None
    for question in questions:
        state = run_chat(ChatRequest(query=question, knowledge_base_ids=["docs"], session_id=session), ctx)
        session = state.request.session_id
    return chat_response(state)
