"""The cost receipt a response carries (``usage.cost``): an estimate in USD of what the request used, by stage and in
all, from a versioned price table (:mod:`ragstep.app.cost` computes it)."""

from __future__ import annotations

from pydantic import Field

from ragstep.models.base import _DeferredModel, empty_list


class CostLine(_DeferredModel):
    """One priced quantity: ``quantity`` ``unit`` of ``item`` (for ``stage``, when one stage used it)."""

    item: str
    stage: str = ""
    quantity: float
    unit: str
    usd: float


class CostReceipt(_DeferredModel):
    """What a request cost, estimated: ``total_usd`` is the sum of the lines, ``by_stage`` the lines of each stage
    summed (requests and storage that belong to no one stage are under ``request``)."""

    estimate: bool = True
    currency: str = "USD"
    price_table: str = Field(description="the price table's region and version, e.g. 'us-east-1 2025-12'")
    assumes: str = Field(description="how the request is priced: the deployment it is priced as")
    lines: list[CostLine] = Field(default_factory=empty_list)
    by_stage: dict[str, float] = Field(default_factory=dict)
    total_usd: float = 0.0
    #: The request's ``cost_budget_usd``, and whether the estimate went over it (ragstep.models.profiles).
    budget_usd: float | None = None
    over_budget: bool = False
    notes: list[str] = Field(default_factory=empty_list)
