"""The text the CLI prints (and the notebook shows): the four fixed elements with their hashes on top, then per-path
acceptance with its interval, the paired differences, latency, the retry policy's effect and cost per accepted
task — every figure read from the record."""

from __future__ import annotations

from ...core.numbers import figure
from .record import PathsResult


def _money(v: float | None, cur: str) -> str:
    return "unknown (a price or the usage is missing)" if v is None else figure(v, f" {cur}")


def _ms(v: float | None) -> str:
    return "—" if v is None else f"{v:.0f} ms"


def _rate(k: int, n: int, rate: float | None, low: float | None, high: float | None) -> str:
    if rate is None:
        return "no task run"
    return f"{k}/{n} = {rate:.0%} (95 % Wilson {low:.0%}–{high:.0%})"


def paths_lines(r: PathsResult) -> list[str]:
    out = ["fixed before any result was read:"]
    out += [f"  {f.name}: sha256 {f.sha256}  [{f.origin}]  {f.summary}" for f in r.fixed]
    out.append(f"task set: {r.task_set}")
    for s in r.paths:
        rate = _rate(s.accepted, s.tasks_run, s.acceptance_rate, s.acceptance_low, s.acceptance_high)
        out.append(f"path {s.path}: accepted {rate}"
                   f"; answered {s.answered}, failed {s.tasks_run - s.answered}, not run {s.tasks_planned - s.tasks_run}"
                   + (f" (stopped by {s.stopped_by})" if s.stopped_by else ""))
        out.append(f"  retries {s.retries} (accepted only after a retry: {s.accepted_after_retry}), timeouts "
                   f"{s.timeouts}, malformed tool calls {s.tool_call_errors} in {s.tasks_with_tool_call_errors} task(s)")
        out.append(f"  TTFT p50 {_ms(s.ttft_p50_ms)} p95 {_ms(s.ttft_p95_ms)}; task latency p50 "
                   f"{_ms(s.latency_p50_ms)} p95 {_ms(s.latency_p95_ms)}; tokens prompt {s.prompt_tokens} "
                   f"(cached {s.cached_tokens}) completion {s.completion_tokens}")
        out.append(f"  cost {_money(s.cost, r.currency)}; per accepted task {_money(s.cost_per_accepted_task, r.currency)}")
    for p in r.pairs:
        if p.difference is None:
            out.append(f"paired {p.a} vs {p.b}: no task ran on both paths")
            continue
        out.append(f"paired {p.a} vs {p.b} on {p.pairs} tasks: both {p.both}, {p.a} only {p.a_only}, {p.b} only "
                   f"{p.b_only}, neither {p.neither}; difference {p.difference:+.0%} (95 % {p.low:+.0%}–{p.high:+.0%}):"
                   f" {p.verdict}")
        if p.only_a_tasks:
            out.append(f"  accepted on {p.a} only: {', '.join(p.only_a_tasks)}")
        if p.only_b_tasks:
            out.append(f"  accepted on {p.b} only: {', '.join(p.only_b_tasks)}")
    return out
