"""The chat half of the contract: conversation turns (the chat issue adds its messages and answers here)."""

from __future__ import annotations

import uuid

from pydantic import Field

from ragstep.models.base import _Model
from ragstep.models.search import SearchResult


class Turn(_Model):
    """One question/answer exchange of a chat session, with the references the answer used."""

    session_id: str
    turn_id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    created_at: float
    query: str
    answer: str = ""
    references: list[SearchResult] = Field(default_factory=list)
