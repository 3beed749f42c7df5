"""Bill lines from any export, made one shape, then selected, amortised, clipped to the window, converted and
split into the review's cost items. Nothing is estimated: a line with no item is listed as left out, an item with
no line is left as it was (blank when new), a currency without a stated rate is refused."""

from __future__ import annotations

import dataclasses
import datetime as dt
import fnmatch
from collections import defaultdict
from collections.abc import Iterable

from ...core.errors import BadInputError
from ..costsources import CurrencyConversion
from .params import Commitment, CostParams
from .provenance import Window, iso

ITEMS = ("capacity", "storage", "network", "monitoring")


@dataclasses.dataclass(frozen=True)
class CostLine:
    line: int  # where it is in the export (line or row number)
    start: dt.datetime
    end: dt.datetime  # == start: a charge at one instant
    amount: float  # in `currency`, on the chosen basis
    currency: str
    service: str
    category: str  # the export's own class of the service (FOCUS ServiceCategory, CUR product family…)
    item: str | None  # the review's item it maps to; None: left out
    resource: str = ""
    tags: tuple[tuple[str, str], ...] = ()
    commitment: str = ""  # the commitment / reservation it belongs to, when the export says
    prepaid: bool = False  # a one-time purchase or upfront fee (FOCUS Purchase, CUR Fee…): what `commitments` spread


@dataclasses.dataclass
class CostSplit:
    """What the lines gave, per item, in the review's currency, and what was left out and why."""

    currency: str
    items: dict[str, float] = dataclasses.field(default_factory=dict)
    lines: dict[str, int] = dataclasses.field(default_factory=dict)
    left_out: dict[str, float] = dataclasses.field(default_factory=lambda: defaultdict(float))  # service → amount
    not_selected: int = 0
    outside_window: int = 0
    prorated: int = 0
    amortised: dict[str, float] = dataclasses.field(default_factory=dict)  # commitment → amount in the window
    currencies: dict[str, int] = dataclasses.field(default_factory=lambda: defaultdict(int))
    rows: int = 0


def _norm_key(k: str) -> str:
    k = k.strip().lower()
    for prefix in ("user:", "user_", "tag:", "tags/"):
        if k.startswith(prefix):
            k = k[len(prefix):]
    return k.replace(":", "_")


def selection_words(p: CostParams) -> str:
    parts = []
    if p.all_rows:
        parts.append("every line of the export (all_rows)")
    if p.tags:
        parts.append("tags " + ", ".join(f"{k}={v}" for k, v in sorted(p.tags.items())))
    if p.resources:
        parts.append("resources " + ", ".join(p.resources))
    if p.commitments:
        parts.append("commitments " + ", ".join(c.id for c in p.commitments))
    text = " or ".join(parts) or "nothing"
    if p.services:
        text += "; services " + ", ".join(p.services) + " only"
    return f"{text}; cost basis {p.basis}"


def check_selector(p: CostParams) -> None:
    if not (p.all_rows or p.tags or p.resources or p.commitments):
        raise BadInputError("no selector: name the deployment's resources with --tag KEY=VALUE or --resource ID "
                            "(or --all-rows when the whole export is the deployment's); a bill is never taken whole "
                            "by default", source="k3 import")


def selected(line: CostLine, p: CostParams) -> bool:
    if p.services and line.service.lower() not in {s.lower() for s in p.services}:
        return False
    if p.all_rows or _term(line, p.commitments) is not None:  # naming a purchase selects it, not what it covers
        return True
    tags = {_norm_key(k): v for k, v in line.tags}
    if p.tags and all(tags.get(_norm_key(k)) == v for k, v in p.tags.items()):
        return True
    return bool(line.resource) and any(fnmatch.fnmatchcase(line.resource, pat) for pat in p.resources)


def _term(line: CostLine, commitments: tuple[Commitment, ...]) -> Commitment | None:
    """The named commitment a prepaid line buys (usage a commitment covers keeps its own charge period)."""
    if not line.prepaid:
        return None
    return next((c for c in commitments if c.id and c.id in (line.commitment, line.resource)), None)


def _rate(currency: str, target: str, conversions: tuple[CurrencyConversion, ...]) -> float:
    if currency == target:
        return 1.0
    rate = next((c.rate for c in conversions if c.from_currency == currency), None)
    if rate is None:
        raise BadInputError(f"lines billed in {currency} and no rate to {target}; expected --rate "
                            f"{currency}=RATE@DATE (units of {target} per {currency}, and the date it was published)",
                            source="k3 import")
    return rate


def split(lines: Iterable[CostLine], p: CostParams, window: Window, target: str,
          conversions: tuple[CurrencyConversion, ...]) -> CostSplit:
    """Select, amortise (named commitments over their term), clip to the window, convert and sum per item."""
    check_selector(p)
    out = CostSplit(currency=target)
    for line in lines:
        out.rows += 1
        if not selected(line, p):
            out.not_selected += 1
            continue
        term = _term(line, p.commitments)
        start, end = (term.start, term.end) if term is not None else (line.start, line.end)
        share = window.share(start, end)
        if share <= 0:
            out.outside_window += 1
            continue
        out.prorated += share < 1
        amount = line.amount * share * _rate(line.currency, target, conversions)
        out.currencies[line.currency] += 1
        if term is not None:
            out.amortised[term.id] = out.amortised.get(term.id, 0.0) + amount
        item = p.items.get(line.service) or p.items.get(line.category) or line.item
        if item is None or item == "none":
            out.left_out[line.service or line.category or "(no service)"] += amount
            continue
        out.items[item] = out.items.get(item, 0.0) + amount
        out.lines[item] = out.lines.get(item, 0) + 1
    out.items = {k: round(v, 2) for k, v in out.items.items()}
    return out


def notes(s: CostSplit, p: CostParams) -> tuple[list[str], list[str], list[str]]:
    """(mapped, blank, notes) lines for the provenance header."""
    mapped = [f"{item}: {s.items[item]:.2f} {s.currency} from {s.lines[item]} line(s)" for item in ITEMS
              if item in s.items]
    blank = [f"{item}: no selected line in the window maps to it (left as it was in the file)" for item in ITEMS
             if item not in s.items]
    out = [f"{s.rows} line(s) read; {s.not_selected} not selected; {s.outside_window} outside the window; "
           f"{s.prorated} prorated to the window's share of their charge period",
           "currencies billed: " + ", ".join(f"{c} ({n} line(s))" for c, n in sorted(s.currencies.items()))]
    out += [f"left out (no item): {svc} {amount:.2f} {s.currency}" for svc, amount in sorted(s.left_out.items())]
    for c in p.commitments:
        got = s.amortised.get(c.id)
        out.append(f"commitment {c.id} spread over {iso(c.start)} to {iso(c.end)}: "
                   + (f"{got:.2f} {s.currency} in the window" if got is not None else "no line carries it"))
    return mapped, blank, out
