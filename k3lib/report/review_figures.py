"""What the review notebooks show: one table and one plotly figure per axis, the drill's answers, the rules, the
decision."""

from __future__ import annotations

import html
import sys
from typing import Any

import pandas as pd  # the review's opener (k3lib.review) imports this module on first use, to draw

from ..core.numbers import figure
from ..renewal.decision import RenewalDecision, money
from ..renewal.params import RenewalParams, tracked_keys
from ..renewal.results import CostResult, ProductionResult, RenewalOperationsResult, StabilityResult, TypedAxis
from .views import badge


def rules_table(params: RenewalParams) -> Any:
    """The four fixed elements, every threshold, the currency and the declared benefits — fixed before the results
    were read — each with its origin (the file or override that set it, or the built-in default): printed on top
    of the report, whole (a pandas Styler; `.data` is the table)."""
    review = params.review.model_dump(mode="json")
    rows = []
    for key in tracked_keys():
        value: Any = review
        for part in key.split(".")[1:]:  # e.g. review.rules.min_window_days, review.series.step_s
            value = value.get(part) if isinstance(value, dict) else None
        origin = params.review.origin(key)
        if value is None and key == "review.currency":  # no default: the costs file states it, or it is refused
            value, origin = "as stated in the costs file", (params.review.inputs.costs if params.review.inputs
                                                            else "the costs file")
        rows.append({"parameter": key.removeprefix("review."), "value": value, "origin": origin})
    table = pd.DataFrame(rows, columns=["parameter", "value", "origin"])
    # a Styler shows whole values and paths (a DataFrame's repr cuts them at 50 characters); escaped: operator text
    return (table.style.format(_compact, subset=["value"], escape="html")
            .format(escape="html", subset=["parameter", "origin"]).hide(axis="index")
            .set_properties(**{"text-align": "left", "white-space": "pre-wrap"}))


def _compact(value: Any) -> str:
    """A fixed element's fields one per line (`key: value`), a scalar as itself."""
    if isinstance(value, dict):
        return "\n".join(f"{k}: {', '.join(map(str, v)) if isinstance(v, list) else v}" for k, v in value.items())
    return ", ".join(map(str, value)) if isinstance(value, list) else str(value)


def axis_table(axis: str, result: dict[str, Any] | TypedAxis) -> Any:
    """The axis' main table, blanks shown as blanks (None → empty cell, never 0); an axis its analysis builds as its
    typed model (production, cost, stability, operations) is read by attribute."""
    if isinstance(result, ProductionResult):  # every figure, the losses' among them, as its JSON holds it
        values = {**result.model_dump(mode="json", exclude={"losses"}), **result.losses.model_dump(mode="json")}
        return pd.DataFrame([{"figure": k, "value": v} for k, v in values.items()])
    if isinstance(result, CostResult):
        return cost_table(result)
    if isinstance(result, (StabilityResult, RenewalOperationsResult)):
        return pd.DataFrame([row.model_dump() for row in result.by_category])
    if axis == "load":
        return pd.concat([pd.DataFrame(result["by_period"]), pd.DataFrame(result["by_category"])],
                         ignore_index=True).astype(object).where(lambda d: d.notna(), "")
    if axis == "comparison":
        return pd.DataFrame({p: result[p] for p in ("self-hosted", "api")})
    raise KeyError(axis)


def cost_table(result: CostResult) -> Any:
    """Each self-hosted item, the totals, both costs per accepted task and the credits, every amount with its
    currency."""
    cur, sh, api = result.currency, result.self_hosted, result.api
    rows: list[dict[str, str | float | None]] = [{"item": i.item, "self-hosted": i.amount} for i in sh.items]
    rows += [{"item": "total (blank if any item is blank)", "self-hosted": sh.total},
             {"item": "known subtotal (partial)", "self-hosted": sh.known_subtotal},
             {"item": "per accepted task", "self-hosted": sh.per_accepted_task, "api": api.per_accepted_task},
             {"item": "API bill for the same tasks", "api": api.bill_same_tasks},
             {"item": "value of delivered tasks", "self-hosted": result.delivered_tasks_value}]
    # credits and refunds apart: netted into their item only when recurring and accepted (issue 44)
    rows += [{"item": f"{c.charge_category or 'credit'} on {c.item}"
                      + (f" ({c.description})" if c.description else "")
                      + (" — netted (recurring, accepted)" if c.netted else " — listed apart, not netted"),
              "self-hosted": c.amount} for c in result.credits]
    # every amount carries its currency; a blank stays an empty cell, never 0
    shown = [{"item": r["item"], **{k: money(r.get(k), cur) if r.get(k) is not None else ""
                                    for k in ("self-hosted", "api")}} for r in rows]
    shown.append({"item": "hourly rate (prices the install hours)",
                  "self-hosted": money(result.hourly_rate, cur) + " per hour", "api": ""})
    return pd.DataFrame(shown, columns=["item", "self-hosted", "api"])


def axis_figure(axis: str, result: dict[str, Any] | TypedAxis,
                frame: Any = None) -> Any:
    import plotly.graph_objects as go

    fig = go.Figure()
    if isinstance(result, ProductionResult):
        lost = result.losses
        fig.add_bar(x=["retries", "tasks_with_malformed_tool_calls", "timeouts", "manual_corrections", "routed_to_api"],
                    y=[lost.retries, lost.tasks_with_malformed_tool_calls, lost.timeouts, lost.manual_corrections,
                       lost.routed_to_api])
        fig.update_layout(title=f"Losses ({result.accepted} accepted of {result.tasks} self-hosted tasks)")
    elif isinstance(result, CostResult):
        cur = result.currency or "no currency"
        items = [i for i in result.self_hosted.items if i.amount is not None]
        fig.add_bar(x=[i.item for i in items], y=[i.amount for i in items], name=cur,
                    hovertemplate="%{x}: %{y:,.2f} " + cur + "<extra></extra>")
        blanks = result.self_hosted.blank_items
        fig.update_layout(title=f"Known self-hosted cost items, {cur}"
                                + (f" (blank: {', '.join(blanks)})" if blanks else ""), yaxis={"title": cur})
    elif isinstance(result, StabilityResult):
        fig.add_bar(x=[r.category for r in result.by_category],
                    y=[r.max_minutes_to_recover for r in result.by_category], name="max minutes to recover")
        fig.update_layout(title="Time to recover by incident class")
    elif isinstance(result, RenewalOperationsResult):
        fig.add_bar(x=[r.category for r in result.by_category], y=[r.hours for r in result.by_category])
        fig.update_layout(title=f"{figure(result.total_h, ' h')} of operations vs a delivery gain of "
                                f"{figure(result.delivery_gain_h, ' h')}")
    elif axis == "load" and frame is not None:
        hourly = frame[["gpu_util", "waiting", "running"]].resample("1h").mean()
        fig.add_scatter(x=hourly.index, y=hourly["gpu_util"], name="mean GPU utilisation (0–1)")
        fig.add_scatter(x=hourly.index, y=hourly["waiting"], name="waiting requests", yaxis="y2")
        fig.update_layout(title="Used capacity and queue, hourly means over the window",
                          yaxis={"range": [0, 1]}, yaxis2={"overlaying": "y", "side": "right", "title": "waiting"})
    elif axis == "load":
        fig.add_bar(x=[p["period"] for p in result["by_period"]], y=[p["busy_share"] for p in result["by_period"]])
    elif axis == "comparison":
        keys = ("acceptance_rate", "retries_per_task", "tool_error_share", "manual_correction_share")
        for p in ("self-hosted", "api"):
            fig.add_bar(x=list(keys), y=[result[p][k] for k in keys], name=p)
        fig.update_layout(title=f"The same {result['paired_tasks']} tasks on both paths", barmode="group")
    return fig


def drill_table(result: dict[str, Any] | None) -> Any:
    """The drill's answers: one row per question, with its answer and evidence."""
    if not result:
        return pd.DataFrame(columns=["question", "answer", "evidence"])
    return pd.DataFrame([{"question": a["question"], "answer": a["answer"], "evidence": a["evidence"]}
                         for a in result["answers"].values()])


def register_views() -> None:
    """Show a `RenewalDecision` as HTML in IPython (JupyterLab, papermill, the report pages): registered as a display
    formatter when a review session opens, so the decision's data model never imports this presentation module.
    Outside IPython there is nothing to register."""

    if "IPython" not in sys.modules:  # no kernel or shell running: never import IPython for this
        return
    from IPython import get_ipython

    shell = get_ipython()
    if shell is not None:
        shell.display_formatter.formatters["text/html"].for_type(RenewalDecision, decision_html)


def decision_html(decision: RenewalDecision) -> str:
    esc = html.escape
    parts = [f'<h2 style="margin:0.2em 0">Decision: {badge(decision.decision)}</h2>',
             f"<p><b>Rule:</b> <code>{esc(decision.rule or '')}</code> (the first row of the renewal decision "
             "table that holds)</p>",
             f"<p><b>Condition:</b> {esc(decision.condition)}</p><ul>"]
    parts += [f"<li>{esc(r)}</li>" for r in decision.reasons]
    parts.append("</ul>")
    if decision.routing:
        parts.append("<h3>Routing (fixed in advance)</h3>")
        cats = decision.routing.get("task_categories")
        if cats:
            parts.append("<p>By task category, from the live run's per-task differences:</p><ul>")
            parts += [f"<li><b>{esc(where)}</b>: {esc(', '.join(names) or 'none')}</li>" for where, names in
                      (("self-hosted", cats["self_hosted"]), ("API", cats["api"]), ("split task by task", cats["split"]))]
            parts.append("</ul>")
        parts.append("<p>Transfer triggers:</p><ul>")
        parts += [f"<li><b>{esc(t['trigger'])}</b>: {esc(t['when'])}</li>" for t in decision.routing["transfer_triggers"]]
        parts.append("</ul><p>Exit rules:</p><ul>")
        parts += [f"<li>{esc(r)}</li>" for r in decision.routing["exit_rules"]]
        parts.append("</ul>")
    return "".join(parts)
