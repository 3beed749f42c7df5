"""The Prometheus alerting rules (alerts.yml): one rule per accepted level, its threshold the level the run
measured; a level that is missing or not accepted leaves its alert out, with the reason."""

from __future__ import annotations

from typing import Any

import yaml

from ..core.numbers import figure
from .options import ROLLBACK_FILE
from .queries import KitContext, fmt, refuse_level
from .shapes import AlertRule


def _rule(name: str, expr: str, duration: str, severity: str, rollback: bool, summary: str, description: str,
          run_id: str) -> AlertRule:
    return {"alert": name, "expr": expr, "for": duration,
            "labels": {"severity": severity, "rollback_trigger": "true" if rollback else "false",
                       "k3_accepted_run": run_id},
            "annotations": {"summary": summary, "description": description, "runbook": ROLLBACK_FILE}}


def build_alerts(ctx: KitContext) -> tuple[list[AlertRule], dict[str, str]]:
    """(rules, omitted): one rule per derivable threshold; engine-down needs none."""
    q, o, lv, run_id = ctx.query, ctx.opts, ctx.levels, ctx.run.run_id
    rules: list[AlertRule] = []
    omitted: dict[str, str] = {}
    planned = lv["planned_concurrency"].value
    at_planned = f"at the planned concurrency {figure(planned)}" if planned else "at planned load"

    rules.append(_rule(
        "K3EngineDown", q.engine_down(), o.down_for, "critical", True,
        "vLLM engine down or no longer exporting metrics",
        f"The scrape of job {o.job} fails, or no {ctx.names['num_requests_running']} series exists. An engine "
        "death under contract load (OOM) is a rollback trigger: check the server log for out-of-memory lines.",
        run_id))

    # The capacity axis' levels at planned load, each armed only from a level that axis accepted:
    # (alert, level, expression over the accepted value, severity, rollback trigger, summary, description)
    measured: tuple[tuple[str, str, Any, str, bool, Any, Any], ...] = (
        ("K3QueueTimeAboveAccepted", "queue_time_p95_s",
         lambda v: f"{q.quantile(0.95, 'request_queue_time_seconds')}\n  > {fmt(v)}", "critical", True,
         lambda v: f"p95 queue time above the accepted {figure(v, ' s')} for {o.sustained_for}",
         lambda lvl: f"Accepted p95 queue time {figure(lvl.value, ' s')} {at_planned} ({lvl.source}). Above it for a "
                     "continuous period is a rollback trigger."),
        ("K3KvCacheUsageAboveAccepted", "kv_usage_at_planned",
         lambda v: f"max({q.series('kv_cache_usage_perc')}) > {fmt(v)}", "warning", False,
         lambda v: f"KV-cache usage above the accepted peak {v:.0%}",
         lambda lvl: f"Accepted peak KV-cache usage {figure(lvl.value)} {at_planned} ({lvl.source}): traffic beyond "
                     "the accepted load or longer contexts than tested."),
        ("K3PreemptionsAboveAccepted", "preemptions_per_s",
         lambda v: f"sum({q.rate('num_preemptions_total')}) > {fmt(v)}", "warning", False,
         lambda v: f"preemption rate above the accepted {figure(v, '/s')}",
         lambda lvl: f"Accepted preemption rate {figure(lvl.value, '/s')} {at_planned} ({lvl.source}): the KV cache "
                     "runs out more often than in the accepted test."),
        ("K3ErrorRatioAboveAccepted", "error_ratio",
         lambda v: f"{q.error_ratio()}\n  > {fmt(v)}", "warning", False,
         lambda v: f"share of requests failed on the server above the accepted {figure(v)}",
         lambda lvl: f"Accepted error ratio {figure(lvl.value)} {at_planned} ({lvl.source}); finished_reason "
                     f"{q.errors} counted as failures (client aborts and disconnects are not)."),
    )
    for name, key, expr, severity, rollback, summary, description in measured:
        level = lv[key]
        why = refuse_level(level, "capacity")
        if why is None and name == "K3ErrorRatioAboveAccepted" and q.errors is None:
            why = (f"vLLM {ctx.version} reports failed requests only as finished_reason abort, which also counts "
                   "client disconnects: no error ratio without client aborts")
        if why:
            omitted[name] = why
        else:
            rules.append(_rule(name, expr(level.value), o.sustained_for, severity, rollback, summary(level.value),
                               description(level), run_id))

    hit = lv["prefix_hit_rate"]
    why = refuse_level(hit, "prefix_cache")
    if why is None and hit.value <= 0:
        why = "the validated hit rate is 0 (no measured reuse): the gain is not counted, nothing to alert against"
    if why is None and not {"prefix_cache_hits_total", "prefix_cache_queries_total"} <= set(ctx.names):
        why = f"vLLM {ctx.version} exports no prefix-cache token counters"
    if why is None and o.traffic_hit_rate is None:
        why = (f"the validated hit rate {hit.value:.0%} comes from controlled warm requests that repeat a prefix on "
               "purpose; ordinary traffic does not reach it. Give the rate your traffic reaches (k3 golive "
               "--traffic-hit-rate, e.g. from a normal day's vllm:prefix_cache_hits/queries) to arm this alert")
    if why:
        omitted["K3PrefixHitRateFarBelowValidated"] = why
    else:
        assert o.traffic_hit_rate is not None  # else `why` says it is not given
        floor = o.traffic_hit_rate * o.hit_rate_fraction
        rules.append(_rule(
            "K3PrefixHitRateFarBelowValidated", f"{q.hit_rate()}\n  < {fmt(floor)}", o.sustained_for,
            "critical", True,
            f"prefix-cache hit rate below {o.hit_rate_fraction:.0%} of the {o.traffic_hit_rate:.0%} ordinary traffic "
            "reaches",
            f"Reuse proven in the accepted run ({hit.source}, {figure(hit.value)} on controlled warm requests); "
            f"ordinary traffic reaches {figure(o.traffic_hit_rate)} (operator's figure), alert under {figure(floor)} "
            f"over {o.hit_rate_window}: cache counters far from the normal behaviour are a rollback trigger.",
            run_id))
    return rules, omitted


def alerts_yaml(ctx: KitContext, rules: list[AlertRule]) -> str:
    head = (f"# k3kit go-live alerts for run {ctx.run.run_id} (vLLM {ctx.version or 'version unknown'}).\n"
            "# Thresholds are levels measured in that run; see ROLLBACK.md for each source and for omitted alerts.\n"
            "# Check: promtool check rules alerts.yml\n")

    class _Dumper(yaml.SafeDumper):
        pass

    def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)

    _Dumper.add_representer(str, _str)
    body = yaml.dump({"groups": [{"name": "k3kit-golive", "rules": rules}]}, Dumper=_Dumper, sort_keys=False,
                     allow_unicode=True, width=120)
    return head + body


# -- Grafana dashboard ----------------------------------------------------------------------------------------------
