"""Findings on saturation at the planned load: the concurrency steps (the saturation point, the queue time, the
steps beyond the contract), the load that did not complete, the client latency against the objectives, and the
soak (memory growth, preemption, KV accumulation, prefix eviction, fragmentation)."""

from __future__ import annotations


from ...core.evidence import Finding
from ...core.numbers import figure
from ...core.params import Params
from .agreement import MIN_SAMPLES
from .analysis import incomplete_counts, incomplete_load, latency_verdict, queue_verdict
from .finding import finding as _f, load_windows
from .result import CapacityResult
from .shapes import StepRow


def saturation_findings(result: CapacityResult, params: Params) -> list[Finding]:
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
        below = [s for s in steps if s["concurrency"] <= planned and s.get("held") is False]
        undecided = [s for s in steps if s["concurrency"] <= planned and s.get("held") is None]
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
        elif undecided:
            first = undecided[0]
            said: list[str] = list(first.get("why") or [])
            cause = ("the step was too short to measure sustained load" if any("no sustained load" in w for w in said)
                     else "the server's series and the kit's own measurements of the load disagree")
            out.append(_f("saturation", "warn", f"inconclusive at concurrency {first['concurrency']}: "
                                                f"{'; '.join(said)} — {cause}, so no step at or above "
                                                f"it is accepted; saturation point "
                                                f"{point if point is not None else 'none'}",
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


def incomplete_finding(result: CapacityResult, params: Params) -> Finding | None:
    """Load that did not complete, in every window up to the planned concurrency and in the soak: each window
    holds only when its completed share meets the contract (`contract.max_error_share`). Requests refused by
    status, timed out, unreachable or cut are load the deployment did not serve at nominal concurrency: a failing
    finding (capacity-extension, the seed's "saturation at a normal concurrency"). A window short only of requests
    that failed on the server leaves those to `capacity.server_errors` (limited observation: not stable, more GPUs
    would not fix it), and this finding warns, naming them."""
    share = params.contract.max_error_share
    windows = [(n, w) for n, w in load_windows(result) if not w.get("out_of_contract")]
    if not windows:
        return None
    table: dict[str, dict[str, int | dict[str, int]]] = {}
    tallies: dict[str, tuple[int, int]] = {}  # (completed, sent) of each window
    short: list[str] = []
    not_served: list[str] = []
    for name, w in windows:
        sent, ok, kinds = incomplete_counts(w)
        table[name] = {"sent": sent, "ok": ok, **kinds, "error_statuses": w.get("error_statuses") or {}}
        tallies[name] = (ok, sent)
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
    counts = ", ".join(f"{name} {ok}/{sent}" for name, (ok, sent) in tallies.items())
    partial = [name for name, (ok, sent) in tallies.items() if ok < sent]
    allowed = f"; short within the allowed share: {', '.join(partial)}" if partial else ""
    return _f("incomplete_load", "pass", f"every load window up to the planned concurrency "
                                         f"{params.contract.planned_concurrency} completed its requests "
                                         f"({counts}){allowed}", observed=table, expected=expected)


def _latency_finding(rule: str, nominal: StepRow | None, key: str, objective: float | None,
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


def latency_findings(result: CapacityResult, params: Params) -> list[Finding]:
    """The planned step's client TTFT and end-to-end p95 against the contract's objectives, on their intervals."""
    planned = params.contract.planned_concurrency
    nominal = result.step(planned)
    ttft = _latency_finding("capacity.latency_ttft", nominal, "ttft", params.contract.ttft_p95_ms, planned)
    e2e = _latency_finding("capacity.latency_e2e", nominal, "e2e", params.contract.e2e_p95_ms, planned)
    return [ttft, e2e]


def soak_findings(result: CapacityResult, params: Params) -> list[Finding]:
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
                                               f"({figure(g['slope_mib_per_min'], ' MiB/min')}, r² {figure(g['r2'])}): "
                                               "not stable, no production", observed=growing,
                      memory=mem))
    else:
        worst = max(mem, key=lambda m: m.get("growth_mib") or 0)
        out.append(_f("memory_growth", "pass", f"no steady memory growth over {dur:.0f} s (largest fitted change "
                                               f"{figure(worst.get('growth_mib'), ' MiB')} on {worst['gpu']})",
                      memory=mem))
    pre, waiting = soak.get("preemptions"), soak.get("waiting_mean")
    short, said = incomplete_load(soak, params.contract.max_error_share)
    agreement = soak.get("agreement")
    if not short and (agreement is None or agreement["agrees"] is False or agreement["samples"] < MIN_SAMPLES):
        out.append(_f("soak_saturation", "warn", "inconclusive: " + ((agreement["text"] if agreement else None) or "no agreement "
                                                 "recorded") + " — the server's series and the kit's own "
                                                 "measurements of the soak disagree",
                      observed={"preemptions": pre, "waiting_mean": waiting, "agreement": agreement or {}}))
    elif short:
        sent, ok, kinds = incomplete_counts(soak)
        out.append(_f("soak_saturation", "fail", f"the soak at the planned concurrency did not complete its load: "
                                                 f"{said}",
                      observed={"sent": sent, "ok": ok, **kinds,
                                "error_statuses": soak.get("error_statuses") or {}},
                      expected=f"at most {params.contract.max_error_share:.1%} not completed"))
    elif pre or soak.get("queueing"):
        out.append(_f("soak_saturation", "fail", f"saturation at the planned concurrency during the soak: "
                                                 f"{pre or 0:g} preemption(s) "
                                                 f"({figure(soak.get('preemptions_per_min'), '/min')}), "
                                                 f"{figure(waiting or 0)} waiting on average",
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
