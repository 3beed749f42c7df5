"""Each bill format's rows as cost lines: FOCUS 1.0–1.2 (any provider's FOCUS export), AWS CUR 2.0, Google Cloud's
BigQuery billing export (`cost` plus `credits[]`), and a GPU cloud's invoice lines written as a small CSV (billing
days that close at a local hour, weekly or upfront invoices)."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any, Callable

from ...core.errors import BadInputError
from .costlines import CostLine
from .params import CostParams
from .tables import Row, RowError, blank, cell, mapping, read_rows, require_columns, row_error, to_float, to_time

# FOCUS ServiceCategory (and ServiceSubcategory, 1.1+) → the review's item; the rest is listed as left out
FOCUS_ITEMS = {"Compute": "capacity", "AI and Machine Learning": "capacity", "Storage": "storage",
               "Networking": "network", "Management and Governance": "monitoring"}
FOCUS_SUBCATEGORY_ITEMS = {"Observability": "monitoring", "Support": None, "Cost Management": None,
                           "Compliance": None, "Data Governance": None, "Architecture": None}
FOCUS_COLUMNS = ("ChargePeriodStart", "ChargePeriodEnd", "BilledCost", "EffectiveCost", "BillingCurrency",
                 "ServiceName", "ServiceCategory")


def _lines(path: Path, rows: list[Row], one: Callable[[Row], CostLine | None]) -> list[CostLine]:
    out = []
    for row in rows:
        try:
            line = one(row)
        except RowError as exc:
            raise row_error(path, row, exc) from None
        if line is not None:
            out.append(line)
    return out


def focus_lines(path: str | Path, p: CostParams) -> list[CostLine]:
    path = Path(path)
    rows = read_rows(path, "a FOCUS cost and usage export (CSV or Parquet)")
    require_columns(path, rows, FOCUS_COLUMNS, "a FOCUS 1.0–1.2 export")
    basis = "EffectiveCost" if p.basis == "amortised" else "BilledCost"

    def one(row: Row) -> CostLine:
        category = str(row.get("ServiceCategory") or "")
        sub = str(row.get("ServiceSubcategory") or "")
        item = FOCUS_SUBCATEGORY_ITEMS[sub] if sub in FOCUS_SUBCATEGORY_ITEMS else FOCUS_ITEMS.get(category)
        return CostLine(line=row["_line"], start=cell(row, "ChargePeriodStart", to_time),
                        end=cell(row, "ChargePeriodEnd", to_time), amount=cell(row, basis, to_float),
                        currency=cell(row, "BillingCurrency", _currency), service=str(row.get("ServiceName") or ""),
                        category=category, item=item, resource=str(row.get("ResourceId") or ""),
                        tags=tuple(sorted(cell(row, "Tags", mapping, required=False, default={}).items())),
                        commitment=str(row.get("CommitmentDiscountId") or ""),
                        prepaid=row.get("ChargeCategory") == "Purchase")
    return _lines(path, rows, one)


def _currency(v: Any) -> str:
    s = str(v).strip().upper()
    if not re.fullmatch(r"[A-Z]{3}", s):
        raise ValueError(f"expected an ISO 4217 currency code (got {v!r})")
    return s


# --- AWS CUR 2.0 ----------------------------------------------------------------------------------------------------

CUR_COLUMNS = ("line_item_usage_start_date", "line_item_usage_end_date", "line_item_line_item_type",
               "line_item_product_code", "line_item_unblended_cost", "line_item_currency_code")
CUR_MONITORING = {"AmazonCloudWatch", "AmazonPrometheus", "AmazonGrafana", "AWSXRay", "AmazonManagedService"}
CUR_STORAGE = {"AmazonS3", "AmazonEFS", "AmazonFSx", "AWSBackup", "AmazonS3GlacierDeepArchive", "AmazonECR"}
CUR_NETWORK = {"AWSDataTransfer", "AmazonVPC", "AWSELB", "AmazonCloudFront", "AWSDirectConnect", "AmazonRoute53"}
CUR_COMMITMENT_FEES = {"RIFee", "SavingsPlanRecurringFee", "SavingsPlanUpfrontFee"}  # compute commitments
CUR_PREPAID = {"Fee", "SavingsPlanUpfrontFee"}  # one-time: Capacity Blocks, RI and Savings Plans upfront fees
CUR_CAPACITY = {"AmazonEC2", "AmazonSageMaker", "AmazonEKS", "AmazonECS", "AWSOutposts"}


def cur_item(code: str, family: str, usage_type: str) -> str | None:
    if family == "Data Transfer" or "DataTransfer" in usage_type or code in CUR_NETWORK:
        return "network"
    if code in CUR_MONITORING:
        return "monitoring"
    if code in CUR_STORAGE or family in ("Storage", "Storage Snapshot", "System Operation", "Provisioned Throughput"):
        return "storage"
    return "capacity" if code in CUR_CAPACITY else None


def _num(row: Row, column: str) -> float:
    return cell(row, column, to_float, required=False, default=0.0)


def cur_amortised(row: Row) -> float:
    """AWS's amortised cost of one line: covered usage at its effective cost, the negations and upfront fees that
    the effective costs already spread set to 0, only the unused part of a recurring commitment fee kept."""
    kind = str(row.get("line_item_line_item_type") or "")
    if kind == "SavingsPlanCoveredUsage":
        return _num(row, "savings_plan_savings_plan_effective_cost")
    if kind == "SavingsPlanRecurringFee":
        return _num(row, "savings_plan_total_commitment_to_date") - _num(row, "savings_plan_used_commitment")
    if kind in ("SavingsPlanNegation", "SavingsPlanUpfrontFee"):
        return 0.0
    if kind == "DiscountedUsage":
        return _num(row, "reservation_effective_cost")
    if kind == "RIFee":
        return (_num(row, "reservation_unused_amortized_upfront_fee_for_billing_period")
                + _num(row, "reservation_unused_recurring_fee"))
    if kind == "Fee" and not blank(row.get("reservation_reservation_a_r_n")):
        return 0.0  # an RI's upfront fee: spread by the DiscountedUsage and RIFee lines above
    return cell(row, "line_item_unblended_cost", to_float)


def _cur_tags(row: Row) -> dict[str, str]:
    tags = cell(row, "resource_tags", mapping, required=False, default={})
    for k, v in row.items():  # legacy CUR and some CSV exports flatten them: resource_tags_user_app
        if isinstance(k, str) and k.startswith("resource_tags_") and not blank(v):
            tags.setdefault(k[len("resource_tags_"):], str(v))
    return tags


def cur_lines(path: str | Path, p: CostParams) -> list[CostLine]:
    path = Path(path)
    rows = read_rows(path, "an AWS CUR 2.0 export (CSV or Parquet)")
    require_columns(path, rows, CUR_COLUMNS, "an AWS CUR 2.0 export")

    def one(row: Row) -> CostLine:
        code = str(row.get("line_item_product_code") or "")
        product = cell(row, "product", mapping, required=False, default={})  # CUR 2.0's map of the rest
        family = str(row.get("product_product_family") or product.get("product_family") or "")
        amount = cur_amortised(row) if p.basis == "amortised" else cell(row, "line_item_unblended_cost", to_float)
        commitment = next((str(row[c]) for c in ("reservation_reservation_a_r_n", "savings_plan_savings_plan_a_r_n")
                           if not blank(row.get(c))), "")
        return CostLine(line=row["_line"], start=cell(row, "line_item_usage_start_date", to_time),
                        end=cell(row, "line_item_usage_end_date", to_time), amount=amount,
                        currency=cell(row, "line_item_currency_code", _currency), service=code, category=family,
                        item="capacity" if row.get("line_item_line_item_type") in CUR_COMMITMENT_FEES
                        else cur_item(code, family, str(row.get("line_item_usage_type") or "")),
                        resource=str(row.get("line_item_resource_id") or ""), tags=tuple(sorted(_cur_tags(row).items())),
                        commitment=commitment, prepaid=row.get("line_item_line_item_type") in CUR_PREPAID)
    return _lines(path, rows, one)


# --- Google Cloud's BigQuery billing export -------------------------------------------------------------------------

GCP_MONITORING = re.compile(r"(?i)monitoring|logging|stackdriver|trace")
GCP_NETWORK = re.compile(r"(?i)egress|ingress|network|data transfer|interconnect|load balanc|\bNAT\b|\bCDN\b|\bIP\b")
GCP_STORAGE = re.compile(r"(?i)storage|\bPD\b|persistent disk|snapshot|\bdisk\b|filestore|hyperdisk")
GCP_CAPACITY = re.compile(r"(?i)compute engine|vertex ai|kubernetes engine|\bGPU\b|\bTPU\b")


def gcp_item(service: str, sku: str) -> str | None:
    if GCP_MONITORING.search(service):
        return "monitoring"
    for pattern, item in ((GCP_NETWORK, "network"), (GCP_STORAGE, "storage")):
        if pattern.search(service) or pattern.search(sku):
            return item
    return "capacity" if GCP_CAPACITY.search(service) else None


def _field(row: Row, dotted: str) -> Any:
    """BigQuery's nested record, or a flat `service_description`-style column from a CSV of a view."""
    node: Any = row
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node if node is not None else row.get(dotted.replace(".", "_"))


def _credits(v: Any) -> float:
    if blank(v):
        return 0.0
    if isinstance(v, str):
        import json

        try:
            v = json.loads(v)
        except ValueError:
            raise ValueError(f"expected credits as a JSON list (got {v[:60]!r})") from None
    if not isinstance(v, list):
        raise ValueError("expected credits as a list of {name, amount, type}")
    return sum(to_float(c.get("amount", 0)) for c in v if isinstance(c, dict))


def gcp_lines(path: str | Path, p: CostParams) -> list[CostLine]:
    path = Path(path)
    rows = read_rows(path, "a Google Cloud billing export (JSON lines, JSON or Parquet)")
    require_columns(path, rows, ("usage_start_time", "usage_end_time", "cost", "currency"),
                    "a BigQuery billing export")

    def one(row: Row) -> CostLine:
        service, sku = str(_field(row, "service.description") or ""), str(_field(row, "sku.description") or "")
        cost = cell(row, "cost", to_float)
        amount = cost + (cell(row, "credits", _credits, required=False, default=0.0) if p.basis == "amortised" else 0)
        labels = cell(row, "labels", mapping, required=False, default={})
        resource = _field(row, "resource.name") or _field(row, "resource.global_name") or ""
        return CostLine(line=row["_line"], start=cell(row, "usage_start_time", to_time),
                        end=cell(row, "usage_end_time", to_time), amount=amount,
                        currency=cell(row, "currency", _currency), service=service, category=sku,
                        item=gcp_item(service, sku), resource=str(resource), tags=tuple(sorted(labels.items())))
    return _lines(path, rows, one)


# --- a GPU cloud's invoice lines ------------------------------------------------------------------------------------

INVOICE_COLUMNS = ("period_start", "period_end", "amount", "currency", "item")


def _billing_day(v: Any, p: CostParams, edge: str) -> dt.datetime:
    """A date is one of the provider's billing days: day D closes at `day_closes_at` local time on D and opens 24
    hours of wall clock before (a midnight close: D runs from its own midnight to the next); `edge` is `open` or
    `close`. A time with an offset is taken as it is."""
    if isinstance(v, str) and re.fullmatch(r"\d{4}-\d{2}-\d{2}", v.strip()):
        day = dt.date.fromisoformat(v.strip())
        midnight = p.day_closes_at == dt.time(0, 0)
        if edge == "open":
            day = day if midnight else day - dt.timedelta(days=1)
        else:
            day = day + dt.timedelta(days=1) if midnight else day
        return to_time(dt.datetime.combine(day, p.day_closes_at), p.timezone)
    return to_time(v, p.timezone)


def invoice_lines(path: str | Path, p: CostParams) -> list[CostLine]:
    """Columns period_start, period_end (dates: billing days as the provider closes them; or times with an
    offset), amount, currency, item (capacity, storage, network, monitoring or none), and optionally service,
    resource, commitment, description. A period of dates covers the billing days from the first to the last."""
    path = Path(path)
    rows = read_rows(path, "invoice lines (CSV: period_start, period_end, amount, currency, item)")
    require_columns(path, rows, INVOICE_COLUMNS, "invoice lines")

    def item(v: Any) -> str | None:
        s = str(v).strip()
        if s not in ("capacity", "storage", "network", "monitoring", "none"):
            raise ValueError(f"expected capacity, storage, network, monitoring or none (got {s!r})")
        return None if s == "none" else s

    def one(row: Row) -> CostLine:
        start = cell(row, "period_start", lambda v: _billing_day(v, p, "open"))
        end = cell(row, "period_end", lambda v: _billing_day(v, p, "close"))  # the last billing day included
        if end < start:
            raise RowError("period_end", "before period_start")
        return CostLine(line=row["_line"], start=start, end=end, amount=cell(row, "amount", to_float),
                        currency=cell(row, "currency", _currency), service=str(row.get("service") or "invoice"),
                        category=str(row.get("description") or ""), item=cell(row, "item", item),
                        resource=str(row.get("resource") or ""), commitment=str(row.get("commitment") or ""),
                        prepaid=not blank(row.get("commitment")))
    return _lines(path, rows, one)


READERS: dict[str, Callable[[str | Path, CostParams], list[CostLine]]] = {
    "focus": focus_lines, "cur": cur_lines, "gcp": gcp_lines, "invoice": invoice_lines}


def read_bill(kind: str, path: str | Path, p: CostParams) -> list[CostLine]:
    if kind not in READERS:
        raise BadInputError(f"unknown bill format {kind!r}; expected one of {', '.join(READERS)}", source="k3 import")
    return READERS[kind](path, p)
