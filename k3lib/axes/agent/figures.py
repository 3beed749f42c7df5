"""What axis 2 found, from the steps written to the run folder: findings, tables, figures, a failing reply.

Everything here is a pure function of `AgentResult`, which `load_agent_result` rebuilds from the run folder,
so a run can be re-rendered without sending a request again.
"""

from __future__ import annotations

import dataclasses
import html
import json
from collections import Counter
from typing import Any

from ...core.evidence import EvidenceRecord, Finding, axis_status
from . import checks as C

STEPS_FILE = "evidence/agent/requests.jsonl"
RUN_FILE = "evidence/agent/run.json"

# What a failing check is about; the decision it forces comes from the one table (k3lib.verdict.decision.RULES).
ENVIRONMENT = {"category": "environment"}
AGENTS_BLOCKED = {"category": "tool-calls", "blocks": "agents"}


@dataclasses.dataclass(frozen=True)
class AgentResult:
    settings: dict[str, Any]
    sample: dict[str, Any]  # name, version, case ids and titles
    levels: list[dict[str, Any]]
    skipped: list[dict[str, str]]
    steps: list[dict[str, Any]]

    # -- derived -------------------------------------------------------------------------------------------------

    def outcomes(self) -> list[tuple[int, C.Outcome]]:
        """Every check outcome with its concurrency level: per reply, then per repetition (stability)."""
        out = [(int(s["level"]), C.Outcome(**o)) for s in self.steps for o in s.get("checks", ())]
        out += [(lvl, o) for lvl, _rep, o in C.stability_outcomes(self.steps)]
        return out

    def rate_rows(self) -> list[C.RateRow]:
        return C.rates(self.outcomes(), [int(lv["level"]) for lv in self.levels] or
                       sorted({int(s["level"]) for s in self.steps}))

    def environment_refusals(self) -> Counter[str]:
        return Counter(s["environment"] for s in self.steps if s.get("environment"))

    def rates_table(self) -> Any:
        import pandas as pd

        rows = [r.to_dict() | {"description": C.CHECKS[r.check]} for r in self.rate_rows()]
        return pd.DataFrame(rows, columns=["level", "check", "passed", "failed", "total", "rate", "description"])

    def cases_table(self) -> Any:
        """One row per case: runs, failing checks with counts, the first failing evidence, the usual decision."""
        import pandas as pd

        titles = {c["id"]: c.get("title", "") for c in self.sample.get("cases", [])}
        rows = []
        for case in titles:
            steps = [s for s in self.steps if s["case"] == case]
            runs = {(s["level"], s["repetition"]) for s in steps}
            failed_runs = {(s["level"], s["repetition"]) for s in steps
                           if any(not o["passed"] for o in s.get("checks", ()))}
            fails = Counter(o["check"] for s in steps for o in s.get("checks", ()) if not o["passed"])
            first = next((f"{o['check']}: {o['detail']}" for s in steps for o in s.get("checks", ())
                          if not o["passed"]), "")
            skipped = next((k["reason"] for k in self.skipped if k["case"] == case), None)
            status = "skipped" if skipped else ("not run" if not runs else ("fail" if failed_runs else "pass"))
            decisions = Counter(s["decision"] for s in steps if s.get("decision"))
            rows.append({"case": case, "title": titles[case], "status": status, "runs": len(runs),
                         "failed_runs": len(failed_runs), "requests": len(steps),
                         "failing_checks": ", ".join(f"{k} ×{v}" for k, v in sorted(fails.items())),
                         "evidence": skipped or first[:200],
                         "usual_decision": decisions.most_common(1)[0][0][:120] if decisions else ""})
        return pd.DataFrame(rows)

    def steps_table(self, case: str | None = None) -> Any:
        """One row per request: where it sits in the scenario, what came back, what the client decided."""
        import pandas as pd

        rows = []
        for s in self.steps:
            if case is not None and s["case"] != case:
                continue
            p = s.get("parsed") or {}
            rows.append({"level": s["level"], "rep": s["repetition"], "case": s["case"], "turn": s["turn"],
                         "round": s["round"], "phase": s["phase"], "status": s["reply"].get("http_status"),
                         "finish": p.get("finish_reason"), "prompt_tokens": p.get("prompt_tokens"),
                         "calls": ", ".join(str(c.get("name")) for c in p.get("tool_calls") or ()),
                         "leak": p.get("leaked_markup"),
                         "failed": ", ".join(o["check"] for o in s.get("checks", ()) if not o["passed"]),
                         "decision": s.get("decision", "")})
        return pd.DataFrame(rows)

    def rates_figure(self) -> Any:
        """Pass rate per check, one bar group per concurrency level, labelled passed/total."""
        import plotly.graph_objects as go

        fig = go.Figure()
        rows = self.rate_rows()
        for level in sorted({r.level for r in rows}):
            mine = [r for r in rows if r.level == level]
            fig.add_trace(go.Bar(name=f"concurrency {level}", x=[r.check for r in mine],
                                 y=[(r.rate * 100) if r.rate is not None else 0 for r in mine],
                                 text=[f"{r.passed}/{r.total}" if r.total else "n/a" for r in mine],
                                 textposition="outside"))
        floor = self.settings.get("min_pass_rate", 1.0) * 100
        fig.add_hline(y=floor, line_dash="dot", annotation_text=f"pass threshold {floor:g}%")
        fig.update_layout(barmode="group", title="Tool-call contract: pass rate per check and concurrency level",
                          yaxis_title="pass rate (%)", yaxis_range=[0, 115], height=420,
                          margin=dict(t=60, b=120, l=60, r=20), legend_title_text="level")
        return fig

    def max_clean_concurrency(self) -> int | None:
        """The highest level at which, like every level below it, every check held: the agents' traffic cap.
        None when the first level already failed (agents blocked) or a server flag is missing."""
        if self.environment_refusals():
            return None
        threshold = float(self.settings.get("min_pass_rate", 1.0))
        clean = None
        rows = self.rate_rows()
        for level in sorted({r.level for r in rows}):
            if any(r.total and (r.rate or 0) < threshold for r in rows if r.level == level):
                break
            clean = level
        return clean

    def failing_example(self) -> FailingReply:
        """The first reply that failed a tool-call check (else any failing reply), raw next to its parse."""
        order = ["arguments_valid", "no_markup_leak", "tool_calls_present", "function_name", "executable",
                 "tool_error_fallback", "final_answer", "requests_ok"]
        for check in order:
            for s in self.steps:
                bad = [o for o in s.get("checks", ()) if o["check"] == check and not o["passed"]]
                if bad:
                    return FailingReply(s, bad)
        return FailingReply(None, [])


class FailingReply:
    """A failing reply shown raw beside its parse. Every string is HTML-escaped: a reply is untrusted text
    (it may hold `<script>` or tool markup), and it is shown as data, never as Markdown or HTML."""

    def __init__(self, step: dict[str, Any] | None, failures: list[dict[str, Any]]) -> None:
        self.step = step
        self.failures = failures

    def raw_text(self) -> str:
        if self.step is None:
            return ""
        reply = self.step["reply"]
        if reply.get("raw_json") is not None:
            return json.dumps(reply["raw_json"], indent=2, ensure_ascii=False)
        return "\n".join(f"data: {line}" for line in reply.get("raw_lines") or ())

    def parsed_text(self) -> str:
        if self.step is None:
            return ""
        return json.dumps(self.step["parsed"], indent=2, ensure_ascii=False)

    def _repr_html_(self) -> str:
        if self.step is None:
            return "<p>No reply failed a check in this run.</p>"
        s = self.step
        e = html.escape
        head = (f"case <code>{e(str(s['case']))}</code>, turn {s['turn']}, round {s['round']}, "
                f"concurrency {s['level']}, repetition {s['repetition']}")
        fails = "".join(f"<li><b>{e(o['check'])}</b>: {e(o['detail'])}</li>" for o in self.failures)
        pre = "white-space:pre-wrap;word-break:break-all;max-height:32em;overflow:auto;font-size:85%"
        return (f"<div><p>{head}</p><ul>{fails}</ul><p>client decision: {e(s.get('decision', ''))}</p>"
                f"<table><tr><th>raw reply</th><th>as parsed by the client</th></tr>"
                f"<tr><td style='vertical-align:top'><pre style='{pre}'>{e(self.raw_text())}</pre></td>"
                f"<td style='vertical-align:top'><pre style='{pre}'>{e(self.parsed_text())}</pre></td></tr>"
                f"</table></div>")

    def __repr__(self) -> str:
        if self.step is None:
            return "FailingReply(none)"
        return f"FailingReply(case={self.step['case']!r}, failures={[o['check'] for o in self.failures]})"


# ---------------------------------------------------------------------------------------------------------------
# Findings


def iter_findings(result: AgentResult) -> list[Finding]:
    out: list[Finding] = []
    threshold = float(result.settings.get("min_pass_rate", 1.0))
    refusals = result.environment_refusals()
    if refusals:
        what = {"auto-tool-choice": "auto tool choice not enabled on the server",
                "tool-parser": "no tool-call parser configured on the server"}
        names = sorted(refusals)
        out.append(Finding(
            rule="agent.auto_tool_choice", status="fail",
            message="; ".join(what[n] for n in names) + " — restart vLLM with --enable-auto-tool-choice "
                    "--tool-call-parser <parser> (Kimi K3: kimi_k3); agents cannot be accepted until then",
            observed={n: refusals[n] for n in names},
            expected="--enable-auto-tool-choice and --tool-call-parser set",
            evidence={**ENVIRONMENT, "server_text": C.AUTO_TOOL_CHOICE_TEXT}))
    else:
        tooled = sum(1 for s in result.steps if s.get("tools") and s["reply"].get("ok"))
        out.append(Finding(rule="agent.auto_tool_choice", status="pass" if tooled else "not-observable",
                           message=(f"the server accepted {tooled} requests offering tools with tool_choice "
                                    f"{_choices(result)}" if tooled else "no request offering tools was answered"),
                           observed=tooled))

    rows = result.rate_rows()
    for check, description in C.CHECKS.items():
        mine = [r for r in rows if r.check == check]
        observed = {str(r.level): r.to_dict() for r in mine}
        seen = [r for r in mine if r.total]
        if not seen:
            out.append(Finding(rule=f"agent.{check}", status="not-observable",
                               message=f"{description}: no reply to check", observed=observed))
            continue
        low = [r for r in seen if (r.rate or 0) < threshold]
        rates_txt = ", ".join(f"c={r.level}: {r.passed}/{r.total}" for r in seen)
        if low:
            worst = min(low, key=lambda r: r.rate or 0)
            example = _first_failure(result, check)
            out.append(Finding(
                rule=f"agent.{check}", status="fail",
                message=f"{description}: fails {worst.total - worst.passed} of {worst.total} at concurrency "
                        f"{worst.level} ({rates_txt}) — {example}",
                observed=observed, expected=f"pass rate >= {threshold:g} at every level",
                evidence={**(AGENTS_BLOCKED if check != "requests_ok" else {"category": "requests"}),
                          "example": example}))
        else:
            out.append(Finding(rule=f"agent.{check}", status="pass", message=f"{description} ({rates_txt})",
                               observed=observed))

    for lv in result.levels:
        if lv.get("stopped_by"):
            out.append(Finding(
                rule="agent.budget", status="warn",
                message=f"concurrency {lv['level']}: {lv['stopped_by']} reached after {lv['requests']} requests, "
                        f"{lv['repetitions_completed']} of {lv['repetitions_planned']} repetitions complete",
                observed=lv))
    for sk in result.skipped:
        out.append(Finding(rule="agent.case_skipped", status="info", message=f"{sk['case']}: {sk['reason']}"))
    fields = Counter(s["parsed"].get("reasoning_field") for s in result.steps
                     if s["reply"].get("ok") and s["parsed"].get("reasoning_field"))
    if fields:
        out.append(Finding(rule="agent.reasoning_field", status="info",
                           message="reasoning came back as " + ", ".join(f"`{k}` ×{v}" for k, v in fields.items())
                                   + "; it was sent back under the same name in later turns",
                           observed=dict(fields)))
    growth = _context_growth(result)
    if growth:
        out.append(Finding(rule="agent.context_growth", status="info",
                           message=f"the long exchange reached {growth['max_prompt_tokens']} prompt tokens "
                                   f"(target {growth['target_tokens']}, context limit {growth['context_limit']})",
                           observed=growth))
    return out


def _choices(result: AgentResult) -> str:
    return "/".join(sorted({str(s.get("tool_choice")) for s in result.steps if s.get("tools")}))


def _first_failure(result: AgentResult, check: str) -> str:
    if check == "structure_stable":
        bad = [o for _l, _r, o in C.stability_outcomes(result.steps) if not o.passed]
        return bad[0].detail[:200] if bad else ""
    for s in result.steps:
        for o in s.get("checks", ()):
            if o["check"] == check and not o["passed"]:
                return f"{s['case']} turn {s['turn']}: {o['detail']}"[:240]
    return ""


def _context_growth(result: AgentResult) -> dict[str, Any] | None:
    long_cases = {c["id"] for c in result.sample.get("cases", []) if c.get("grows_context")}
    tokens = [s["parsed"].get("prompt_tokens") for s in result.steps
              if s["case"] in long_cases and s["reply"].get("ok") and isinstance(s["parsed"].get("prompt_tokens"), int)]
    if not tokens:
        return None
    return {"max_prompt_tokens": max(tokens), "target_tokens": result.settings.get("long_context_tokens"),
            "context_limit": result.settings.get("context_limit")}


def agent_record(result: AgentResult, ctx: Any) -> EvidenceRecord:
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
    attachments = [p for p in (STEPS_FILE, RUN_FILE) if ctx.store.path(p).exists()]
    return EvidenceRecord(
        axis="agent", title="Agent scenario and tool-call contract", status=status, summary=summary,
        findings=findings, attachments=attachments,
        data={"settings": result.settings, "sample": result.sample, "levels": result.levels,
              "skipped": result.skipped, "rates": [r.to_dict() for r in result.rate_rows()],
              "max_clean_concurrency": result.max_clean_concurrency(),
              "cases": result.cases_table().to_dict(orient="records")})
