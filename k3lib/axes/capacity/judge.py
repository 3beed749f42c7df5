"""The capacity axis' findings and evidence record: OOM and saturation turned into findings whose rule ids the
one decision table (k3lib.verdict.decision.RULES) maps to a decision. Pure over a `CapacityResult` and the parameters;
the record carries the saturation point and the traffic cap it justifies."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...core.outcomes import strongest
from ...core.evidence import EvidenceRecord, Finding, FindingStatus, axis_status
from ...core.params import Params
from .analysis import incomplete_counts, incomplete_load, latency_verdict, queue_verdict
from .ranks import rank_findings
from .result import CapacityResult
from .roofline import roofline_findings

if TYPE_CHECKING:
    from ...core.session import AxisContext

def _f(rule: str, status: FindingStatus, message: str, *, observed: Any = None, expected: Any = None,
       **evidence: Any) -> Finding:
    return Finding(rule=f"capacity.{rule}", status=status, message=message, observed=observed, expected=expected,
                   evidence=evidence)


def _ms(value: Any) -> str:
    return "n/a" if value is None else f"{value:.0f} ms"


def traffic_cap(result: CapacityResult, params: Params) -> dict[str, Any]:
    """The concurrency this run can justify: the saturation point, never above the planned concurrency."""
    planned = params.contract.planned_concurrency
    point = result.saturation_point
    if point is None:
        return {"max_concurrency": None, "basis": "no concurrency step held (or none ran)"}
    cap = min(point, planned)
    return {"max_concurrency": cap, "saturation_point": point, "planned_concurrency": planned,
            "basis": f"the highest concurrency step that held without preemption or queueing beyond the objective "
                     f"was {point}" + (f" (capped at the contract's {planned})" if point > planned else "")}


def _cold_load(result: CapacityResult) -> Finding:
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
                                       f"{ready.get('waited_s')} s, last {last}); {why}: rework the topology or the "
                                       "image",
                  observed=ready.get("last_status"), expected=200)
    restart = ready.get("restart") or {}
    if restart.get("command") and not restart.get("ok"):
        return _f("cold_load", "not-observable", f"target.restart failed ({restart.get('detail')}): the cold load was "
                                                 f"not observed; memory now: {mem_text}", observed=ready)
    if ready.get("observed_transition"):
        how = "restarted with target.restart, " if restart.get("ok") else ""
        return _f("cold_load", "pass", f"{how}not ready → ready in {ready['waited_s']:.1f} s of loading; memory at "
                                       f"ready: {mem_text}", observed=ready, memory_at_ready=memory)
    seen = (f"; the startup log shows a clean start to ready (line {log.ready_line})"
            if log is not None and log.ready and (log.oom is None or log.oom.phase != "startup") else "")
    return _f("cold_load", "not-observable", f"not observed: the server was already running and no target.restart "
                                             f"command restarts it{seen}; memory now: {mem_text}", observed=ready,
              memory_at_ready=memory)


def _admission(result: CapacityResult, params: Params) -> Finding:
    """A planned concurrency above what the server admits at once (max_num_seqs per engine × DP engines) queues by
    design, whatever memory is left."""
    values = (result.run.get("config") or {}).get("values") or {}
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


def _observability(result: CapacityResult) -> list[Finding]:
    out = []
    if result.gpu:
        gpus = sorted({f"{r.get('host')}/gpu{r.get('gpu')}" for r in result.gpu})
        out.append(_f("gpu_memory", "pass", f"per-GPU memory sampled on {len(gpus)} GPU(s), {len(result.gpu)} samples "
                                            f"({result.run.get('gpu_source')})", observed=len(gpus)))
    else:
        out.append(_f("gpu_memory", "not-observable", "no per-GPU memory curve: set target.gpu_metrics (dcgm, nvml "
                                                      "or prometheus) — the seed requires the curves before, during "
                                                      "and after any error"))
    usage = [r for r in result.metrics if r.get("kv_cache_usage_perc") is not None]
    if usage:
        out.append(_f("server_metrics", "pass", f"KV usage, running, waiting and preemptions sampled "
                                                f"({len(usage)} samples)", observed=len(usage)))
    else:
        out.append(_f("server_metrics", "not-observable", "no vllm:kv_cache_usage_perc in the sampled /metrics: "
                                                          "saturation cannot be read from the server"))
    return out


def _oom(result: CapacityResult, params: Params) -> list[Finding]:
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
    import datetime as dt

    if t is None:
        return "?"
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%H:%M:%S.%f")[:-3] + " UTC"


def _refusal(result: CapacityResult) -> Finding:
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


def _long_context(result: CapacityResult) -> Finding:
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
                                      f"{top.get('prompt_tokens')} tokens (TTFT p95 {_ms(top.get('ttft_p95_ms'))})",
              observed=table)


def _saturation(result: CapacityResult, params: Params) -> list[Finding]:
    planned = params.contract.planned_concurrency
    steps = result.steps
    point = result.saturation_point
    table = [{k: s.get(k) for k in ("concurrency", "held", "sent", "ok", "preemptions", "waiting_mean", "queue_p95_ms",
                                    "queue_p95_high_ms", "ttft_p95_ms", "latency_valid", "kv_usage_max", "server_errors",
                                    "refused", "timeouts", "unreachable", "cancelled", "out_of_contract")}
             for s in steps]
    nominal = result.step(planned)
    out = []
    if nominal is None or nominal.get("status") == "skipped":
        out.append(_f("saturation", "not-observable", f"the planned concurrency ({planned}) was not reached "
                                                      "(the engine died or the phase did not run)",
                      observed=point, steps=table))
    else:
        below = [s for s in steps if s["concurrency"] <= planned and not s.get("held")]
        crash = (result.oom or {}).get("kind") in ("engine-death", "server-errors")
        if below and crash and all((s.get("server_errors") or 0) > 0 or not s.get("engine_alive_after", True)
                                   for s in below):
            # the steps broke on a failure the OOM/engine finding already carries, not on memory pressure
            out.append(_f("saturation", "not-observable", f"the step at concurrency {below[0]['concurrency']} broke on "
                                                          f"a server failure that is not a memory error; saturation "
                                                          f"point so far {point}",
                          observed=point, steps=table))
        elif below:
            first = below[0]
            why = "; ".join(first.get("why") or [])
            out.append(_f("saturation", "fail", f"saturation at nominal load: the step at concurrency "
                                                f"{first['concurrency']} did not hold ({why}); saturation point "
                                                f"{point if point is not None else 'none'} for a planned {planned}",
                          observed=point, expected=f">= {planned}", steps=table))
        else:
            out.append(_f("saturation", "pass", f"every step up to the planned concurrency {planned} held without "
                                                f"preemption or queueing; saturation point {point}",
                          observed=point, expected=f">= {planned}", steps=table))
        objective = params.contract.queue_p95_ms
        q95 = nominal.get("queue_p95_ms")
        bounds = {k: nominal.get(k) for k in ("queue_p95_low_ms", "queue_p95_high_ms", "queue_p95_basis",
                                               "queue_mean_ms") if nominal.get(k) is not None}
        status, text = queue_verdict(nominal, objective)
        at = f"at the planned concurrency {planned}"
        if objective is None:
            out.append(_f("queue_time", "info", f"the contract sets no queue-time objective; {text} {at}",
                          observed=q95, **bounds))
        elif status is None:
            out.append(_f("queue_time", "not-observable", "no vllm:request_queue_time_seconds window at the planned "
                                                          "concurrency",
                          expected=objective))
        elif status == "undecided":
            out.append(_f("queue_time", "warn", f"inconclusive {at}: {text}", observed=q95, expected=objective, **bounds))
        else:
            out.append(_f("queue_time", status, f"{text} {at}", observed=q95, expected=objective, **bounds))
    beyond = [s for s in steps if s.get("out_of_contract") and s.get("status") != "skipped"]
    for s in beyond:
        held = s.get("held")
        out.append(_f("beyond_contract", "info",
                      f"beyond the contract, concurrency {s['concurrency']} " +
                      ("also held: headroom above the plan" if held else
                       f"did not hold ({'; '.join(s.get('why') or [])}): the cap is the planned concurrency"),
                      observed=held))
    return out


_NOT_SERVED = ("refused", "timeouts", "unreachable", "cancelled")


def _incomplete(result: CapacityResult, params: Params) -> Finding | None:
    """Load that did not complete, in every window up to the planned concurrency and in the soak: each window
    holds only when its completed share meets the contract (`contract.max_error_share`). Requests refused by
    status, timed out, unreachable or cut are load the deployment did not serve at nominal concurrency: a failing
    finding (capacity-extension, the seed's "saturation at a normal concurrency"). A window short only of requests
    that failed on the server leaves those to `capacity.server_errors` (limited observation: not stable, more GPUs
    would not fix it), and this finding warns, naming them."""
    share = params.contract.max_error_share
    windows = [(n, w) for n, w in _windows(result) if not w.get("out_of_contract")]
    if not windows:
        return None
    table: dict[str, dict[str, Any]] = {}
    short: list[str] = []
    not_served: list[str] = []
    for name, w in windows:
        sent, ok, kinds = incomplete_counts(w)
        table[name] = {"sent": sent, "ok": ok, **kinds, "error_statuses": w.get("error_statuses") or {}}
        is_short, said = incomplete_load(w, share)
        if is_short:
            short.append(f"{name}: {said}")
            if any(kinds.get(k) for k in _NOT_SERVED):
                not_served.append(name)
    expected = f"at most {share:.1%} of each window's requests not completed (contract.max_error_share)"
    if not_served:
        return _f("incomplete_load", "fail", "load did not complete at or below the planned concurrency "
                                             f"{params.contract.planned_concurrency}: " + "; ".join(short)
                  + " — the deployment as reached does not serve the planned load",
                  observed=table, expected=expected)
    if short:
        return _f("incomplete_load", "warn", "; ".join(short) + " — requests failed on the server side (judged by "
                                             "capacity.server_errors)", observed=table, expected=expected)
    counts = ", ".join(f"{name} {t['ok']}/{t['sent']}" for name, t in table.items())
    partial = [name for name, t in table.items() if t["ok"] < t["sent"]]
    allowed = f"; short within the allowed share: {', '.join(partial)}" if partial else ""
    return _f("incomplete_load", "pass", f"every load window up to the planned concurrency "
                                         f"{params.contract.planned_concurrency} completed its requests "
                                         f"({counts}){allowed}", observed=table, expected=expected)


def _latency_finding(rule: str, nominal: dict[str, Any] | None, key: str, objective: float | None,
                     planned: int) -> Finding:
    at = f"at the planned concurrency {planned}"
    if nominal is None or nominal.get("status") == "skipped":
        return Finding(rule=rule, status="not-observable" if objective is not None else "info",
                       message=f"the planned concurrency ({planned}) was not reached: no latency to judge")
    status, text, interval = latency_verdict(nominal, key, objective)
    observed = nominal.get(f"{key}_p95_ms")
    evidence = {"interval": interval} if interval else {}
    if status is None:
        return Finding(rule=rule, status="info", message=f"the contract sets no objective; {text} {at}",
                       observed=observed, evidence=evidence)
    if nominal.get("latency_valid") is False:
        return Finding(rule=rule, status="not-observable", observed=observed, expected=objective, evidence=evidence,
                       message=f"{text} {at}, but the client's latency figures failed the self-calibration gate "
                               f"({nominal.get('invalid_reason') or 'no reason kept'}): not judged")
    if status == "inconclusive":
        return Finding(rule=rule, status="warn", message=f"inconclusive {at}: {text}", observed=observed,
                       expected=objective, evidence=evidence)
    return Finding(rule=rule, status=status, message=f"{text} {at}", observed=observed, expected=objective,
                   evidence=evidence)


def _latency(result: CapacityResult, params: Params) -> list[Finding]:
    """The planned step's client TTFT and end-to-end p95 against the contract's objectives, on their intervals."""
    planned = params.contract.planned_concurrency
    nominal = result.step(planned)
    ttft = _latency_finding("capacity.latency_ttft", nominal, "ttft", params.contract.ttft_p95_ms, planned)
    e2e = _latency_finding("capacity.latency_e2e", nominal, "e2e", params.contract.e2e_p95_ms, planned)
    return [ttft, e2e]


def _soak(result: CapacityResult, params: Params) -> list[Finding]:
    soak = result.run.get("soak")
    if not soak:
        return [_f("soak", "not-observable", "the sustained-operation phase did not run")]
    out = []
    dur = soak.get("duration_s")
    growing = soak.get("memory_growing") or []
    mem = soak.get("memory") or []
    if not mem:
        out.append(_f("memory_growth", "not-observable", "no GPU memory samples during the soak"))
    elif growing:
        g = next(m for m in mem if m["gpu"] == growing[0])
        out.append(_f("memory_growth", "fail", f"steady memory growth during the soak on {len(growing)} GPU(s): "
                                               f"{g['gpu']} +{g['growth_mib']:.0f} MiB over {dur:.0f} s "
                                               f"({g['slope_mib_per_min']:.1f} MiB/min, r² {g['r2']}): not stable, no "
                                               "production", observed=growing,
                      memory=mem))
    else:
        worst = max(mem, key=lambda m: m.get("growth_mib") or 0)
        out.append(_f("memory_growth", "pass", f"no steady memory growth over {dur:.0f} s (largest fitted change "
                                               f"{worst.get('growth_mib')} MiB on {worst['gpu']})", memory=mem))
    pre, waiting = soak.get("preemptions"), soak.get("waiting_mean")
    short, said = incomplete_load(soak, params.contract.max_error_share)
    if short:
        sent, ok, kinds = incomplete_counts(soak)
        out.append(_f("soak_saturation", "fail", f"the soak at the planned concurrency did not complete its load: "
                                                 f"{said}",
                      observed={"sent": sent, "ok": ok, **kinds,
                                "error_statuses": soak.get("error_statuses") or {}},
                      expected=f"at most {params.contract.max_error_share:.1%} not completed"))
    elif pre or soak.get("queueing"):
        out.append(_f("soak_saturation", "fail", f"saturation at the planned concurrency during the soak: "
                                                 f"{pre or 0:g} preemption(s) ({soak.get('preemptions_per_min')}/min), "
                                                 f"{waiting or 0:.2f} waiting on average",
                      observed={"preemptions": pre, "waiting_mean": waiting}))
    elif pre is None:
        out.append(_f("soak_saturation", "not-observable", "no preemption counter sampled during the soak"))
    else:
        out.append(_f("soak_saturation", "pass", f"no preemption and no lasting queue at the planned concurrency "
                                                 f"over {dur:.0f} s", observed={"preemptions": pre,
                                                                                 "waiting_mean": waiting}))
    if soak.get("kv_accumulating"):
        out.append(_f("kv_accumulation", "warn", f"KV usage climbed from {soak['kv_usage_first']:.2f} to "
                                                 f"{soak['kv_usage_last']:.2f} under constant load (accumulation)",
                      observed=soak.get("kv_rise")))
    if soak.get("evicting"):
        out.append(_f("prefix_eviction", "warn", f"the prefix hit rate fell from {soak['hit_rate_first']:.2f} to "
                                                 f"{soak['hit_rate_last']:.2f} during the soak (eviction)",
                      observed=soak.get("hit_rate_drop")))
    if soak.get("fragmented"):
        out.append(_f("fragmentation", "warn", f"KV usage ≥ 90 % while few requests ran in "
                                               f"{soak['fragmentation_share']:.0%} of the soak samples (fragmentation)",
                      observed=soak.get("fragmentation_share")))
    return out


def _calibration(result: CapacityResult) -> Finding | None:
    cal = result.run.get("calibration") or {}
    if not cal.get("enabled"):
        return _f("client_calibration", "info", "the client's own timing error was not calibrated "
                                                "(axes.capacity.calibrate is false): its latency figures carry an "
                                                "unknown error")
    if not cal.get("ran"):
        return None  # the steps did not run: nothing to vouch for
    summary = cal.get("summary") or []
    failed = sorted((r for r in summary if not r.get("valid")), key=lambda r: r["concurrency"])
    invalid = [s["concurrency"] for s in result.steps if s.get("latency_valid") is False]
    common = dict(observed=summary, expected=f"p99 error <= {cal.get('max_error_ms')} ms",
                  known_ttft_ms=cal.get("known_ttft_ms"), known_itl_ms=cal.get("known_itl_ms"),
                  basis=cal.get("basis"), invalid_steps=invalid)
    if failed:
        n = failed[0]["concurrency"]
        return _f("client_calibration", "warn",
                  f"the client's own timing error at concurrency {n} exceeds its bound ({failed[0]['reason']}): "
                  f"the latency figures of the steps at or above {n} are marked invalid, not trusted; the "
                  "saturation point rests on the server's counters and is unaffected",
                  **common)
    worst: dict[str, Any] = max(summary, key=lambda r: r["concurrency"], default={})
    return _f("client_calibration", "pass",
              f"the client's own timing error stays within {cal.get('max_error_ms')} ms up to concurrency "
              f"{worst.get('concurrency')} (TTFT error p99 {_ms(worst.get('ttft_error_ms_p99'))}, ITL error p99 "
              f"{_ms(worst.get('itl_error_ms_p99'))}, event-loop lag p99 {_ms(worst.get('loop_lag_ms_p99'))})",
              **common)


def _windows(result: CapacityResult) -> list[tuple[str, dict[str, Any]]]:
    out = [(f"concurrency {s['concurrency']}", s) for s in result.steps if s.get("status") != "skipped"]
    if result.run.get("soak"):
        out.append(("the soak", result.run["soak"]))
    return out


def _cross_check(result: CapacityResult, params: Params) -> Finding | None:
    windows = [(name, w, w.get("cross_check") or {}) for name, w in _windows(result)]
    if not windows:
        return None
    table = {name: {"counts_agree": c.get("counts_agree"), "agrees": c.get("agrees"),
                    "disagreements": c.get("disagreements") or [], "incomplete": c.get("incomplete") or {},
                    "error_statuses": c.get("error_statuses") or {}} for name, _, c in windows}
    compared = [(name, c) for name, _, c in windows if c.get("agrees") is not None]
    if not compared:
        return _f("cross_check", "info", "client and server were not compared: no server counters around the load "
                                         "windows (see capacity.server_metrics)", observed=table)
    counts = [(name, c) for name, c in compared if c.get("counts_agree") is False]
    if counts:
        def detail(c: dict[str, Any]) -> str:
            by = {i["quantity"]: i for i in c.get("items") or []}
            return ", ".join(f"{q}: client {by[q]['client']:g}, server {by[q]['server']:g}"
                             for q in c.get("disagreements") or [] if q in by and by[q].get("diff") is not None
                             and by[q]["unit"] != "ms")
        where = "; ".join(f"{name} ({detail(c)})" for name, c in counts)
        return _f("cross_check", "warn", f"client and server counts disagree in {len(counts)} of {len(compared)} "
                                         f"load window(s): {where}"[:600] + " — another client was loading the "
                                         "target, or one side counts wrong: those windows did not measure the load "
                                         "the kit sent", observed=table)
    # the counts agree on what reached the engine; a window whose load did not complete (counted by the client,
    # kind by kind) measured less than the kit sent, which the agreement must not hide
    short = [(name, w) for name, w, c in windows if c.get("agrees") is not None and not w.get("out_of_contract")
             and incomplete_load(w, params.contract.max_error_share)[0]]
    if short:
        where = "; ".join(f"{name} ({incomplete_load(w, params.contract.max_error_share)[1]})" for name, w in short)
        return _f("cross_check", "warn", f"client and server agree only on the requests that reached the engine: the "
                                         f"client's load did not complete in {len(short)} of {len(compared)} compared "
                                         f"window(s): {where}"[:900] + " — those windows did not measure the load "
                                         "the kit sent", observed=table)
    latency = [(name, c) for name, c in compared if c.get("agrees") is False]
    if latency:
        return _f("cross_check", "info", "client and server counts agree in every window; latency quantiles differ "
                                         "beyond a histogram bucket and the network allowance in "
                                         + ", ".join(f"{name} ({', '.join(c['disagreements'])})"
                                                     for name, c in latency), observed=table)
    return _f("cross_check", "pass", f"client and server agree on requests, tokens and TTFT/e2e quantiles in every "
                                     f"load window ({len(compared)} compared)", observed=table)


def _phases(result: CapacityResult) -> list[Finding]:
    out = []
    for p in result.run.get("phases") or []:
        if p["status"] in ("cut", "failed"):
            out.append(_f("phase_bounds", "warn", f"the {p['phase']} phase {p['status']}: {p['note']}",
                          observed=p))
    return out


def iter_findings(result: CapacityResult, params: Params) -> list[Finding]:
    out = [_cold_load(result), _admission(result, params), *_observability(result), *_oom(result, params),
           _refusal(result)]
    if (long_context := result.phase("long-context")) and long_context["status"] != "skipped":
        out.append(_long_context(result))
    if (concurrency := result.phase("concurrency")) and concurrency["status"] != "skipped":
        out.extend(_saturation(result, params))
        out.extend(_latency(result, params))
        out.extend(rank_findings(result, params))
        out.extend(roofline_findings(result, params))
        out.extend(f for f in (_calibration(result),) if f is not None)
    if (soak := result.phase("soak")) and soak["status"] != "skipped":
        out.extend(_soak(result, params))
    out.extend(f for f in (_incomplete(result, params), _cross_check(result, params)) if f is not None)
    out.extend(_phases(result))
    return out


def implied_decision(findings: list[Finding]) -> str:
    """The strongest decision the one decision table gives these findings ("production" when none)."""
    return strongest(findings)


def capacity_record(result: CapacityResult, ctx: "AxisContext") -> EvidenceRecord:
    findings = iter_findings(result, ctx.params)
    status = axis_status(findings)
    decision = implied_decision(findings)
    cap = traffic_cap(result, ctx.params)
    point = result.saturation_point
    oom = result.oom
    cls = (oom or {}).get("classification") or {}
    failed = [f.rule for f in findings if f.status == "fail"]
    summary = (f"saturation point {point if point is not None else 'none'} (planned "
               f"{ctx.params.contract.planned_concurrency})"
               + (f"; {oom['kind']} in {oom.get('phase')} → {cls.get('oom_class')}" if oom else "; no OOM")
               + (f"; failing: {', '.join(failed)}" if failed else "")
               + f"; implies {decision}")
    files = result.run.get("files") or {}
    attachments = [v for v in files.values() if v] + ["evidence/capacity/run.json"]
    return EvidenceRecord(
        axis="capacity", title="Memory capacity", status=status, summary=summary, findings=findings,
        data={"saturation_point": point, "traffic_cap": cap, "implied_decision": decision,
              "planned_concurrency": ctx.params.contract.planned_concurrency,
              "oom": _oom_data(oom), "configuration": (result.run.get("config") or {}),
              "plan": result.plan, "phases": result.run.get("phases"),
              "steps": result.steps, "calibration": result.run.get("calibration"),
              "cross_check": {name: w.get("cross_check") for name, w in _windows(result)},
              "long_context": result.run.get("long_context"), "refusal": result.run.get("refusal"),
              "ready": result.run.get("ready"), "soak": result.run.get("soak")},
        attachments=sorted(set(attachments)))


def _oom_data(oom: dict[str, Any] | None) -> dict[str, Any] | None:
    if oom is None:
        return None
    return {k: oom.get(k) for k in ("kind", "phase", "step", "in_flight", "at_wall", "via", "classification",
                                    "log_line", "log_text", "log_time", "log_time_wall", "lines_before",
                                    "memory_around")}
