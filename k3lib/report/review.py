"""The review notebooks' calls, one per cell (`k3lib.review` in a notebook): the context, the axis result, its table
and figure, the drill, the record, the rules table and the decision."""

from __future__ import annotations

from typing import Any

from ..core.evidence import EvidenceRecord
from . import review_figures as figures
from ..renewal.records import axis_record, decide_review
from .review_figures import rules_table
from .review_session import ReviewContext, open_review, open_review_summary

__all__ = ["ReviewContext", "axis_figure", "axis_result", "axis_table", "decide_review", "drill_table", "open_review",
           "open_review_summary", "record_axis", "review_drill", "rules_table"]


def axis_result(ctx: ReviewContext, drill: dict[str, Any] | None = None) -> dict[str, Any]:
    """This notebook's axis, computed from the run's inputs and series."""
    return ctx.axes(drill)[ctx.axis]


def axis_table(ctx: ReviewContext, result: dict[str, Any]) -> Any:
    return figures.axis_table(ctx.axis, result)


def axis_figure(ctx: ReviewContext, result: dict[str, Any]) -> Any:
    return figures.axis_figure(ctx.axis, result, ctx.load_frame() if ctx.axis == "load" else None)


def record_axis(ctx: ReviewContext, result: dict[str, Any]) -> EvidenceRecord:
    return ctx.record(axis_record(ctx, result))


def review_drill(ctx: ReviewContext) -> dict[str, Any] | None:
    """The live incident drill on the review's target (the embedded emulator when no base_url is given, with a
    second emulator standing in for the API), plus the pipeline artifact check when a manifest is named. Its
    answers speak for the reviewed deployment only when the target is it (not the emulator; its model, and its
    instance when named); otherwise they are all "not shown", and the drill's observations are kept apart."""
    from ..io.target import resolve_target
    from ..renewal.artifacts import check_pipeline
    from ..renewal.drill import for_deployment, is_deployment, not_run, run_drill

    drill = ctx.params.review.drill
    demo = ctx.params.review.demo is not None  # a demo's deployment is the embedded emulator its series describe
    why = drill_not_run(ctx.params)
    if why is not None:
        if demo:
            return None
        result = not_run(why)
        ctx.store.write_json("drill/drill.json", result)
        return result
    target = resolve_target(ctx.params)  # duck-typed: it reads params.target only
    stand_in = None
    api = drill.api_base_url
    try:
        if api is None and target.emulator is not None:
            from ..emulator import start_emulator
            from ..io.target import emulator_config

            stand_in = start_emulator(emulator_config(ctx.params), host="127.0.0.1", port=0)
            api = stand_in.url
        result = run_drill(target.base_url, drill, api_base_url=api, headers=target.headers(),
                           model=ctx.params.target.model)
        if stand_in is not None:
            result["api_note"] = "the API path is a second embedded emulator standing in for the provider's API"
        # the answers speak for the reviewed deployment only if the drill touched it
        deployment = ctx.params.review.deployment
        proves, reason = is_deployment(result, emulator=target.emulator is not None and not demo,
                                       model_name=deployment.model_name, instances=deployment.instances,
                                       addresses=(target.base_url, *ctx.params.target.metrics_urls))
        result = for_deployment(result, proves, reason)
    finally:
        if stand_in is not None:
            stand_in.stop()
        target.stop()
    if drill.artifacts_manifest:
        result["pipeline"] = check_pipeline(drill.artifacts_manifest)
    ctx.store.write_json("drill/drill.json", result)  # raw steps; evidence/ holds records only
    return result


def drill_not_run(params: Any) -> str | None:
    """Why the drill is not run (None: it is): disabled, or a review with no deployment URL — the embedded emulator
    is drilled only for a demo, whose deployment it is; never in place of a real deployment."""
    if not params.review.drill.enabled:
        return "review.drill.enabled is false"
    if params.target.base_url is None and params.review.demo is None:
        return ("no deployment URL (target.base_url): the embedded emulator is not the reviewed deployment — name "
                "the deployment's base URL and the kill/restore steps to show the drill premise")
    return None


def drill_table(result: dict[str, Any] | None) -> Any:
    import pandas as pd

    if not result:
        return pd.DataFrame(columns=["question", "answer", "evidence"])
    return pd.DataFrame([{"question": a["question"], "answer": a["answer"], "evidence": a["evidence"]}
                         for a in result["answers"].values()])
