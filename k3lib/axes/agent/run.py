"""Axis 2's entry point: `run_agent(ctx)` plays the sample (`scenario.py`), the tool-turn series (`series.py`) and
the vendor contract check (`contract.py`) against the target, writes every request to the run folder as it
finishes, and returns the `AgentResult`; `load_agent_result(store)` rebuilds it from a finished run folder."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import httpx

from ...core import progress
from ...core.session import find_path
from ...io.client import SyncChatClient
from ...io.crosscheck import cross_check
from ...io.load import check_load_target
from ...io.metrics import delta, scrape
from ..environment.run import fetch_text
from .contract import ContractCheck
from .result import CONTRACT_FILE, RUN_FILE, STEPS_FILE, TURNS_FILE, AgentResult
from .sample import AgentSample, load_sample, packaged_sample_path
from .scenario import RunSettings, ScenarioRunner
from .series import ToolTurnSeries
from .serving import SPEC_DECODE, tool_strict_settings
from .shapes import (AgentRun, ContractRow, CrossCheckDict, SampleSummary, ServedCounters, ServingRow, SettingsRow,
                     SpecDecode, Step, TurnRow)

if TYPE_CHECKING:
    from ...core.session import AxisContext


def sample_summary(sample: AgentSample, source: str) -> SampleSummary:
    return {"name": sample.name, "version": sample.version, "source": source,
            "tools": [t.function.name for t in sample.tools],
            "cases": [{"id": c.id, "title": c.title, "turns": len(c.turns), "requires_images": c.requires_images,
                       "grows_context": any(t.filler for t in c.turns)} for c in sample.cases]}


def run_agent(ctx: AxisContext) -> AgentResult:
    """Play the sample at every concurrency level against `ctx.target`, then the tool-turn series at the planned
    concurrency and the vendor contract check; requests land in the run folder as they finish. Target misbehaviour
    becomes findings; only an unusable sample or target set-up raises."""

    params = ctx.params
    path = params.axes.agent.sample
    source = str(find_path(path)) if path else str(packaged_sample_path())
    sample = load_sample(find_path(path) if path else None)
    settings = RunSettings.from_params(params, source)
    check_load_target(ctx.target.base_url, params.target.allow_remote_load)

    def sink(name: str) -> Any:
        return lambda row: ctx.store.append_jsonl(name, row)

    before, before_error = _scrape(ctx)
    with SyncChatClient(ctx.target.base_url, model=params.target.model, api_key_env=ctx.target.api_key_env,
                        timeout_s=settings.request_timeout_s) as sync:
        kept = sync.client.keep_records()
        runner = ScenarioRunner(sync.client, sample, settings, sink(STEPS_FILE))
        series = ToolTurnSeries(sync.client, sample, settings, max(settings.levels), sink(TURNS_FILE))
        contract = ContractCheck(sync.client, sample, settings, sink(CONTRACT_FILE))
        stopped = None
        try:
            sync.run(runner.run())
            sync.run(series.run())
            if settings.contract_check:
                sync.run(contract.run())
        except progress.ConsentExceeded as exc:  # the plan's at-most reached: stop, judged on what was measured
            stopped = str(exc)
    after, after_error = _scrape(ctx)
    error = before_error or after_error
    spec: SpecDecode = _spec_decode_delta(before, after) if error is None else {"error": error}
    served = served_counters(before, after, kept, error)
    serving: ServingRow = {"tool_strict": tool_strict_settings(_server_log(ctx))}
    for name in (STEPS_FILE, TURNS_FILE, CONTRACT_FILE):
        if ctx.store.path(name).exists():
            ctx.store.adopt(name)
    run: AgentRun = {"settings": cast(SettingsRow, settings.model_dump()), "sample": sample_summary(sample, source),
                     "levels": runner.levels, "skipped": runner.skipped_cases(), "series": series.summary,
                     "spec_decode": spec, "serving": serving, "served": served, "stopped": stopped}
    ctx.store.write_json(RUN_FILE, run)
    return AgentResult(run["settings"], run["sample"], runner.levels, run["skipped"], runner.steps, series.turns,
                       contract.rows, series.summary, spec, serving, served, stopped)


def _server_log(ctx: AxisContext) -> str | None:
    """The server log's text when the parameters name one (axes.environment.server_log), else None."""

    source = ctx.params.axes.environment.server_log
    if not source:
        return None
    with httpx.Client(timeout=15.0, headers=ctx.target.headers()) as http:
        text = fetch_text("server_log", source, ctx.target.base_url, http)
    return text.text if text.ok else None


def _scrape(ctx: AxisContext) -> tuple[Any, str | None]:
    """A /metrics snapshot of the target (the spec-decode counters, the request and token counters), or why there
    is none: a /metrics that cannot be read leaves what rests on it not observable, with this reason."""

    urls = tuple(getattr(ctx.target, "metrics_urls", ()) or ())
    if not urls:
        return None, "the target names no /metrics endpoint"
    try:
        snap = scrape(urls, strict=False)
    except Exception as exc:  # noqa: BLE001 - any failure to read is the reason, kept
        return None, f"/metrics could not be read: {type(exc).__name__}: {exc}"[:300]
    failed = [f"{e.endpoint}: {e.error}" for e in snap.endpoints if e.error]
    return (None, f"/metrics could not be read: {'; '.join(failed)}"[:300]) if failed else (snap, None)


def served_counters(before: Any, after: Any, records: list[Any], error: str | None) -> ServedCounters:
    """The server's request and token counters over the whole agent run against every request the kit sent in it
    (the scenario, the tool-turn series with its retries, the contract check): `k3lib.io.crosscheck`."""

    if error is not None or before is None or after is None:
        return {"cross_check": None, "error": error or "no /metrics snapshot"}
    return {"cross_check": cast(CrossCheckDict, cross_check(records, before, after).model_dump()), "error": None,
            "requests": len(records)}


def _spec_decode_delta(before: Any, after: Any) -> SpecDecode:
    if before is None or after is None:
        return {}
    values: SpecDecode = {"drafts": delta(before, after, SPEC_DECODE[0]).value,
                          "draft_tokens": delta(before, after, SPEC_DECODE[1]).value,
                          "accepted": delta(before, after, SPEC_DECODE[2]).value}
    return values if values["drafts"] is not None else {}


def load_agent_result(store: Any) -> AgentResult:
    """Rebuild the result from `evidence/agent/` (`RunStore.read_jsonl`: a killed run keeps what it measured)."""
    run = store.read_json(RUN_FILE) if store.path(RUN_FILE).exists() else {}
    return AgentResult(run.get("settings", {}), run.get("sample", {}), run.get("levels", []),
                       run.get("skipped", []), cast(list[Step], store.read_jsonl(STEPS_FILE)),
                       cast(list[TurnRow], store.read_jsonl(TURNS_FILE)),
                       cast(list[ContractRow], store.read_jsonl(CONTRACT_FILE)), run.get("series", {}),
                       run.get("spec_decode", {}), run.get("serving", {}), run.get("served", {}), run.get("stopped"))
