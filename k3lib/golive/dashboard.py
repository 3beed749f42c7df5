"""The Grafana dashboard (dashboard.json): the alerts' queries as panels, with the accepted levels drawn as
thresholds."""

from __future__ import annotations

import hashlib
from .options import GRAFANA_SCHEMA_VERSION
from .queries import KitContext
from .shapes import FieldDefaults, GrafanaDashboard, GrafanaPanel


def _panel(pid: int, title: str, targets: list[tuple[str, str]], unit: str, description: str,
           threshold: float | None = None) -> GrafanaPanel:
    defaults: FieldDefaults = {"unit": unit, "custom": {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10}}
    if threshold is not None:
        defaults["thresholds"] = {"mode": "absolute",
                                  "steps": [{"color": "green", "value": None}, {"color": "red", "value": threshold}]}
        defaults["custom"]["thresholdsStyle"] = {"mode": "line"}
    return {
        "id": pid, "type": "timeseries", "title": title, "description": description,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": 8, "w": 12, "x": 12 * ((pid - 1) % 2), "y": 8 * ((pid - 1) // 2)},
        "targets": [{"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend,
                     "datasource": {"type": "prometheus", "uid": "${datasource}"}}
                    for i, (expr, legend) in enumerate(targets)],
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}},
    }


def build_dashboard(ctx: KitContext) -> GrafanaDashboard:
    q, lv = ctx.query, ctx.levels
    ok = f'finished_reason!~"{q.errors}"'
    err = f'finished_reason=~"{q.errors}"'

    def accepted(name: str) -> float | None:
        level = lv[name]
        return float(level.value) if level.accepted else None

    hit = accepted("prefix_hit_rate")
    specs: list[tuple[str, list[tuple[str, str]], str, str, float | None]] = [
        ("Errors", [(f"sum by (finished_reason) ({q.rate('request_success_total', err)})", "{{finished_reason}}")],
         "reqps", "Finished requests that errored or were aborted.", None),
        ("Successes", [(f"sum by (finished_reason) ({q.rate('request_success_total', ok)})", "{{finished_reason}}")],
         "reqps", "Finished requests by finish reason (stop, length…).", None),
        ("End-to-end latency", [(q.quantile(0.5, "e2e_request_latency_seconds"), "p50"),
                                (q.quantile(0.95, "e2e_request_latency_seconds"), "p95")],
         "s", "Server-side, from arrival to the last token.", None),
        ("Time to first token", [(q.quantile(0.5, "time_to_first_token_seconds"), "p50"),
                                 (q.quantile(0.95, "time_to_first_token_seconds"), "p95")],
         "s", "Server-side TTFT, from arrival (tokenization) to the first token.", None),
        ("Queue: waiting requests", [(f"sum({q.series('num_requests_waiting')})", "waiting")],
         "short", "Requests waiting for the scheduler.", None),
        ("Queue time", [(q.quantile(0.95, "request_queue_time_seconds"), "p95")],
         "s", "Line: the p95 queue time accepted at planned load.", accepted("queue_time_p95_s")),
        ("Running requests", [(f"sum({q.series('num_requests_running')})", "running")],
         "short", "Requests in the running batch.", None),
        ("KV-cache usage", [(f"max by (engine) ({q.series('kv_cache_usage_perc')})", "engine {{engine}}")],
         "percentunit", "Line: the peak usage accepted at planned load.", accepted("kv_usage_at_planned")),
        ("Preemptions", [(f"sum({q.rate('num_preemptions_total')})", "preemptions/s")],
         "short", "Line: the preemption rate accepted at planned load.", accepted("preemptions_per_s")),
    ]
    if {"prefix_cache_hits_total", "prefix_cache_queries_total"} <= set(ctx.names):
        specs.append(("Prefix-cache counters", [(f"sum({q.rate('prefix_cache_queries_total')})", "queried tokens/s"),
                                                (f"sum({q.rate('prefix_cache_hits_total')})", "hit tokens/s"),
                                                (q.hit_rate().replace("\n", " "), "hit rate")],
                      "short", "Token counters; hit rate = hits / queries. Validated hit rate: "
                      + (f"{hit:.0%}" if hit is not None else "none accepted"), None))
    dcgm = "{" + ctx.opts.dcgm_matchers + "}" if ctx.opts.dcgm_matchers else ""
    specs.append(("GPU memory used", [(f"DCGM_FI_DEV_FB_USED{dcgm}", "{{Hostname}} GPU {{gpu}}")],
                  "decmbytes", "dcgm-exporter framebuffer memory used per GPU (MiB).", None))
    panels = [_panel(i + 1, *spec) for i, spec in enumerate(specs)]
    run_id = ctx.run.run_id
    return {
        "uid": "k3-" + hashlib.sha256(run_id.encode()).hexdigest()[:12],
        "title": f"k3kit go-live — {run_id}",
        "description": f"First dashboard after acceptance run {run_id} (vLLM {ctx.version or 'unknown'}).",
        "tags": ["k3kit", "vllm"],
        "timezone": "utc", "editable": True, "graphTooltip": 1, "refresh": "30s",
        "schemaVersion": GRAFANA_SCHEMA_VERSION, "version": 1,
        "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": [{"name": "datasource", "label": "Prometheus", "type": "datasource",
                                 "query": "prometheus", "current": {}, "hide": 0, "refresh": 1}]},
        "annotations": {"list": []},
        "panels": panels,
    }


# -- ROLLBACK.md ------------------------------------------------------------------------------------------------------
