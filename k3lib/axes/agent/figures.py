"""What a person reads of axis 2's run: the tables of rates, cases and requests, the pass-rate figure, and one
failing reply shown raw beside its parse.

Pure functions of `AgentResult` (`k3lib.axes.agent.judge`), so a run can be re-rendered from its run folder.
"""

from __future__ import annotations

import html
import json
from typing import Any

from ...core.numbers import figure
from ...core.stats import wilson_interval
from . import checks as C
from .config import DEFAULT_MIN_PASS_RATE
from .contract_judge import contract_rows
from .judge import case_rows
from .rate import failure_rate_finding
from .result import AgentResult
from .shapes import CheckRow, Step


def rates_table(result: AgentResult) -> Any:
    """One row per concurrency level and check: passed, failed, total, the pass rate and what the check asks."""
    import pandas as pd

    rows = [r.model_dump() | {"description": C.CHECKS[r.check]} for r in result.rate_rows()]
    return pd.DataFrame(rows, columns=["level", "check", "passed", "failed", "total", "rate", "description"])


def cases_table(result: AgentResult) -> Any:
    """One row per case (`judge.case_rows`): runs, failing checks with counts, the first failing evidence, the
    usual decision."""
    import pandas as pd

    return pd.DataFrame(case_rows(result))


def steps_table(result: AgentResult, case: str | None = None) -> Any:
    """One row per request: where it sits in the scenario, what came back, what the client decided."""
    import pandas as pd

    rows = []
    for s in result.steps:
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


def turns_table(result: AgentResult) -> Any:
    """The tool-turn series: one row per stream mode and one for all, with the failure rate, its Wilson 95 %
    interval, the failures a retry recovered and those it did not, and the tolerance it is judged against."""
    import pandas as pd

    done = [t for t in result.turns if t.get("failure") != "cancelled"]
    judged = failure_rate_finding(done, result.settings)
    rows = []
    for mode in [*sorted({str(t.get("mode")) for t in done}), "all"]:
        mine = [t for t in done if mode == "all" or str(t.get("mode")) == mode]
        failed = [t for t in mine if t.get("failure")]
        lo, hi = wilson_interval(len(failed), len(mine)) or (None, None)
        rows.append({"mode": mode, "turns": len(mine), "failed": len(failed),
                     "recovered_by_retry": sum(1 for t in failed if t.get("recovered")),
                     "not_recovered": sum(1 for t in failed if not t.get("recovered")),
                     "rate_pct": round(100 * len(failed) / len(mine), 3) if mine else None,
                     "wilson95_low_pct": None if lo is None else round(100 * lo, 3),
                     "wilson95_high_pct": None if hi is None else round(100 * hi, 3),
                     "judged_at_pct": None if judged is None else round(100 * judged.observed["judged_at"], 3),
                     "status": judged.status if judged is not None and mode == "all" else ""})
    return pd.DataFrame(rows)


def contract_table(result: AgentResult) -> Any:
    """The vendor contract check: one row per item and mode — passed or not, the acceptance item it serves, whether
    it blocks the agents, and what was seen."""
    import pandas as pd

    return pd.DataFrame(contract_rows(result.contract, result.settings),
                        columns=["id", "mode", "passed", "seed_item", "blocks", "detail"])


def rates_figure(result: AgentResult) -> Any:
    """Pass rate per check, one bar group per concurrency level, labelled passed/total."""
    import plotly.graph_objects as go

    fig = go.Figure()
    rows = result.rate_rows()
    for level in sorted({r.level for r in rows}):
        mine = [r for r in rows if r.level == level]
        fig.add_trace(go.Bar(name=f"concurrency {level}", x=[r.check for r in mine],
                             y=[(r.pass_rate * 100) if r.pass_rate is not None else 0 for r in mine],
                             text=[f"{r.passed}/{r.total}" if r.total else "n/a" for r in mine],
                             textposition="outside"))
    floor = result.settings.get("min_pass_rate", DEFAULT_MIN_PASS_RATE) * 100
    fig.add_hline(y=floor, line_dash="dot", annotation_text=f"pass threshold {figure(floor)}%")
    fig.update_layout(barmode="group", title="Tool-call contract: pass rate per check and concurrency level",
                      yaxis_title="pass rate (%)", yaxis_range=[0, 115], height=420,
                      margin=dict(t=60, b=120, l=60, r=20), legend_title_text="level")
    return fig


def failing_example(result: AgentResult) -> FailingReply:
    """The first reply that failed a tool-call check (else any failing reply), raw next to its parse."""
    order = ["arguments_valid", "no_markup_leak", "tool_calls_present", "function_name", "executable",
             "tool_error_fallback", "final_answer", "requests_ok"]
    for check in order:
        for s in result.steps:
            bad = [o for o in s.get("checks", ()) if o["check"] == check and not o["passed"]]
            if bad:
                return FailingReply(s, bad)
    return FailingReply(None, [])


class FailingReply:
    """A failing reply shown raw beside its parse. Every string is HTML-escaped: a reply is untrusted text
    (it may hold `<script>` or tool markup), and it is shown as data, never as Markdown or HTML."""

    def __init__(self, step: Step | None, failures: list[CheckRow]) -> None:
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
