"""Figures and tables of a capacity run, built from what the run folder holds: one figure per phase on the wall
clock (memory per GPU, KV usage, running vs waiting, preemptions, TTFT) with phase and step boundaries marked,
the OOM with the memory curve around it, and the saturation/decision summary."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from .analysis import MIB, gpu_keys, gpu_label, increase, window
from .classify import DECISIONS
from .judge import implied_decision, iter_findings, traffic_cap
from .run_shapes import PhaseRow, Unit
from .shapes import MemoryPoint, SeriesName
from .trust import cross_check_label

if TYPE_CHECKING:
    from ...core.params import Params
    from .result import CapacityResult

PHASE_TITLES = {"cold-load": "Cold load", "long-context": "Long context (one request at a time)",
                "concurrency": "Progressive concurrency", "soak": "Sustained operation",
                "sessions": "Agent sessions"}
_ROWS = ("GPU memory (MiB)", "KV cache usage (%)", "running / waiting", "preemptions (since phase start)",
         "TTFT (ms)")


def _dt(ts: Sequence[float | None]) -> list[Any]:
    import pandas as pd

    return list(pd.to_datetime(list(ts), unit="s", utc=True))


def _walls(phase: PhaseRow) -> tuple[float, float]:
    """A phase's start and end (its start while it runs)."""
    start = phase.get("start_wall") or 0.0
    return start, phase.get("end_wall") or start


def _bounds(result: "CapacityResult", phase: PhaseRow) -> tuple[float, float]:
    start, end = _walls(phase)
    interval = 1.0
    if len(result.metrics) >= 2:
        interval = max(result.metrics[1]["t_wall"] - result.metrics[0]["t_wall"], 0.05)
    pad = max((end - start) * 0.05, 2 * interval)
    return start - pad, end + pad


def phase_figure(result: "CapacityResult", phase_name: str) -> Any:
    """Memory per GPU, KV usage, running vs waiting, preemptions and TTFT of one phase, boundaries marked."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    phase = result.phase(phase_name)
    fig = make_subplots(rows=5, cols=1, shared_xaxes=True, vertical_spacing=0.035, subplot_titles=_ROWS)
    # every row on one wall-clock axis, data or not: a phase marker drawn on a row left numeric (no samples)
    # becomes an SVG path of NaNs, which the browser reports as an error
    fig.update_xaxes(type="date")
    title = PHASE_TITLES.get(phase_name, phase_name)
    if phase is None:
        fig.update_layout(title=f"{title}: did not run", height=300)
        return fig
    lo, hi = _bounds(result, phase)
    status = phase["status"] + (f" — {phase['note']}" if phase.get("note") else "")
    fig.update_layout(title=f"{title} ({status})"[:160], height=900, margin=dict(t=70, b=40, l=70, r=20),
                      legend=dict(orientation="h", y=-0.06), hovermode="x unified")
    gpu = window(result.gpu, lo, hi)
    for key in gpu_keys(gpu):
        pts = [(r["t_wall"], used / MIB) for r in gpu
               if (str(r.get("host")), r.get("gpu")) == key and (used := r.get("fb_used_bytes")) is not None]
        fig.add_trace(go.Scatter(x=_dt([p[0] for p in pts]), y=[p[1] for p in pts], mode="lines",
                                 name=gpu_label(key), legendgroup="gpu"), row=1, col=1)
    if not gpu:
        _empty(fig, 1, "no GPU memory samples (target.gpu_metrics)")
    met = window(result.metrics, lo, hi)
    usage = [(r["t_wall"], kv * 100) for r in met if (kv := r.get("kv_cache_usage_perc")) is not None]
    fig.add_trace(go.Scatter(x=_dt([p[0] for p in usage]), y=[p[1] for p in usage], mode="lines",
                             name="KV usage %", line=dict(color="#8250df")), row=2, col=1)
    gauges: tuple[tuple[SeriesName, str], ...] = (("num_requests_running", "#1a7f37"),
                                                  ("num_requests_waiting", "#cf222e"))
    for col, colour in gauges:
        pts = [(r["t_wall"], v) for r in met if (v := r.get(col)) is not None]
        fig.add_trace(go.Scatter(x=_dt([p[0] for p in pts]), y=[p[1] for p in pts], mode="lines",
                                 line=dict(shape="hv", color=colour), name=col.replace("num_requests_", "")),
                      row=3, col=1)
    pre = [(r["t_wall"], v) for r in met if (v := r.get("num_preemptions_total")) is not None]
    cum = [(pre[i][0], increase([v for _, v in pre[: i + 1]])) for i in range(len(pre))]
    fig.add_trace(go.Scatter(x=_dt([p[0] for p in cum]), y=[p[1] for p in cum], mode="lines",
                             line=dict(shape="hv", color="#bc4c00"), name="preemptions"), row=4, col=1)
    reqs = [r for r in result.requests if r.get("phase") == phase_name and r.get("sent_wall_ns")]
    ok = [r for r in reqs if r.get("ttft_ms") is not None]
    bad = [r for r in reqs if not r.get("ok") and not r.get("cancelled")]
    fig.add_trace(go.Scatter(x=_dt([(r.get("sent_wall_ns") or 0) / 1e9 for r in ok]), y=[r["ttft_ms"] for r in ok],
                             mode="markers", marker=dict(size=4, color="#0969da"), name="TTFT per request",
                             text=[r.get("step") for r in ok]), row=5, col=1)
    if bad:
        fig.add_trace(go.Scatter(x=_dt([(r.get("done_wall_ns") or r.get("sent_wall_ns") or 0) / 1e9 for r in bad]),
                                 y=[0] * len(bad), mode="markers", marker=dict(symbol="x", size=8, color="#cf222e"),
                                 name="failed request", text=[(r.get("error") or "")[:80] for r in bad]),
                      row=5, col=1)
    quantiles: tuple[tuple[Literal["ttft_p50_ms", "ttft_p95_ms"], str], ...] = (("ttft_p50_ms", "dot"),
                                                                                 ("ttft_p95_ms", "dash"))
    for unit in _units(result, phase_name):
        for q, dash in quantiles:
            if (value := unit.get(q)) is not None and (t0 := unit.get("start_wall")):
                fig.add_trace(go.Scatter(x=_dt([t0, unit.get("end_wall")]), y=[value, value],
                                         mode="lines", line=dict(dash=dash, color="#57606a"),
                                         name=q.replace("ttft_", "TTFT ").replace("_ms", ""), showlegend=False),
                              row=5, col=1)
    _mark(fig, result, phase, phase_name)
    fig.update_yaxes(rangemode="tozero")
    return fig


def _units(result: "CapacityResult", phase_name: str) -> list[Unit]:
    if phase_name == "concurrency":
        return [s for s in result.steps if s.get("start_wall")]
    if phase_name == "long-context":
        return [r for r in result.run.get("long_context") or [] if r.get("start_wall")]
    if phase_name == "soak" and (soak := result.run.get("soak")):
        return [soak]
    if phase_name == "sessions":
        sessions = result.run.get("sessions")
        return [lv for lv in (sessions.get("levels") or [] if sessions else []) if lv.get("start_wall")]
    return []


def _empty(fig: Any, row: int, text: str) -> None:
    fig.add_annotation(text=text, xref="x domain", yref="y domain", x=0.5, y=0.5, showarrow=False,
                       row=row, col=1, font=dict(color="#57606a"))


def _vline(fig: Any, t: float, text: str, colour: str, dash: str = "dot") -> None:
    x = _dt([t])[0]
    fig.add_vline(x=x, line=dict(color=colour, dash=dash, width=1))
    fig.add_annotation(x=x, y=1.0, yref="paper", text=text, showarrow=False, yshift=10,
                       font=dict(size=10, color=colour))


def _mark(fig: Any, result: "CapacityResult", phase: PhaseRow, phase_name: str) -> None:
    t0, t1 = _walls(phase)
    start, end = _dt([t0, t1])
    fig.add_vrect(x0=start, x1=end, fillcolor="#0969da", opacity=0.05, line_width=0)
    _vline(fig, t0, f"{phase_name} start", "#0969da", "solid")
    if phase.get("end_wall"):
        _vline(fig, t1, "end", "#0969da", "solid")
    for unit in _units(result, phase_name):
        if phase_name == "concurrency":
            text = f"c={unit.get('concurrency')}" + (" (beyond contract)" if unit.get("out_of_contract") else "") \
                + (" latency not trusted" if unit.get("latency_valid") is False else "")
        elif phase_name == "long-context":
            text = f"{unit.get('prompt_tokens') or unit.get('target_tokens')} tok"
        else:
            continue
        _vline(fig, unit.get("start_wall") or 0.0, text, "#57606a")  # a unit marked has started
    ready = result.run.get("ready")
    if phase_name == "cold-load" and ready and (at := ready.get("ready_at_wall")):
        _vline(fig, at, "ready", "#1a7f37", "dash")
    oom = result.oom
    if oom and (at := oom.get("at_wall")) and t0 - 1 <= at <= (phase.get("end_wall") or 0) + 1:
        _vline(fig, at, oom["kind"].upper(), "#cf222e", "dash")


def oom_figure(result: "CapacityResult") -> Any:
    """The per-GPU memory curve around the OOM (or engine failure), time relative to it."""
    import plotly.graph_objects as go

    fig = go.Figure()
    oom = result.oom
    if not oom or not oom.get("memory_around"):
        fig.update_layout(title="No OOM or engine failure" if not oom else
                          f"{oom['kind']}: no GPU memory samples around it", height=250)
        return fig
    by_gpu: dict[str, list[MemoryPoint]] = {}
    for p in oom["memory_around"]:
        by_gpu.setdefault(p["gpu"], []).append(p)
    for name, pts in sorted(by_gpu.items()):
        fig.add_trace(go.Scatter(x=[p["t_rel_s"] for p in pts], y=[p["used_mib"] for p in pts], mode="lines+markers",
                                 name=name, marker=dict(size=4)))
    fig.add_vline(x=0, line=dict(color="#cf222e", dash="dash"))
    cls = (oom.get("classification") or {}).get("oom_class")
    fig.update_layout(title=f"{oom['kind']} in {oom.get('phase')} ({cls or 'unclassified'}): GPU memory around it",
                      xaxis_title="seconds from the failure", yaxis_title="used (MiB)", height=380,
                      margin=dict(t=50, b=40, l=70, r=20))
    return fig


def phases_table(result: "CapacityResult") -> Any:
    import pandas as pd

    rows = []
    for p in result.run.get("phases") or []:
        start, end = _walls(p)
        dur = end - start
        rows.append({"phase": p["phase"], "status": p["status"], "duration_s": round(dur, 2),
                     "bound_s": budget.get(p["phase"]) if isinstance(budget := result.plan.get("budget_s"), dict)
                     else None, "note": p.get("note")})
    return pd.DataFrame(rows)


def steps_table(result: "CapacityResult") -> Any:
    import pandas as pd

    cols = ("concurrency", "out_of_contract", "status", "held", "sent", "ok", "server_errors", "refused", "timeouts",
            "unreachable", "cancelled", "error_statuses", "preemptions",
            "waiting_mean", "running_mean", "kv_usage_max", "queue_p95_ms", "ttft_p50_ms", "ttft_p95_ms",
            "server_ttft_p95_ms", "latency_valid", "prompt_tokens", "output_tokens")
    # latency_valid: the client's self-calibration at this concurrency held (None: not calibrated); a False step
    # keeps its counts and preemptions, its client TTFT figures are not trusted (latency_note says why)
    frame = pd.DataFrame([{c: s.get(c) for c in cols}
                          | {"cross_check": cross_check_label(s.get("cross_check")) if s.get("status") != "skipped"
                             else None,
                             "latency_note": s.get("invalid_reason"), "why": "; ".join(s.get("why") or [])}
                          for s in result.steps])
    return frame


def ranks_table(result: "CapacityResult") -> Any:
    """Per DP rank, at each step and in the soak (empty with one rank): what the aggregate hides."""
    import pandas as pd

    cols = ("name", "num_gpu_blocks", "preemptions", "waiting_mean", "running_mean", "kv_usage_max",
            "decode_tokens_per_s_per_seq", "prefix_queries", "hit_rate")
    windows = [(f"c{s['concurrency']}", s.get("ranks")) for s in result.steps]
    windows.append(("soak", (result.run.get("soak") or {}).get("ranks")))
    rows = [{"window": w, **{c: r.get(c) for c in cols}} for w, ranks in windows for r in ranks or []]
    return pd.DataFrame(rows, columns=["window", *cols])


def long_context_table(result: "CapacityResult") -> Any:
    import pandas as pd

    cols = ("target_tokens", "prompt_tokens", "sized_by", "output_tokens", "status", "ttft_p95_ms", "e2e_p95_ms",
            "server_ttft_p95_ms", "engine_alive_after", "error")
    rows = [{c: r.get(c) for c in cols} for r in result.run.get("long_context") or []]
    ref = result.run.get("refusal") or {}
    rows.insert(0, {"target_tokens": ref.get("prompt_tokens"), "prompt_tokens": ref.get("prompt_tokens"),
                    "sized_by": ref.get("sized_by"), "status": f"out of contract: {ref.get('outcome')}",
                    "engine_alive_after": ref.get("engine_alive_after"), "error": ref.get("message")})
    return pd.DataFrame(rows)


def configuration_table(result: "CapacityResult") -> Any:
    import pandas as pd

    cfg = result.run.get("config")
    values, sources = (cfg.get("values") if cfg else None) or {}, (cfg.get("sources") if cfg else None) or {}
    return pd.DataFrame([{"setting": k, "value": v, "source": sources.get(k)} for k, v in values.items()])


def oom_lines(result: "CapacityResult") -> Any:
    """The server log lines before the OOM (or the engine death), as kept."""
    import pandas as pd

    oom = result.oom or {}
    lines = list(oom.get("lines_before") or [])
    if text := oom.get("log_text"):
        lines.append(text)
    # a Styler shows whole lines (a DataFrame's repr cuts them at 50 characters); escaped: they are server text
    return (pd.DataFrame({"log line": lines}).style.format(escape="html")
            .set_properties(**{"text-align": "left", "font-family": "monospace", "white-space": "pre-wrap"}))


def decision_table(result: "CapacityResult", params: "Params") -> Any:
    """Saturation point, OOM class and the decision the findings imply, one row each."""
    import pandas as pd

    findings = iter_findings(result, params)
    oom = result.oom or {}
    cls = oom.get("classification") or {}
    cap = traffic_cap(result, params)
    rows = [
        ("saturation point", f"{result.saturation_point} (planned {params.contract.planned_concurrency})",
         cap.get("basis")),
        ("failure", oom.get("kind") or "none",
         f"phase {oom.get('phase')}, step {oom.get('step')}, {oom.get('in_flight')} in flight" if oom else ""),
        ("OOM class", cls.get("oom_class") or "—", cls.get("basis") or ""),
        ("what to do", cls.get("remedy") or "—", DECISIONS.get(cls.get("oom_class") or "", "")),
        ("traffic cap", cap.get("max_concurrency"), "for a limited-observation decision"),
        ("decision implied by this axis", implied_decision(findings),
         "; ".join(f"{f.rule}: {f.status}" for f in findings if f.status in ("fail", "warn"))),
    ]
    return pd.DataFrame(rows, columns=["item", "value", "basis"])


def summary_html(result: "CapacityResult") -> str:
    oom = result.oom
    parts = [f"<b>Capacity run</b>: saturation point {result.saturation_point}, phases "
             + ", ".join(f"{p['phase']} {p['status']}" for p in result.run.get("phases") or [])]
    if oom:
        cls = (oom.get("classification") or {}).get("oom_class")
        parts.append(f"{html.escape(oom['kind'])} in {html.escape(str(oom.get('phase')))} ({html.escape(str(cls))})")
    return "<p>" + "<br>".join(parts) + "</p>"
