"""The demo's records as a team holds them: from a generated scenario's hand-written sheet, the exports it was
copied from — a FOCUS bill in USD (another team's lines, lines outside the window, a monthly line across the
window's edge, a prepaid commitment, a database line that is no item), PagerDuty's Analytics raw incidents with the
postmortems, Jira worklogs with labels, and a gateway log of the API path's requests with cached tokens — then
imported back (`k3 review --demo SCENARIO --from-exports`). The imported files decide as the sheet does."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from pathlib import Path
from typing import Any

import yaml

from ..demo import materialise
from ..inputs import COST_ITEMS, FIVE_QUESTIONS, read_costs, read_hours, read_incidents, read_tasks
from .commands import import_bill, import_incidents, import_usage, import_worklogs
from .params import ImportParams, load_import_params
from .provenance import ReviewWindow, iso, write_text
from .tables import Row

RATE = 0.92  # EUR per USD, the demo's stated rate
RATE_DATE = "2026-08-14"
LABELS = {"install": "k3-install", "vllm-tuning": "k3-tuning", "monitoring": "k3-watch", "upgrades": "k3-upgrade",
          "failed-task-diagnosis": "k3-triage", "documentation": "k3-docs", "product-communication": "k3-sync",
          "out-of-hours": "k3-oncall", "api-comparison": "k3-api-compare"}
FOCUS_HEADER = ("BillingPeriodStart", "BillingPeriodEnd", "ChargePeriodStart", "ChargePeriodEnd", "ChargeCategory",
                "ChargeFrequency", "BilledCost", "EffectiveCost", "BillingCurrency", "ServiceName", "ServiceCategory",
                "ResourceId", "SkuId", "CommitmentDiscountId", "Tags")
TAG = {"app": "kimi-k3"}
OTHER_TAG = {"app": "search-index"}


def _day(start: dt.datetime, n: int) -> tuple[str, str]:
    a = start + dt.timedelta(days=n)
    return iso(a), iso(a + dt.timedelta(days=1))


def _focus_row(period: tuple[str, str], category: str, billed: float, effective: float, service: str,
               service_category: str, resource: str, tags: dict[str, str], commitment: str = "",
               kind: str = "Usage") -> list[str]:
    return ["2026-07-01T00:00:00Z", "2026-09-01T00:00:00Z", *period, kind, "Usage-Based" if kind == "Usage"
            else "One-Time", repr(billed), repr(effective), "USD", service, service_category, resource,
            f"sku-{service_category[:4].lower()}", commitment, json.dumps(tags) if tags else ""]


def focus_bill(costs: dict[str, float | None], window: ReviewWindow) -> str:
    """Daily lines per item in USD whose amortised, converted sum is the item's amount; storage partly as a
    monthly August line (prorated), capacity partly covered by a prepaid commitment."""
    days = (window.end - window.start).days
    rows: list[list[str]] = []
    services = {"capacity": ("Amazon Elastic Compute Cloud", "Compute", "i-0k3gpu"),
                "storage": ("Amazon Elastic Block Store", "Storage", "vol-0k3weights"),
                "network": ("AWS Data Transfer", "Networking", "i-0k3gpu"),
                "monitoring": ("Amazon CloudWatch", "Management and Governance", "k3-dashboards")}
    for item, (service, cat, resource) in services.items():
        amount = costs.get(item)
        if amount is None:
            continue
        usd = amount / RATE
        daily_days = days if item != "storage" else (dt.datetime(2026, 8, 1, tzinfo=dt.timezone.utc)
                                                     - window.start).days
        share = usd * daily_days / days
        for n in range(daily_days):
            if item == "capacity":  # half on demand, half covered by the prepaid commitment at its effective cost
                rows.append(_focus_row(_day(window.start, n), item, share / daily_days / 2, share / daily_days / 2,
                                       service, cat, resource, TAG))
                rows.append(_focus_row(_day(window.start, n), item, 0.0, share / daily_days / 2, service, cat,
                                       resource, TAG, commitment="cr-k3-block"))
            else:
                rows.append(_focus_row(_day(window.start, n), item, share / daily_days, share / daily_days, service,
                                       cat, resource, TAG))
        if item == "storage":  # August as one monthly line: 13 of its 31 days fall in the window
            aug = usd - share
            rows.append(_focus_row(("2026-08-01T00:00:00Z", "2026-09-01T00:00:00Z"), item, aug * 31 / 13,
                                   aug * 31 / 13, service, cat, resource, TAG, kind="Usage"))
    rows.append(_focus_row(("2026-07-20T00:00:00Z", "2026-07-21T00:00:00Z"), "capacity", 900.0, 900.0,
                           "Amazon Elastic Compute Cloud", "Compute", "i-0k3gpu", TAG))  # before the window
    rows.append(_focus_row(_day(window.start, 2), "capacity", 4000.0, 4000.0, "Amazon Elastic Compute Cloud",
                           "Compute", "i-0search", OTHER_TAG))  # another team's instance
    rows.append(_focus_row(_day(window.start, 0), "capacity", 9000.0, 0.0, "Amazon EC2 Capacity Blocks", "Compute",
                           "cr-k3-block", TAG, commitment="cr-k3-block", kind="Purchase"))  # prepaid: amortised
    rows.append(_focus_row(_day(window.start, 3), "none", 12.5, 12.5, "Amazon RDS", "Databases", "db-k3-meta", TAG))
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(FOCUS_HEADER)
    w.writerows(rows)
    return buf.getvalue()


def pagerduty_export(incidents_csv: Path, window: ReviewWindow) -> tuple[str, str]:
    """(Analytics raw incidents JSON, postmortems CSV) behind the sheet's incidents."""
    data, posts = [], io.StringIO()
    w = csv.writer(posts, lineterminator="\n")
    w.writerow(("id", "category", *FIVE_QUESTIONS))
    for n, inc in enumerate(read_incidents(incidents_csv), start=1):
        minutes = inc.minutes_to_recover or 0.0
        resolved = inc.started_at + dt.timedelta(minutes=minutes)
        data.append({"id": f"Q{n:04d}K3", "incident_number": 4100 + n, "description": f"kimi-k3 {inc.category}",
                     "service_name": "kimi-k3-vllm", "created_at": iso(inc.started_at), "resolved_at": iso(resolved),
                     "seconds_to_resolve": round(minutes * 60), "seconds_to_first_ack": 120,
                     "engaged_seconds": round(minutes * 60 * 1.5), "user_defined_effort_seconds": None,
                     "urgency": "high", "status": "resolved"})
        w.writerow((f"Q{n:04d}K3", inc.category,
                    *["" if getattr(inc, q) is None else str(getattr(inc, q)).lower() for q in FIVE_QUESTIONS]))
    data.append({"id": "QOTHER1", "incident_number": 4090, "description": "search-index disk full",
                 "service_name": "search-index", "created_at": iso(window.start + dt.timedelta(days=4)),
                 "resolved_at": iso(window.start + dt.timedelta(days=4, hours=1)), "seconds_to_resolve": 3600})
    return json.dumps({"data": data, "more": False}, indent=1) + "\n", posts.getvalue()


def jira_worklogs(hours_csv: Path, window: ReviewWindow) -> str:
    """The all-fields CSV: one issue per (week, category) with repeated Labels and Log Work columns."""
    rows = []
    for n, h in enumerate(read_hours(hours_csv), start=1):
        year, week = int(h.week[:4]), int(h.week.split("W")[1])
        monday = dt.datetime.fromisocalendar(year, week, 1).replace(hour=10, tzinfo=dt.timezone.utc)
        # logged on days of the week inside the window (its first and last weeks are partly outside)
        first_day = max(monday, window.start.replace(hour=10))
        last_day = min(first_day + dt.timedelta(days=2), window.end - dt.timedelta(hours=14))
        seconds = round(h.hours * 3600)
        first = seconds // 2 // 360 * 360
        logs = [(first_day, first), (last_day, seconds - first)]
        cells = [f"{h.category} work;{t.strftime('%d/%b/%y %I:%M %p')};ops{n % 3};{s}" for t, s in logs if s]
        rows.append([f"K3OPS-{n}", f"{h.category} {h.week}", LABELS[h.category], "kimi-k3", str(seconds), *cells,
                     *[""] * (2 - len(cells))])
    rows.append(["K3OPS-900", "hiring loop", "hiring", "", "7200",
                 f"interviews;{(window.start + dt.timedelta(days=5)).strftime('%d/%b/%y %I:%M %p')};ops1;7200", ""])
    rows.append(["K3OPS-901", "before the window", LABELS["install"], "kimi-k3", "3600",
                 f"early setup;{(window.start - dt.timedelta(days=3)).strftime('%d/%b/%y %I:%M %p')};ops2;3600", ""])
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["Issue key", "Summary", "Labels", "Labels", "Time Spent", "Log Work", "Log Work"])
    w.writerows(rows)
    return buf.getvalue()


def usage_log(tasks_csv: Path, bill_eur: float | None, window: ReviewWindow
              ) -> tuple[str, dict[str, float | str] | None]:
    """A gateway log of the API path's requests (a cached prefix on most), and the prices that bill them at the
    sheet's amount; None prices when the sheet's API bill is blank."""
    api = [t for t in read_tasks(tasks_csv) if t.path == "api"]
    lines: list[Row] = []
    totals = [0, 0, 0]
    for n, t in enumerate(api):
        prompt = 4_000 + (n * 7_919) % 26_000
        cached = prompt * (60 + n % 35) // 100
        completion = 300 + (n * 3_571) % 3_700
        totals = [totals[0] + prompt - cached, totals[1] + cached, totals[2] + completion]
        sent = t.started_at or t.submitted_at
        when = sent.timestamp()
        lines.append({"timestamp": iso(sent), "metadata": {"task_id": t.task_id},
                      "response": {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": int(when),
                                   "model": "kimi-k3", "usage": {"prompt_tokens": prompt, "completion_tokens":
                                                                 completion, "total_tokens": prompt + completion,
                                                                 "prompt_tokens_details": {"cached_tokens": cached}}}})
        if n % 40 == 0:  # a 429 the client retried: not billed
            lines.append({"timestamp": iso(t.submitted_at), "metadata": {"task_id": t.task_id}, "status_code": 429,
                          "error": {"type": "rate_limit_exceeded"}})
    lines.append({"timestamp": iso(window.start + dt.timedelta(days=1)), "metadata": {"task_id": "chat-ui-7"},
                  "response": {"created": int(window.start.timestamp()) + 86400, "model": "kimi-k3",
                               "usage": {"prompt_tokens": 900, "completion_tokens": 80}}})  # not of the task set
    prices: dict[str, float | str] | None = None
    if bill_eur is not None and any(totals):
        unit = bill_eur / RATE * 1e6 / (totals[0] + 0.1 * totals[1] + 5 * totals[2])
        prices = {"input_per_mtok": unit, "cached_input_per_mtok": unit * 0.1, "output_per_mtok": unit * 5,
                  "currency": "USD"}
    return "".join(json.dumps(x) + "\n" for x in lines), prices


def write_exports(folder: str | Path, window: ReviewWindow) -> dict[str, Path]:
    """The exports behind the sheet in `folder` (tasks.csv, costs.yaml, incidents.csv, hours.csv), in
    `folder/exports/`, with the import parameters a team would write (`imports.yaml`)."""
    folder = Path(folder)
    out = folder / "exports"
    costs = read_costs(folder / "costs.yaml")
    amounts = {k: getattr(costs, k) for k in COST_ITEMS}
    pd_json, posts = pagerduty_export(folder / "incidents.csv", window)
    usage, prices = usage_log(folder / "tasks.csv", amounts["api_bill_same_tasks"], window)
    files = {"bill": ("bill.focus.csv", focus_bill(amounts, window)), "pagerduty": ("pagerduty.json", pd_json),
             "postmortems": ("postmortems.csv", posts), "jira": ("worklogs.jira.csv",
                                                                jira_worklogs(folder / "hours.csv", window)),
             "usage": ("gateway.jsonl", usage)}
    paths = {}
    for key, (name, text) in files.items():
        write_text(out / name, text)
        paths[key] = out / name
    params = {"imports": {
        "window": {"start": iso(window.start), "end": iso(window.end)}, "currency": "EUR",
        "conversions": [{"from": "USD", "rate": RATE, "date": RATE_DATE, "source": "the demo's stated rate"}],
        "costs": {"tags": TAG},  # the prepaid block is amortised by the bill's EffectiveCost
        "incidents": {"postmortems": "postmortems.csv", "services": ["kimi-k3-vllm"]},
        "hours": {"labels": {**{v: k for k, v in LABELS.items()}, "hiring": "none"}},
        "usage": {"prices": {"default": prices} if prices else {}, "task_field": "metadata.task_id",
                  "tasks": "../tasks.csv"}}}
    write_text(out / "imports.yaml", "# What the team states to import its records (k3 import -p imports.yaml)\n"
               + yaml.safe_dump(params, sort_keys=False))
    paths["params"] = out / "imports.yaml"
    return paths


def import_exports(folder: str | Path, window: ReviewWindow) -> dict[str, Path]:
    """Write the exports behind the sheet in `folder`, then import them into `folder/imported/`: costs.yaml (the
    sheet's hand-set items kept, the billed ones imported), incidents.csv and hours.csv."""

    folder = Path(folder)
    paths = write_exports(folder, window)
    section: ImportParams = load_import_params([paths["params"]])
    p = section.imports
    dest = folder / "imported"
    costs = read_costs(folder / "costs.yaml")
    sheet = {k: getattr(costs, k) for k in COST_ITEMS}
    for k in ("capacity", "storage", "network", "monitoring", "api_bill_same_tasks"):
        sheet[k] = None  # what the exports bring; the rest stays the team's own figures
    write_text(dest / "costs.yaml", "# The team's own figures; the billed items come from k3 import\ncurrency: EUR\n"
               + "".join(f"{k}: {'' if v is None else v}\n" for k, v in sheet.items()))
    import_bill("focus", paths["bill"], dest / "costs.yaml", p, window)
    if p.usage.prices:
        import_usage(paths["usage"], dest / "costs.yaml", p, window)
    import_incidents("pagerduty", paths["pagerduty"], dest / "incidents.csv", p, window)
    import_worklogs(paths["jira"], dest / "hours.csv", p, window)
    return {"costs": dest / "costs.yaml", "incidents": dest / "incidents.csv", "hours": dest / "hours.csv",
            **{f"export_{k}": v for k, v in paths.items()}}


def materialise_from_exports(params: Any, folder: str | Path) -> Any:
    """Demo parameters: the scenario's sheet generated into `folder` (as `review --demo` does), its exports written
    and imported, and the parameters pointing at the imported costs, incidents and hours (the task log and the
    series have no standard export: they stay the generated ones)."""

    params = materialise(params, folder)
    series = params.review.series
    got = import_exports(folder, ReviewWindow(series.start, series.end))
    inputs = params.review.inputs.model_copy(update={k: str(got[k]) for k in ("costs", "incidents", "hours")})
    return params.model_copy(update={"review": params.review.model_copy(update={"inputs": inputs})})
