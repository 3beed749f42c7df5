"""Tables and plotly figures of a prefix-cache run, built from the stored result so a run re-renders alone."""

from __future__ import annotations

from typing import Any, Literal

from .result import PrefixCacheResult
from .judge import reconcile

_COLD, _WARM, _DESIGNED, _OBSERVED, _CACHED = "#8c959f", "#0969da", "#bf8700", "#1a7f37", "#8250df"


def _label(p: Any) -> str:
    return f"s{p.session} · {p.prefix_target} tok"


def pairs_table(result: PrefixCacheResult) -> Any:
    """One row per session × prefix length: cold vs warm TTFT and hits."""
    import pandas as pd

    rows = [{"session": p.session, "prefix_tokens": p.prefix_target, "warm_prompt_tokens": p.warm_prompt_tokens,
             "cold_ttft_ms": _round(p.cold_ttft_ms), "warm_ttft_ms": _round(p.warm_ttft_ms),
             "ttft_gain_pct": _round(p.ttft_gain_pct, 1), "observed_hits": p.observed_hits,
             "cached_tokens": p.cached_tokens, "clean": p.clean} for p in reconcile(result)]
    return pd.DataFrame(rows)


def hits_table(result: PrefixCacheResult) -> Any:
    """Designed vs observed hits per pair, with the cause of any gap in words."""
    import pandas as pd

    rows = [{"session": p.session, "prefix_tokens": p.prefix_target, "intended_hits": p.intended_hits,
             "designed_hits": p.designed_hits, "observed_hits": p.observed_hits, "cached_tokens": p.cached_tokens,
             "cold_designed_hits": p.cold_designed_hits, "cold_hits": p.cold_observed_hits,
             "diverges_at": p.divergence_at, "cause": p.cause, "explanation": p.explanation} for p in reconcile(result)]
    return pd.DataFrame(rows)


def requests_table(result: PrefixCacheResult) -> Any:
    """Every request with its own counter window."""
    import pandas as pd

    keep = ("session", "prefix_target", "kind", "salt", "prompt_tokens", "tokenized_tokens", "ttft_ms",
            "queries_delta", "hits_delta", "cached_tokens", "cached_counter_delta", "designed_hits", "contaminated",
            "error")
    return pd.DataFrame([{k: getattr(s, k) for k in keep} for s in result.samples])


def ttft_figure(result: PrefixCacheResult) -> Any:
    """Cold vs warm TTFT per session (grouped bars)."""
    import plotly.graph_objects as go

    pairs = reconcile(result)
    x = [_label(p) for p in pairs]
    fig = go.Figure([
        go.Bar(name="cold", x=x, y=[p.cold_ttft_ms for p in pairs], marker_color=_COLD),
        go.Bar(name="warm", x=x, y=[p.warm_ttft_ms for p in pairs], marker_color=_WARM,
               text=[f"{p.ttft_gain_pct:.0f}%" if p.ttft_gain_pct is not None else "" for p in pairs],
               textposition="outside"),
    ])
    fig.update_layout(title="Time to first token, cold vs warm (label: warm gain)", barmode="group",
                      yaxis_title="TTFT (ms)", height=360, margin=dict(t=50, b=40, l=60, r=20))
    return fig


def hits_figure(result: PrefixCacheResult) -> Any:
    """Designed vs observed hit tokens per warm request, with usage cached_tokens."""
    import plotly.graph_objects as go

    pairs = reconcile(result)
    x = [_label(p) for p in pairs]
    fig = go.Figure([
        go.Bar(name="designed (from token ids)", x=x, y=[p.designed_hits for p in pairs], marker_color=_DESIGNED),
        go.Bar(name="observed (counter delta)", x=x, y=[p.observed_hits for p in pairs], marker_color=_OBSERVED,
               text=[p.cause for p in pairs], textposition="outside"),
        go.Bar(name="usage cached_tokens", x=x, y=[p.cached_tokens for p in pairs], marker_color=_CACHED),
    ])
    fig.update_layout(title=f"Prefix-cache hits of the warm requests ({result.unit}-token unit)", barmode="group",
                      yaxis_title="tokens", height=380, margin=dict(t=50, b=40, l=60, r=20))
    return fig


def counters_figure(result: PrefixCacheResult) -> Any:
    """The cumulative counters as scraped around each request: steps show which request moved them."""
    import plotly.graph_objects as go

    rows = [r for r in result.counters if r.get("t_wall") is not None]
    t0 = min((r["t_wall"] for r in rows), default=0.0)
    fig = go.Figure()
    series: tuple[tuple[Literal["queries", "hits", "cached"], str, str], ...] = (
        ("queries", "prefix_cache_queries", _COLD), ("hits", "prefix_cache_hits", _OBSERVED),
        ("cached", "prompt_tokens_cached", _CACHED))
    for key, name, colour in series:
        pts = [r for r in rows if r.get(key) is not None]
        if pts:
            fig.add_trace(go.Scatter(x=[r["t_wall"] - t0 for r in pts], y=[r[key] for r in pts], name=name,
                                     mode="lines+markers", line=dict(shape="hv", color=colour),
                                     text=[f"{r['request_id']} ({r['phase']})" for r in pts]))
    fig.update_layout(title="Prefix-cache counters (tokens), scraped before and after each request",
                      xaxis_title="seconds since the first scrape", yaxis_title="tokens (cumulative)", height=380,
                      margin=dict(t=50, b=40, l=60, r=20))
    return fig


def _round(x: float | None, nd: int = 2) -> float | None:
    return None if x is None else round(x, nd)
