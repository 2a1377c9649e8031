"""The chat half of the contract: conversation turns, the effective chat settings and the chat part of the state."""

# No ``from __future__ import annotations``: see ragstep.models.base (pydantic reads the fields' types as objects).

import json
import uuid
from typing import Annotated, Any, ClassVar, Literal

from pydantic import ConfigDict, Field

from ragstep.models.base import _DeferredModel, empty_list
from ragstep.models.search import RetrievalOverrides, SearchResult

FallbackStrategy = Literal["fixed", "model"]
Language = Literal["zh", "en"]


class Usage(_DeferredModel):
    """Token counts the model reported (zeros when it reported none); ``estimated`` when ragstep's token estimator
    counted them instead (the extractive answerer, which has no tokenizer)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    estimated: bool = False


class Turn(_DeferredModel):
    """One question/answer exchange of a chat session, with the references the answer used.

    The user message and the answer are one record, written once when the answer is final (or cut short), so a
    session never holds a question without its answer or half of a turn.
    """

    session_id: str
    turn_id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    created_at: float
    query: str
    answer: str = ""
    references: list[SearchResult] = Field(default_factory=empty_list)
    # The request that produced the turn (WeKnora groups a round's messages by it).
    request_id: str | None = None
    rewritten_query: str | None = None
    model: str = ""
    usage: Usage = Field(default_factory=Usage)
    # The reader went away mid-answer: ``answer`` is what had been streamed by then.
    interrupted: bool = False
    # The knowledge bases (ids) the turn's question searched: with the references' own, what a knowledge-base-limited
    # API key must be allowed before it may read the session (ragstep.app.session_access).
    knowledge_bases: list[str] = Field(default_factory=empty_list)

    #: The fields history stores keep as one JSON document beside the columns every store has had from the start
    #: (so adding one needs no schema change).
    META_FIELDS: ClassVar[frozenset[str]] = frozenset(
        {"request_id", "rewritten_query", "model", "usage", "interrupted", "knowledge_bases"}
    )

    def meta_json(self) -> str:
        return self.model_dump_json(include=set(self.META_FIELDS))

    @staticmethod
    def meta_from_json(text: str | None) -> dict[str, Any]:
        """The stored meta document as constructor arguments (``{}`` for turns stored before it existed)."""
        data = json.loads(text) if text else {}
        return {k: v for k, v in data.items() if k in Turn.META_FIELDS} if isinstance(data, dict) else {}


class ChatSettings(_DeferredModel):
    """Every chat knob, with WeKnora's defaults; configured by ``RAGSTEP_CHAT_*`` and overridable per request.

    Prompt fields left None use the shipped prompt in the question's language (:mod:`ragstep.stages.chat.prompts`).
    """

    # History rounds (question + answer) the model sees, the newest kept (WeKnora: 5).
    max_rounds: Annotated[int, Field(ge=0, le=50)] = 5
    # Messages read from the history store before grouping into rounds (WeKnora: 20).
    history_messages: Annotated[int, Field(ge=0, le=200)] = 20
    # Rewrite a follow-up into a standalone question with the model before searching (needs a generative model).
    enable_rewrite: bool = True
    # The model's sampling temperature.
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] = 0.3
    # The answer's length cap in tokens (max_tokens / max_completion_tokens of an OpenAI request).
    max_tokens: Annotated[int, Field(ge=1, le=200_000)] = 2048
    # Nucleus sampling; None: the provider's default.
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    # Sequences that end the answer.
    stop: list[str] = Field(default_factory=empty_list)
    # None: "model", except with a model that cannot generate freely (extractive), which gets "fixed".
    fallback_strategy: FallbackStrategy | None = None
    # The fixed fallback answer ("fixed"), and the prompt of the model's own fallback ("model"); None: shipped text.
    fallback_response: str | None = None
    fallback_prompt: str | None = None
    # An answer starting with this means "the context does not answer" (WeKnora's no_match_prefix, after </think>).
    no_match_prefix: str = "NO_MATCH"
    # The answer's system prompt and the template the passages are laid into; None: the shipped ones.
    system_prompt: str | None = None
    context_template: str | None = None
    # The query rewrite's prompts; None: the shipped ones.
    rewrite_system_prompt: str | None = None
    rewrite_user_prompt: str | None = None
    # The extractive answerer's length cap, in characters.
    extractive_max_chars: Annotated[int, Field(ge=50, le=20_000)] = 600
    # Ask the model to cite the passages with [n] markers (and insert citations when it wrote none).
    citations: bool = True
    # The chat model's context window in tokens: prompt and answer together (max_tokens is the answer's share).
    context_window: Annotated[int, Field(ge=256, le=2_000_000)] = 8192
    # Answered at once, without the model, when retrieval found nothing (RAGFlow's empty_response); None: the
    # fallback strategy answers.
    empty_response: str | None = None
    # Serve a repeated question with the same messages and settings from the response cache.
    cache_answers: bool = False
    # The assistant's name in the shipped system prompts ({{assistant_name}}; a configured prompt may use it too).
    assistant_name: Annotated[str, Field(min_length=1, max_length=64)] = "ragstep"

    def with_max_tokens(self, max_tokens: int) -> "ChatSettings":
        """These settings with the answer's share lowered to what the token budget leaves (validated: >= 1)."""
        return ChatSettings.model_validate({**self.model_dump(), "max_tokens": max_tokens})


class Reference(SearchResult):
    """A passage the answer was given (``[n]`` = the n-th reference), whether the answer cites it, and where: the
    character offsets of the markers that cite it in the final answer."""

    model_config = ConfigDict(defer_build=True)  # a part of ChatState (see _DeferredModel)

    cited: bool = False
    positions: list[int] = Field(default_factory=empty_list)

    def cited_at(self, positions: list[int]) -> "Reference":
        """This reference cited at these answer offsets (none: not cited)."""
        return self.model_copy(update={"cited": bool(positions), "positions": list(positions)})


class DocAggregate(_DeferredModel):
    """One document of an answer's references (RAGFlow's ``doc_aggs``): how many of its passages were given and
    how many of those the answer cites."""

    knowledge_id: str
    knowledge_base_id: str = ""
    name: str = ""
    count: int = 0
    cited: int = 0


CitationMode = Literal["model", "inserted", "extractive", "none"]


class HistoryRound(_DeferredModel):
    """One earlier question and its answer (``<think>`` removed), as the model sees it."""

    query: str
    answer: str
    request_id: str | None = None


class ChatState(_DeferredModel):
    """The chat part of the pipeline state: what each chat stage leaves for the next."""

    # Its default (every search state's) is made by ``model_construct``, its parts' defaults too: the same values as
    # ``ChatState()`` (no validator of these models acts on a default), without building the models' validators, so
    # a search process builds none of them (BuiltOnFirstUse on the state's field).
    settings: ChatSettings = Field(default_factory=ChatSettings.model_construct)
    language: Language = "en"
    history: list[HistoryRound] = Field(default_factory=empty_list)
    # The user message into_chat_message built (query + context); empty = the plain query.
    user_content: str = ""
    # The numbered passages of user_content, in order: what the extractive answerer quotes and [n] refers to.
    passages: list[str] = Field(default_factory=empty_list)
    answer: str = ""
    reasoning: str = ""
    model: str = ""
    usage: Usage = Field(default_factory=Usage.model_construct)
    # Why the model stopped, as it said it ("stop", "length" when cut at max_tokens, Bedrock's "max_tokens" ...);
    # None when no model wrote the answer (a fixed response) or it did not say.
    finish_reason: str | None = None
    # "fixed" / "model" when the answer is the fallback; None for a grounded answer.
    fallback: FallbackStrategy | None = None
    interrupted: bool = False
    # The passages given to the model, with their citations (into_chat_message lists them, the completion marks
    # what the answer cites); empty for the plain chat pipelines.
    references: list[Reference] = Field(default_factory=empty_list)
    doc_aggs: list[DocAggregate] = Field(default_factory=empty_list)
    # The FAQ-first layout's labels ("FAQ-1", "DOC-2") -> reference number, for the markers a model writes with them.
    labels: dict[str, int] = Field(default_factory=dict)
    # Where the answer's markers came from: the model (repaired), insert_citations, the extractive quotes, or none.
    citation_mode: CitationMode = "none"


def language_of(text: str) -> Language:
    """ "zh" when Han characters make up at least a fifth of the letters of ``text``, else "en": picks the prompts'
    language (a Chinese question with an English product name is still Chinese)."""
    han = sum(1 for ch in text if "\u3400" <= ch <= "\u9fff" or "\uf900" <= ch <= "\ufaff")
    letters = sum(1 for ch in text if ch.isalpha())
    return "zh" if letters and han * 5 >= letters else "en"


class ChatRequest(_DeferredModel):
    """A question for a chat pipeline: what to search, which session it continues, and per-request overrides."""

    query: str
    knowledge_base_ids: list[str] = Field(default_factory=empty_list)
    knowledge_ids: list[str] = Field(default_factory=empty_list)
    # None starts a new session; an id must name an existing session of the caller's tenant.
    session_id: str | None = None
    pipeline: str = "rag_stream"
    #: viking_stream: whose memories memory queries search and the turn's memories go to ("default" when not given).
    user: str | None = None
    overrides: RetrievalOverrides = Field(default_factory=RetrievalOverrides)
    # ChatSettings fields to override for this request (unknown names are refused).
    chat: dict[str, Any] = Field(default_factory=dict)
    # A profile (quick, standard, deep, or one of RAGSTEP_PROFILES), a latency budget and a cost budget in USD
    # (ragstep.models.profiles).
    profile: str | None = None
    budget_ms: Annotated[int, Field(ge=10, le=600_000)] | None = None
    cost_budget_usd: Annotated[float, Field(gt=0, le=1000)] | None = None


class SessionSummary(_DeferredModel):
    """One chat session as ``ragstep sessions list`` shows it."""

    session_id: str
    turns: int
    first_query: str
    created_at: float
    updated_at: float
