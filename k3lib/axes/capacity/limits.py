"""Findings on the server's limits, each against what the contract plans: the cold load to ready, the sequences it
admits at once, the memory (an OOM or engine death, classified), the out-of-contract prompt it must refuse, and the
planned context lengths served one at a time."""

from __future__ import annotations

import datetime as dt
from typing import Any

from ...core.evidence import Finding
from ...core.numbers import figure
from ...core.params import Params
from .finding import finding as _f
from .finding import ms_text
from .result import CapacityResult


def cold_load_finding(result: CapacityResult) -> Finding:
    phase = result.phase("cold-load")
    ready = result.run.get("ready") or {}
    if phase is None or not ready:
        return _f("cold_load", "not-observable", "the cold-load phase did not run")
    memory = ready.get("memory_at_ready") or []
    mem_text = ", ".join(f"{m['gpu']} {m['used_mib']:.0f}/{m['total_mib']:.0f} MiB" for m in memory
                         if m.get("used_mib") is not None and m.get("total_mib")) or "GPU memory not observable"
    log = result.log
    if not ready.get("ready"):
        oom = log.oom if log is not None else None
        startup_oom = oom if oom is not None and oom.phase == "startup" else None
        why = f"startup OOM in the log (line {startup_oom.line}): {startup_oom.text.strip()[:200]}" \
            if startup_oom is not None else \
            "no memory error in the log" if log is not None else "no server log to say why"
        last = ready.get("last_status") or ready.get("last_error")
        return _f("cold_load", "fail", f"the server never became ready ({ready.get('polls')} health polls over "
                                       f"{figure(ready.get('waited_s'), ' s')}, last {last}); {why}: rework the "
                                       "topology or the image",
                  observed=ready.get("last_status"), expected=200)
    restart = ready.get("restart") or {}
    if restart.get("command") and not restart.get("ok"):
        return _f("cold_load", "not-observable", f"target.restart failed ({restart.get('detail')}): the cold load was "
                                                 f"not observed; memory now: {mem_text}", observed=ready)
    if ready.get("observed_transition"):
        how = f"restarted with target.restart ({restart['effect']}), " if restart.get("effect") else \
            ("restarted with target.restart, " if restart.get("ok") else "")
        return _f("cold_load", "pass", f"{how}not ready → ready in {figure(ready['waited_s'], ' s')} of loading; "
                                       f"memory at ready: {mem_text}", observed=ready, memory_at_ready=memory)
    if restart.get("command") and restart.get("effect"):
        return _f("cold_load", "not-observable", f"target.restart returned ({restart.get('detail')}) but "
                                                 f"{restart['effect']}: the cold load was not observed; memory now: "
                                                 f"{mem_text}", observed=ready, memory_at_ready=memory)
    seen = (f"; the startup log shows a clean start to ready (line {log.ready_line})"
            if log is not None and log.ready and (log.oom is None or log.oom.phase != "startup") else "")
    return _f("cold_load", "not-observable", f"not observed: the server was already running and no target.restart "
                                             f"command restarts it{seen}; memory now: {mem_text}", observed=ready,
              memory_at_ready=memory)


def admission_finding(result: CapacityResult, params: Params) -> Finding:
    """A planned concurrency above what the server admits at once (max_num_seqs per engine × DP engines) queues by
    design, whatever memory is left."""
    config = result.run.get("config")
    values = (config.get("values") if config else None) or {}
    seqs, dp = values.get("max_num_seqs"), values.get("data_parallel_size") or 1
    planned = params.contract.planned_concurrency
    if not isinstance(seqs, int) or not isinstance(dp, int):
        return _f("admission", "info", "max_num_seqs not stated by the server (startup log, /v1/models): the planned "
                                       f"concurrency {planned} was not compared with what the server admits")
    limit = seqs * dp
    if planned > limit:
        return _f("admission", "fail", f"the planned concurrency {planned} is above what the server admits at once "
                                       f"(max_num_seqs {seqs} × DP {dp} = {limit}): requests beyond {limit} queue by "
                                       "design", observed=limit, expected=f">= {planned}")
    return _f("admission", "pass", f"the server admits {limit} sequences at once (max_num_seqs {seqs} × DP {dp}) ≥ "
                                   f"the planned concurrency {planned}", observed=limit, expected=f">= {planned}")



def oom_findings(result: CapacityResult, params: Params) -> list[Finding]:
    ev = result.oom
    planned = params.contract.planned_concurrency
    log_note = "" if result.log is not None else " (server log not configured: only client-visible failures checked)"
    if ev is None:
        return [_f("oom", "pass", "no OOM, engine death or server error during the run" + log_note)]
    if ev["kind"] == "not-ready":
        return []  # the cold-load finding carries it
    where = f"in the {ev.get('phase')} phase" + (f" (step {ev['step']})" if ev.get("step") else "")
    when = f" at {_clock(ev.get('at_wall'))}" if ev.get("at_wall") else ""
    lines = ev.get("lines_before") or []
    common = dict(at_wall=ev.get("at_wall"), log_time=ev.get("log_time"), log_line=ev.get("log_line"),
                  log_text=ev.get("log_text"), lines_before=lines, memory_around=ev.get("memory_around"),
                  in_flight=ev.get("in_flight"), classification=ev.get("classification"))
    if ev["kind"] == "engine-death":
        return [_f("engine_death", "fail", f"the engine died {where}{when} with a fatal error that is not a memory "
                                           f"error ({(ev.get('log_text') or '').strip()[:160]}): image, driver or "
                                           "topology", observed=ev.get("phase"),
                   **common)]
    if ev["kind"] == "server-errors":
        return [_f("server_errors", "fail", f"requests failed on the server side {where}{when} while the engine stayed "
                                            f"up: {(ev.get('first_error') or '')[:160]}",
                   observed=ev.get("phase"), **common)]
    cls = ev.get("classification") or {}
    confirmed = "OOM" if ev["kind"] == "oom" else "engine failure (no log to confirm an OOM; treated as one)"
    message = (f"{confirmed} {where}{when}, classified '{cls.get('oom_class')}': {cls.get('basis')}. "
               f"Next: {cls.get('remedy')}")
    step_c = _step_concurrency(ev.get("step"))
    beyond_only = ev.get("phase") == "concurrency" and step_c is not None and step_c > planned
    if cls.get("oom_class") == "startup":
        return [_f("startup_oom", "fail", message, observed=cls.get("oom_class"), **common)]
    if beyond_only:
        return [_f("oom", "warn", message + f" — only beyond the contract (planned concurrency {planned}): the "
                                            "server does not protect itself from overload; cap the traffic and "
                                            "control the queue",
                   observed=cls.get("oom_class"), **common)]
    return [_f("oom", "fail", message + " — an OOM on nominal traffic: no production", observed=cls.get("oom_class"),
               **common)]


def _step_concurrency(label: Any) -> int | None:
    if isinstance(label, str) and label.startswith("c") and label[1:].isdigit():
        return int(label[1:])
    return None


def _clock(t: float | None) -> str:
    if t is None:
        return "?"
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%H:%M:%S.%f")[:-3] + " UTC"


def refusal_finding(result: CapacityResult) -> Finding:
    r = result.run.get("refusal") or {}
    outcome = r.get("outcome")
    limit = r.get("contract_limit_tokens")
    n = r.get("prompt_tokens")
    if outcome == "refused" and r.get("engine_alive_after"):
        wording = "vLLM's context-length message" if r.get("context_message") else \
            f"an unfamiliar message ({(r.get('message') or '')[:120]!r})"
        return _f("context_refusal", "pass", f"the acceptable case: a {n}-token prompt beyond the contract's {limit} "
                                             f"tokens was refused with 400 ({wording}) before any GPU was exhausted",
                  observed=r.get("http_status"), expected=400, refusal=r)
    if outcome == "served":
        return _f("context_refusal", "warn", f"a {n}-token prompt beyond the contract's {limit} tokens was served: the "
                                             "server's context limit is above the contract, so nothing refuses an "
                                             "out-of-contract request (set --max-model-len to the contract)",
                  observed=200, expected=400, refusal=r)
    if outcome in ("failed", "refused"):
        return _f("context_refusal", "fail", f"a {n}-token prompt beyond the contract's {limit} tokens was not "
                                             "refused cleanly: the engine failed "
                                             f"({(r.get('message') or '')[:160]}); an out-of-contract request must be "
                                             "refused before it exhausts the GPUs",
                  observed=r.get("http_status"), expected=400, refusal=r)
    return _f("context_refusal", "not-observable", f"the out-of-contract probe did not complete ({outcome}: "
                                                   f"{r.get('reason') or r.get('message') or ''})"[:300],
              refusal=r)


def long_context_finding(result: CapacityResult) -> Finding:
    rows = result.run.get("long_context") or []
    if not rows:
        return _f("long_context", "not-observable", "no long-context request ran")
    bad = [r for r in rows if r.get("status") not in ("ok", "skipped")]
    table = [{k: r.get(k) for k in ("target_tokens", "prompt_tokens", "status", "ttft_p95_ms", "e2e_p95_ms")}
             for r in rows]
    if bad:
        first = bad[0]
        return _f("long_context", "fail", f"{len(bad)} of {len(rows)} planned context lengths failed, first at "
                                          f"{first.get('prompt_tokens') or first.get('target_tokens')} tokens "
                                          f"({(first.get('error') or first.get('status') or '')[:160]})",
                  observed=table)
    if any(r.get("status") == "skipped" for r in rows):
        return _f("long_context", "not-observable", "some context lengths were skipped (engine dead)",
                  observed=table)
    top = max(rows, key=lambda r: r.get("prompt_tokens") or 0)
    return _f("long_context", "pass", f"every planned context length served one at a time, up to "
                                      f"{top.get('prompt_tokens')} tokens (TTFT p95 {ms_text(top.get('ttft_p95_ms'))})",
              observed=table)
