"""The capacity axis' findings and evidence record: OOM and saturation turned into findings whose rule ids the
one decision table (k3lib.core.outcomes.RULES) maps to a decision. Pure over a `CapacityResult` and the parameters;
the record carries the saturation point and the traffic cap it justifies."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from ...core.evidence import EvidenceRecord, Finding, axis_status
from ...core.outcomes import strongest
from ...core.params import Params
from ..served import open_findings, served_finding, served_verdict
from ..shapes import Reply, ServedVerdict
from .finding import finding as _f, load_windows
from .limits import (admission_finding, cold_load_finding, long_context_finding, oom_findings,
                     refusal_finding)
from .ranks import rank_findings
from .reliability import calibration_finding, cross_check_finding
from .result import CapacityResult
from .roofline import roofline_findings
from .run_shapes import OomEventRow, TrafficCapRow
from .ties import capacity_claims
from .saturation import incomplete_finding, latency_findings, saturation_findings, soak_findings
from .sessionjudge import session_findings, session_summary

if TYPE_CHECKING:
    from ...core.session import JudgeContext


def traffic_cap(result: CapacityResult, params: Params) -> TrafficCapRow:
    """The concurrency this run can justify: the saturation point, never above the planned concurrency."""
    planned = params.contract.planned_concurrency
    point = result.saturation_point
    if point is None:
        done = sorted((s for s in result.steps if s.get("status") != "skipped"), key=lambda s: s["concurrency"])
        if done and done[0].get("held") is None:
            return {"max_concurrency": None, "basis": f"no concurrency step held: the step at {done[0]['concurrency']} "
                                                      f"is inconclusive ({'; '.join(done[0].get('why') or [])})"[:600]}
        return {"max_concurrency": None, "basis": "no concurrency step held (or none ran)"}
    cap = min(point, planned)
    return {"max_concurrency": cap, "saturation_point": point, "planned_concurrency": planned,
            "basis": f"the highest concurrency step that held without preemption or queueing beyond the objective "
                     f"was {point}" + (f" (capped at the contract's {planned})" if point > planned else "")}


def observability_findings(result: CapacityResult) -> list[Finding]:
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


def phase_findings(result: CapacityResult) -> list[Finding]:
    out = []
    for p in result.run.get("phases") or []:
        if p["status"] in ("cut", "failed"):
            out.append(_f("phase_bounds", "warn", f"the {p['phase']} phase {p['status']}: {p['note']}",
                          observed=p))
    return out


def iter_findings(result: CapacityResult, params: Params) -> list[Finding]:
    """Every finding of a capacity run, phase by phase (a phase that was skipped gives none of its own)."""
    out = [cold_load_finding(result), admission_finding(result, params), *observability_findings(result),
           *oom_findings(result, params), refusal_finding(result)]
    if (long_context := result.phase("long-context")) and long_context["status"] != "skipped":
        out.append(long_context_finding(result))
    if (concurrency := result.phase("concurrency")) and concurrency["status"] != "skipped":
        out.extend(saturation_findings(result, params))
        out.extend(latency_findings(result, params))
        out.extend(rank_findings(result, params))
        out.extend(roofline_findings(result, params))
        out.extend(f for f in (calibration_finding(result),) if f is not None)
    if (soak := result.phase("soak")) and soak["status"] != "skipped":
        out.extend(soak_findings(result, params))
    if (sessions := result.phase("sessions")) and sessions["status"] != "skipped":
        out.extend(session_findings(result, params))
    out.extend(f for f in (incomplete_finding(result, params), cross_check_finding(result, params)) if f is not None)
    out.extend(phase_findings(result))
    verdict = served_of(result)
    return [*open_findings(out, verdict), served_finding("capacity", verdict)]


def served_of(result: CapacityResult) -> ServedVerdict:
    """Asked vs served over the run's requests (`k3lib.axes.served`): the out-of-contract request is left out (it
    asks to be refused; a server that serves it clamps its length), and the counters are compared window by window
    (`capacity.cross_check`)."""
    # each request row is its ChatRecord's dict with the capacity step beside it
    return served_verdict(cast(list[Reply], [r for r in result.requests if r.get("step") != "out-of-contract"]),
                          counters=False, length_required=True)


def implied_decision(findings: list[Finding]) -> str:
    """The strongest decision the one decision table gives these findings ("production" when none)."""
    return strongest(findings)


def capacity_record(result: CapacityResult, ctx: "JudgeContext") -> EvidenceRecord:
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
              "cross_check": {name: w.get("cross_check") for name, w in load_windows(result)},
              "long_context": result.run.get("long_context"), "refusal": result.run.get("refusal"),
              "ready": result.run.get("ready"), "soak": result.run.get("soak"),
              "claims": capacity_claims(result), "sessions": session_summary(result)},
        attachments=sorted(set(attachments)))


def _oom_data(oom: OomEventRow | None) -> OomEventRow | None:
    if oom is None:
        return None
    return cast(OomEventRow, {k: oom.get(k) for k in ("kind", "phase", "step", "in_flight", "at_wall", "via", "classification",
                                    "log_line", "log_text", "log_time", "log_time_wall", "lines_before",
                                    "memory_around")})
