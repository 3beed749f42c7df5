"""Each bill format's lines as the one shape costlines folds (NORM): FOCUS 1.0–1.2 (any provider's FOCUS export),
AWS CUR 2.0 and the legacy CUR (its `lineItem/UsageStartDate` headers mapped to CUR 2.0's names), Google Cloud's
BigQuery billing export (`cost` plus `credits[]`, nested JSON or a CSV's dotted headers), and a GPU cloud's invoice
lines written as a small CSV (billing days that close at a local hour, weekly or upfront invoices). FOCUS and CUR
are mapped a column at a time (pyarrow compute), whatever their size."""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...core.errors import BadInputError
from .columnar import Export, fail, norm_key, numbers, open_export, strings, tag_mask, times
from .costlines import NORM, Format, check_selector, fold
from .params import CostParams
from .provenance import ReviewWindow
from .tables import Row, blank, to_float, to_time

Batch = tuple[Export, pa.Table, int]  # the export, one batch of its columns, the line of the batch's first row

# FOCUS ServiceCategory (and ServiceSubcategory, 1.1+) → the review's item; the rest is listed as left out
FOCUS_ITEMS = {"Compute": "capacity", "AI and Machine Learning": "capacity", "Storage": "storage",
               "Networking": "network", "Management and Governance": "monitoring"}
FOCUS_SUBCATEGORY_ITEMS = {"Observability": "monitoring", "Support": None, "Cost Management": None,
                           "Compliance": None, "Data Governance": None, "Architecture": None}
FOCUS_COLUMNS = ("ChargePeriodStart", "ChargePeriodEnd", "BilledCost", "EffectiveCost", "BillingCurrency",
                 "ServiceName", "ServiceCategory", "ChargeCategory")
# ChargeCategory, read fully (1.0–1.2): usage, purchases and tax are counted by their service; a credit or an
# adjustment (and a ChargeClass `Correction` of an earlier period) is listed apart, never netted into an item
FOCUS_COUNTED = {"Usage", "Purchase", "Tax"}
FOCUS_APART = {"Credit": "credit", "Adjustment": "adjustment", "Refund": "refund"}


def _norm(b: Batch, **cols: Any) -> pa.Table:
    n = b[1].num_rows
    out = {k: cols.get(k) for k in NORM}
    for k in ("service", "category", "detail", "kind", "resource", "commitment"):
        if out[k] is None:
            out[k] = pa.array([""] * n, pa.string())
    out["prepaid"] = pa.array(np.zeros(n, bool) if out["prepaid"] is None else out["prepaid"], pa.bool_())
    out["tag_ok"] = pa.array(out["tag_ok"], pa.bool_())
    return pa.table(out)


def _currency_col(b: Batch, column: str) -> pa.Array:
    col = pc.utf8_upper(pc.utf8_trim_whitespace(strings(b[1], column)))
    ok = np.asarray(pc.match_substring_regex(col, r"^[A-Z]{3}$"), dtype=bool)
    if not ok.all():
        bad = int(np.argmin(ok))
        raise fail(b[0], b[2] + bad, column, f"expected an ISO 4217 currency code (got {b[1].column(column)[bad]})")
    return col


def _focus_item(service: str, category: str, sub: str, kind: str) -> str | None:
    return FOCUS_SUBCATEGORY_ITEMS[sub] if sub in FOCUS_SUBCATEGORY_ITEMS else FOCUS_ITEMS.get(category)


def _focus_kind(b: Batch) -> pa.Array:
    kind = strings(b[1], "ChargeCategory")
    known = np.asarray(pc.is_in(kind, pa.array(sorted(FOCUS_COUNTED | set(FOCUS_APART)))), dtype=bool)
    if not known.all():
        bad = int(np.argmin(known))
        raise fail(b[0], b[2] + bad, "ChargeCategory", f"expected Usage, Purchase, Tax, Credit or Adjustment (got "
                                                       f"{kind[bad].as_py()!r})")
    correction = pc.equal(strings(b[1], "ChargeClass"), "Correction")
    return pc.if_else(correction, pa.scalar("Correction"), kind)


def _focus(b: Batch, p: CostParams) -> pa.Table:
    t = b[1]
    basis = "EffectiveCost" if p.basis == "amortised" else "BilledCost"
    kind = _focus_kind(b)
    return _norm(b, start=times(b[0], t, b[2], "ChargePeriodStart"), end=times(b[0], t, b[2], "ChargePeriodEnd"),
                 amount=numbers(b[0], t, b[2], basis), currency=_currency_col(b, "BillingCurrency"),
                 service=strings(t, "ServiceName"), category=strings(t, "ServiceCategory"),
                 detail=strings(t, "ServiceSubcategory"), kind=kind, resource=strings(t, "ResourceId"),
                 commitment=strings(t, "CommitmentDiscountId"), prepaid=np.asarray(pc.equal(kind, "Purchase")),
                 tag_ok=tag_mask(t, "Tags", p.tags))


FOCUS = Format(item_of=_focus_item, apart_of=lambda k: "correction" if k == "Correction" else FOCUS_APART.get(k))


# --- AWS CUR 2.0 and legacy CUR -------------------------------------------------------------------------------------

CUR_COLUMNS = ("line_item_usage_start_date", "line_item_usage_end_date", "line_item_line_item_type",
               "line_item_product_code", "line_item_unblended_cost", "line_item_currency_code")
CUR_MONITORING = {"AmazonCloudWatch", "AmazonPrometheus", "AmazonGrafana", "AWSXRay", "AmazonManagedService"}
CUR_STORAGE = {"AmazonS3", "AmazonEFS", "AmazonFSx", "AWSBackup", "AmazonS3GlacierDeepArchive", "AmazonECR"}
CUR_NETWORK = {"AWSDataTransfer", "AmazonVPC", "AWSELB", "AmazonCloudFront", "AWSDirectConnect", "AmazonRoute53"}
CUR_COMMITMENT_FEES = {"RIFee", "SavingsPlanRecurringFee", "SavingsPlanUpfrontFee"}  # compute commitments
CUR_PREPAID = {"Fee", "SavingsPlanUpfrontFee"}  # one-time: Capacity Blocks, RI and Savings Plans upfront fees
CUR_CAPACITY = {"AmazonEC2", "AmazonSageMaker", "AmazonEKS", "AmazonECS", "AWSOutposts"}


CUR_APART = {"Credit": "credit", "Refund": "refund"}
CUR_AMORTISED = ("savings_plan_savings_plan_effective_cost", "savings_plan_total_commitment_to_date",
                 "savings_plan_used_commitment", "reservation_effective_cost",
                 "reservation_unused_amortized_upfront_fee_for_billing_period", "reservation_unused_recurring_fee",
                 "reservation_reservation_a_r_n", "savings_plan_savings_plan_a_r_n")


def cur_amortised(b: Batch, kind: pa.Array) -> np.ndarray:
    """AWS's amortised cost of each line: covered usage at its effective cost, the negations and upfront fees
    that the effective costs already spread set to 0, only the unused part of a recurring commitment fee kept."""
    t = b[1]
    num = {c: numbers(b[0], t, b[2], c, required=False) for c in CUR_AMORTISED[:6]}
    is_ = {k: np.asarray(pc.equal(kind, k), dtype=bool) for k in (
        "SavingsPlanCoveredUsage", "SavingsPlanRecurringFee", "SavingsPlanNegation", "SavingsPlanUpfrontFee",
        "DiscountedUsage", "RIFee", "Fee")}
    ri_fee = is_["Fee"] & (strings(t, "reservation_reservation_a_r_n").to_numpy(zero_copy_only=False) != "")
    return np.select(
        [is_["SavingsPlanCoveredUsage"], is_["SavingsPlanRecurringFee"],
         is_["SavingsPlanNegation"] | is_["SavingsPlanUpfrontFee"], is_["DiscountedUsage"], is_["RIFee"], ri_fee],
        [num["savings_plan_savings_plan_effective_cost"],
         num["savings_plan_total_commitment_to_date"] - num["savings_plan_used_commitment"], 0.0,
         num["reservation_effective_cost"],
         num["reservation_unused_amortized_upfront_fee_for_billing_period"] + num["reservation_unused_recurring_fee"],
         0.0], numbers(b[0], t, b[2], "line_item_unblended_cost"))


def _cur_family(t: pa.Table) -> pa.Array:
    """product_product_family, else the product map's product_family (CUR 2.0 keeps the rest in a map)."""
    family = strings(t, "product_product_family")
    if "product" not in t.column_names or "product_product_family" in t.column_names:
        return family
    col = t.column("product").combine_chunks()
    if pa.types.is_map(col.type):
        got = pc.map_lookup(col, pa.scalar("product_family", col.type.key_type), "first")
    else:
        got = pa.array([_json_get(v, "product_family") for v in col.cast(pa.string()).to_pylist()], pa.string())
    return pc.fill_null(got.cast(pa.string()), "")


def _json_get(v: Any, key: str) -> Any:
    try:
        return json.loads(v).get(key) if v else None
    except (ValueError, AttributeError):
        return None


def _cur(b: Batch, p: CostParams) -> pa.Table:
    t = b[1]
    kind = strings(t, "line_item_line_item_type")
    amount = cur_amortised(b, kind) if p.basis == "amortised" else numbers(b[0], t, b[2], "line_item_unblended_cost")
    sp_arn, ri_arn = strings(t, "savings_plan_savings_plan_a_r_n"), strings(t, "reservation_reservation_a_r_n")
    transfer = pc.if_else(pc.match_substring(strings(t, "line_item_usage_type"), "DataTransfer"),
                          pa.scalar("DataTransfer"), pa.scalar(""))
    return _norm(b, start=times(b[0], t, b[2], "line_item_usage_start_date"),
                 end=times(b[0], t, b[2], "line_item_usage_end_date"), amount=amount,
                 currency=_currency_col(b, "line_item_currency_code"), service=strings(t, "line_item_product_code"),
                 category=_cur_family(t), detail=transfer, kind=kind, resource=strings(t, "line_item_resource_id"),
                 commitment=pc.if_else(pc.not_equal(ri_arn, ""), ri_arn, sp_arn),
                 prepaid=np.asarray(pc.is_in(kind, pa.array(sorted(CUR_PREPAID)))),
                 tag_ok=tag_mask(t, "resource_tags", p.tags, flat_prefix="resource_tags_"))


def cur_item(code: str, family: str, usage_type: str, kind: str = "") -> str | None:
    if kind in CUR_COMMITMENT_FEES:
        return "capacity"
    if family == "Data Transfer" or "DataTransfer" in usage_type or code in CUR_NETWORK:
        return "network"
    if code in CUR_MONITORING:
        return "monitoring"
    if code in CUR_STORAGE or family in ("Storage", "Storage Snapshot", "System Operation", "Provisioned Throughput"):
        return "storage"
    return "capacity" if code in CUR_CAPACITY else None


# negative line types that are the price's own mechanism (billed basis: a Savings Plan's negation of the usage it
# covers, the contract's discounts): netted into their item, as AWS nets them; any other negative line is listed apart
CUR_NETS = frozenset({"SavingsPlanNegation", "EdpDiscount", "BundledDiscount", "PrivateRateDiscount",
                      "DistributorDiscount", "Discount", "SppDiscount", "RiVolumeDiscount"})
CUR = Format(item_of=cur_item, apart_of=CUR_APART.get, nets=CUR_NETS)


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


# credits a price already carries (commitments and sustained use, contract discounts) are netted under the amortised
# basis, as FOCUS's EffectiveCost nets them; any other credit (promotion, free tier…) is listed apart
GCP_NETTED = {"COMMITTED_USAGE_DISCOUNT", "COMMITTED_USAGE_DISCOUNT_DOLLAR_BASE", "SUSTAINED_USAGE_DISCOUNT",
              "DISCOUNT", "FEE_UTILIZATION_OFFSET"}
GCP_COLUMNS = ("usage_start_time", "usage_end_time", "cost", "currency")


def _gcp_item(service: str, sku: str, detail: str, kind: str) -> str | None:
    return gcp_item(service, sku)


def _credit_list(v: Any) -> list[Row]:
    if blank(v):
        return []
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except ValueError:
            raise ValueError(f"expected credits as a JSON list (got {v[:60]!r})") from None
    if not isinstance(v, list):
        raise ValueError("expected credits as a list of {name, amount, type}")
    return [c for c in v if isinstance(c, dict)]


def _first_col(t: pa.Table, *names: str) -> pa.Array:
    return next((strings(t, n) for n in names if n in t.column_names), strings(t, names[0]))


def _gcp(b: Batch, p: CostParams) -> pa.Table:
    """One line per row (cost, plus the netted credits under the amortised basis), and one per credit listed
    apart; BigQuery's nested record, a CSV's dotted header or a view's `service_description` alike."""
    t = b[1]
    base = _norm(b, start=times(b[0], t, b[2], "usage_start_time"), end=times(b[0], t, b[2], "usage_end_time"),
                 amount=numbers(b[0], t, b[2], "cost"), currency=_currency_col(b, "currency"),
                 service=_first_col(t, "service.description", "service_description"),
                 category=_first_col(t, "sku.description", "sku_description"),
                 kind=pc.fill_null(_first_col(t, "cost_type"), "regular"),
                 resource=_first_col(t, "resource.name", "resource_name", "resource.global_name"),
                 tag_ok=tag_mask(t, "labels", p.tags))
    if "credits" not in t.column_names:
        return base
    amounts = base.column("amount").to_numpy().copy()
    extra: list[tuple[int, str, float]] = []
    for i, v in enumerate(t.column("credits").to_pylist()):
        try:
            for c in _credit_list(v):
                kind, value = str(c.get("type") or c.get("name") or "credit"), to_float(c.get("amount", 0))
                if kind in GCP_NETTED:
                    amounts[i] += value if p.basis == "amortised" else 0.0
                else:
                    extra.append((i, kind, value))
        except ValueError as exc:
            raise fail(b[0], b[2] + i, "credits", str(exc)) from None
    base = base.set_column(NORM.index("amount"), "amount", pa.array(amounts))
    if not extra:
        return base
    rows = base.take(pa.array([i for i, _, _ in extra]))
    rows = rows.set_column(NORM.index("amount"), "amount", pa.array([v for _, _, v in extra], pa.float64()))
    rows = rows.set_column(NORM.index("kind"), "kind", pa.array([f"credit:{k}" for _, k, _ in extra]))
    return pa.concat_tables([base, rows])


def _gcp_apart(kind: str) -> str | None:
    if kind.startswith("credit:"):
        return f"credit {kind[len('credit:'):]}"
    return "adjustment" if kind == "adjustment" else None


GCP = Format(item_of=_gcp_item, apart_of=_gcp_apart)


# --- a GPU cloud's invoice lines ------------------------------------------------------------------------------------

INVOICE_COLUMNS = ("period_start", "period_end", "amount", "currency", "item")
INVOICE_ITEMS = ("capacity", "storage", "network", "monitoring", "none")


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


def _invoice(b: Batch, p: CostParams) -> pa.Table:
    """Columns period_start, period_end (dates: billing days as the provider closes them; or times with an
    offset), amount, currency, item (capacity, storage, network, monitoring or none), and optionally service,
    resource, commitment, description. A period of dates covers the billing days from the first to the last."""
    t = b[1]
    start = times(b[0], t, b[2], "period_start", parse=lambda v: _billing_day(v, p, "open"))
    end = times(b[0], t, b[2], "period_end", parse=lambda v: _billing_day(v, p, "close"))
    if (end < start).any():
        raise fail(b[0], b[2] + int(np.argmax(end < start)), "period_end", "before period_start")
    item = strings(t, "item")
    ok = np.asarray(pc.is_in(item, pa.array(INVOICE_ITEMS)), dtype=bool)
    if not ok.all():
        bad = int(np.argmin(ok))
        raise fail(b[0], b[2] + bad, "item", f"expected {', '.join(INVOICE_ITEMS[:-1])} or none (got "
                                            f"{item[bad].as_py()!r})")
    service = strings(t, "service")
    commitment = strings(t, "commitment")
    return _norm(b, start=start, end=end, amount=numbers(b[0], t, b[2], "amount"),
                 currency=_currency_col(b, "currency"),
                 service=pc.if_else(pc.equal(service, ""), pa.scalar("invoice"), service),
                 category=strings(t, "description"), detail=item, resource=strings(t, "resource"),
                 commitment=commitment, prepaid=np.asarray(pc.not_equal(commitment, "")),
                 tag_ok=np.zeros(t.num_rows, bool))


INVOICE = Format(item_of=lambda s, c, detail, k: None if detail == "none" else detail, apart_of=lambda k: None)


READERS: dict[str, tuple[str, tuple[str, ...], Format, Callable[[Batch, CostParams], pa.Table]]] = {
    "focus": ("a FOCUS 1.0–1.2 export (CSV, gzip CSV or Parquet)", FOCUS_COLUMNS, FOCUS, _focus),
    "cur": ("an AWS CUR export (CUR 2.0 or legacy; CSV, gzip CSV or Parquet)", CUR_COLUMNS, CUR, _cur),
    "gcp": ("a Google Cloud BigQuery billing export (JSON lines, JSON, CSV or Parquet)", GCP_COLUMNS, GCP, _gcp),
    "invoice": ("invoice lines (CSV: period_start, period_end, amount, currency, item)", INVOICE_COLUMNS, INVOICE,
                _invoice),
}
WANTED = {"focus": (*FOCUS_COLUMNS, "ServiceSubcategory", "ResourceId", "CommitmentDiscountId", "ChargeClass",
                    "Tags"),
          "cur": (*CUR_COLUMNS, "line_item_usage_type", "product_product_family", "line_item_resource_id",
                  "resource_tags", *CUR_AMORTISED),
          "gcp": (*GCP_COLUMNS, "service.description", "service_description", "sku.description", "sku_description",
                  "cost_type", "resource.name", "resource_name", "resource.global_name", "labels", "credits"),
          "invoice": (*INVOICE_COLUMNS, "service", "resource", "commitment", "description")}


def _wanted(kind: str, export: Export, p: CostParams) -> list[str]:
    extra: list[str] = []
    if kind == "cur":  # legacy CUR's one column per tag: only those of the selection's keys
        keys = {norm_key(k) for k in p.tags}
        extra = [n for n in export.names if n.startswith("resource_tags_")
                 and norm_key(n[len("resource_tags_"):]) in keys]
        if not export.has("product_product_family"):
            extra.append("product")
    return [*WANTED[kind], *extra]


def read_bill(kind: str, path: str | Path, p: CostParams, window: ReviewWindow) -> tuple[dict[tuple, list[float]], Format,
                                                                                 int, int]:
    """(groups, the format's item map, lines read, lines not selected), the export read a batch at a time."""
    if kind not in READERS:
        raise BadInputError(f"unknown bill format {kind!r}; expected one of {', '.join(READERS)}", source="k3 import")
    check_selector(p)
    what, required, fmt, normalise = READERS[kind]
    export = open_export(path, what)
    export.require(required if kind != "gcp" else GCP_COLUMNS, what)
    groups: dict[tuple, list[float]] = {}
    rows = not_selected = 0
    for first, table in export.batches(_wanted(kind, export, p)):
        rows += table.num_rows
        not_selected += fold(normalise((export, table, first), p), p, window, groups)
    if rows == 0:
        raise BadInputError(f"no line; expected {what} with at least one line", source=str(path))
    return groups, fmt, rows, not_selected
