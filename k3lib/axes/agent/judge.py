"""What axis 2 found: the result of a run, rebuilt from the steps written to the run folder, and the findings and
evidence record drawn from it.

Everything here is a pure function of `AgentResult`, which `load_agent_result` rebuilds from the run folder,
so a run can be re-rendered without sending a request again.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from ...core.jsonvalue import JsonValue

from ...core.evidence import EvidenceRecord, Finding, axis_status
from ...core.numbers import figure
from . import checks as C
from .config import DEFAULT_MIN_PASS_RATE
from .contract_judge import contract_findings, contract_rows
from .rate import failure_rate_finding
from .result import CONTRACT_FILE, RUN_FILE, STEPS_FILE, TURNS_FILE, AgentResult
from .serving import longest_silence, serving_findings
from ..served import open_findings, served_finding, served_verdict
from ..shapes import Reply, ServedVerdict
from .shapes import CaseRow, ContextGrowth

if TYPE_CHECKING:
    from ...core.session import JudgeContext

# What a failing check is about; the decision it forces comes from the one table (k3lib.core.outcomes.RULES).
ENVIRONMENT = {"category": "environment"}
AGENTS_BLOCKED = {"category": "tool-calls", "blocks": "agents"}


# ---------------------------------------------------------------------------------------------------------------
# Findings


def iter_findings(result: AgentResult) -> list[Finding]:
    """The axis's findings: server flags, each check's pass rate per level, budgets hit, cases skipped, context;
    every pass opened when the target did not serve what was asked (`k3lib.axes.served`)."""
    verdict = served_of(result)
    return [*open_findings(_findings(result), verdict), served_finding("agent", verdict)]


def served_of(result: AgentResult) -> ServedVerdict:
    """Asked vs served over every reply of the run (scenario, tool-turn series and its retries, contract check) and
    the server's counters over the run."""
    found: list[Reply | None] = [s.get("reply") for s in result.steps]
    for t in result.turns:
        retry = t.get("retry")
        found += [t.get("reply"), retry.get("reply") if retry else None]
    found += [r.get("reply") for r in result.contract]
    replies = [r for r in found if r]
    served = result.served or {}
    return served_verdict(replies, served.get("cross_check"),
                          counters_error=served.get("error") or ("the run recorded no server counters"
                                                                 if not served else None))


def _findings(result: AgentResult) -> list[Finding]:
    out: list[Finding] = [_tool_choice_finding(result)]
    out.extend(_check_findings(result))
    out.extend(_budget_findings(result))
    out.extend(Finding(rule="agent.case_skipped", status="info", message=f"{sk['case']}: {sk['reason']}")
               for sk in result.skipped)
    fields = Counter(s["parsed"].get("reasoning_field") for s in result.steps
                     if s["reply"].get("ok") and s["parsed"].get("reasoning_field"))
    if fields:
        out.append(Finding(rule="agent.reasoning_field", status="info",
                           message="reasoning came back as " + ", ".join(f"`{k}` ×{v}" for k, v in fields.items())
                                   + "; it was sent back under the same name in later turns",
                           observed=dict(fields)))
    rate = failure_rate_finding(result.turns, result.settings)
    if rate is not None:
        out.append(rate)
    if result.stopped:
        out.append(Finding(rule="agent.budget", status="warn", observed={"stopped": result.stopped},
                           message=f"the axis stopped at the plan's at-most, judged on what it measured: "
                                   f"{result.stopped}"))
    if result.series.get("stopped_by"):
        sr = result.series
        out.append(Finding(rule="agent.budget", status="warn", observed=sr,
                           message=f"tool-turn series: {sr['stopped_by']} reached after {sr.get('requests')} requests, "
                                   f"{sr.get('completed')} of {sr.get('planned')} turns complete"))
    out.extend(contract_findings(result.contract, result.settings))
    out.extend(serving_findings(result))
    growth = _context_growth(result)
    if growth:
        out.append(Finding(rule="agent.context_growth", status="info",
                           message=f"the long exchange reached {growth['max_prompt_tokens']} prompt tokens "
                                   f"(target {growth['target_tokens']}, context limit {growth['context_limit']})",
                           observed=growth))
    return out


def _tool_choice_finding(result: AgentResult) -> Finding:
    """Whether the server takes tools at all: its refusals name the missing flags, else the answered tool requests."""
    refusals = result.environment_refusals()
    if refusals:
        what = {"auto-tool-choice": "auto tool choice not enabled on the server",
                "tool-parser": "no tool-call parser configured on the server"}
        names = sorted(refusals)
        return Finding(
            rule="agent.auto_tool_choice", status="fail",
            message="; ".join(what[n] for n in names) + " — restart vLLM with --enable-auto-tool-choice "
                    "--tool-call-parser <parser> (Kimi K3: kimi_k3); agents cannot be accepted until then",
            observed={n: refusals[n] for n in names},
            expected="--enable-auto-tool-choice and --tool-call-parser set",
            evidence={**ENVIRONMENT, "server_text": C.AUTO_TOOL_CHOICE_TEXT})
    tooled = sum(1 for s in result.steps if s.get("tools") and s["reply"].get("ok"))
    return Finding(rule="agent.auto_tool_choice", status="pass" if tooled else "not-observable",
                   message=(f"the server accepted {tooled} requests offering tools with tool_choice "
                            f"{_choices(result)}" if tooled else "no request offering tools was answered"),
                   observed=tooled)


def _check_findings(result: AgentResult) -> list[Finding]:
    """One finding per check: its pass rate at every concurrency level against the settings' threshold."""
    out: list[Finding] = []
    threshold = float(result.settings.get("min_pass_rate", DEFAULT_MIN_PASS_RATE))
    rows = result.rate_rows()
    for check, description in C.CHECKS.items():
        mine = [r for r in rows if r.check == check]
        observed = {str(r.level): r.model_dump() for r in mine}
        seen = [r for r in mine if r.total]
        if not seen and check in C.THINKING_CHECKS and not result.settings.get("thinking"):
            continue  # the recipe does not turn thinking on: nothing to hold the replies to
        if not seen:
            out.append(Finding(rule=f"agent.{check}", status="not-observable",
                               message=f"{description}: no reply to check", observed=observed))
            continue
        low = [r for r in seen if (r.pass_rate or 0) < threshold]
        rates_txt = ", ".join(f"c={r.level}: {r.passed}/{r.total}" for r in seen)
        if low:
            worst = min(low, key=lambda r: r.pass_rate or 0)
            example = _first_failure(result, check)
            out.append(Finding(
                rule=f"agent.{check}", status="fail",
                message=f"{description}: fails {worst.total - worst.passed} of {worst.total} at concurrency "
                        f"{worst.level} ({rates_txt}) — {example}",
                observed=observed, expected=f"pass rate >= {figure(threshold)} at every level",
                evidence={**(AGENTS_BLOCKED if check != "requests_ok" else {"category": "requests"}),
                          "example": example}))
        else:
            out.append(Finding(rule=f"agent.{check}", status="pass", message=f"{description} ({rates_txt})",
                               observed=observed))
    return out


def _budget_findings(result: AgentResult) -> list[Finding]:
    """A warning for every concurrency level a budget stopped before its repetitions were done."""
    return [Finding(
        rule="agent.budget", status="warn",
        message=f"concurrency {lv['level']}: {lv['stopped_by']} reached after {lv['requests']} requests, "
                f"{lv['repetitions_completed']} of {lv['repetitions_planned']} repetitions complete",
        observed=lv) for lv in result.levels if lv.get("stopped_by")]


def _choices(result: AgentResult) -> str:
    return "/".join(sorted({str(s.get("tool_choice")) for s in result.steps if s.get("tools")}))


def _first_failure(result: AgentResult, check: str) -> str:
    if check == "structure_stable":
        bad = [o for _l, _r, o in C.stability_outcomes(result.steps) if not o.passed]
        return bad[0].detail[:200] if bad else ""
    for s in result.steps:
        for o in s.get("checks", ()):
            if o["check"] == check and not o["passed"]:
                where = f"{s['case']} turn {s['turn']}" + (f" round {s['round']}" if s.get("round") else "")
                mode = (s.get("reply") or {}).get("stream")
                return f"{where}{'' if mode is None else (' (streamed)' if mode else ' (whole)')}: {o['detail']}"[:280]
    for t in result.turns:
        for o in t.get("checks", ()):
            if o["check"] == check and not o["passed"]:
                return f"tool turn {t['turn']} ({t['case']}, {t.get('mode')}): {o['detail']}"[:280]
    return ""


def _context_growth(result: AgentResult) -> ContextGrowth | None:
    long_cases = {c["id"] for c in result.sample.get("cases", []) if c.get("grows_context")}
    tokens = [n for s in result.steps
              if s["case"] in long_cases and s["reply"].get("ok") and isinstance(n := s["parsed"].get("prompt_tokens"), int)]
    if not tokens:
        return None
    return {"max_prompt_tokens": max(tokens), "target_tokens": result.settings.get("long_context_tokens"),
            "context_limit": result.settings.get("context_limit")}


def agent_record(result: AgentResult, ctx: JudgeContext) -> EvidenceRecord:
    """The axis record: findings, the rates table and the attachments (steps JSONL, run summary)."""
    findings = iter_findings(result)
    status = axis_status(findings)
    failed = [f.rule for f in findings if f.status == "fail"]
    n = len(result.steps)
    summary = (f"{n} requests over {len(result.levels)} concurrency levels "
               f"({', '.join(str(lv['level']) for lv in result.levels)})"
               + (f"; failing: {', '.join(failed)}" if failed else "; tool-call contract held at every level"))
    cap = result.max_clean_concurrency()
    if failed:
        summary += (f"; agents: contract held up to concurrency {cap}" if cap else "; agents blocked")
    attachments = [p for p in (STEPS_FILE, RUN_FILE, TURNS_FILE, CONTRACT_FILE) if ctx.store.path(p).exists()]
    return EvidenceRecord(
        axis="agent", title="Agent scenario and tool-call contract", status=status, summary=summary,
        findings=findings, attachments=attachments,
        data={"settings": result.settings, "sample": result.sample, "levels": result.levels,
              "skipped": result.skipped, "rates": [r.model_dump() for r in result.rate_rows()],
              "max_clean_concurrency": result.max_clean_concurrency(),
              "cases": case_rows(result),
              "tool_turns": {**result.series, **(_rate_observed(findings))},
              "contract": contract_rows(result.contract, result.settings),
              "longest_silence_s": longest_silence(result)})


def _rate_observed(findings: list[Finding]) -> dict[str, JsonValue]:
    f = next((f for f in findings if f.rule == "agent.tool_call_failure_rate"), None)
    return {"status": f.status, **(f.observed or {})} if f is not None else {}


def case_rows(result: AgentResult) -> list[CaseRow]:
    """One row per case: runs, failing checks with counts, the first failing evidence, the usual decision (the
    record keeps them; `figures.cases_table` shows them)."""
    titles = {c["id"]: c.get("title", "") for c in result.sample.get("cases", [])}
    rows: list[CaseRow] = []
    for case in titles:
        steps = [s for s in result.steps if s["case"] == case]
        runs = {(s["level"], s["repetition"]) for s in steps}
        failed_runs = {(s["level"], s["repetition"]) for s in steps
                       if any(not o["passed"] for o in s.get("checks", ()))}
        fails = Counter(o["check"] for s in steps for o in s.get("checks", ()) if not o["passed"])
        first = next((f"{o['check']}: {o['detail']}" for s in steps for o in s.get("checks", ())
                      if not o["passed"]), "")
        skipped = next((k["reason"] for k in result.skipped if k["case"] == case), None)
        status = "skipped" if skipped else ("not run" if not runs else ("fail" if failed_runs else "pass"))
        decisions = Counter(s["decision"] for s in steps if s.get("decision"))
        rows.append({"case": case, "title": titles[case], "status": status, "runs": len(runs),
                     "failed_runs": len(failed_runs), "requests": len(steps),
                     "failing_checks": ", ".join(f"{k} ×{v}" for k, v in sorted(fails.items())),
                     "evidence": skipped or first[:200],
                     "usual_decision": decisions.most_common(1)[0][0][:120] if decisions else ""})
    return rows
