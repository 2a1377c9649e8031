"""What every part of the contract shares: the strict base model, identifier and query checks, the trace."""

# Annotations are evaluated as the classes are defined (no ``from __future__ import annotations``): pydantic then
# reads each field's type as an object instead of compiling it from its text, which was half of the time a
# ``ragstep search`` spent collecting model fields (issue #23). Quote only what is not defined yet (a method's own
# class, names imported for type checking).

import functools
import importlib
import re
import unicodedata
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import core_schema

if TYPE_CHECKING:
    from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler, ValidationInfo
    from pydantic.json_schema import JsonSchemaValue
    from pydantic_core import CoreSchema

#: The version of PipelineState's schema (tests/test_state_schema.py keeps it honest): "2" added the profile, the
#: latency budget, the answer's finish reason and notes; "3" made a result list None until its stage runs, and sends
#: the state in its compact wire form (ragstep.models.wire). States of the previous versions are still read.
SCHEMA_VERSION: Literal["3"] = "3"
MAX_QUERY_CHARS = 4000
#: The tenant of a single-user install and of every request that names none.
DEFAULT_TENANT = "default"
_TENANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")


def empty_list() -> list[Any]:
    """The factory of the models' list fields (``Field(default_factory=empty_list)``), instead of the builtin ``list``.

    Pydantic reads a default factory's signature when it builds a model, and the builtin's signature is parsed from
    its text form, at a cost per field plus a tokenizer loaded once to parse it. A search process builds dozens of
    such fields before its first result; a Python function's signature costs almost nothing.
    """
    return []


class _Model(BaseModel):
    # Unknown keys are an error: a typo in a request must not silently fall back to a default.
    model_config = ConfigDict(extra="forbid", validate_assignment=False)


class _DeferredModel(_Model):
    # Built on first use, not when its module loads: for the models a search process loads but never uses (each
    # costs its build): those of parts of the state most pipelines leave empty (with BuiltOnFirstUse on the state's
    # field), and the sessions', jobs' and stream's models that share a module with what a search uses.
    model_config = ConfigDict(defer_build=True)


class BuiltOnFirstUse:
    """Field marker, ``Annotated[SomeModel, BuiltOnFirstUse()]``: the field is validated by ``SomeModel``'s own
    validator, built the first time a value arrives, instead of by a copy of its schema built into the holder's.

    Same values, same errors (at the same locations), same JSON: the value is an instance of the model, and it is
    serialised as one (the holder's JSON schema inlines the model's instead of referring to it). For a
    :class:`_DeferredModel` held by a part of the state most pipelines leave empty or at its defaults: the viking and
    chat parts (issue #23: a ``ragstep search`` built hierarchy and chat models it never used).

    ``BuiltOnFirstUse("package.module", "Model")`` on ``Annotated[Any, ...]`` names the model instead of holding it:
    its module is imported when a value first arrives or a JSON schema is asked for, not when the holder's is (the
    state's viking part: importing ``ragstep.models.viking`` cost a search its field collection for nothing).
    """

    def __init__(self, module: str | None = None, name: str | None = None) -> None:
        self.module, self.name = module, name
        self.model: type[BaseModel] | None = None

    def held(self) -> type[BaseModel] | None:
        """The model of the field: imported now if named; None for a held one before its holder was built."""
        if self.model is None and self.module is not None:
            self.model = getattr(importlib.import_module(self.module), self.name or "")
        return self.model

    def __get_pydantic_core_schema__(self, source: type[BaseModel], handler: "GetCoreSchemaHandler") -> "CoreSchema":
        held = source if self.module is None else None  # a named model is looked up at the first value
        if held is not None:
            self.model = held

        def validate(value: Any, info: "ValidationInfo") -> BaseModel:
            return (held or self._named()).model_validate(value, context=info.context)

        return core_schema.with_info_plain_validator_function(validate)

    def _named(self) -> type[BaseModel]:
        model = self.held()
        assert model is not None  # a marker without a name has its model from the holder's schema, built first
        return model

    def __get_pydantic_json_schema__(self, schema: "CoreSchema", handler: "GetJsonSchemaHandler") -> "JsonSchemaValue":
        return handler(self._named().__pydantic_core_schema__)


def check_query(text: str) -> str:
    """Validate a user query; returns it stripped. Raises ``ValueError`` with a message that says what to fix."""
    if not isinstance(text, str):
        raise ValueError("query must be a string")
    if any(0xD800 <= ord(ch) <= 0xDFFF for ch in text):
        raise ValueError("query is not valid UTF-8; re-encode it as UTF-8")
    stripped = text.strip()
    if not stripped:
        raise ValueError("query is empty; pass the question to search for")
    if len(stripped) > MAX_QUERY_CHARS:
        raise ValueError(f"query has {len(stripped)} characters; the limit is {MAX_QUERY_CHARS}")
    for ch in stripped:
        # Tabs and newlines are ordinary in pasted questions; other control characters are not text.
        if ch not in "\t\n\r" and unicodedata.category(ch) in ("Cc", "Cf") and ch not in "\u200d\u200c":
            raise ValueError(f"query contains the control character U+{ord(ch):04X}; remove it")
    return stripped


#: The DOM's event handler attributes (onerror=, onload=, onmouseover= ...), by name: any word starting with "on"
#: before an "=" also refused "what does one = two mean" and "WHERE one=1".
_HANDLERS = (
    "abort|animation[a-z]*|auxclick|before[a-z]*|begin|blur|cancel|canplay[a-z]*|change|click|close|context[a-z]*|"
    "copy|cuechange|cut|dblclick|drag[a-z]*|drop|durationchange|emptied|end|ended|error|focus[a-z]*|formdata|"
    "fullscreen[a-z]*|hashchange|input|invalid|key[a-z]+|load[a-z]*|message[a-z]*|mouse[a-z]+|offline|online|"
    "page[a-z]+|paste|pause|play[a-z]*|pointer[a-z]+|popstate|progress|ratechange|repeat|reset|resize|scroll[a-z]*|"
    "search|seek[a-z]+|select[a-z]*|show|slotchange|stalled|storage|submit|suspend|timeupdate|toggle|touch[a-z]+|"
    "transition[a-z]+|unload|volumechange|waiting|webkit[a-z]+|wheel"
)


@functools.cache
def _markup() -> re.Pattern[str]:
    # Compiled on first use: a process that never checks a question never needs it.
    return re.compile(
        r"<\s*(?:script|iframe|object|embed|svg|img|link|meta|style)\b|javascript\s*:|vbscript\s*:"
        rf"|\bon(?:{_HANDLERS})\s*=",
        re.IGNORECASE,
    )


def check_markup(text: str) -> str:
    """Refuse a question holding markup that turns a rendered page into script (``<script>``, ``javascript:``,
    ``onerror=``): refused rather than escaped, on every route that takes a question (search, find, chat), so that
    no stored history, usage record or recorded request holds it and a route does not accept what another refuses.
    Raises ``ValueError`` saying what to fix; returns ``text``."""
    if _markup().search(text):
        raise ValueError("query contains HTML or script markup (e.g. <script>, javascript:, onerror=); remove it")
    return text


def check_identifier(value: str) -> str:
    """Ids and names travel to SQLite, DynamoDB and OpenSearch: they must be non-empty, printable UTF-8."""
    if not value or not value.strip():
        raise ValueError("ids must not be empty")
    if len(value) > 256:
        raise ValueError(f"id {value[:32]!r}... is longer than 256 characters")
    if any(0xD800 <= ord(ch) <= 0xDFFF for ch in value):
        raise ValueError(f"id {value!r} is not valid UTF-8; re-encode it as UTF-8")
    if any(unicodedata.category(ch) == "Cc" for ch in value):
        raise ValueError(f"id {value!r} contains a control character; remove it")
    return value


TraceAction = Literal["run", "skip", "degrade", "fallback", "expand", "error", "offload"]


class TraceEvent(_Model):
    """One line of the pipeline log (WeKnora's pipelineInfo): what a stage did and why."""

    stage: str
    action: TraceAction = "run"
    duration_ms: float = 0.0
    counts: dict[str, int] = Field(default_factory=dict)
    reason: str | None = None
    detail: dict[str, Any] = Field(default_factory=dict)


class ErrorInfo(_DeferredModel):
    stage: str
    error: str
    message: str


def check_tenant(value: str) -> str:
    """Tenant ids name folders, key prefixes and filters: 1-64 ASCII letters, digits, '-' or '_'."""
    if not isinstance(value, str) or not _TENANT.match(value):
        raise ValueError(
            f"tenant id {value!r} must be 1-64 ASCII letters, digits, '-' or '_', starting with a letter or digit"
        )
    return value


class StreamEvent(_DeferredModel):
    """One event of a streaming stage, as SSE sends it: ``event: <event>`` and ``data: <data as JSON>``."""

    event: str
    data: dict[str, Any] = Field(default_factory=dict)
