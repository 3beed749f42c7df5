"""Writing the review's costs.yaml from imports: each import's amounts land in the items it covers, recorded as a
source (file, sha256, what it gave per item) with the rates it used; a re-import of the same file replaces its
own entry, other sources and the hand-set items stay. The file is checked by the review's own reader before and
after it is written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from ...core.errors import BadInputError
from ..costsources import CostSource, Credit, CurrencyConversion
from ..inputs import COST_ITEMS, CostsInput, read_costs
from .provenance import MARK, Provenance, blocks, read_header, write_text
from .shapes import ListedApart


def _merge_conversions(have: tuple[CurrencyConversion, ...], new: tuple[CurrencyConversion, ...],
                       path: Path) -> tuple[CurrencyConversion, ...]:
    out = {c.from_currency: c for c in have}
    for c in new:
        old = out.get(c.from_currency)
        if old is not None and (old.rate, old.date) != (c.rate, c.date):
            raise BadInputError(f"conversions: {c.from_currency} is already converted at {old.rate:g} "
                                f"({old.date.isoformat()}) in this file; expected the same rate and date for every "
                                f"import into one costs file (or write another file)", source=str(path))
        out[c.from_currency] = c
    return tuple(out[k] for k in sorted(out))


def _amounts(existing: CostsInput | None, sources: list[CostSource]) -> dict[str, float | None]:
    amounts: dict[str, float | None] = {k: getattr(existing, k) if existing else None for k in COST_ITEMS}
    covered: dict[str, float] = {}
    for s in sources:
        for item, value in s.items.items():
            covered[item] = covered.get(item, 0.0) + value
    amounts.update({k: float(f"{v:.12g}") for k, v in covered.items()})  # unrounded: 0.000195 stays
    return amounts


def _yaml_block(key: str, value: Any) -> str:
    return yaml.safe_dump({key: value}, sort_keys=False, allow_unicode=True, width=200)


def render_costs(currency: str, amounts: dict[str, float | None], conversions: tuple[CurrencyConversion, ...],
                 sources: list[CostSource], header: list[str], credits: tuple[Credit, ...] = (),
                 capacity_nodes: tuple[str, ...] = ()) -> str:
    lines = [f"# Amounts for the review's window, in {currency}. A blank item stays blank in every output.",
             "# Items under sources: come from `k3 import` (re-import to change them); the others are set by hand.",
             *header, f"currency: {currency}"]
    lines += [f"{k}: {'' if amounts[k] is None else amounts[k]}" for k in COST_ITEMS]
    text = "\n".join(lines) + "\n"
    if conversions:
        text += _yaml_block("conversions", [c.model_dump(mode="json", by_alias=True, exclude_none=True)
                                            for c in conversions])
    if sources:
        text += _yaml_block("sources", [s.model_dump(mode="json", exclude_none=True) for s in sources])
    if credits:
        text += _yaml_block("credits", [c.model_dump(mode="json") for c in credits])
    if capacity_nodes:
        text += _yaml_block("capacity_nodes", list(capacity_nodes))
    return text


def _credit_origin(importer: str, file: str) -> str:
    return f" (k3 import {importer} {file})"


def merged_credits(existing: CostsInput | None, source: CostSource,
                   listed: list[ListedApart]) -> tuple[Credit, ...]:
    """The file's credits with this import's replaced: each credit, refund or adjustment the bill listed apart
    becomes a `credits:` entry of its own (listed by the review, netted only when someone marks it recurring and
    accepted); a hand-written credit and another import's stay."""
    origin = _credit_origin(source.importer, source.file)
    kept = [c for c in (existing.credits if existing else ()) if not c.description.endswith(origin)]
    new = [Credit(amount=float(str(c["amount"])), charge_category=str(c["category"]),
                  description=f"{c['service'] or '(no service)'}, {c['lines']} line(s){origin}")
           for c in listed]
    return tuple(kept + new)


def update_costs(out: str | Path, source: CostSource, prov: Provenance, currency: str,
                 conversions: tuple[CurrencyConversion, ...],
                 listed_apart: list[ListedApart] | None = None) -> CostsInput:
    """Merge one import into `out` (created when absent) and return the file as the review reads it."""
    path = Path(out)
    existing = read_costs(path) if path.exists() else None
    if existing is not None and existing.currency and existing.currency != currency:
        raise BadInputError(f"currency: this file is in {existing.currency}, the import in {currency}; expected one "
                            "currency per costs file (--currency, or imports.currency)", source=str(path))
    merged_conv = _merge_conversions(existing.conversions if existing else (), conversions, path)
    sources = [s for s in (existing.sources if existing else ()) if (s.importer, s.file) != (source.importer,
                                                                                                source.file)]
    sources.append(source)
    lines, _ = read_header(path)
    kept = [b for b in blocks(lines) if b[0].startswith("# Imported by") and _block_source(b) in
            {(s.importer, s.file) for s in sources} - {(source.importer, source.file)}]
    header = [line for b in kept for line in b] + prov.lines()
    amounts = _amounts(existing, sources)
    credits = merged_credits(existing, source, listed_apart or [])
    nodes = existing.capacity_nodes if existing else ()
    data = {"currency": currency, **amounts, "conversions": [c.model_dump(by_alias=True) for c in merged_conv],
            "sources": [s.model_dump() for s in sources], "credits": [c.model_dump() for c in credits],
            "capacity_nodes": list(nodes)}
    try:
        CostsInput.model_validate(data)
    except ValueError as exc:
        raise BadInputError(f"the merged costs would not be valid: {' '.join(str(exc).split())[:300]}",
                            source=str(path)) from None
    write_text(path, render_costs(currency, amounts, merged_conv, sources, header, credits, nodes))
    return read_costs(path)


def _block_source(block: list[str]) -> tuple[str, str] | None:
    for line in block:
        if line.startswith(MARK):
            meta = json.loads(line[len(MARK):])
            return str(meta.get("importer")), str(meta.get("source"))
    return None
