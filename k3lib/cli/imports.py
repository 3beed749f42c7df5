"""`k3 import SOURCE`: a team's own records as the review's input files — bills (FOCUS, AWS CUR 2.0, Google
Cloud's billing export, a GPU cloud's invoice lines), incidents (PagerDuty, Opsgenie), worklogs (Jira, Tempo) and
API usage. The options are `--set` overrides of the `imports:` parameters (parameters/imports.example.yaml)."""

from __future__ import annotations

import argparse
import json

from ..core.errors import BadInputError

BILLS = {"focus": "a FOCUS 1.0–1.2 cost export (CSV, gzip CSV or Parquet; AWS, Google Cloud, Azure, OCI)",
         "cur": "an AWS CUR 2.0 or legacy CUR export (CSV, gzip CSV or Parquet), amortised as AWS amortises it",
         "gcp": "Google Cloud's BigQuery billing export (JSON lines, JSON, CSV with dotted headers, or Parquet)",
         "invoice": "a GPU cloud's invoice lines (CSV: period_start, period_end, amount, currency, item), billing "
                    "days closing at a stated local hour"}
OTHERS = {"pagerduty": "PagerDuty incidents (REST or Analytics raw incidents; JSON or CSV)",
          "opsgenie": "Opsgenie incidents (JSON or CSV)",
          "jira": "Jira worklogs (the CSV's Log Work columns, REST worklogs, issues with their worklogs) or Tempo's "
                  "worklog export (CSV, v4 JSON)",
          "usage": "per-request usage: chat completions, OpenAI Batch output, Anthropic Message Batch results, a "
                   "LiteLLM spend log or a gateway's request log (JSON lines, a JSON array or one object)"}
WRITES = {**{k: "costs.yaml" for k in BILLS}, "pagerduty": "incidents.csv", "opsgenie": "incidents.csv",
          "jira": "hours.csv", "usage": "costs.yaml"}


def _common(p: argparse.ArgumentParser, kind: str) -> None:
    p.add_argument("sources", nargs="+" if kind in BILLS else None, metavar="EXPORT", help="the exported file" +
                   ("(s): each is one source of the costs file" if kind in BILLS else ""))
    p.add_argument("--out", required=True, metavar="FILE",
                   help=f"the review's {WRITES[kind]} to write (updated in place when it exists)")
    p.add_argument("-p", "--params", action="append", default=[], metavar="FILE",
                   help="parameters file with an imports: section (parameters/imports.example.yaml); repeatable")
    p.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE", dest="sets",
                   help="override one parameter, e.g. --set imports.incidents.timezone=Europe/Paris")
    p.add_argument("--window", metavar="START/END", help="the review's window, e.g. 2026-07-24T00:00:00Z/"
                                                         "2026-08-14T00:00:00Z (end excluded)")
    p.add_argument("--review", metavar="FILE", help="take the window from this review parameters file")


def _costs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tag", action="append", default=[], metavar="KEY=VALUE",
                   help="select lines carrying this tag (repeat: all must match)")
    p.add_argument("--resource", action="append", default=[], metavar="ID",
                   help="select lines of this resource id (a glob pattern is allowed); repeatable")
    p.add_argument("--service", action="append", default=[], metavar="NAME", help="only this service; repeatable")
    p.add_argument("--all-rows", action="store_true", help="the whole export is the deployment's")
    p.add_argument("--basis", choices=("amortised", "billed"), help="amortised (default: FOCUS EffectiveCost, CUR "
                                                                    "amortised) or billed")
    p.add_argument("--commitment", action="append", default=[], metavar="ID=START/END",
                   help="spread this one-time purchase (reservation, capacity block) over its term; repeatable")


def _money(p: argparse.ArgumentParser) -> None:
    p.add_argument("--currency", metavar="CODE", help="the review's currency (ISO 4217), e.g. EUR")
    p.add_argument("--rate", action="append", default=[], metavar="CUR=RATE@DATE",
                   help="units of the review's currency per unit of CUR, as published on DATE (recorded in "
                        "costs.yaml), e.g. USD=0.92@2026-08-14; repeatable")


def add_import_parser(sub: argparse._SubParsersAction, parser_class: type) -> None:
    im = sub.add_parser("import", help="turn a team's records into the review's input files",
                        description="Read an export the team already has and write the review's input file with a "
                                    "provenance header (source, sha256, filters, window, what was mapped, what was "
                                    "left blank). Nothing is invented: what the export cannot say stays blank. "
                                    "Exit 0 written, 2 bad input.")
    isub = im.add_subparsers(dest="source_kind", metavar="SOURCE", parser_class=parser_class)
    for kind, what in {**BILLS, **OTHERS}.items():
        p = isub.add_parser(kind, help=f"read {what}", description=f"Read {what}; write {WRITES[kind]}.")
        _common(p, kind)
        if kind in BILLS:
            _costs(p)
            _money(p)
        if kind in ("pagerduty", "opsgenie"):
            p.add_argument("--postmortems", metavar="FILE", help="CSV: id, category and the drill's answers")
            p.add_argument("--service", action="append", default=[], metavar="NAME",
                           help="only incidents of this service; repeatable")
            p.add_argument("--hours", metavar="FILE",
                           help="(pagerduty, Analytics export) also write the off-hours effort into this hours.csv")
            p.add_argument("--force", action="store_true", help="overwrite answers typed into the output by hand")
        if kind == "jira":
            p.add_argument("--force", action="store_true", help="replace hand-set rows of the mapped categories")
            p.add_argument("--issues", metavar="FILE", help="Jira's issues export (search JSON or CSV): resolves "
                                                            "worklogs that name their issue by id (REST, Tempo v4)")
        if kind == "usage":
            _money(p)
            p.add_argument("--batch-dates", metavar="START/END",
                           help="a batch's created_at/ended_at: places its results, which carry no time")
            p.add_argument("--all-rows", action="store_true",
                           help="lines without a time are the window's (the operator's word)")
            for name in ("input", "cached-input", "cache-write", "output"):
                p.add_argument(f"--price-{name}", type=float, metavar="PRICE",
                               help=f"{name.replace('-', ' ')} price per million tokens (the 'default' model)")
            p.add_argument("--price-currency", metavar="CODE", help="the prices' currency (default USD)")
            p.add_argument("--tasks", metavar="FILE", help="the review's task log: bill its API-path tasks only")
            p.add_argument("--task-field", metavar="PATH", help="where a line holds its task id, e.g. metadata.task_id")
        p.set_defaults(func=cmd_import, import_kind=kind)


def _pair(text: str, sep: str, what: str, flag: str) -> tuple[str, str]:
    key, ok, value = text.partition(sep)
    if not ok or not key or not value:
        raise BadInputError(f"expected {what} (got {text!r})", source=flag)
    return key, value


def _sets(ns: argparse.Namespace) -> list[str]:
    """The options as `--set` overrides (applied after the files and the user's own --set)."""
    out: list[str] = []
    j = json.dumps
    if ns.window:
        from ..renewal.imports.commands import parse_window

        w = parse_window(ns.window, "--window")  # a bad window is named as --window, before anything is read
        out += [f"imports.window.start={j(w.start.isoformat())}", f"imports.window.end={j(w.end.isoformat())}"]
    for t in getattr(ns, "tag", []):
        k, v = _pair(t, "=", "KEY=VALUE", "--tag")
        out.append(f"imports.costs.tags.{k}={j(v)}")
    for flag, key in (("resource", "resources"), ("service", "services")):
        if ns.import_kind in BILLS and getattr(ns, flag, None):
            out.append(f"imports.costs.{key}={j(getattr(ns, flag))}")
    if getattr(ns, "all_rows", False):
        out.append(f"imports.{'usage' if ns.import_kind == 'usage' else 'costs'}.all_rows=true")
    if getattr(ns, "basis", None):
        out.append(f"imports.costs.basis={ns.basis}")
    if getattr(ns, "commitment", None):
        terms = []
        for c in ns.commitment:
            cid, span = _pair(c, "=", "ID=START/END", "--commitment")
            start, end = _pair(span, "/", "ID=START/END", "--commitment")
            terms.append({"id": cid, "start": start, "end": end})
        out.append(f"imports.costs.commitments={j(terms)}")
    if getattr(ns, "currency", None):
        out.append(f"imports.currency={ns.currency}")
    if getattr(ns, "rate", None):
        rates = []
        for r in ns.rate:
            cur, rest = _pair(r, "=", "CUR=RATE@DATE", "--rate")
            rate, date = _pair(rest, "@", "CUR=RATE@DATE", "--rate")
            rates.append({"from": cur, "rate": rate, "date": date})
        out.append(f"imports.conversions={j(rates)}")
    return out + _incident_sets(ns) + _usage_sets(ns) + _jira_sets(ns)


def _incident_sets(ns: argparse.Namespace) -> list[str]:
    if ns.import_kind not in ("pagerduty", "opsgenie"):
        return []
    out = [f"imports.incidents.services={json.dumps(ns.service)}"] if ns.service else []
    if ns.postmortems:
        out.append(f"imports.incidents.postmortems={json.dumps(ns.postmortems)}")
    return out


def _jira_sets(ns: argparse.Namespace) -> list[str]:
    if ns.import_kind != "jira" or not ns.issues:
        return []
    return [f"imports.hours.issues_export={json.dumps(ns.issues)}"]


def _usage_sets(ns: argparse.Namespace) -> list[str]:
    if ns.import_kind != "usage":
        return []
    out = []
    prices = {k: getattr(ns, f"price_{k.replace('-', '_')}") for k in ("input", "cached-input", "cache-write",
                                                                        "output")}
    if any(v is not None for v in prices.values()):
        if prices["input"] is None or prices["output"] is None:
            raise BadInputError("expected both --price-input and --price-output (and --price-cached-input for cache "
                                "hits)", source="k3 import usage")
        price = {"input_per_mtok": prices["input"], "output_per_mtok": prices["output"],
                 "cached_input_per_mtok": prices["cached-input"], "cache_write_input_per_mtok": prices["cache-write"],
                 "currency": ns.price_currency or "USD"}
        out.append(f"imports.usage.prices={json.dumps({'default': price})}")
    if ns.tasks:
        out.append(f"imports.usage.tasks={json.dumps(ns.tasks)}")
    if ns.task_field:
        out.append(f"imports.usage.task_field={json.dumps(ns.task_field)}")
    if ns.batch_dates:
        from ..renewal.imports.commands import parse_window

        w = parse_window(ns.batch_dates, "--batch-dates")
        out.append(f"imports.usage.batch={json.dumps({'start': w.start.isoformat(), 'end': w.end.isoformat()})}")
    return out


def cmd_import(ns: argparse.Namespace) -> int:
    from ..renewal.imports import commands as c
    from ..renewal.imports.params import load_import_params

    params = load_import_params(ns.params, [*ns.sets, *_sets(ns)]).imports
    window = c.window_of(params, ns.review)
    kind = ns.import_kind
    if kind in BILLS:
        lines = [line for src in ns.sources for line in c.import_bill(kind, src, ns.out, params, window)]
    elif kind in ("pagerduty", "opsgenie"):
        lines = c.import_incidents(kind, ns.sources, ns.out, params, window, ns.hours, ns.force)
    elif kind == "jira":
        lines = c.import_worklogs(ns.sources, ns.out, params, window, ns.force)
    else:
        lines = c.import_usage(ns.sources, ns.out, params, window)
    for line in lines:
        print(line)
    return 0
