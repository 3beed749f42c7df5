"""Running the four capacity phases against the target, each bounded in requests and seconds, on one wall clock
shared by the /metrics sampler, the GPU sampler and the client records; everything lands in the run folder.

I/O lives here and only here. Request records are appended to `evidence/capacity/requests.jsonl` as they
finish; the sampled series, health polls and phase windows are rewritten after every phase, so a killed run
keeps what it measured. A dead engine (health not 200) ends the run early: the later phases are recorded as
skipped, with the reason.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import httpx

from ...io.calibration import CalibrationReport, KnownTimingServer, calibrate
from ...io.client import ChatClient, ChatRecord, run_sync
from ...io.crosscheck import cross_check
from ...core.errors import APIError, K3Error, TargetError
from ...io.load import check_load_target, run_closed_loop, run_soak
from ...io.metrics import HistogramWindow, Snapshot, delta, scrape_async, window_histogram, window_quantile
from ...core.params import Params
from ...io.prompts import BuiltPrompt, EstimateCounter, build_prompts
from ...io.readers.vllm_log import VllmLogReport, parse_vllm_log
from ...io.sampling import SCRAPE_TIMEOUT_S, Timeline
from ...core.stats import percentile, percentile_interval
from .analysis import judge_step, memory_at, settled_stats, soak_analysis
from .server import server_config
from .ranks import rank_window
from .result import GPU_JSON, LOG_TXT, METRICS_JSON, REQUESTS, RUN_JSON, CapacityResult, read_capacity
from .shape import CALIBRATION_BOUND_S, PHASES, CapacityPlan, plan_capacity
from ...io.workers import WorkerPool, calibrate_workers, resolve_workers
from .trust import (calibration_rounds, calibration_summary, cross_check_data, failed_report, gate_step,
                    known_timing, record_view)

if TYPE_CHECKING:
    from ...core.session import AxisContext

HEALTH_TIMEOUT_S = 5.0
_CONTEXT_REFUSAL = re.compile(r"maximum context length|is too long|too large|longer than the maximum model length",
                              re.IGNORECASE)


class _EngineGone(Exception):
    """Raised by a phase's sink to stop a load window once more server failures than its concurrency came in a
    row: the engine is gone, and hammering a dead server for the rest of the window only adds noise. The load
    generator re-raises it once the window has stopped; the records delivered so far are kept."""


def failure_kind(rec: Mapping[str, Any]) -> str | None:
    """How a request record failed: None (ok), "cancelled", "refused" (4xx), "server-error" (5xx, or an error
    event inside a 200 stream), "timeout" or "unreachable"."""
    if rec.get("ok"):
        return None
    if rec.get("cancelled"):
        return "cancelled"
    status = rec.get("http_status")
    kind = rec.get("error_kind")
    if isinstance(status, int) and 400 <= status < 500:
        return "refused"
    if isinstance(status, int) and status >= 500:
        return "server-error"
    if kind == "Timeout":
        return "timeout"
    if kind == "TargetUnreachable" and status is None:
        return "unreachable"
    return "server-error"


def pinned_params(ctx: "AxisContext") -> Params:
    from ...core.target import pin_target

    return pin_target(ctx.params, ctx.target)


async def boundary_snapshot(urls: Sequence[str]) -> Snapshot:
    return await scrape_async(list(urls), timeout_s=SCRAPE_TIMEOUT_S, strict=False)


def window_numbers(before: Snapshot | None, after: Snapshot | None) -> dict[str, Any]:
    """Counter and histogram deltas between two boundary scrapes (None where a scrape failed).

    The queue p95 is kept as what the histogram can prove: `queue_p95_low_ms` ≤ p95 ≤ `queue_p95_high_ms`
    (`queue_p95_basis` says why), and `queue_p95_ms` is a figure only where the buckets allow one (never an
    interpolation inside vLLM's first bucket, [0, 0.3 s], which would turn 0.1 ms waits into ~285 ms)."""
    if before is None or after is None:
        return {"preemptions": None, "queue_p95_ms": None, "server_ttft_p95_ms": None}
    pre = delta(before, after, "num_preemptions_total").value
    queue = window_histogram(before, after, "request_queue_time_seconds")
    t95 = window_quantile(before, after, "time_to_first_token_seconds", 0.95)
    return {"preemptions": pre, **queue_numbers(queue),
            "server_ttft_p95_ms": None if t95 is None else round(t95 * 1000, 3)}


def queue_numbers(queue: HistogramWindow | None) -> dict[str, Any]:
    """The queue-time p95 of one window in ms: a figure where decided, else its bounds (see window_numbers)."""
    if queue is None or not queue.count:
        return {"queue_p95_ms": None}
    bounds = queue.quantile_bounds(0.95)
    if bounds is None:
        return {"queue_p95_ms": None}
    ms = lambda v: None if v is None or math.isinf(v) else round(v * 1000, 3)  # noqa: E731
    point = {"bucket": bounds.estimate, "above-last-bucket": bounds.low}.get(bounds.basis)
    return {"queue_p95_ms": ms(point), "queue_p95_low_ms": ms(bounds.low), "queue_p95_high_ms": ms(bounds.high),
            "queue_p95_basis": bounds.basis, "queue_p95_text": bounds.describe(1000, " ms"),
            "queue_mean_ms": ms(queue.mean), "queue_count": queue.count}


def _pct(values: Sequence[float], q: float) -> float | None:
    got = percentile(values, q)
    return None if got is None else round(got, 3)


def _p95_interval(values: Sequence[float]) -> dict[str, float] | None:
    got = percentile_interval(values, 95)
    return None if got is None else got.to_dict()


def record_stats(records: Sequence[Mapping[str, Any]], *, intervals: bool = False) -> dict[str, Any]:
    """Client-side numbers of a set of request records; with `intervals`, the bootstrap interval of the TTFT and
    e2e p95 over the requests (a load step's latency is judged against its objective on that interval)."""
    kinds = [failure_kind(r) for r in records]
    ok = [r for r, k in zip(records, kinds) if k is None]
    ttft = [r["ttft_ms"] for r in ok if r.get("ttft_ms") is not None]
    e2e = [r["e2e_ms"] for r in ok if r.get("e2e_ms") is not None]
    statuses: dict[str, int] = {}
    for r, k in zip(records, kinds):
        if k is not None and isinstance(r.get("http_status"), int):
            statuses[str(r["http_status"])] = statuses.get(str(r["http_status"]), 0) + 1
    return {"sent": len(records), "ok": len(ok), "server_errors": kinds.count("server-error"),
            "refused": kinds.count("refused"), "timeouts": kinds.count("timeout"),
            "unreachable": kinds.count("unreachable"), "cancelled": kinds.count("cancelled"),
            "error_statuses": dict(sorted(statuses.items())),
            "ttft_p50_ms": _pct(ttft, 50), "ttft_p95_ms": _pct(ttft, 95), "e2e_p95_ms": _pct(e2e, 95),
            "prompt_tokens_mean": (round(sum(r.get("prompt_tokens") or 0 for r in ok) / len(ok), 1) if ok else None),
            "completion_tokens_mean": (round(sum(r.get("completion_tokens") or 0 for r in ok) / len(ok), 1)
                                       if ok else None),
            **({"ttft_p95_interval": _p95_interval(ttft), "e2e_p95_interval": _p95_interval(e2e)} if intervals else {})}


# -----------------------------------------------------------------------------------------------------------
# One run


class CapacityRunner:
    """Mutable state of one run; `run()` drives the phases in order and writes the run folder."""

    def __init__(self, ctx: "AxisContext", plan: CapacityPlan | None = None) -> None:
        self.ctx = ctx
        self.params = ctx.params
        self.cap = ctx.params.axes.capacity
        self.plan = plan or plan_capacity(ctx.params)
        self.store = ctx.store
        self.urls = tuple(ctx.target.metrics_urls)
        self.phases: list[dict[str, Any]] = []
        self.steps: list[dict[str, Any]] = []
        self.long_context: list[dict[str, Any]] = []
        self.health: list[dict[str, Any]] = []
        self.refusal: dict[str, Any] = {"outcome": "not-run", "reason": "the long-context phase did not run"}
        self.ready: dict[str, Any] = {}
        self.failure: dict[str, Any] | None = None
        self.dead = False
        self.notes: list[str] = []
        self.model_card: dict[str, Any] | None = None
        self.cache_info: dict[str, str] = {}
        self.log_report: VllmLogReport | None = None
        self.log_error: str | None = None
        self.soak: dict[str, Any] | None = None
        self.soak_window: tuple[float, float] | None = None
        self._phase: str = ""
        self._in_flight = 0
        self.timeline: Timeline | None = None
        # the client's self-calibration: what it ran against, and its reports (see trust.py)
        self.calibration: dict[str, Any] = {"enabled": bool(self.plan.calibration_concurrencies), "ran": False}
        self._reports: list[CalibrationReport] = []
        self._measured: list[dict[str, Any]] = []  # long-context records: the timing the calibration imitates
        # load.workers: the concurrency steps' and the soak's streams (and their calibration) spread over this many
        # processes; the long-context phase (one stream) stays in this one
        self.workers = min(resolve_workers(self.params.load.workers),
                           max((*self.plan.steps, self.plan.planned_concurrency)))
        self._pool: WorkerPool | None = None

    # -- clients ---------------------------------------------------------------------------------------------
    def _client(self, timeout_s: float) -> ChatClient:
        return ChatClient(self.ctx.target.base_url, model=self.params.target.model,
                          api_key_env=self.params.target.api_key_env, timeout_s=timeout_s,
                          connect_timeout_s=min(10.0, timeout_s))

    async def _workers(self) -> WorkerPool | None:
        """The worker processes, started once for the run (their clients keep their connections step to step)."""
        if self.workers > 1 and self._pool is None:
            self._pool = await WorkerPool(self.workers).astart()
        return self._pool

    # -- recording -------------------------------------------------------------------------------------------
    def _sink(self, phase: str, step: str, bucket: list[dict[str, Any]], concurrency: int,
              stop_on_death: bool = True) -> Callable[[ChatRecord], None]:
        streak = {"n": 0}

        def sink(rec: ChatRecord) -> None:
            d = rec.to_dict(include_raw=False)
            d["raw_json"] = None
            d.update(phase=phase, step=step, done_wall_ns=rec.wall_ns(rec.done_ns))
            self.store.append_jsonl(REQUESTS, d)
            bucket.append(d)
            kind = failure_kind(d)
            if kind in ("server-error", "unreachable"):
                self._note_failure(d, phase, step, concurrency, kind)
                streak["n"] += 1
                if stop_on_death and streak["n"] > concurrency:
                    raise _EngineGone(f"{streak['n']} server failures in a row")
            elif kind is None:
                streak["n"] = 0

        return sink

    def _note_failure(self, rec: Mapping[str, Any], phase: str, step: str, in_flight: int, kind: str) -> None:
        if self.failure is not None:
            return
        ns = rec.get("done_wall_ns") or rec.get("sent_wall_ns")
        self.failure = {"via": f"request ({kind})", "t_wall": ns / 1e9 if ns else time.time(), "phase": phase,
                        "step": step, "in_flight": in_flight, "request_id": rec.get("request_id"),
                        "http_status": rec.get("http_status"), "error": (rec.get("error") or "")[:500]}

    async def _health(self, client: ChatClient, phase: str, timeout_s: float = HEALTH_TIMEOUT_S) -> dict[str, Any]:
        p = await client.probe("/health", timeout_s=max(timeout_s, 0.2))
        endpoint = "/health"
        if p.status == 404:  # an engine without vLLM's /health route (llama.cpp): readiness from /v1/models
            p = await client.probe("/v1/models", timeout_s=max(timeout_s, 0.2))
            endpoint = "/v1/models"
        row = {"t_wall": p.wall_ns / 1e9, "phase": phase, "status": p.status, "latency_ms": p.latency_ms,
               "error": p.error if p.status is None else None, "endpoint": endpoint}
        self.health.append(row)
        return row

    async def _check_alive(self, client: ChatClient, phase: str, in_flight: int) -> bool:
        row = await self._health(client, phase)
        if row["status"] == 200:
            return True
        self.dead = True
        if self.failure is None:
            self.failure = {"via": f"health {row['status'] or row['error']}", "t_wall": row["t_wall"],
                            "phase": phase, "step": None, "in_flight": in_flight, "request_id": None,
                            "http_status": row["status"], "error": row["error"]}
        return False

    def _flush(self) -> None:
        """Rewrite the series and the run description; called after every phase."""
        if self.timeline is not None:
            self.store.write_json(METRICS_JSON, self.timeline.metric_rows())
            self.store.write_json(GPU_JSON, self.timeline.gpu_rows())
        self.store.write_json(RUN_JSON, self.describe())
        if self.store.path(REQUESTS).exists():
            self.store.adopt(REQUESTS)

    def describe(self) -> dict[str, Any]:
        return {
            "plan": self.plan.to_dict(),
            "target": self.ctx.target.base_url,
            "gpu_source": self.params.target.gpu_metrics.source if self.timeline is None else self.timeline.gpu_kind,
            "phases": self.phases, "steps": self.steps, "long_context": self.long_context,
            "refusal": self.refusal, "ready": self.ready, "health": self.health, "failure": self.failure,
            "dead": self.dead, "soak": self.soak, "notes": self.notes, "calibration": self.calibration,
            "model_card": self.model_card, "cache_config_info": self.cache_info,
            "config": server_config(self.log_report, self.cache_info, self.model_card),
            "log_error": self.log_error,
            "sampler_errors": self.timeline.errors() if self.timeline is not None else {},
            "files": {"requests": REQUESTS, "metrics": METRICS_JSON, "gpu": GPU_JSON,
                      "server_log": LOG_TXT if self.log_report is not None else None},
        }

    # -- phases ----------------------------------------------------------------------------------------------
    async def _phase_run(self, name: str, work: Callable[[], Any]) -> None:
        entry = {"phase": name, "start_wall": time.time(), "end_wall": None, "status": "running", "note": ""}
        self.phases.append(entry)
        self._phase = name
        try:
            async with asyncio.timeout(self.plan.phase_budget_s(name)):
                note = await work()
            entry["status"] = "done"
            entry["note"] = note or ""
        except TimeoutError:
            entry["status"] = "cut"
            entry["note"] = f"stopped at its bound of {self.plan.phase_budget_s(name):.0f} s"
        except (TargetError, httpx.HTTPError) as exc:
            entry["status"] = "failed"
            entry["note"] = f"{type(exc).__name__}: {exc}"[:500]
        entry["end_wall"] = time.time()
        self._flush()

    def _skip(self, name: str, reason: str) -> None:
        now = time.time()
        self.phases.append({"phase": name, "start_wall": now, "end_wall": now, "status": "skipped", "note": reason})

    def _admit_limit(self) -> int | None:
        """How many sequences the server runs at once (max_num_seqs × DP), when its configuration states it."""
        values = server_config(self.log_report, self.cache_info, self.model_card)["values"]
        seqs, dp = values.get("max_num_seqs"), values.get("data_parallel_size") or 1
        return seqs * dp if isinstance(seqs, int) and isinstance(dp, int) else None

    async def _cold_load(self) -> str:
        """Restart the engine with `target.restart` (when set) and time not ready → ready, with memory at ready.
        Without a restart command a running server's load is not observed: the phase only checks it is up."""
        from ...core.operator import run_operator_command

        cap = self.cap
        client = self._client(HEALTH_TIMEOUT_S)
        start = time.perf_counter()
        restart: dict[str, Any] = {"command": None, "ok": None, "detail": "no target.restart: the cold load is not observed"}
        command = self.params.target.restart
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
            restarted = bool(restart["ok"])
            self.ready = {"ready": ready, "observed_transition": ready and (not_ready > 0 or restarted),
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
        from ..compat.run import fetch_text

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

    async def _prompts(self, sizing: ChatClient, *, count: int, tokens: int | Sequence[int], seed: int,
                       shared_prefix_tokens: int = 0) -> list[BuiltPrompt]:
        try:
            return await build_prompts(sizing, count=count, target_tokens=tokens, seed=seed,
                                       shared_prefix_tokens=shared_prefix_tokens)
        except (APIError, TargetError) as exc:
            # a /tokenize that refuses an over-long prompt or does not answer: estimate, and say so
            self.notes.append(f"prompt sizing fell back to a chars/token estimate: {exc}"[:300])
            return await build_prompts(EstimateCounter(), count=count, target_tokens=tokens, seed=seed,
                                       shared_prefix_tokens=shared_prefix_tokens)

    def _body(self, prompt: BuiltPrompt, max_tokens: int, *, stream: bool = True,
              salt: str | None = None) -> dict[str, Any]:
        # ignore_eos: the output length is part of the test condition, not left to the model's mood
        extra: dict[str, Any] = {"ignore_eos": True, "temperature": 0}
        if salt:
            extra["cache_salt"] = salt  # a cold prefix cache for every request: nothing shared, full KV cost
        return prompt.body(max_tokens=max_tokens, model=self.params.target.model, stream=stream, **extra)

    async def _long_context(self) -> str:
        plan = self.plan
        sizing = self._client(self.params.target.timeout_s)
        client = self._client(plan.request_timeout_s)
        try:
            # The refusal costs the GPUs nothing when the server does its job, so it goes first; if it is not
            # refused and kills the engine, that is the finding.
            await self._refusal_probe(sizing, client)
            if self.dead:
                return "the out-of-contract probe left the engine dead"
            prompts = await self._prompts(sizing, count=len(plan.context_lengths_tokens),
                                          tokens=list(plan.context_lengths_tokens), seed=31)
            for prompt in prompts:
                if self.dead:
                    self.long_context.append({"target_tokens": prompt.target_tokens,
                                              "prompt_tokens": prompt.prompt_tokens, "sized_by": prompt.sized_by,
                                              "status": "skipped", "note": "engine dead"})
                    continue
                await self._one_length(client, prompt)
        finally:
            await sizing.aclose()
            await client.aclose()
        served = sum(1 for r in self.long_context if r["status"] == "ok")
        return f"{served}/{len(self.long_context)} lengths served"

    async def _one_length(self, client: ChatClient, prompt: BuiltPrompt) -> None:
        plan = self.plan
        bucket: list[dict[str, Any]] = []
        label = f"{prompt.target_tokens}"
        body = self._body(prompt, plan.long_context_output_tokens, salt=f"k3cap-{self.store.run_id}-lc-{label}")
        before = await boundary_snapshot(self.urls)
        t0 = time.time()
        self._in_flight = 1
        try:
            await run_closed_loop(client, [body], concurrency=1, max_requests=plan.long_context_repeats,
                                  max_duration_s=plan.request_timeout_s * plan.long_context_repeats,
                                  request_timeout_s=plan.request_timeout_s,
                                  sink=self._sink("long-context", label, bucket, 1, stop_on_death=False),
                                  name=f"long-{label}", allow_remote_load=self.params.target.allow_remote_load)
        finally:
            self._in_flight = 0
        t1 = time.time()
        after = await boundary_snapshot(self.urls)
        self._measured.extend(bucket)
        stats = record_stats(bucket)
        status = "ok" if stats["ok"] == stats["sent"] and stats["sent"] else \
            ("failed" if stats["server_errors"] or stats["unreachable"] else "incomplete")
        alive = await self._check_alive(client, "long-context", 1)
        self.long_context.append({"target_tokens": prompt.target_tokens, "prompt_tokens": prompt.prompt_tokens,
                                  "sized_by": prompt.sized_by, "output_tokens": plan.long_context_output_tokens,
                                  "status": status if alive or status != "ok" else "ok",
                                  "start_wall": t0, "end_wall": t1, "engine_alive_after": alive,
                                  **stats, **window_numbers(before, after),
                                  "error": next((r.get("error") for r in bucket if r.get("error")), None)})

    async def _refusal_probe(self, sizing: ChatClient, client: ChatClient) -> None:
        plan = self.plan
        (prompt,) = await self._prompts(sizing, count=1, tokens=plan.out_of_contract_tokens, seed=97)
        body = self._body(prompt, plan.long_context_output_tokens, stream=False,
                          salt=f"k3cap-{self.store.run_id}-oc")
        bucket: list[dict[str, Any]] = []
        sink = self._sink("long-context", "out-of-contract", bucket, 1, stop_on_death=False)
        t0 = time.time()
        self._in_flight = 1
        try:
            rec = await client.chat_body(body, strict=False, request_id="out-of-contract",
                                         timeout_s=plan.request_timeout_s)
        finally:
            self._in_flight = 0
        sink(rec)
        t1 = time.time()
        alive = await self._check_alive(client, "long-context", 1)
        d = bucket[0]
        kind = failure_kind(d)
        message = d.get("error") or ""
        if d.get("http_status") == 400:
            outcome = "refused"
        elif kind is None:
            outcome = "served"
        elif kind in ("server-error", "unreachable") or not alive:
            outcome = "failed"
        else:
            outcome = kind
        self.refusal = {"outcome": outcome, "prompt_tokens": prompt.prompt_tokens, "sized_by": prompt.sized_by,
                        "contract_limit_tokens": plan.context_limit_tokens, "http_status": d.get("http_status"),
                        "message": message[:500], "context_message": bool(_CONTEXT_REFUSAL.search(message)),
                        "engine_alive_after": alive, "start_wall": t0, "end_wall": t1,
                        "e2e_ms": d.get("e2e_ms")}

    async def _closed(self, client: ChatClient, bodies: Any, *, phase: str,
                      label: str, concurrency: int, max_requests: int, duration_s: float,
                      bucket: list[dict[str, Any]], soak: bool = False) -> tuple[Any, str | None]:
        """One closed-loop load window; returns its PhaseSummary (None when it was stopped early) and why it
        stopped early, if it did."""
        sink = self._sink(phase, label, bucket, concurrency)
        pool = await self._workers()
        self._in_flight = concurrency
        try:
            if soak:
                # the requests in flight at the soak's end may finish (bounded, see CapacityPlan.soak_drain_s): one
                # cut there counts as load that did not complete, so it must not be cut merely by the clock
                summary = await run_soak(client, bodies, concurrency=concurrency, duration_s=duration_s,
                                         max_requests=max_requests, window_s=max(duration_s / 6, 1.0),
                                         request_timeout_s=self.plan.request_timeout_s, sink=sink, name=label,
                                         allow_remote_load=self.params.target.allow_remote_load,
                                         drain_s=self.plan.soak_drain_s, workers=pool)
            else:
                # the requests in flight when the window closes may finish for as long again: a step then keeps
                # its slow requests too, and a busy machine still completes some at concurrency 1
                summary = await run_closed_loop(client, bodies, concurrency=concurrency, max_requests=max_requests,
                                                max_duration_s=duration_s, drain_s=duration_s,
                                                request_timeout_s=self.plan.request_timeout_s, sink=sink, name=label,
                                                allow_remote_load=self.params.target.allow_remote_load, workers=pool)
        except _EngineGone as exc:
            return None, f"stopped early: {exc}"
        finally:
            self._in_flight = 0
        return summary, None

    async def _calibrate(self) -> None:
        """The client's own timing error at the calibrated concurrencies, against a known-timing server on this
        machine (a real socket on 127.0.0.1), bounded whatever that server does. A calibration that cannot
        complete counts as failed: the steps it would have vouched for are not trusted."""
        plan = self.plan
        if not plan.calibration_concurrencies:
            self.calibration = {"enabled": False, "ran": False, "reports": [], "summary": [],
                                "note": "axes.capacity.calibrate is false: the client's timing error is not known"}
            return
        timing = known_timing(self._measured)
        server = KnownTimingServer(in_process=plan.calibration_server == "thread")
        pool = await self._workers()
        reports: list[CalibrationReport] = []
        error = None
        t0 = time.time()
        try:
            async with asyncio.timeout(CALIBRATION_BOUND_S):
                await asyncio.to_thread(server.start, CALIBRATION_BOUND_S / 2)
                if pool is not None:
                    reports = await self._calibrate_spread(pool, server.url, timing)
                client = ChatClient(server.url, timeout_s=CALIBRATION_BOUND_S, connect_timeout_s=5.0)
                try:
                    # a fresh server and a fresh connection pool pay one-off costs on their first requests (imports,
                    # connects): warm both up at the lowest calibrated concurrency, and keep that round out of it
                    if pool is None:
                        await calibrate(client, concurrency=plan.calibration_concurrencies[0],
                                        known_ttft_ms=timing["known_ttft_ms"], known_itl_ms=timing["known_itl_ms"],
                                        chunks=2, max_error_ms=plan.calibration_max_error_ms)
                    for c in plan.calibration_concurrencies if pool is None else ():
                        reports.append(await calibrate(
                            client, concurrency=c, known_ttft_ms=timing["known_ttft_ms"],
                            known_itl_ms=timing["known_itl_ms"], chunks=timing["chunks"],
                            rounds=calibration_rounds(c, timing), max_error_ms=plan.calibration_max_error_ms))
                finally:
                    await client.aclose()
        except TimeoutError:
            error = f"it ran past its bound of {CALIBRATION_BOUND_S:.0f} s"
        except (RuntimeError, OSError, httpx.HTTPError, TargetError) as exc:
            error = f"{type(exc).__name__}: {exc}"[:300]
        finally:
            await asyncio.to_thread(server.stop)
        done = {r.concurrency for r in reports}
        reports += [failed_report(c, timing, plan.calibration_max_error_ms, error or "no report")
                    for c in plan.calibration_concurrencies if c not in done]
        self._reports = reports
        self.calibration = {"enabled": True, "ran": True, "server": plan.calibration_server, "workers": self.workers,
                            "start_wall": t0, "end_wall": time.time(), **timing,
                            "max_error_ms": plan.calibration_max_error_ms, "error": error,
                            "summary": calibration_summary(reports), "reports": [r.to_dict() for r in reports]}
        self._flush()

    async def _calibrate_spread(self, pool: WorkerPool, url: str, timing: Mapping[str, Any]) -> list[CalibrationReport]:
        """The calibration over the worker processes, as the steps will spread their streams: per worker and whole."""
        plan = self.plan
        kw = {"known_ttft_ms": timing["known_ttft_ms"], "known_itl_ms": timing["known_itl_ms"],
              "max_error_ms": plan.calibration_max_error_ms}
        # a warm-up round kept out of it: the workers' fresh connection pools, the fresh server's first answers
        await calibrate_workers(pool, url, concurrency=plan.calibration_concurrencies[0], chunks=2, **kw)
        return [await calibrate_workers(pool, url, concurrency=c, chunks=timing["chunks"],
                                        rounds=calibration_rounds(c, timing), **kw)
                for c in plan.calibration_concurrencies]

    def _trust(self, summary: Any, bucket: Sequence[Mapping[str, Any]], concurrency: int,
               before: Snapshot | None, after: Snapshot | None) -> dict[str, Any]:
        """A window's calibration gate and its client/server cross-check, as step fields."""
        check = None
        error = None
        if before is not None and after is not None:
            try:
                check = cross_check([record_view(r) for r in bucket], before, after)
            except (ValueError, KeyError) as exc:
                error = f"{type(exc).__name__}: {exc}"[:300]
        spread = {"workers": summary.workers if summary is not None else None,
                  "degraded": summary.degraded if summary is not None else None}
        return {**gate_step(summary, self._reports, concurrency), "cross_check": cross_check_data(check, error),
                **spread}

    async def _concurrency(self) -> str:
        assert self.timeline is not None  # run() starts the samplers before any phase
        plan = self.plan
        sizing = self._client(self.params.target.timeout_s)
        client = self._client(plan.request_timeout_s)
        try:
            prompts = await self._prompts(sizing, count=4, tokens=plan.prompt_tokens, seed=53)
            await self._calibrate()
            for c in plan.steps:
                label = f"c{c}"
                if self.dead:
                    self.steps.append({"concurrency": c, "label": label, "status": "skipped", "held": False,
                                       "out_of_contract": c > plan.planned_concurrency, "note": "engine dead"})
                    continue
                bodies = self._salted(prompts, plan.output_tokens, f"{label}")
                bucket: list[dict[str, Any]] = []
                before = await boundary_snapshot(self.urls)
                t0 = time.time()
                summary, early = await self._closed(client, bodies, phase="concurrency", label=label,
                                                    concurrency=c, max_requests=plan.step_max_requests,
                                                    duration_s=plan.step_duration_s, bucket=bucket)
                t1 = time.time()
                after = await boundary_snapshot(self.urls)
                alive = await self._check_alive(client, "concurrency", c)
                step = {"concurrency": c, "label": label, "status": "done" if early is None else "stopped",
                        "note": early or "", "out_of_contract": c > plan.planned_concurrency,
                        "prompt_tokens": prompts[0].prompt_tokens, "sized_by": prompts[0].sized_by,
                        "output_tokens": plan.output_tokens, "start_wall": t0, "end_wall": t1,
                        "engine_alive_after": alive, **record_stats(bucket, intervals=True), **window_numbers(before, after),
                        **settled_stats(self.timeline.metric_rows(), t0, t1, self.cap.settle_fraction,
                                        self._admit_limit()),
                        **self._trust(summary, bucket, c, before, after),
                        "ranks": rank_window(before, after, self.timeline.metric_rows(), t0, t1)}
                held, why = judge_step(step, queue_objective_ms=self.params.contract.queue_p95_ms,
                                       waiting_tolerance=self.cap.waiting_tolerance,
                                       max_error_share=self.params.contract.max_error_share)
                # a step whose worker process ended early sent less load than planned: it did not show that level held
                degraded = step.get("degraded")
                step.update(held=held and alive and not degraded,
                            why=why + ([] if alive else ["the engine died"]) + ([degraded] if degraded else []))
                self.steps.append(step)
        finally:
            await sizing.aclose()
            await client.aclose()
        return f"{sum(1 for s in self.steps if s.get('held'))}/{len(plan.steps)} steps held"

    def _salted(self, prompts: Sequence[BuiltPrompt], max_tokens: int, label: str) -> "SaltedBodies":
        return SaltedBodies(tuple(self._body(p, max_tokens) for p in prompts), f"k3cap-{self.store.run_id}-{label}")

    async def _soak(self) -> str:
        assert self.timeline is not None  # run() starts the samplers before any phase
        plan = self.plan
        sizing = self._client(self.params.target.timeout_s)
        client = self._client(plan.request_timeout_s)
        try:
            n = min(4 * plan.planned_concurrency, 32)
            prompts = await self._prompts(sizing, count=n, tokens=plan.prompt_tokens, seed=71,
                                          shared_prefix_tokens=plan.shared_prefix_tokens)
            bodies = [self._body(p, plan.output_tokens) for p in prompts]
            bucket: list[dict[str, Any]] = []
            before = await boundary_snapshot(self.urls)
            t0 = time.time()
            summary, early = await self._closed(client, bodies, phase="soak",
                                                label="soak", concurrency=plan.planned_concurrency,
                                                max_requests=plan.soak_max_requests,
                                                duration_s=plan.soak_duration_s, bucket=bucket, soak=True)
            t1 = time.time()
            after = await boundary_snapshot(self.urls)
            alive = await self._check_alive(client, "soak", plan.planned_concurrency)
        finally:
            await sizing.aclose()
            await client.aclose()
        cap = self.cap
        self.soak_window = (t0, t1)
        self.soak = {"start_wall": t0, "end_wall": t1, "concurrency": plan.planned_concurrency,
                     "prompt_tokens": prompts[0].prompt_tokens, "shared_prefix_tokens": prompts[0].shared_prefix_tokens,
                     "output_tokens": plan.output_tokens, "distinct_prompts": len(prompts),
                     "note": early or "", "engine_alive_after": alive, **record_stats(bucket),
                     **self._trust(summary, bucket, plan.planned_concurrency, before, after),
                     "ranks": rank_window(before, after, self.timeline.metric_rows(), t0, t1),
                     # judged over the sending window: the drain's tail, load falling off, is not sustained load
                     **soak_analysis(self.timeline.metric_rows(), self.timeline.gpu_rows(), t0,
                                     min(t1, t0 + plan.soak_duration_s),
                                     concurrency=plan.planned_concurrency,
                                     memory_growth_min_mib=cap.memory_growth_min_mib, kv_trend_max=cap.kv_trend_max,
                                     hit_rate_drop_max=cap.hit_rate_drop_max,
                                     fragmentation_share_max=cap.fragmentation_share_max,
                                     waiting_tolerance=cap.waiting_tolerance, settle_fraction=cap.settle_fraction,
                                     admit_limit=self._admit_limit())}
        return early or f"{self.soak['ok']} requests over {t1 - t0:.1f} s"

    async def run(self) -> None:
        pinned = pinned_params(self.ctx)
        self.timeline = Timeline(self.urls, pinned.target.gpu_metrics, interval_s=self.cap.sample_interval_s,
                                 max_duration_s=self.plan.budget_s + 60).start()
        try:
            works = {"cold-load": self._cold_load, "long-context": self._long_context,
                     "concurrency": self._concurrency, "soak": self._soak}
            for name in PHASES:
                if self.dead:
                    why = "the server never became ready" if not self.ready.get("ready") else \
                        f"the engine stopped answering (health) during {self._phase}"
                    self._skip(name, why)
                    continue
                await self._phase_run(name, works[name])
        finally:
            self.timeline.stop()
            if self._pool is not None:
                await self._pool.aclose()
            await asyncio.to_thread(self._read_log)
            self._flush()


class SaltedBodies:
    """Request `i` of a step: the prompts in turn, each with its own cache salt (nothing shared, full KV cost). A
    module-level class, so a step spread over worker processes hands it to them as it is (it pickles)."""

    def __init__(self, bodies: Sequence[Mapping[str, Any]], salt: str) -> None:
        self.bodies, self.salt = tuple(bodies), salt

    def __call__(self, i: int) -> dict[str, Any]:
        return {**self.bodies[i % len(self.bodies)], "cache_salt": f"{self.salt}-{i}"}


def run_capacity(ctx: "AxisContext") -> "CapacityResult":
    """Run the four phases (bounded, whatever the target does) and return what was written to the run folder."""
    # before the samplers and the health polls touch the target: a mistyped URL must not load a remote deployment
    check_load_target(ctx.target.base_url, ctx.params.target.allow_remote_load)
    runner = CapacityRunner(ctx)
    run_sync(runner.run())
    return read_capacity(ctx.store)
