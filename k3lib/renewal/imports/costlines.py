"""Bill lines from any export, made one shape (a table of NORM columns, a batch at a time), then selected,
amortised, clipped to the window, converted and split into the review's cost items. Each batch is folded into a
few groups (currency, service, class, charge kind, named commitment) by pyarrow before any Python sees it, so a
bill of millions of lines costs what its groups cost. Nothing is estimated: a line with no item is listed as left
out, an item with no line is left as it was (blank when new), a currency without a stated rate is refused, and a
credit, refund, adjustment or correction is listed apart, never netted into an item."""

from __future__ import annotations

import dataclasses
import fnmatch
from collections import defaultdict
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...core.errors import BadInputError
from ..costsources import CurrencyConversion
from .params import Commitment, CostParams
from .provenance import ReviewWindow, iso
from .shapes import ListedApart

ITEMS = ("capacity", "storage", "network", "monitoring")
# one bill line, whatever the export: start/end int64 µs UTC (end == start: a charge at one instant), amount in
# `currency` on the chosen basis, `service` and `category` (the export's class: FOCUS ServiceCategory, CUR product
# family…), `detail` (what else the item depends on), `kind` (the charge: FOCUS ChargeCategory, CUR line item type,
# GCP cost type or credit type), `resource`, `commitment` (the purchase it belongs to), `prepaid` (a one-time
# purchase or upfront fee: what `commitments` spread), `tag_ok` (its tags match the selection)
NORM = ("start", "end", "amount", "currency", "service", "category", "detail", "kind", "resource", "commitment",
        "prepaid", "tag_ok")
KEYS = ("currency", "service", "category", "detail", "kind", "term")


@dataclasses.dataclass
class Format:
    """How one export's groups become items: `item_of(service, category, detail, kind)` (None: no item) and
    `apart_of(kind)` (the credit class listed apart, None: counted)."""

    item_of: Callable[[str, str, str, str], str | None]
    apart_of: Callable[[str], str | None]
    nets: frozenset[str] = frozenset()  # kinds whose negative lines are the price's own mechanism (netted)


NEGATIVE = "negative:"  # the kind of a line whose amount is below 0, before its own kind


def kind_and_apart(fmt: Format, kind: str) -> tuple[str, str | None]:
    """The line's own kind and the class it is listed apart under (None: counted). A negative amount of a kind the
    format counts (a `Usage`, `Purchase` or `Tax` line below 0, an invoice's credit note) is no cost of running:
    it is listed apart as "negative KIND", never netted into an item; only the kinds the format's price nets
    (`nets`: a CUR Savings Plan negation, a contract discount) stay in their item."""
    if not kind.startswith(NEGATIVE):
        return kind, fmt.apart_of(kind)
    own = kind[len(NEGATIVE):]
    apart = fmt.apart_of(own)
    if apart is None and own not in fmt.nets:
        apart = f"negative {own or 'line'}"
    return own, apart


@dataclasses.dataclass
class CostSplit:
    """What the lines gave, per item, in the review's currency, and what was left out and why."""

    currency: str
    items: dict[str, float] = dataclasses.field(default_factory=dict)
    lines: dict[str, int] = dataclasses.field(default_factory=dict)
    left_out: dict[str, float] = dataclasses.field(default_factory=lambda: defaultdict(float))  # service → amount
    apart: dict[tuple[str, str], list[float]] = dataclasses.field(default_factory=dict)  # (class, service) → [amt, n]
    not_selected: int = 0
    outside_window: int = 0
    prorated: int = 0
    amortised: dict[str, float] = dataclasses.field(default_factory=dict)  # commitment → amount in the window
    currencies: dict[str, int] = dataclasses.field(default_factory=lambda: defaultdict(int))
    rows: int = 0


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


def _by_value(col: pa.Array, test: Callable[[str], bool]) -> np.ndarray:
    """`test` applied once per distinct value of a string column."""
    enc = pc.dictionary_encode(col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col)
    hit = np.array([test(v) for v in enc.dictionary.to_pylist()] + [False], dtype=bool)
    return hit[pc.fill_null(enc.indices, -1).to_numpy(zero_copy_only=False)]


def _terms(table: pa.Table, commitments: tuple[Commitment, ...]) -> np.ndarray:
    """The named commitment a prepaid line buys ("" for none): usage a commitment covers keeps its own period."""
    out = np.full(table.num_rows, "", dtype=object)
    prepaid = np.asarray(table.column("prepaid"), dtype=bool)
    for c in reversed(commitments):
        if not c.id:
            continue
        named = pc.or_(pc.equal(table.column("commitment"), c.id), pc.equal(table.column("resource"), c.id))
        out[prepaid & np.asarray(pc.fill_null(named, False), dtype=bool)] = c.id
    return out


def fold(table: pa.Table, p: CostParams, window: ReviewWindow, acc: dict[tuple, list[float]]) -> int:
    """Select the batch's lines, clip them to the window and add them to `acc` (group → [amount over the whole
    period, amount in the window, lines, lines outside, lines prorated]); returns the lines not selected."""
    n = table.num_rows
    sel = np.asarray(table.column("tag_ok"), dtype=bool) | p.all_rows
    if p.resources:
        sel |= _by_value(table.column("resource"), lambda r: bool(r) and any(
            fnmatch.fnmatchcase(r, pat) for pat in p.resources))
    term = _terms(table, p.commitments)
    sel |= term != ""
    if p.services:
        wanted = {s.lower() for s in p.services}
        sel &= _by_value(table.column("service"), lambda s: s.lower() in wanted)
    start, end = np.asarray(table.column("start")), np.asarray(table.column("end"))
    ws, we = round(window.start.timestamp() * 1e6), round(window.end.timestamp() * 1e6)
    span = (end - start).astype(np.float64)
    inside = (np.minimum(end, we) - np.maximum(start, ws)).astype(np.float64)
    share = np.where(span > 0, np.clip(inside, 0, None) / np.where(span > 0, span, 1),
                     ((start >= ws) & (start < we)).astype(np.float64))
    amount = np.asarray(table.column("amount"), dtype=np.float64)
    keep = pa.array(sel)
    # a negative line is grouped apart from its kind's positive ones, so that it is never summed into them unseen
    kind = pc.if_else(pa.array(amount < 0), pc.binary_join_element_wise(NEGATIVE, table.column("kind"), ""),
                      table.column("kind"))
    by = {k: (kind if k == "kind" else table.column(k)) for k in KEYS if k != "term"}
    grouped = pa.table({**by, "term": pa.array(term, pa.string()),
                        "raw": amount, "win": amount * share, "one": np.ones(n), "out": (share <= 0) * 1.0,
                        "part": ((share > 0) & (share < 1)) * 1.0}).filter(keep)
    g = grouped.group_by(list(KEYS)).aggregate([(c, "sum") for c in ("raw", "win", "one", "out", "part")])
    cols = [g.column(k).to_pylist() for k in KEYS]
    sums = [g.column(f"{c}_sum").to_pylist() for c in ("raw", "win", "one", "out", "part")]
    for i, key in enumerate(zip(*cols)):
        have = acc.setdefault(key, [0.0] * 5)
        for j in range(5):
            have[j] += sums[j][i]
    return int(n - sel.sum())


def _rate(currency: str, target: str, conversions: tuple[CurrencyConversion, ...]) -> float:
    if currency == target:
        return 1.0
    rate = next((c.rate for c in conversions if c.from_currency == currency), None)
    if rate is None:
        raise BadInputError(f"lines billed in {currency} and no rate to {target}; expected --rate "
                            f"{currency}=RATE@DATE (units of {target} per {currency}, and the date it was published)",
                            source="k3 import")
    return rate


def split(groups: dict[tuple, list[float]], fmt: Format, p: CostParams, window: ReviewWindow, target: str,
          conversions: tuple[CurrencyConversion, ...], rows: int, not_selected: int) -> CostSplit:
    """Amortise (named commitments over their term), convert and sum the selected groups per item."""
    out = CostSplit(currency=target, rows=rows, not_selected=not_selected)
    terms = {c.id: c for c in p.commitments}
    for (currency, service, category, detail, marked, term_id), (raw, win, n, outside, part) in sorted(
            groups.items()):
        n = int(n)
        if term_id:
            share = window.share(terms[term_id].start, terms[term_id].end)
            win, outside, part = raw * share, n if share <= 0 else 0, n if 0 < share < 1 else 0
        out.outside_window += int(outside)
        out.prorated += int(part)
        if n - int(outside) <= 0:
            continue
        amount = win * _rate(currency, target, conversions)
        out.currencies[currency] += n - int(outside)
        if term_id:
            out.amortised[term_id] = out.amortised.get(term_id, 0.0) + amount
        kind, apart = kind_and_apart(fmt, marked)
        if apart is not None:
            have = out.apart.setdefault((apart, service or category or "(no service)"), [0.0, 0])
            have[0] += amount
            have[1] += n - int(outside)
            continue
        item = p.items.get(service) or p.items.get(category) or fmt.item_of(service, category, detail, kind)
        if item is None or item == "none":
            out.left_out[service or category or "(no service)"] += amount
            continue
        out.items[item] = out.items.get(item, 0.0) + amount
        out.lines[item] = out.lines.get(item, 0) + n - int(outside)
    return out


def credits(s: CostSplit) -> list[ListedApart]:
    """The lines listed apart, as the import's output carries them (never netted into an item)."""
    return [{"category": c, "service": svc, "amount": tidy(a), "currency": s.currency, "lines": int(n)}
            for (c, svc), (a, n) in sorted(s.apart.items())]


def tidy(v: float) -> float:
    """An amount as stored: unrounded (a 0.000195 bill stays 0.000195), float summation noise removed."""
    return float(f"{v:.12g}")


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
    out += [f"listed apart ({c}, never netted into an item): {svc} {a:.2f} {s.currency} from {int(n)} line(s)"
            for (c, svc), (a, n) in sorted(s.apart.items())]
    for c in p.commitments:
        got = s.amortised.get(c.id)
        out.append(f"commitment {c.id} spread over {iso(c.start)} to {iso(c.end)}: "
                   + (f"{got:.2f} {s.currency} in the window" if got is not None else "no line carries it"))
    return mapped, blank, out
