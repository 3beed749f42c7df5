"""The index's headline figures: small plots of capacity, memory, prefix cache and tool calls, and the levels a
re-validation compares, each with the evidence it was read from."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.evidence import AgentData, AgentRate, CapacityData, PrefixCacheData
from ..verdict import accepted as acc
from .markup import _fmt, _table, _typed, esc

if TYPE_CHECKING:
    from ..core.evidence import CapacityStep


def _small(fig: Any, title: str) -> Any:
    fig.update_layout(title=dict(text=title, font=dict(size=12)), height=250, width=325,
                      margin=dict(t=40, b=40, l=50, r=10), legend=dict(orientation="h", y=-0.25, font=dict(size=10)),
                      template="plotly_white")
    return fig


def _steps(run: Any) -> list[CapacityStep]:
    cap = _typed(run, "capacity", CapacityData)
    return list(cap.steps) if cap is not None else []


def fig_ttft_kv(run: Any) -> Any:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    steps = _steps(run)
    if not steps:
        return None
    x = [s.concurrency for s in steps]
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Scatter(x=x, y=[s.ttft_p50_ms for s in steps], mode="lines+markers", name="TTFT p50 (ms)"))
    fig.add_trace(go.Scatter(x=x, y=[s.ttft_p95_ms for s in steps], mode="lines+markers", name="TTFT p95 (ms)"))
    fig.add_trace(go.Bar(x=x, y=[None if s.kv_usage_max is None else s.kv_usage_max * 100 for s in steps],
                         name="KV usage max (%)", opacity=0.35), secondary_y=True)
    planned = (run.params.get("contract") or {}).get("planned_concurrency")
    if planned:
        fig.add_vline(x=planned, line_dash="dot", annotation_text="planned", annotation_font_size=10)
    fig.update_xaxes(title_text="concurrency", type="category")
    fig.update_yaxes(title_text="ms", secondary_y=False)
    fig.update_yaxes(title_text="KV %", range=[0, 100], dtick=25, showgrid=False, secondary_y=True)
    return _small(fig, "TTFT and KV usage per concurrency step")


def fig_memory_phases(run: Any, root: Path) -> Any:
    import plotly.graph_objects as go

    from ..axes.capacity.analysis import MIB, gpu_keys, gpu_label  # the capacity package loads its whole runner

    cap = _typed(run, "capacity", CapacityData)
    phases = list(cap.phases or []) if cap is not None else []
    try:
        samples = json.loads((root / "evidence/capacity/gpu.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        samples = []
    if not phases or not isinstance(samples, list) or not samples:
        return None
    fig = go.Figure()
    names = [p.phase for p in phases]
    for key in gpu_keys(samples):
        peaks = []
        for p in phases:
            lo, hi = p.start_wall or 0, p.end_wall or float("inf")
            vals = [r["fb_used_bytes"] / MIB for r in samples if (str(r.get("host")), r.get("gpu")) == key
                    and r.get("fb_used_bytes") is not None and lo <= r.get("t_wall", -1) <= hi]
            peaks.append(round(max(vals)) if vals else None)
        fig.add_trace(go.Bar(x=names, y=peaks, name=gpu_label(key)))
    fig.update_yaxes(title_text="MiB (peak)")
    return _small(fig, "Memory per GPU through the phases")


def fig_cold_warm(run: Any) -> Any:
    import plotly.graph_objects as go

    rec = _typed(run, "prefix_cache", PrefixCacheData)
    pairs = list(rec.pairs) if rec is not None else []
    if not pairs:
        return None
    x = [f"s{p.session}" for p in pairs]
    fig = go.Figure([go.Bar(x=x, y=[p.cold_ttft_ms for p in pairs], name="cold TTFT (ms)"),
                     go.Bar(x=x, y=[p.warm_ttft_ms for p in pairs], name="warm TTFT (ms)")])
    gain = rec.ttft_gain_pct if rec is not None else None
    fig.update_yaxes(title_text="ms")
    return _small(fig, "Cold vs warm TTFT per session" + (f" (gain {gain}%)" if gain is not None else ""))


def fig_tool_rate(run: Any) -> Any:
    import plotly.graph_objects as go

    rec = _typed(run, "agent", AgentData)
    rates = [r for r in rec.rates if r.total] if rec is not None else []
    if not rates:
        return None
    levels = list(dict.fromkeys(r.level for r in rates))

    def pct(rows: list[AgentRate]) -> float | None:
        return min(100 * r.passed / r.total for r in rows) if rows else None

    valid = [pct([r for r in rates if r.level == lv and r.check == acc.AGENT_VALIDITY_CHECK]) for lv in levels]
    lowest = [pct([r for r in rates if r.level == lv]) for lv in levels]
    fig = go.Figure([go.Scatter(x=[str(lv) for lv in levels], y=valid, mode="lines+markers",
                                name="arguments valid (%)", line=dict(width=3)),
                     go.Scatter(x=[str(lv) for lv in levels], y=lowest, mode="lines+markers",
                                name="lowest of all checks (%)", line=dict(dash="dot"))])
    fig.update_xaxes(title_text="concurrency", type="category")
    fig.update_yaxes(title_text="% passed", range=[0, 105])
    return _small(fig, "Tool-contract rate per concurrency")


def headline_numbers(run: Any) -> list[tuple[str, str, str]]:
    """(figure, value, source): the levels a re-validation compares, as `k3lib.verdict.accepted` derives them."""

    out = []
    for label, func, unit, scale in (("queue time p95 at planned concurrency", acc.queue_time_p95_s, " s", 1),
                                     ("KV usage at planned concurrency", acc.kv_usage_at_planned, " %", 100),
                                     ("prefix-cache hit rate (warm)", acc.prefix_hit_rate, " %", 100),
                                     ("tool-call validity", acc.tool_call_validity, " %", 100)):
        lv = func(run)
        if lv.value is None:
            out.append((label, "", f"not in the evidence: {lv.reason or ''}"))
        else:
            out.append((label, _fmt(float(lv.value) * scale, unit), lv.source or ""))

    cap = _typed(run, "capacity", CapacityData)
    if cap is not None:
        sat = cap.saturation_point
        out.append(("saturation point (concurrency)", _fmt(sat) if sat is not None else "not reached in the steps",
                    "evidence/capacity.json: data.saturation_point"))
        found = cap.step_at((run.params.get("contract") or {}).get("planned_concurrency"))
        if found:
            out.append(("TTFT p95 at planned concurrency", _fmt(found[1].ttft_p95_ms, " ms"),
                        "evidence/capacity.json: data.steps"))
    pc = _typed(run, "prefix_cache", PrefixCacheData)
    if pc is not None and pc.ttft_gain_pct is not None:
        out.append(("prefix-cache TTFT gain", _fmt(pc.ttft_gain_pct, " %"),
                    "evidence/prefix_cache.json: data.ttft_gain_pct"))
    return out


def figures_block(run: Any, *, numbers: bool = True) -> str:
    """The headline figures drawn, and (`numbers`) their values in a table."""
    figs = []
    for build in (fig_ttft_kv, lambda r: fig_memory_phases(r, r.root), fig_cold_warm, fig_tool_rate):
        try:
            fig = build(run)
        except (KeyError, TypeError, ValueError) as exc:  # evidence of another shape: said, never guessed
            figs.append(f"<div class='k3-fig k3-missing'>figure not drawn: {esc(type(exc).__name__)}</div>")
            continue
        if fig is not None:
            figs.append("<div class='k3-fig'>" + fig.to_html(full_html=False, include_plotlyjs=False,
                                                                include_mathjax=False,
                                                                config={"displaylogo": False,
                                                                        "staticPlot": True}) + "</div>")
    table = _table(("figure", "value", "source"), [[esc(a), esc(b), f"<small>{esc(c)}</small>"]
                                                    for a, b, c in headline_numbers(run)], "k3-numbers") if numbers else ""
    return ("<section><h2>Headline figures" + ("" if numbers else ", drawn") + "</h2><div class='k3-figs'>"
            + "".join(figs) + "</div>" + table + "</section>")
