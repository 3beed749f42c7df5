"""The go-live kit of an accepted run: Prometheus alerting rules, a Grafana dashboard, and ROLLBACK.md.

Every threshold is a level the accepted run measured (read through `k3lib.verdict.accepted`); when a level is missing the
alert is left out and ROLLBACK.md says why. Metric names are those of the vLLM version the run observed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from pathlib import Path
from collections.abc import Mapping
from typing import Any

import yaml

from . import accepted as acc
from ..core.errors import BadInputError, EvidenceError
from ..core.numbers import figure
from ..core.versions import release
from ..io.metrics.names import spec_for
from ..core.store import RunStore, atomic_write_bytes

ALERTS_FILE = "alerts.yml"
DASHBOARD_FILE = "dashboard.json"
ROLLBACK_FILE = "ROLLBACK.md"
ACCEPTED_DECISIONS = ("production", "limited-observation")
_DURATION = re.compile(r"^[1-9][0-9]*[smhd]$")
GRAFANA_SCHEMA_VERSION = 39  # Grafana 10.4 / 11 dashboards; older servers migrate forward, newer ones read it


@dataclasses.dataclass(frozen=True)
class GoliveOptions:
    """How the alerts are scoped and timed: operator choices, stated in ROLLBACK.md, never thresholds."""

    job: str = "vllm"  # Prometheus `job` label of the vLLM scrape
    matchers: str = ""  # extra label matchers on vLLM series, e.g. 'model_name="kimi-k3"'
    dcgm_matchers: str = ""  # label matchers on dcgm-exporter series, e.g. 'Hostname=~"gpu-node-.*"'
    sustained_for: str = "10m"  # "a continuous period" before a queue/KV/preemption/error alert fires
    down_for: str = "2m"
    rate_window: str = "5m"
    hit_rate_window: str = "30m"  # hit rates are traffic-shaped: a longer window smooths single sessions
    hit_rate_fraction: float = 0.5  # "far below": alert under this share of the hit rate ordinary traffic reaches
    # the prefix-cache hit rate this deployment's ordinary traffic reaches (hits/queries tokens over a normal day):
    # the controlled warm requests' rate is no threshold for real traffic. Unset: the hit-rate alert is not armed.
    traffic_hit_rate: float | None = None

    def __post_init__(self) -> None:
        for name in ("sustained_for", "down_for", "rate_window", "hit_rate_window"):
            value = getattr(self, name)
            if not _DURATION.match(value):
                raise BadInputError(f"expected a Prometheus duration such as 10m, got {value!r}", source=name)
        if not 0 < self.hit_rate_fraction < 1:
            raise BadInputError(f"expected a share between 0 and 1, got {self.hit_rate_fraction}",
                                source="hit_rate_fraction")
        if self.traffic_hit_rate is not None and not 0 < self.traffic_hit_rate <= 1:
            raise BadInputError(f"expected a hit rate between 0 and 1, got {self.traffic_hit_rate}",
                                source="--traffic-hit-rate")
        for name in ("job", "matchers", "dcgm_matchers"):
            if any(c in getattr(self, name) for c in "{}\n"):
                raise BadInputError("label matchers go without braces, e.g. model_name=\"kimi-k3\"", source=name)


@dataclasses.dataclass(frozen=True)
class GoliveKit:
    out_dir: Path
    files: tuple[Path, ...]
    alerts: tuple[str, ...]  # alert names written
    omitted: dict[str, str]  # alert name → why no threshold could be derived
    metric_names: dict[str, str]
    warnings: tuple[str, ...] = ()  # what the operator must know before arming them (`golive_warnings`)


# -- metric names by version --------------------------------------------------------------------------------------

CANONICALS = ("kv_cache_usage_perc", "num_requests_running", "num_requests_waiting", "num_preemptions_total",
              "prefix_cache_queries_total", "prefix_cache_hits_total", "request_success_total",
              "time_to_first_token_seconds", "e2e_request_latency_seconds", "request_queue_time_seconds")
HISTOGRAMS = ("time_to_first_token_seconds", "e2e_request_latency_seconds", "request_queue_time_seconds")


def metric_names(version: str | None, observed: frozenset[str] | None = None) -> dict[str, str]:
    """canonical → the vLLM name to query. The names the run's exposition held win; else the version decides.

    vLLM 0.10 exports both `kv_cache_usage_perc` and its deprecated alias `gpu_cache_usage_perc` (0.11 hides the
    alias, 0.12 removes it); likewise `gpu_prefix_cache_*_total`. The new names exist from 0.10 on, so they are
    the choice for every v1 server; only a pre-0.10 server is queried by the old gauge name, and has no token
    counters for the prefix cache at all.
    """
    out: dict[str, str] = {}
    vt = release(version)
    for canonical in CANONICALS:
        names = [n for n in spec_for(canonical).names if n.startswith("vllm:")]
        if observed:
            suffix = "_bucket" if canonical in HISTOGRAMS else ""
            seen = [n for n in names if n + suffix in observed]
            if seen:
                out[canonical] = seen[0]
                continue
        if vt is not None and vt < (0, 10):
            legacy = {"kv_cache_usage_perc": "vllm:gpu_cache_usage_perc"}
            if canonical in ("prefix_cache_queries_total", "prefix_cache_hits_total"):
                continue
            out[canonical] = legacy.get(canonical, names[0])
        else:
            out[canonical] = names[0]
    return out


def error_reasons(version: str | None) -> str | None:
    """The `finished_reason` that means a server-side failure: `error`, from 0.13. `abort` is left out: it counts
    client disconnects and cancellations too. 0.10–0.12 only have `abort`: no error ratio can be told from them."""
    vt = release(version)
    return None if vt is not None and vt < (0, 13) else "error"


# -- PromQL building ----------------------------------------------------------------------------------------------

def _fmt(x: float) -> str:  # a threshold in PromQL: every digit the level has (prose goes through `figure`)
    return f"{x:.6g}"


class _Query:
    def __init__(self, opts: GoliveOptions, names: dict[str, str], version: str | None) -> None:
        self.opts, self.names, self.errors = opts, names, error_reasons(version)

    def sel(self, *extra: str) -> str:
        parts = [f'job="{self.opts.job}"'] + [m for m in (self.opts.matchers, *extra) if m]
        return "{" + ",".join(parts) + "}"

    def series(self, canonical: str, *extra: str) -> str:
        return self.names[canonical] + self.sel(*extra)

    def rate(self, canonical: str, *extra: str, window: str | None = None) -> str:
        return f"rate({self.series(canonical, *extra)}[{window or self.opts.rate_window}])"

    def quantile(self, q: float, canonical: str) -> str:
        bucket = f"{self.names[canonical]}_bucket{self.sel()}"
        return f"histogram_quantile({q}, sum by (le) (rate({bucket}[{self.opts.rate_window}])))"

    def error_ratio(self) -> str:
        err = f'finished_reason="{self.errors}"'
        return (f"sum({self.rate('request_success_total', err)})\n  /\nsum({self.rate('request_success_total')})")

    def hit_rate(self) -> str:
        w = self.opts.hit_rate_window
        return (f"sum({self.rate('prefix_cache_hits_total', window=w)})\n  /\n"
                f"sum({self.rate('prefix_cache_queries_total', window=w)})")

    def engine_down(self) -> str:
        up_sel = f'{{job="{self.opts.job}"}}'
        return f"up{up_sel} == 0\nor\nabsent({self.series('num_requests_running')})"


# -- the kit --------------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class _Context:
    run: acc.RunEvidence
    version: str | None
    levels: dict[str, acc.Level]
    names: dict[str, str]
    query: _Query
    opts: GoliveOptions


def _refuse_level(level: acc.Level, axis_hint: str) -> str | None:
    if not level.known:
        return f"no accepted level ({level.reason})"
    if not level.accepted:
        return f"the {axis_hint} axis did not pass (status {level.axis_status}): {level.source} is no accepted level"
    return None


def _rule(name: str, expr: str, duration: str, severity: str, rollback: bool, summary: str, description: str,
          run_id: str) -> dict[str, Any]:
    return {"alert": name, "expr": expr, "for": duration,
            "labels": {"severity": severity, "rollback_trigger": "true" if rollback else "false",
                       "k3_accepted_run": run_id},
            "annotations": {"summary": summary, "description": description, "runbook": ROLLBACK_FILE}}


def build_alerts(ctx: _Context) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """(rules, omitted): one rule per derivable threshold; engine-down needs none."""
    q, o, lv, run_id = ctx.query, ctx.opts, ctx.levels, ctx.run.run_id
    rules: list[dict[str, Any]] = []
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
         lambda v: f"{q.quantile(0.95, 'request_queue_time_seconds')}\n  > {_fmt(v)}", "critical", True,
         lambda v: f"p95 queue time above the accepted {figure(v, ' s')} for {o.sustained_for}",
         lambda lvl: f"Accepted p95 queue time {figure(lvl.value, ' s')} {at_planned} ({lvl.source}). Above it for a "
                     "continuous period is a rollback trigger."),
        ("K3KvCacheUsageAboveAccepted", "kv_usage_at_planned",
         lambda v: f"max({q.series('kv_cache_usage_perc')}) > {_fmt(v)}", "warning", False,
         lambda v: f"KV-cache usage above the accepted peak {v:.0%}",
         lambda lvl: f"Accepted peak KV-cache usage {figure(lvl.value)} {at_planned} ({lvl.source}): traffic beyond "
                     "the accepted load or longer contexts than tested."),
        ("K3PreemptionsAboveAccepted", "preemptions_per_s",
         lambda v: f"sum({q.rate('num_preemptions_total')}) > {_fmt(v)}", "warning", False,
         lambda v: f"preemption rate above the accepted {figure(v, '/s')}",
         lambda lvl: f"Accepted preemption rate {figure(lvl.value, '/s')} {at_planned} ({lvl.source}): the KV cache "
                     "runs out more often than in the accepted test."),
        ("K3ErrorRatioAboveAccepted", "error_ratio",
         lambda v: f"{q.error_ratio()}\n  > {_fmt(v)}", "warning", False,
         lambda v: f"share of requests failed on the server above the accepted {figure(v)}",
         lambda lvl: f"Accepted error ratio {figure(lvl.value)} {at_planned} ({lvl.source}); finished_reason "
                     f"{q.errors} counted as failures (client aborts and disconnects are not)."),
    )
    for name, key, expr, severity, rollback, summary, description in measured:
        level = lv[key]
        why = _refuse_level(level, "capacity")
        if why is None and name == "K3ErrorRatioAboveAccepted" and q.errors is None:
            why = (f"vLLM {ctx.version} reports failed requests only as finished_reason abort, which also counts "
                   "client disconnects: no error ratio without client aborts")
        if why:
            omitted[name] = why
        else:
            rules.append(_rule(name, expr(level.value), o.sustained_for, severity, rollback, summary(level.value),
                               description(level), run_id))

    hit = lv["prefix_hit_rate"]
    why = _refuse_level(hit, "prefix_cache")
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
            "K3PrefixHitRateFarBelowValidated", f"{q.hit_rate()}\n  < {_fmt(floor)}", o.sustained_for,
            "critical", True,
            f"prefix-cache hit rate below {o.hit_rate_fraction:.0%} of the {o.traffic_hit_rate:.0%} ordinary traffic "
            "reaches",
            f"Reuse proven in the accepted run ({hit.source}, {figure(hit.value)} on controlled warm requests); "
            f"ordinary traffic reaches {figure(o.traffic_hit_rate)} (operator's figure), alert under {figure(floor)} "
            f"over {o.hit_rate_window}: cache counters far from the normal behaviour are a rollback trigger.",
            run_id))
    return rules, omitted


def alerts_yaml(ctx: _Context, rules: list[dict[str, Any]]) -> str:
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

def _panel(pid: int, title: str, targets: list[tuple[str, str]], unit: str, description: str,
           threshold: float | None = None) -> dict[str, Any]:
    defaults: dict[str, Any] = {"unit": unit, "custom": {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10}}
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


def build_dashboard(ctx: _Context) -> dict[str, Any]:
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

def _val(level: acc.Level, fmt: str | None = None, unit: str = "") -> str:  # prose: `figure`, or `fmt` for a share
    return (f"unknown ({level.reason})" if not level.known else figure(level.value, unit) if fmt is None
            else fmt.format(level.value))


def rollback_md(ctx: _Context, rules: list[dict[str, Any]], omitted: dict[str, str]) -> str:
    lv, o, run = ctx.levels, ctx.opts, ctx.run
    traffic = acc.Level("traffic_hit_rate", o.traffic_hit_rate, "k3 golive --traffic-hit-rate",
                        reason="not given: k3 golive --traffic-hit-rate")
    decision = (run.decision or {}).get("decision")
    armed = {r["alert"]: r for r in rules}

    def trigger(alert: str, armed_text: str) -> str:
        if alert in armed:
            return f"{armed_text} Alert `{alert}`."
        return f"NOT ARMED — no threshold derived: {omitted.get(alert, 'not derived')}."

    queue, hit, validity = lv["queue_time_p95_s"], lv["prefix_hit_rate"], lv["tool_call_validity"]
    planned, contract_ctx = lv["planned_concurrency"], lv["contract_context_tokens"]
    lines = [
        f"# Rollback triggers — accepted run {run.run_id}",
        "",
        f"Decision: **{decision}**. vLLM {ctx.version or 'unknown'}. Every number below was measured in this run "
        "(its evidence file is named); none is copied from another model or deployment. Where the run did not "
        "measure a level, the alert is not armed and this file says so.",
        "",
        "## Roll back to the previous image when",
        "",
        f"1. **OOM under contract load.** The engine dies or logs CUDA out of memory while traffic stays within the "
        f"contract (≤ {_val(planned)} concurrent requests, prompts ≤ {_val(contract_ctx)} tokens). "
        f"{trigger('K3EngineDown', f'An engine down for {o.down_for} fires it; confirm OOM in the server log.')}",
        "2. **Queue time above the accepted level for a continuous period.** "
        + trigger("K3QueueTimeAboveAccepted",
                  f"p95 queue time above {_val(queue, unit=' s')} (from {queue.source}) for {o.sustained_for}."),
        f"3. **Tool calls produce invalid JSON.** The accepted tool-call validity is "
        f"{_val(validity, '{:.1%}')}" + (f" ({validity.source})" if validity.known else "")
        + ". vLLM exports no metric for it: watch the agents' clients or gateway; any invalid tool-call JSON in "
        "production is a trigger.",
        "4. **Cache counters far from the validated behaviour.** "
        + trigger("K3PrefixHitRateFarBelowValidated",
                  f"Hit rate (hits/queries tokens over {o.hit_rate_window}) below {o.hit_rate_fraction:.0%} of the "
                  f"{_val(traffic, '{:.1%}')} ordinary traffic reaches "
                  f"(operator's figure; the validated {_val(hit, '{:.1%}')} from {hit.source} comes from controlled "
                  "warm requests and is no threshold for real traffic)."),
        "",
        "## Alerts to investigate (not a rollback by themselves)",
        "",
    ]
    for alert in ("K3KvCacheUsageAboveAccepted", "K3PreemptionsAboveAccepted", "K3ErrorRatioAboveAccepted"):
        if alert in armed:
            lines.append(f"- `{alert}`: {armed[alert]['annotations']['description']}")
        else:
            lines.append(f"- `{alert}`: NOT ARMED — {omitted.get(alert)}")
    lines += [
        "",
        f"Operator choices (not measured): continuous period `for: {o.sustained_for}`, rate window "
        f"{o.rate_window}, engine down after {o.down_for}, \"far below\" = under {o.hit_rate_fraction:.0%} of the "
        f"validated hit rate, scrape job `{o.job}`" + (f", matchers `{o.matchers}`" if o.matchers else "") + ".",
        "",
        "## What reopens the acceptance sheet",
        "",
        "Any change of the following, compared with this run (`k3 validate … --baseline "
        f"{run.run_id}` states it on top):",
        "",
    ]
    for _key, label, read in acc.IDENTITY:
        level = read(run)
        shown = level.value if level.known else f"not recorded in this run ({level.reason})"
        if isinstance(shown, dict):
            shown = ", ".join(f"{k}={v}" for k, v in sorted(shown.items()))
        lines.append(f"- {label}: {shown}")
    lines.append("- the container image itself (rebuilt or re-tagged), even under the same tag")
    if decision == "limited-observation":
        d = run.decision or {}
        lines += ["", "## Limited observation", "",
                  f"Traffic cap: {json.dumps(d.get('traffic_cap'), ensure_ascii=False)}. "
                  f"Re-examine on: {d.get('reexamine_on')}.", ""]
        lines += [f"- {r}" for r in d.get("reasons", [])]
    if omitted:
        lines += ["", "## Alerts not written (no accepted level)", ""]
        lines += [f"- `{name}`: {why}" for name, why in omitted.items()]
    return "\n".join(lines) + "\n"


# -- entry point ------------------------------------------------------------------------------------------------------

def write_golive_kit(run_dir: str | Path, out_dir: str | Path, *, options: GoliveOptions | None = None) -> GoliveKit:
    """Write alerts.yml, dashboard.json and ROLLBACK.md for an accepted, intact run (atomic file by file)."""
    opts = options or GoliveOptions()
    store = RunStore.open(run_dir)
    problems = store.verify()
    if problems:
        raise EvidenceError(f"{store.root}: does not verify, no thresholds taken from it: " + "; ".join(problems))
    run = acc.read_run(run_dir)
    decision = (run.decision or {}).get("decision")
    if decision not in ACCEPTED_DECISIONS:
        raise BadInputError(f"the run's decision is {decision!r}; a go-live kit comes from an accepted run "
                            f"({' or '.join(ACCEPTED_DECISIONS)})", source=str(run_dir))
    version = acc.vllm_version(run).value
    names = metric_names(version, acc.observed_metric_names(run).value)
    levels = acc.levels(run, (acc.queue_time_p95_s, acc.kv_usage_at_planned, acc.preemptions_per_s, acc.error_ratio,
                              acc.prefix_hit_rate, acc.tool_call_validity, acc.planned_concurrency,
                              acc.contract_context_tokens))
    ctx = _Context(run, version, levels, names, _Query(opts, names, version), opts)
    rules, omitted = build_alerts(ctx)
    out = Path(out_dir)
    files = {
        ALERTS_FILE: alerts_yaml(ctx, rules).encode(),
        DASHBOARD_FILE: (json.dumps(build_dashboard(ctx), indent=2, ensure_ascii=False) + "\n").encode(),
        ROLLBACK_FILE: rollback_md(ctx, rules, omitted).encode(),
    }
    try:
        for name, data in files.items():
            atomic_write_bytes(out / name, data)
    except OSError as exc:
        raise BadInputError(f"cannot write the go-live kit: {exc.strerror}", source=str(out)) from None
    return GoliveKit(out, tuple(out / n for n in files), tuple(r["alert"] for r in rules), omitted, names,
                     golive_warnings(run.decision or {}))


def golive_warnings(decision: Mapping[str, Any]) -> tuple[str, ...]:
    """Said before arming: a `limited-observation` run's kit holds under its traffic cap only; a run shortened by
    loosened settings (steps, soak, repetitions below their floors) measured its levels on less load."""
    from ..core.thresholds import Loosened

    out = []
    if decision.get("decision") == "limited-observation":
        out.append(f"the run decided limited-observation: these alerts hold only under its traffic cap "
                   f"({json.dumps(decision.get('traffic_cap'), ensure_ascii=False)}), until "
                   f"{decision.get('reexamine_on')}")
    short = []
    for d in decision.get("loosened_thresholds") or ():
        try:
            short.append(Loosened.model_validate(d).short())
        except (TypeError, ValueError):
            continue
    if short:
        out.append("its levels were measured by a shortened run (" + "; ".join(short) + "): run the recipe's "
                   "defaults before arming alerts on production traffic")
    return tuple(out)
