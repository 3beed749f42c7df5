"""The cold-load phase: restart the engine (when `target.restart` says how) and time not ready → ready, with the
GPU memory at ready; then the server's own account of itself (its model card, its cache configuration, its startup
log), which the later phases judge a queue against."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Sequence

import httpx

from ...core.errors import K3Error, TargetError
from ...core.evidence import Row
from ...core.operator import run_operator_command
from ...io.client import ChatClient
from ...io.readers.vllm_log import VllmLogReport, parse_vllm_log
from ..environment.run import fetch_text
from .analysis import memory_at
from .config import HEALTH_TIMEOUT_S
from .result import LOG_TXT
from .server import server_config
from .run_shapes import HealthRow, ReadyRow, RestartRow
from .state import Recorder
from .watch import boundary_snapshot


@dataclasses.dataclass(frozen=True)
class ServerLog:
    """The server's startup log as read (axes.environment.server_log), or why it was not."""

    report: VllmLogReport | None = None
    error: str | None = None


@dataclasses.dataclass(frozen=True)
class ColdLoad:
    """What the cold load found: readiness (`ready`, as the run description writes it) and the server's own account
    of itself at ready (its model card, its cache configuration, its log)."""

    ready: ReadyRow
    model_card: Row | None = None
    cache_info: dict[str, str] = dataclasses.field(default_factory=dict)
    log: ServerLog = ServerLog()
    note: str = ""

    def admit_limit(self) -> int | None:
        """How many sequences the server runs at once (max_num_seqs × DP), when its configuration states it."""
        values = server_config(self.log.report, self.cache_info, self.model_card)["values"]
        seqs, dp = values.get("max_num_seqs"), values.get("data_parallel_size") or 1
        return seqs * dp if isinstance(seqs, int) and isinstance(dp, int) else None


NOT_RUN = ColdLoad(ready={})


async def cold_load(rec: Recorder) -> ColdLoad:
    """Restart the engine with `target.restart` (when set) and time not ready → ready, with memory at ready.
    Without a restart command a running server's load is not observed: the phase only checks it is up."""

    cap, params = rec.cap, rec.params
    client = rec.client(HEALTH_TIMEOUT_S)
    start = time.perf_counter()
    restart: RestartRow = {"command": None, "ok": None, "detail": "no target.restart: the cold load is not observed"}
    command = params.target.restart
    started_before = await process_start(rec.urls) if command else None
    if command:
        # the restart counts in the cold load: command and polls together stay within ready_timeout_s
        ok, detail = await asyncio.to_thread(run_operator_command, command, rec.ctx.target.base_url,
                                             min(cap.ready_timeout_s, params.target.restart_timeout_s),
                                             rec.ctx.target.headers())
        restart = {"command": "target.restart", "ok": ok, "detail": detail,
                   "returned_after_s": round(time.perf_counter() - start, 3)}
    try:
        row, not_ready = await _until_ready(rec, client, start + cap.ready_timeout_s)
        ready = row["status"] == 200
        # a restart is proven by its effect, never by the command's exit: /health left 200, or the server's
        # process start time changed (a command that exits 0 and restarts nothing observes no cold load)
        transition = not_ready > 0
        if command and restart["ok"] and ready:
            transition, restart["effect"] = restart_effect(not_ready, started_before, await process_start(rec.urls))
        state: ReadyRow = {"ready": ready, "observed_transition": ready and transition, "restart": restart,
                           "polls": not_ready + 1, "ready_at_wall": row["t_wall"] if ready else None,
                           "waited_s": round(time.perf_counter() - start, 3), "last_status": row["status"],
                           "last_error": row["error"]}
        # the server's account of itself; the startup log states max_num_seqs and DP: the steps judge a queue
        # against them
        facts = await _server_facts(rec, client) if ready else {}
        log = await asyncio.to_thread(read_log, rec) if ready else ServerLog()
    finally:
        await client.aclose()
    if not ready:
        rec.dead = True
        return ColdLoad(ready=state, note=f"not ready after {state['waited_s']:.1f} s "
                                          f"(last: {row['status'] or row['error']})")
    timeline = rec.timeline
    state["memory_at_ready"] = memory_at(rec.gpu_rows(), row["t_wall"]) \
        if timeline and timeline.gpu is not None else []
    return ColdLoad(ready=state, log=log, **facts,
                    note="ready" + (" (was already running)" if not state["observed_transition"] else ""))


async def _until_ready(rec: Recorder, client: ChatClient, deadline: float) -> tuple[HealthRow, int]:
    """/health polled until 200 or the deadline: the last poll, and how many were not ready."""
    not_ready = 0
    while True:
        remaining = deadline - time.perf_counter()
        row = await rec.poll_health(client, "cold-load", min(HEALTH_TIMEOUT_S, max(remaining, 0.2)))
        if row["status"] == 200:
            return row, not_ready
        not_ready += 1
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            return row, not_ready
        await asyncio.sleep(min(rec.cap.health_interval_s, remaining))


async def process_start(urls: Sequence[str]) -> float | None:
    """The latest `process_start_time_seconds` the server's endpoints state (None where its /metrics does not say
    it: vLLM's multiprocess mode). A process that restarts starts after every other: the latest changes when any
    of them restarted, a router's older start left aside."""
    snap = await boundary_snapshot(urls)
    starts = [s.value for e in snap.endpoints for s in e.samples if s.name == "process_start_time_seconds"]
    return max(starts) if starts else None


async def _server_facts(rec: Recorder, client: ChatClient) -> Row:
    model_card = None
    try:
        body = await client.get_json("/v1/models", timeout_s=HEALTH_TIMEOUT_S)
        cards = [c for c in (body or {}).get("data", []) if isinstance(c, dict)] if isinstance(body, dict) else []
        wanted = rec.params.target.model
        model_card = next((c for c in cards if c.get("id") == wanted), cards[0] if cards else None)
    except TargetError as exc:
        rec.notes.append(f"/v1/models: {exc}")
    snap = await boundary_snapshot(rec.urls)
    return {"model_card": model_card, "cache_info": snap.cache_config_info()}


def read_log(rec: Recorder) -> ServerLog:
    """The server log, when axes.environment.server_log names it (a file or a URL)."""

    value = rec.params.axes.environment.server_log
    if not value:
        return ServerLog(error="not configured (set axes.environment.server_log to read OOM lines and startup)")
    with httpx.Client(timeout=rec.params.axes.environment.timeout_s) as http:
        src = fetch_text("server_log", value, rec.ctx.target.base_url, http)
    if not src.ok:
        return ServerLog(error=src.error)
    rec.store.write_text(LOG_TXT, src.text or "")
    try:
        return ServerLog(report=parse_vllm_log(src.text or ""))
    except K3Error as exc:
        return ServerLog(error=str(exc))


def restart_effect(not_ready: int, before: float | None, after: float | None) -> tuple[bool, str]:
    """Whether a restart command had an effect the kit saw, and the words: the process start time the server states
    changed, or, where it states none, /health answered other than 200 at least once. A start time stated before and
    after and unchanged is the same process: /health that left 200 meanwhile flapped for another reason (a probe
    timeout, a drain), and the time it took to come back is no cold load."""
    if before is not None and after is not None and after != before:
        return True, f"the server's process start time changed ({before:.3f} → {after:.3f})"
    if not_ready > 0 and before is not None and after is not None:
        return False, (f"no restart: /health left 200 ({not_ready} poll(s) not ready) but the server's process start "
                       f"time did not change ({before:.3f}) — the same process, nothing restarted")
    if not_ready > 0:
        return True, f"/health left 200 ({not_ready} poll(s) not ready; its /metrics states no process start time)"
    said = ("its process start time did not change" if before is not None and after is not None else
            "its /metrics states no process start time")
    return False, f"no effect seen: /health never left 200 and {said} — nothing restarted"
