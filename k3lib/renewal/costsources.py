"""What a costs file says about where its amounts came from: the currency conversions applied (rate and date) and
the imported sources (file, hash, what each gave per item). `k3 import` writes both; the review reads and checks
them, so an amount edited after its import no longer matches its stated source and is refused."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

Currency = Annotated[str, Field(pattern=r"^[A-Z]{3}$")]
ImportedItem = Literal["capacity", "storage", "network", "monitoring", "api_bill_same_tasks"]
# what a usage import's selection says when it billed the task log's API-path tasks only (`k3 import usage --tasks`);
# an API bill imported without it bills every line of the window, which is not the bill of the tasks it is divided by
USAGE_SCOPED = "the API-path tasks of"
SUM_TOLERANCE = 0.005  # amounts are written to the cent; a source's items summed may differ by rounding only


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class CurrencyConversion(_M):
    """`rate` units of the review's currency for one unit of `from`, as published on `date`."""

    from_currency: Currency = Field(alias="from")
    rate: Annotated[float, Field(gt=0)]
    date: dt.date
    source: str | None = None  # who published the rate, e.g. "ECB euro reference rate"


class CostSource(_M):
    """One imported export: what it gave to each item, in the review's currency, after filters, window and
    conversion."""

    importer: Literal["focus", "cur", "gcp", "invoice", "usage"]
    file: str
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    items: dict[ImportedItem, float]
    window: str | None = None
    selection: str | None = None  # the filters, in words


class Credit(_M):
    """A credit or refund the bill lists (FOCUS `ChargeCategory` Credit, a CUR `Credit`/`Refund` line), kept apart
    from the items: the review lists it and nets it into its item only when it recurs (it will be there next cycle
    too) and someone accepted netting it — a one-off credit says nothing about what renewing costs."""

    amount: Annotated[float, Field(allow_inf_nan=False)]  # as the bill writes it: a credit is negative
    item: ImportedItem = "capacity"
    description: str = ""
    charge_category: str | None = None  # e.g. "Credit", "Refund"
    recurring: bool = False
    accepted_by: str | None = None  # who accepted netting it into the item; null: listed, not netted

    @property
    def netted(self) -> bool:
        return self.recurring and bool(self.accepted_by)


def mismatched_items(amounts: dict[str, float | None], sources: tuple[CostSource, ...]) -> list[str]:
    """The items whose amount is not the sum of what the sources list for them (one line each)."""
    totals: dict[str, float] = {}  # item → the sources' sum
    for s in sources:
        for item, value in s.items.items():
            totals[item] = totals.get(item, 0.0) + value
    out = []
    for name, total in sorted(totals.items()):
        have = amounts.get(name)
        if have is None or abs(have - total) > SUM_TOLERANCE:
            out.append(f"{name} is {'blank' if have is None else have} but its sources sum to {round(total, 2)}")
    return out
