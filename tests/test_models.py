"""The state contract: every model round-trips through JSON, and requests are validated with clear messages."""

from __future__ import annotations

import json
import re

import pytest
from pydantic import BaseModel, ValidationError

from ragstep import models
from ragstep.models import (
    MAX_QUERY_CHARS,
    SCHEMA_VERSION,
    ChatRequest,
    Chunk,
    ChunkType,
    ErrorInfo,
    ImageInfo,
    Knowledge,
    KnowledgeBase,
    MatchType,
    PipelineState,
    RetrievalOverrides,
    RetrievalSettings,
    SearchRequest,
    SearchResult,
    SessionSummary,
    StreamEvent,
    TraceEvent,
    Turn,
)
from ragstep.models.catalog import IngestionJob


def full_result(i: int = 0) -> SearchResult:
    return SearchResult(
        id=f"c{i}",
        content="内容 content",
        knowledge_id="k",
        knowledge_base_id="kb",
        knowledge_title="Title",
        knowledge_filename="doc.md",
        chunk_index=i,
        start_at=10,
        end_at=20,
        score=0.5,
        match_type=MatchType.HYBRID,
        chunk_type=ChunkType.TABLE_SUMMARY,
        tag_id="t",
        sub_chunk_ids=["a", "b"],
        metadata={"nested": {"x": [1, 2.5, None]}},
        image_info=[ImageInfo(url="https://x/y.png", caption="c", ocr_text="o")],
    )


def full_state() -> PipelineState:
    req = SearchRequest(
        query="什么是 RRF?",
        session_id="s",
        knowledge_base_ids=["kb"],
        knowledge_ids=["k"],
        tag_ids=["t"],
        overrides=RetrievalOverrides(embedding_top_k=5, fusion="minmax"),
    )
    return PipelineState(
        request=req,
        retrieval=req.overrides.apply(RetrievalSettings()),
        rewritten_query="RRF 是什么",
        query_embeddings={"openai:m": [0.1, -0.2]},
        search_results=[full_result(0)],
        rerank_results=[full_result(1)],
        merge_results=[full_result(2)],
        final_results=[full_result(3)],
        trace=[TraceEvent(stage="chunk_search", action="degrade", duration_ms=1.5, counts={"n": 1}, reason="r")],
        offloaded={},
        error=ErrorInfo(stage="x", error="invalid_input", message="m"),
    )


ROUND_TRIP = [
    full_result(),
    full_state(),
    Chunk(
        id="c",
        knowledge_id="k",
        knowledge_base_id="kb",
        content="x",
        chunk_type=ChunkType.FAQ,
        index_text="q",
        embed_text="e",
        parent_id="p",
        metadata={"a": 1},
    ),
    Turn(session_id="s", created_at=1.5, query="q", answer="a", references=[full_result()]),
    KnowledgeBase(id="i", name="n", type="faq", embedding_model="openai:m", created_at=2.0),
    Knowledge(id="k", knowledge_base_id="kb", title="t", content_hash="h", status="completed", chunk_count=3),
    RetrievalOverrides(rrf_k=10),
    # Built on first use (a search never uses them): the same values and JSON as before.
    ChatRequest(query="q", session_id="s", overrides=RetrievalOverrides(rrf_k=3), chat={"max_rounds": 2}),
    SessionSummary(session_id="s", turns=2, first_query="q", created_at=1.0, updated_at=2.5),
    IngestionJob(id="j", knowledge_base_id="kb", knowledge_id="k", filename="a.md", blob_key="sources/x", size=3),
    StreamEvent(event="delta", data={"text": "内容"}),
    ErrorInfo(stage="chunk_search", error="invalid_input", message="m"),
]


@pytest.mark.parametrize("model", ROUND_TRIP, ids=lambda m: type(m).__name__)
def test_every_model_round_trips_through_json(model: BaseModel) -> None:
    text = model.model_dump_json()
    again = type(model).model_validate_json(text)
    assert again == model
    # and through a plain dict, as Step Functions hands it to the next Lambda
    assert type(model).model_validate(json.loads(text)) == model


def test_state_is_versioned() -> None:
    data = full_state().model_dump(mode="json")
    assert data["schema_version"] == SCHEMA_VERSION
    data["schema_version"] = "999"
    with pytest.raises(ValidationError, match="schema_version"):
        PipelineState.model_validate(data)


def test_match_and_chunk_type_names_are_the_contract() -> None:
    assert {m.value for m in MatchType} == {
        "vector",
        "keyword",
        "hybrid",
        "history",
        "parent",
        "nearby",
        "graph",
        "web",
        "data_analysis",
        "faq",
    }
    assert {c.value for c in ChunkType} == {
        "text",
        "faq",
        "table_summary",
        "table_column",
        "image_caption",
        "image_ocr",
        "summary",
        "web_search",
        "abstract",
        "overview",
    }


def test_defaults_are_weknoras() -> None:
    s = RetrievalSettings()
    assert (s.embedding_top_k, s.vector_threshold, s.keyword_threshold) == (30, 0.2, 0.3)
    assert (s.rerank_top_k, s.rerank_threshold, s.rrf_k) == (10, 0.3, 60)
    assert (s.rrf_vector_weight, s.rrf_keyword_weight) == (0.7, 0.3)


def test_the_model_free_reranker_defaults_to_ragflows_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    from ragstep.settings import MODEL_FREE_RERANK_THRESHOLD, Settings

    monkeypatch.delenv("RAGSTEP_RERANK_THRESHOLD", raising=False)
    monkeypatch.delenv("RAGSTEP_RERANKER", raising=False)
    assert MODEL_FREE_RERANK_THRESHOLD == 0.2
    assert Settings().rerank_threshold == 0.2  # reranker "none": RAGFlow's scale and cut-off
    assert Settings().retrieval_defaults().rerank_threshold == 0.2
    assert Settings(reranker="http").rerank_threshold == 0.3  # a rerank model: WeKnora's
    assert Settings(reranker="bedrock").rerank_threshold == 0.3
    monkeypatch.setenv("RAGSTEP_RERANK_THRESHOLD", "0.3")
    assert Settings().rerank_threshold == 0.3, "a threshold the user sets is kept"


def test_overrides_apply_only_what_is_set() -> None:
    base = RetrievalSettings()
    eff = RetrievalOverrides(rerank_top_k=3, vector_threshold=0.0).apply(base)
    assert eff.rerank_top_k == 3 and eff.vector_threshold == 0.0
    assert eff.embedding_top_k == base.embedding_top_k
    assert RetrievalOverrides().apply(base) is base


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("rerank_top_k", 0, "greater than or equal to 1"),
        ("vector_threshold", 1.5, "less than or equal to 1"),
        ("fusion", "sum", "'adaptive', 'minmax', 'dbsf' or 'rrf'"),
        ("no_such_knob", 1, "Extra inputs are not permitted"),
    ],
)
def test_bad_overrides_are_rejected(field: str, value: object, needle: str) -> None:
    with pytest.raises(ValidationError, match=needle):
        SearchRequest(query="q", knowledge_base_ids=["kb"], overrides={field: value})


@pytest.mark.parametrize(
    ("query", "needle"),
    [
        ("", "query is empty"),
        ("   \n\t ", "query is empty"),
        ("x" * (MAX_QUERY_CHARS + 1), "limit is 4000"),
        ("bell\x07", "control character U+0007"),
        ("zero\u200bwidth", "control character U+200B"),
        ("caf\udcff", "not valid UTF-8"),
    ],
)
def test_bad_queries_say_what_to_fix(query: str, needle: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(needle)):
        SearchRequest(query=query, knowledge_base_ids=["kb"])


def test_query_is_stripped_and_multiline_is_fine() -> None:
    req = SearchRequest(query="  line one\nline two\t ", knowledge_base_ids=["kb"])
    assert req.query == "line one\nline two"
    assert len(SearchRequest(query="x" * MAX_QUERY_CHARS, knowledge_base_ids=["kb"]).query) == MAX_QUERY_CHARS


def test_a_request_needs_a_target() -> None:
    with pytest.raises(ValidationError, match="at least one knowledge base"):
        SearchRequest(query="q")
    assert SearchRequest(query="q", knowledge_ids=["k"]).scoped
    assert SearchRequest(query="q", knowledge_base_ids=["kb"], tag_ids=["t"]).scoped
    assert not SearchRequest(query="q", knowledge_base_ids=["kb"]).scoped


def test_search_query_prefers_the_rewrite() -> None:
    state = PipelineState(request=SearchRequest(query="orig", knowledge_base_ids=["kb"]))
    assert state.search_query == "orig"
    assert state.model_copy(update={"rewritten_query": "better"}).search_query == "better"


def test_models_module_exports_no_mutable_globals() -> None:
    # The contract is data only: constants, enums and classes.
    for name, value in vars(models).items():
        if not name.startswith("_"):
            assert not isinstance(value, (list, dict, set)), name


def test_no_model_list_field_has_the_builtin_list_as_its_factory() -> None:
    """Pydantic reads a default factory's signature when it builds a model; the builtin ``list``'s is parsed from
    text (~0.15 ms a field, ~10 ms for the first): the models use ``empty_list`` (BENCHMARKS.md, "ragstep search at
    100k")."""
    import importlib
    import pkgutil

    from ragstep.settings import Settings

    found = [Settings]
    for info in pkgutil.iter_modules(models.__path__):
        module = importlib.import_module(f"ragstep.models.{info.name}")
        found += [v for v in vars(module).values() if isinstance(v, type) and issubclass(v, BaseModel)]
    assert len(found) > 40
    builtin = [f"{m.__name__}.{n}" for m in found for n, f in m.model_fields.items() if f.default_factory is list]
    assert builtin == []


def test_the_search_models_hold_their_field_types_as_objects() -> None:
    """The modules of the models and settings a search builds are written without ``from __future__ import
    annotations``: pydantic compiles a field type given as text (~35 us a field, ~12 ms of a ``ragstep search``,
    issue #23) and reads one given as an object."""
    import importlib

    found = []
    for name in ("base", "catalog", "search", "chat", "state"):
        module = importlib.import_module(f"ragstep.models.{name}")
        found += [v for v in vars(module).values() if isinstance(v, type) and v.__module__ == module.__name__]
    from ragstep.settings import Settings

    found = [c for c in [*found, Settings] if issubclass(c, BaseModel)]
    assert len(found) > 20
    texts = [
        f"{c.__name__}.{n}" for c in found for n, t in vars(c).get("__annotations__", {}).items() if isinstance(t, str)
    ]
    assert texts == []


def test_a_search_state_builds_no_hierarchy_or_chat_state_model() -> None:
    """The state's viking and chat parts are built on first use (BuiltOnFirstUse): a fresh process that makes a
    search state leaves ChatState's parts unbuilt and ragstep.models.viking unimported, and builds none of the
    models that share a module with a search's but serve sessions, jobs or streams (issue #23). A viking part
    arriving imports the module then, and builds only what validates it."""
    code = (
        "import json, sys\n"
        "from pydantic import BaseModel\n"
        "from ragstep.models import PipelineState, SearchRequest\n"
        "from ragstep.models.chat import ChatSettings, ChatState, DocAggregate, HistoryRound, Reference, Usage\n"
        "from ragstep.models.chat import ChatRequest, SessionSummary, Turn\n"
        "from ragstep.models.catalog import IngestionJob, Knowledge\n"
        "from ragstep.models.base import ErrorInfo, StreamEvent\n"
        "from ragstep.app.search import SearchResponse\n"
        "state = PipelineState(request=SearchRequest(query='q', knowledge_base_ids=['kb']))\n"
        "state = state.model_copy(update={'final_results': []})\n"
        "loaded = 'ragstep.models.viking' in sys.modules\n"
        "models = [ChatSettings, ChatState, DocAggregate, HistoryRound, Reference, Usage, ChatRequest,\n"
        "          SessionSummary, Turn, IngestionJob, Knowledge, ErrorInfo, StreamEvent, SearchResponse]\n"
        "built = [c.__name__ for c in models if c.__pydantic_complete__]\n"
        "state = PipelineState.model_validate({**state.model_dump(), 'viking': {'query': {'query': 'x'}}})\n"
        "import ragstep.models.viking as viking\n"
        "models = [c for c in vars(viking).values() if isinstance(c, type) and issubclass(c, BaseModel)\n"
        "          and c.__module__ == viking.__name__]\n"
        "print(json.dumps({'loaded': loaded, 'built': built, 'part': type(state.viking).__name__,\n"
        "                  'viking_built': sorted(c.__name__ for c in models if c.__pydantic_complete__)}))\n"
    )
    assert _fresh(code) == {"loaded": False, "built": [], "part": "VikingPart", "viking_built": ["VikingPart"]}


def _fresh(code: str) -> object:
    """What ``code`` printed (JSON) in a fresh interpreter: what a module builds is process-wide."""
    import subprocess
    import sys
    from pathlib import Path

    shared = Path(__file__).resolve().parents[1] / "shared"
    run = subprocess.run(
        [sys.executable, "-c", code], env={"PYTHONPATH": str(shared)}, capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout)


def test_the_viking_part_is_described_as_its_model_before_any_value_arrived() -> None:
    """The state's JSON schema is the first use of the viking part in a fresh process: it imports the model and
    describes the field exactly as a field holding the model (``Annotated[VikingPart, BuiltOnFirstUse()]``) does."""
    code = (
        "import json\n"
        "from ragstep.models import PipelineState\n"
        "print(json.dumps({m: PipelineState.model_json_schema(mode=m) for m in ('validation', 'serialization')}))\n"
    )
    fresh = _fresh(code)
    from typing import Annotated

    from ragstep.models.base import BuiltOnFirstUse, _Model
    from ragstep.models.viking import VikingPart

    class Held(_Model):
        viking: Annotated[VikingPart, BuiltOnFirstUse()] | None = None

    for mode in ("validation", "serialization"):
        schema, held = PipelineState.model_json_schema(mode=mode), Held.model_json_schema(mode=mode)
        assert fresh[mode] == schema  # type: ignore[index]
        assert schema["properties"]["viking"] == held["properties"]["viking"]
        assert {k: v for k, v in schema["$defs"].items() if k in held["$defs"]} == held["$defs"]


def test_the_viking_part_validates_and_serialises_as_a_nested_model() -> None:
    base = PipelineState(request=SearchRequest(query="q", knowledge_base_ids=["kb"])).model_dump(mode="json")
    part = {"query": {"query": "x"}, "outcome": {"matches": [{"uri": "ragstep://a", "is_leaf": True, "score": 0.5}]}}
    state = PipelineState.model_validate_json(json.dumps({**base, "viking": part}))
    assert type(state.viking).__name__ == "VikingPart" and state.viking.outcome is not None
    assert state.model_dump(mode="json", exclude_defaults=True)["viking"] == part
    with pytest.raises(ValidationError) as err:
        PipelineState.model_validate({**base, "viking": {"query": {"query": "", "priority": 9}, "bogus": 1}})
    assert [(e["loc"], e["type"]) for e in err.value.errors()] == [
        (("viking", "query", "query"), "string_too_short"),
        (("viking", "query", "priority"), "less_than_equal"),
        (("viking", "bogus"), "extra_forbidden"),
    ]


def test_the_default_chat_part_is_what_chat_state_gives() -> None:
    """The state's default chat part is made without validation (``model_construct``, BuiltOnFirstUse): it must be
    exactly ``ChatState()``, fields set included; a validator acting on defaults would break this."""
    from ragstep.models import ChatSettings, ChatState, Usage

    made = PipelineState(request=SearchRequest(query="q", knowledge_base_ids=["kb"])).chat
    validated = ChatState()
    assert made == validated and made.model_dump() == validated.model_dump()
    assert made.model_fields_set == validated.model_fields_set == set()
    assert made.settings.model_fields_set == made.usage.model_fields_set == set()
    assert made.settings == ChatSettings() and made.usage == Usage()
