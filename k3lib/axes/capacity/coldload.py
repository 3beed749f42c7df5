"""The cold-load phase: restart the engine (when `target.restart` says how) and time not ready → ready, with the
GPU memory at ready; then the server's own account of itself (its model card, its cache configuration, its startup
log), which the later phases judge a queue against."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from ...core.errors import K3Error, TargetError
from ...io.client import ChatClient
from ...io.readers.vllm_log import parse_vllm_log
from .analysis import memory_at
from .config import HEALTH_TIMEOUT_S
from .result import LOG_TXT
from .watch import EngineWatch, boundary_snapshot


class ColdLoadPhase(EngineWatch):
    """The cold load and the server facts read at ready."""

    async def _cold_load(self) -> str:
        """Restart the engine with `target.restart` (when set) and time not ready → ready, with memory at ready.
        Without a restart command a running server's load is not observed: the phase only checks it is up."""
        from ...core.operator import run_operator_command

        cap = self.cap
        client = self._client(HEALTH_TIMEOUT_S)
        start = time.perf_counter()
        restart: dict[str, Any] = {"command": None, "ok": None, "detail": "no target.restart: the cold load is not observed"}
        command = self.params.target.restart
        started_before = await self._process_start() if command else None
        if command:
            # the restart counts in the cold load: command and polls together stay within ready_timeout_s
            ok, detail = await asyncio.to_thread(run_operator_command, command, self.ctx.target.base_url,
                                                 min(cap.ready_timeout_s, self.params.target.restart_timeout_s),
                                                 self.ctx.target.headers())
            restart = {"command": "target.restart", "ok": ok, "detail": detail,
                       "returned_after_s": round(time.perf_counter() - start, 3)}
        deadline = start + cap.ready_timeout_s
        not_ready = 0
        try:
            while True:
                remaining = deadline - time.perf_counter()
                row = await self._health(client, "cold-load", min(HEALTH_TIMEOUT_S, max(remaining, 0.2)))
                if row["status"] == 200:
                    break
                not_ready += 1
                remaining = deadline - time.perf_counter()
                if remaining <= 0:
                    break
                await asyncio.sleep(min(cap.health_interval_s, remaining))
            ready = row["status"] == 200
            # a restart is proven by its effect, never by the command's exit: /health left 200, or the server's
            # process start time changed (a command that exits 0 and restarts nothing observes no cold load)
            transition = not_ready > 0
            if command and restart["ok"] and ready:
                transition, restart["effect"] = restart_effect(not_ready, started_before, await self._process_start())
            self.ready = {"ready": ready, "observed_transition": ready and transition,
                          "restart": restart, "polls": not_ready + 1,
                          "ready_at_wall": row["t_wall"] if ready else None,
                          "waited_s": round(time.perf_counter() - start, 3), "last_status": row["status"],
                          "last_error": row["error"]}
            if ready:
                await self._read_server_facts(client)
                # the startup log states max_num_seqs and DP: the steps judge a queue against them
                await asyncio.to_thread(self._read_log)
        finally:
            await client.aclose()
        if not ready:
            self.dead = True
            return f"not ready after {self.ready['waited_s']:.1f} s (last: {row['status'] or row['error']})"
        self.ready["memory_at_ready"] = memory_at(self.timeline.gpu_rows(), self.ready["ready_at_wall"]) \
            if self.timeline and self.timeline.gpu is not None else []
        return "ready" + (" (was already running)" if not self.ready["observed_transition"] else "")

    async def _process_start(self) -> float | None:
        """The latest `process_start_time_seconds` the server's endpoints state (None where its /metrics does not say
        it: vLLM's multiprocess mode). A process that restarts starts after every other: the latest changes when any
        of them restarted, a router's older start left aside."""
        snap = await boundary_snapshot(self.urls)
        starts = [s.value for e in snap.endpoints for s in e.samples if s.name == "process_start_time_seconds"]
        return max(starts) if starts else None

    async def _read_server_facts(self, client: ChatClient) -> None:
        try:
            body = await client.get_json("/v1/models", timeout_s=HEALTH_TIMEOUT_S)
            cards = [c for c in (body or {}).get("data", []) if isinstance(c, dict)] if isinstance(body, dict) else []
            wanted = self.params.target.model
            self.model_card = next((c for c in cards if c.get("id") == wanted), cards[0] if cards else None)
            if self.model_card and client.model is None:
                client.model = str(self.model_card.get("id"))
        except TargetError as exc:
            self.notes.append(f"/v1/models: {exc}")
        snap = await boundary_snapshot(self.urls)
        self.cache_info = snap.cache_config_info()

    def _read_log(self) -> None:
        """The server log, when axes.environment.server_log names it (a file or a URL)."""
        from ..environment.run import fetch_text

        value = self.params.axes.environment.server_log
        if not value:
            self.log_error = "not configured (set axes.environment.server_log to read OOM lines and startup)"
            return
        with httpx.Client(timeout=self.params.axes.environment.timeout_s) as http:
            src = fetch_text("server_log", value, self.ctx.target.base_url, http)
        if not src.ok:
            self.log_error = src.error
            return
        self.store.write_text(LOG_TXT, src.text or "")
        try:
            self.log_report = parse_vllm_log(src.text or "")
            self.log_error = None
        except K3Error as exc:
            self.log_error = str(exc)


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
