"""ROLLBACK.md: what each alert means, where its threshold comes from, and what to do when it fires."""

from __future__ import annotations

import json

from ..core.numbers import figure
from ..verdict import accepted as acc
from .queries import KitContext
from .shapes import AlertRule


def _val(level: acc.Level, fmt: str | None = None, unit: str = "") -> str:  # prose: `figure`, or `fmt` for a share
    return (f"unknown ({level.reason})" if not level.known else figure(level.value, unit) if fmt is None
            else fmt.format(level.value))


def rollback_md(ctx: KitContext, rules: list[AlertRule], omitted: dict[str, str]) -> str:
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
