"""Cost receipts: what one request cost, estimated from what it actually used and a versioned price table.

What is priced, and from what:

* **Compute**: each stage's measured duration (the trace's ``run`` rows) as Lambda GB-seconds at the function's
  memory, billed per millisecond. With ``RAGSTEP_EXECUTOR=inprocess`` every stage runs inside the API function (one
  invocation, :data:`API_MEMORY_MB`); with ``stepfunctions`` each stage is an invocation of its own function
  (:data:`STAGE_MEMORY_MB`, the template's sizes) inside one Express execution (a request, and the execution's
  duration at 64 MB in 100 ms steps). A stage that ran in parallel with another is still priced for its own time:
  on Lambda both were billed.
* **Requests**: the HTTP API request, and the store requests a query makes on the deployed stack (DynamoDB: the key
  and the knowledge bases read, the usage record written; S3: one conditional GET of the index snapshot with the
  default S3-snapshot index), as README "Cost per 1,000 queries" counts them.
* **Models**: the tokens the chat model reported (or ragstep estimated, marked), and the query's embedding tokens
  (estimated at 4 characters a token), times the model's price; a model the table does not list is priced at 0 with
  a note saying so.

Locally the same request is priced as the AWS deployment would bill it (``assumes`` says which): the point of a
receipt is what the request would cost in production. Logs and X-Ray are left out (they depend on log level and
sampling). The table ships in the package (``ragstep/data/prices/aws-us-east-1.json``: region, version, source);
``RAGSTEP_PRICE_TABLE`` names a JSON file of the same shape to use instead.
"""

from __future__ import annotations

import json
import math
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from ragstep.context import Context
from ragstep.models.cost import CostLine, CostReceipt
from ragstep.models.state import PipelineState

#: Memory of the API function (and the streaming chat function) and of each stage function, as template.yaml sets.
API_MEMORY_MB = 1024
STAGE_MEMORY_MB: dict[str, int] = {}
DEFAULT_STAGE_MEMORY_MB = 1024
#: DynamoDB requests of one API request on the deployed stack: the key, the knowledge bases; the usage record.
DYNAMODB_READS = 3
DYNAMODB_WRITES = 1
CHARS_PER_TOKEN = 4
REQUEST = "request"


@cache
def _shipped_table() -> dict[str, Any]:
    text = resources.files("ragstep").joinpath("data/prices/aws-us-east-1.json").read_text(encoding="utf-8")
    table: dict[str, Any] = json.loads(text)
    return table


def price_table(path: str | None = None) -> dict[str, Any]:
    """The shipped table, or the one at ``path`` (``RAGSTEP_PRICE_TABLE``)."""
    if not path:
        return _shipped_table()
    table: dict[str, Any] = json.loads(Path(path).read_text(encoding="utf-8"))
    return table


def _model_price(table: dict[str, Any], model: str) -> dict[str, float] | None:
    models: dict[str, dict[str, float]] = table.get("models", {})
    if model in models:
        return models[model]
    # The longest listed prefix: "bedrock:anthropic.claude-3-haiku" prices "...-20240307-v1:0".
    matches = [key for key in models if model.startswith(key)]
    return models[max(matches, key=len)] if matches else None


def _billed_gb_s(duration_ms: float, memory_mb: int, step_ms: int) -> float:
    billed_ms = max(step_ms, math.ceil(duration_ms / step_ms) * step_ms)
    return billed_ms / 1000.0 * memory_mb / 1024.0


class _Lines:
    def __init__(self) -> None:
        self.lines: list[CostLine] = []

    def add(self, item: str, quantity: float, unit: str, price: float, stage: str = REQUEST) -> None:
        self.lines.append(
            CostLine(item=item, stage=stage, quantity=round(quantity, 6), unit=unit, usd=round(quantity * price, 10))
        )


def receipt(
    state: PipelineState, *, executor: str, index_backend: str, table: dict[str, Any], embedding_model: str = ""
) -> CostReceipt:
    """The receipt of a finished request ``state``."""
    lines = _Lines()
    notes: list[str] = []
    lam, sfn = table["lambda"], table["stepfunctions"]
    runs = [t for t in state.trace if t.action == "run" and t.duration_ms > 0]
    lines.add("http_api_request", 1, "requests", table["http_api"]["request"])
    lines.add("lambda_request", 1, "requests", lam["request"])
    if executor == "stepfunctions":
        total_ms = sum(t.duration_ms for t in runs)
        lines.add("stepfunctions_express_request", 1, "executions", sfn["express_request"])
        gb_s = _billed_gb_s(total_ms, sfn["express_memory_mb"], sfn["express_billing_ms"])
        lines.add("stepfunctions_express_duration", gb_s, "GB-s", sfn["express_gb_second"])
        for run in runs:
            memory = STAGE_MEMORY_MB.get(run.stage, DEFAULT_STAGE_MEMORY_MB)
            lines.add("lambda_request", 1, "requests", lam["request"], run.stage)
            gb_s = _billed_gb_s(run.duration_ms, memory, lam["billing_ms"])
            lines.add("lambda_duration", gb_s, "GB-s", lam["gb_second"], run.stage)
    else:
        for run in runs:
            gb_s = run.duration_ms / 1000.0 * API_MEMORY_MB / 1024.0
            lines.add("lambda_duration", gb_s, "GB-s", lam["gb_second"], run.stage)
    lines.add("dynamodb_read", DYNAMODB_READS, "requests", table["dynamodb"]["read_request"])
    lines.add("dynamodb_write", DYNAMODB_WRITES, "requests", table["dynamodb"]["write_request"])
    if index_backend == "s3snapshot":
        lines.add("s3_get", 1, "requests", table["s3"]["get"])
    _model_lines(state, table, embedding_model, lines, notes)
    by_stage: dict[str, float] = {}
    for line in lines.lines:
        by_stage[line.stage] = round(by_stage.get(line.stage, 0.0) + line.usd, 10)
    total = round(sum(line.usd for line in lines.lines), 10)
    budget = state.cost_budget_usd
    return CostReceipt(
        price_table=f"{table.get('region', '?')} {table.get('version', '?')}",
        assumes=f"AWS, RAGSTEP_EXECUTOR={executor}, index {index_backend}",
        lines=lines.lines,
        by_stage=by_stage,
        total_usd=total,
        budget_usd=budget,
        over_budget=budget is not None and total > budget,
        notes=notes,
    )


def _model_lines(
    state: PipelineState, table: dict[str, Any], embedding_model: str, lines: _Lines, notes: list[str]
) -> None:
    model, usage = state.chat.model, state.chat.usage
    if model and (usage.prompt_tokens or usage.completion_tokens):
        price = _model_price(table, model)
        if price is None:
            notes.append(f"no price for chat model {model!r} in the price table: its tokens are priced at 0")
            price = {}
        stage = "chat_completion"
        estimated = " (estimated)" if usage.estimated else ""
        lines.add(
            f"chat_prompt_tokens{estimated}",
            usage.prompt_tokens,
            "tokens",
            price.get("prompt_per_million", 0) / 1e6,
            stage,
        )
        lines.add(
            f"chat_completion_tokens{estimated}",
            usage.completion_tokens,
            "tokens",
            price.get("completion_per_million", 0) / 1e6,
            stage,
        )
    if embedding_model and embedding_model != "none":
        price = _model_price(table, embedding_model)
        if price is None:
            notes.append(f"no price for embedding model {embedding_model!r} in the price table: priced at 0")
            price = {}
        tokens = max(1, math.ceil(len(state.request.query) / CHARS_PER_TOKEN))
        lines.add(
            "embedding_tokens (estimated)",
            tokens,
            "tokens",
            price.get("embedding_per_million", 0) / 1e6,
            "chunk_search",
        )


def cost_of(state: PipelineState, ctx: Context) -> CostReceipt:
    """The receipt of ``state`` as this deployment bills it (its executor, index and price table)."""
    settings = ctx.settings
    models = {kb.embedding_model for kb in state.knowledge_bases} - {"none", ""}
    return receipt(
        state,
        executor=settings.executor,
        index_backend=settings.index_backend,
        table=price_table(settings.price_table),
        embedding_model=sorted(models)[0] if models else "",
    )


def observe(state: PipelineState, ctx: Context) -> None:
    """Teach this process what each stage costs (the cost budgets' estimates, ragstep.app.profiles): the receipt of
    a finished request, stage by stage, into the running means."""
    costs = ctx.clients.stage_costs
    for stage, usd in cost_of(state, ctx).by_stage.items():
        costs.observe(stage, usd)
