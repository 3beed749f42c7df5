"""Re-validations over time: a trend page over every run folder under a folder (acceptance and renewal), and the
last runs' results in the Prometheus text format for node_exporter's textfile collector.

Each run is read through `k3lib.verdict.accepted` (the one place that knows the evidence keys); drift is
`k3lib.verdict.baseline`'s comparison with the accepted baseline: `--baseline RUN`, else the latest earlier acceptance run
that was accepted and signed, else the latest earlier accepted one. Nothing here writes into a run folder.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import html
from pathlib import Path
from typing import Any, Sequence

import plotly.graph_objects as go  # the history's commands import this module only when they run
from plotly.offline import get_plotlyjs
from prometheus_client import CollectorRegistry, Gauge, generate_latest

from ..core.errors import BadInputError, K3Error
from ..core.evidence import CapacityData, PrefixCacheData
from ..core.numbers import figure
from ..core.store import MANIFEST, RunStore, atomic_write_bytes
from ..verdict import accepted as acc
from ..verdict.baseline import compare_with_baseline
from .markup import _badge
from .pages import PLOTLY_JS
from .shapes import RunFigures

ACCEPTANCE_DECISIONS = ("production", "limited-observation", "capacity-extension", "environment-rebuild")
RENEWAL_DECISIONS = ("renew", "reduce", "dual-circuit", "exit-to-api")
ACCEPTED = ("production", "limited-observation")
SHEET_STATUSES = ("pass", "fail", "warn", "open")
esc = html.escape


@dataclasses.dataclass(frozen=True)
class RunPoint:
    """One run folder as the trend sees it. A value that the evidence does not hold is None (a gap, not zero)."""

    run_id: str
    root: Path
    kind: str  # acceptance | renewal | explorer (the OOM explorer's bursts: no decision)
    label: str
    started: dt.datetime
    duration_s: float | None
    decision: str | None
    verified: bool  # every file matches the manifest
    signed: bool
    checks: tuple[tuple[str, str], ...]  # (id, status) of the sheet (acceptance) or of the analyses (renewal)
    saturation_concurrency: float | None = None
    ttft_p95_at_planned_ms: float | None = None
    cache_gain_pct: float | None = None
    queue_p95_at_planned_s: float | None = None
    tool_call_validity: float | None = None
    baseline: str | None = None
    drift: tuple[str, ...] = ()
    unmeasured: tuple[str, ...] = ()  # metrics the baseline banded that this run did not measure
    reopened: tuple[str, ...] = ()
    compare_note: str = ""


def _stamp(run_id: str) -> dt.datetime | None:
    try:
        return dt.datetime.strptime(run_id[:16], "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.timezone.utc)
    except ValueError:
        return None


def _iso(text: Any) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None


def _label(run_id: str) -> str:
    parts = run_id.split("-", 2)
    return parts[2] if len(parts) == 3 else ""


def find_runs(folder: Path) -> list[Path]:
    """Run folders directly under `folder` (or one level deeper, e.g. outputs/<site>/<run>), oldest first."""
    if not folder.is_dir():
        raise BadInputError("not a folder", source=str(folder))
    found = [p for p in folder.iterdir() if (p / MANIFEST).is_file()]
    found += [q for p in folder.iterdir() if p.is_dir() and not (p / MANIFEST).is_file()
              for q in p.iterdir() if (q / MANIFEST).is_file()]
    return sorted(found, key=lambda p: (_stamp(p.name) or dt.datetime.fromtimestamp(p.stat().st_mtime,
                                                                                     dt.timezone.utc), p.name))


def read_point(root: Path) -> RunPoint:
    run = acc.read_run(root)
    store = RunStore(root)
    kind = "renewal" if (root / "notebooks" / "19_renewal.ipynb").is_file() or \
        (run.decision or {}).get("condition") is not None else "acceptance"
    if kind == "acceptance" and not run.records and run.decision is None and (root / "explore").is_dir():
        kind = "explorer"  # the OOM explorer's bursts (explore/): no axis, no decision, not a failed acceptance
    starts = [t for r in run.records.values() for t in [_iso(r.started_at)] if t]
    ends = [t for r in run.records.values() for t in [_iso(r.finished_at)] if t]
    started = _stamp(root.name) or (min(starts) if starts else dt.datetime.fromtimestamp(root.stat().st_mtime,
                                                                                       dt.timezone.utc))
    duration = (max(ends) - min(starts)).total_seconds() if starts and ends else None
    checks = tuple((str(i.get("id")), str(i.get("status"))) for i in (run.decision or {}).get("checklist") or []
                   if isinstance(i, dict))
    values: RunFigures = {}
    if kind == "acceptance":
        # the axes' typed data (k3lib.core.evidence): declared fields, checked when the records were read
        cap, pc = run.records.get("capacity"), run.records.get("prefix_cache")
        capacity = cap.typed() if cap is not None else None
        prefix = pc.typed() if pc is not None else None
        planned = (run.params.get("contract") or {}).get("planned_concurrency")
        if isinstance(capacity, CapacityData):
            values["saturation_concurrency"] = _num(capacity.saturation_point)
            found = capacity.step_at(planned)
            values["ttft_p95_at_planned_ms"] = _num(found[1].ttft_p95_ms if found else None)
        if isinstance(prefix, PrefixCacheData):
            values["cache_gain_pct"] = _num(prefix.ttft_gain_pct)
        values["queue_p95_at_planned_s"] = _num(acc.queue_time_p95_s(run).value)
        values["tool_call_validity"] = _num(acc.tool_call_validity(run).value)
    return RunPoint(root.name, root, kind, _label(root.name), started, duration,
                    (run.decision or {}).get("decision"), not store.verify(), (root / "signature.json").is_file(),
                    checks, **values)


def _num(value: Any) -> float | None:
    try:
        return None if value is None or isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        return None


def with_drift(points: Sequence[RunPoint], baseline: Path | None = None) -> list[RunPoint]:
    """Each acceptance run compared with the accepted baseline (never with itself)."""

    out = []
    for i, p in enumerate(points):
        if p.kind != "acceptance":
            out.append(p)
            continue
        base = baseline.resolve() if baseline else _default_baseline(points[:i])
        if base is None or base == p.root.resolve():
            out.append(dataclasses.replace(p, compare_note="no accepted baseline before this run"))
            continue
        try:
            cmp = compare_with_baseline(p.root, base)
        except K3Error as exc:
            out.append(dataclasses.replace(p, baseline=base.name, compare_note=f"not compared: {exc}"))
            continue
        out.append(dataclasses.replace(
            p, baseline=base.name, compare_note=cmp.headline(),
            drift=tuple(f.message for f in cmp.drift), unmeasured=tuple(f.message for f in cmp.unmeasured),
            reopened=tuple(f.message for f in cmp.reopen) + ((cmp.refused.message,) if cmp.refused else ())))
    return out


def _default_baseline(earlier: Sequence[RunPoint]) -> Path | None:
    accepted = [p for p in earlier if p.kind == "acceptance" and p.decision in ACCEPTED and p.verified]
    signed = [p for p in accepted if p.signed]
    chosen = (signed or accepted)[-1:] if (signed or accepted) else []
    return chosen[0].root.resolve() if chosen else None


# -- the trend page ----------------------------------------------------------------------------------------------

def _fig(points: Sequence[RunPoint], title: str, series: Sequence[tuple[str, str]], unit: str) -> str:
    acc = [p for p in points if p.kind == "acceptance"]
    if not acc:
        return ""
    fig = go.Figure()
    for attr, name in series:
        fig.add_trace(go.Scatter(x=[p.started for p in acc], y=[getattr(p, attr) for p in acc], mode="lines+markers",
                                 name=name, text=[p.run_id for p in acc], connectgaps=False))
    fig.update_layout(title=dict(text=title, font=dict(size=12)), height=260, width=440, template="plotly_white",
                      margin=dict(t=40, b=40, l=50, r=10), legend=dict(orientation="h", y=-0.3))
    fig.update_yaxes(title_text=unit)
    return "<div class='k3-fig'>" + fig.to_html(full_html=False, include_plotlyjs=False,
                                                config={"displaylogo": False}) + "</div>"


def _decision_fig(points: Sequence[RunPoint]) -> str:
    fig = go.Figure()
    for kind, _order in (("acceptance", ACCEPTANCE_DECISIONS), ("renewal", RENEWAL_DECISIONS)):
        pts = [p for p in points if p.kind == kind and p.decision]
        if pts:
            fig.add_trace(go.Scatter(x=[p.started for p in pts], y=[p.decision for p in pts], mode="markers+lines",
                                     name=kind, text=[p.run_id for p in pts], line=dict(shape="hv")))
    fig.update_yaxes(categoryorder="array", categoryarray=[*reversed(RENEWAL_DECISIONS),
                                                           *reversed(ACCEPTANCE_DECISIONS)])
    fig.update_layout(title=dict(text="Decision per run", font=dict(size=12)), height=260, width=440,
                      template="plotly_white", margin=dict(t=40, b=40, l=130, r=10),
                      legend=dict(orientation="h", y=-0.3))
    return "<div class='k3-fig'>" + fig.to_html(full_html=False, include_plotlyjs=False,
                                                config={"displaylogo": False}) + "</div>"


def _cell(value: Any) -> str:
    return "" if value is None else esc(figure(value))


def trend_html(points: Sequence[RunPoint], folder_name: str) -> str:
    rows = []
    for p in reversed(points):
        flags = ([f"REOPEN {m}" for m in p.reopened] + [f"DRIFT {m}" for m in p.drift]
                 + [f"UNMEASURED {m}" for m in p.unmeasured])
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in (
            esc(p.started.strftime("%Y-%m-%d %H:%M")), f"<a href='{esc(p.root.name)}/report/index.html'>"
            f"{esc(p.run_id)}</a>", esc(p.kind), _badge(p.decision or "none"),
            "yes" if p.verified else "<b>NO</b>", "yes" if p.signed else "no",
            _cell(p.saturation_concurrency), _cell(p.ttft_p95_at_planned_ms), _cell(p.cache_gain_pct),
            esc(p.baseline or ""), ("<br>".join(esc(f) for f in flags) or esc(p.compare_note)))) + "</tr>")
    head = "".join(f"<th>{h}</th>" for h in ("started (UTC)", "run", "kind", "decision", "hashes match", "signed",
                                             "saturation point", "TTFT p95 at planned (ms)", "cache gain (%)",
                                             "baseline", "drift against the baseline"))
    figs = (_decision_fig(points)
            + _fig(points, "Saturation point (concurrency)", [("saturation_concurrency", "saturation")], "concurrency")
            + _fig(points, "TTFT p95 at the planned concurrency", [("ttft_p95_at_planned_ms", "TTFT p95")], "ms")
            + _fig(points, "Prefix-cache TTFT gain", [("cache_gain_pct", "gain")], "%"))
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>k3kit history: {esc(folder_name)}"
            f"</title><style>{_style()}</style><script src='{PLOTLY_JS}'></script></head><body class='k3-index'>"
            f"<h1>Re-validations in {esc(folder_name)}</h1><p>{len(points)} runs; newest first. A blank is a value "
            "the run's evidence does not hold.</p><div class='k3-figs'>" + figs + "</div>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
            "</body></html>")


def _style() -> str:
    return ("body{font:13px/1.35 system-ui,sans-serif;max-width:1500px;margin:8px auto;padding:0 12px}"
            "table{border-collapse:collapse;width:100%}td,th{padding:2px 6px;border-bottom:1px solid #d0d7de;"
            "text-align:left;vertical-align:top}th{background:#f6f8fa}.k3-figs{display:flex;flex-wrap:wrap;gap:8px}"
            ".k3-fig{border:1px solid #d0d7de;border-radius:4px}")


# -- node_exporter textfile -------------------------------------------------------------------------------------

def textfile_registry(points: Sequence[RunPoint]) -> Any:
    """The last run of each kind as gauges. Decisions and check statuses are state sets (one series per possible
    value, 1 for the one that holds), so an alert can say `decision="production"} == 0`."""

    reg = CollectorRegistry()
    common = ["kind", "run", "label"]
    decision = Gauge("k3kit_decision", "Decision of the last run of this kind (1 for the decision taken).",
                     [*common, "decision"], registry=reg)
    check = Gauge("k3kit_check_status", "Status of each sheet item (acceptance) or analysis (renewal) of the last "
                                        "run (1 for the status it has).", [*common, "id", "status"], registry=reg)
    stamp = Gauge("k3kit_run_timestamp_seconds", "When the last run of this kind started (Unix time).", common,
                  registry=reg)
    duration = Gauge("k3kit_run_duration_seconds", "From the first axis' start to the last axis' end.", common,
                     registry=reg)
    verified = Gauge("k3kit_run_verified", "1 when every file of the run matches its manifest hash.", common,
                     registry=reg)
    signed = Gauge("k3kit_run_signed", "1 when the run carries signature.json.", common, registry=reg)
    drift = Gauge("k3kit_drift_metrics", "Metrics outside the accepted band against the baseline.",
                  [*common, "baseline"], registry=reg)
    unmeasured = Gauge("k3kit_drift_unmeasured_metrics", "Metrics the baseline has a band for that the run did not "
                       "measure (drift not ruled out).", [*common, "baseline"], registry=reg)
    reopened = Gauge("k3kit_sheet_reopened", "1 when the deployment changed since the baseline (the sheet reopens).",
                     [*common, "baseline"], registry=reg)
    gauges = {
        "saturation_concurrency": Gauge("k3kit_saturation_concurrency", "First concurrency step that saturated.",
                                        common, registry=reg),
        "ttft_p95_at_planned_ms": Gauge("k3kit_ttft_p95_at_planned_seconds", "TTFT p95 at the planned concurrency.",
                                        common, registry=reg),
        "cache_gain_pct": Gauge("k3kit_prefix_cache_ttft_gain_ratio", "Warm vs cold TTFT gain of the prefix cache.",
                                common, registry=reg),
        "tool_call_validity": Gauge("k3kit_tool_call_validity_ratio", "Share of tool calls with valid arguments.",
                                    common, registry=reg),
    }
    scale = {"ttft_p95_at_planned_ms": 1e-3, "cache_gain_pct": 1e-2}
    for kind, decisions in (("acceptance", ACCEPTANCE_DECISIONS), ("renewal", RENEWAL_DECISIONS)):
        mine = [p for p in points if p.kind == kind]
        if not mine:
            continue
        p = mine[-1]
        labels = {"kind": kind, "run": p.run_id, "label": p.label}
        for d in dict.fromkeys([*decisions, p.decision or "none"]):
            decision.labels(**labels, decision=d).set(1 if d == (p.decision or "none") else 0)
        for cid, status in p.checks:
            for s in dict.fromkeys([*SHEET_STATUSES, status]):
                check.labels(**labels, id=cid, status=s).set(1 if s == status else 0)
        stamp.labels(**labels).set(p.started.timestamp())
        if p.duration_s is not None:
            duration.labels(**labels).set(p.duration_s)
        verified.labels(**labels).set(1 if p.verified else 0)
        signed.labels(**labels).set(1 if p.signed else 0)
        if p.baseline:
            drift.labels(**labels, baseline=p.baseline).set(len(p.drift))
            unmeasured.labels(**labels, baseline=p.baseline).set(len(p.unmeasured))
            reopened.labels(**labels, baseline=p.baseline).set(1 if p.reopened else 0)
        for attr, gauge in gauges.items():
            value = getattr(p, attr)
            if value is not None:
                gauge.labels(**labels).set(value * scale.get(attr, 1))
    return reg


def write_textfile(points: Sequence[RunPoint], path: Path) -> None:

    # node_exporter reads *.prom; a half-written file would be scraped as is, hence the atomic write
    atomic_write_bytes(path, generate_latest(textfile_registry(points)))


def history(folder: Path, *, out: Path | None = None, textfile: Path | None = None,
            baseline: Path | None = None) -> tuple[list[RunPoint], Path]:
    roots = find_runs(folder)
    if not roots:
        raise BadInputError("no run folder (with manifest.json) in it", source=str(folder))
    points = with_drift([read_point(r) for r in roots], baseline)
    out = out or folder / "history.html"
    atomic_write_bytes(out, trend_html(points, folder.name).encode("utf-8"))
    js = out.parent / PLOTLY_JS
    if not js.is_file():
        atomic_write_bytes(js, get_plotlyjs().encode("utf-8"))
    if textfile is not None:
        write_textfile(points, textfile)
    return points, out
