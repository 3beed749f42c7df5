"""The session phase: agent sessions replayed faithfully (k3lib.io.sessions), stepped like concurrency up to the
contract's planned sessions (`contract.planned_sessions`, floored at the planned concurrency when unset).

Each level holds that many sessions at once for `axes.capacity.session_duration_s`: a session that ends gives its
place to the next one, no turn starts after the level's duration once a session played its first turns
(`SESSION_MIN_TURNS`), and the turns in flight then finish (each within the request timeout). Every turn is one
record in `evidence/capacity/sessions.jsonl`, written as it ends; the judge aligns it with the server's KV usage,
running and waiting sampled while it ran and the preemptions counted over it. Each level keeps its counter deltas
between its two boundary scrapes. The sessions come from a trace (`axes.capacity.session_trace`, the kit's format
or a public shape) or, by default, from the contract: the agent sample's system prompt, tools and tool questions,
growing to the contract's longest exchange (`contract.max_context_tokens × axes.agent.long_context_fraction`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

from ...core import progress
from ...core.errors import APIError, TargetError
from ...io.client import ChatClient
from ...io.metrics import Snapshot, delta
from ...io.sessions import (FILLER_SAMPLE, Question, ReplayConfig, SessionReplay, SessionShape, SessionTurn, convert_trace,
                            generate_sessions, read_trace)
from .config import SESSION_MAX_TURNS, SESSION_MIN_TURNS
from .result import RUN_JSON, SESSIONS_JSONL
from .shape import session_levels
from .watch import EngineWatch, boundary_snapshot
from .window import record_stats, window_numbers

__all__ = ["SESSIONS_JSONL", "SessionPhase", "SessionSource", "cache_counters", "longest_exchange", "sample_shape", "sampling_of",
           "session_levels"]
#: a generated session's recorded tool result, when the sample's tool has no canned one
_RESULT = {"status": "ok", "source": "recorded result (k3kit session replay)"}


def longest_exchange(params: Any) -> int:
    return int(params.contract.max_context_tokens * params.axes.agent.long_context_fraction)


def sample_shape(params: Any, sessions: int, seed: int, start_tokens: int = 0,
                 chars_per_token: float | None = None) -> SessionShape:
    """Generated sessions from the contract and the agent sample (system prompt, tools, questions that need one);
    `start_tokens`: the system prompt and tools as the server counts them (0: estimated from their characters);
    `chars_per_token`: the server's tokenizer on the filler words (None: four characters a token)."""
    from ..agent.sample import load_sample
    from ...core.session import find_path

    a, cap, contract = params.axes.agent, params.axes.capacity, params.contract
    sample = load_sample(find_path(a.sample) if a.sample else None)
    questions = []
    for case in sample.cases:
        if case.requires_images:
            continue
        for t in case.turns:
            if isinstance(t.user, str) and t.expect_tool and t.tool_error is None:
                tool = sample.tool(t.expect_tool)
                result = tool.result if tool is not None and tool.result is not None else {**_RESULT,
                                                                                           "function": t.expect_tool}
                questions.append(Question(t.user, t.expect_tool, json.dumps(result, sort_keys=True)))
    return SessionShape(sessions=sessions, system_prompt=sample.system_prompt,
                        tools=tuple(t.openai() for t in sample.tools), questions=tuple(questions),
                        longest_tokens=longest_exchange(params),
                        # the reply's ceiling is the agent axis's (K3 thinks inside it before it calls: the
                        # typical output as a ceiling cut every think channel short on real vLLM, no call made);
                        # the history grows by the typical output
                        max_tokens=min(sample.defaults.max_tokens, contract.max_output_tokens),
                        reply_tokens=min(contract.typical_output_tokens or contract.max_output_tokens,
                                         contract.max_output_tokens),
                        max_turns=SESSION_MAX_TURNS, think_mean_s=cap.session_think_s, seed=seed,
                        start_tokens=start_tokens, **({"chars_per_token": chars_per_token}
                                                      if chars_per_token else {}))


def cache_counters(before: Snapshot | None, after: Snapshot | None) -> dict[str, Any]:
    """The server's own prefix-cache counters over a level (vllm:prefix_cache_hits/queries, in tokens): what the
    turns' usage `cached_tokens` is reconciled with (None where a scrape failed or the server has none)."""
    if before is None or after is None:
        return {"prefix_cache_hits": None, "prefix_cache_queries": None}
    return {"prefix_cache_hits": delta(before, after, "prefix_cache_hits_total").value,
            "prefix_cache_queries": delta(before, after, "prefix_cache_queries_total").value}


def sampling_of(params: Any) -> dict[str, Any]:
    """The production sampling the sessions are sent with (the recipe's; the server's defaults where unset)."""
    s = params.recipe.sampling
    out: dict[str, Any] = {}
    if s.temperature is not None:
        out["temperature"] = s.temperature
    if s.top_p is not None:
        out["top_p"] = s.top_p
    if s.thinking is not None:
        out["chat_template_kwargs"] = {"thinking": s.thinking}
    return out


class SessionSource:
    """Where a level's sessions come from: the trace's sessions in order (each once per level), or generated ones,
    numbered on so that no two sessions of a run share more than the system prompt and tools."""

    def __init__(self, params: Any, seed: int = 47) -> None:
        cap = params.axes.capacity
        self.trace: list[list[SessionTurn]] | None = None
        if cap.session_trace:
            from ...core.session import find_path

            path = find_path(cap.session_trace)
            self.trace = read_trace(path) if cap.session_trace_format == "k3" else \
                convert_trace(cap.session_trace_format, path)
        self.params, self.seed, self.next = params, seed, 0
        # the shared prefix in the server's tokens, once measured: the sessions then grow to the longest exchange
        # from what the server counts (an estimate from characters counts a template that renders no tools as if
        # it did: on real vLLM with the tiny K3 model, ~450 estimated for 42 real, every session cut at two turns)
        self.start_tokens = 0
        self.chars_per_token: float | None = None  # the server's tokenizer on the filler words, once measured
        self.kind = f"trace ({cap.session_trace_format})" if self.trace is not None else "generated from the contract"

    def head(self) -> tuple[str | None, list[dict[str, Any]]]:
        """The system prompt and tools every session starts with (a trace's first session's)."""
        if self.trace is not None:
            first = self.trace[0][0]
            return first.system, [dict(t) for t in first.tools]
        shape = sample_shape(self.params, 1, self.seed)
        return shape.system_prompt, [dict(t) for t in shape.tools]

    def level(self) -> Iterator[list[SessionTurn]]:
        if self.trace is not None:
            yield from self.trace
            return
        shape = sample_shape(self.params, 1, self.seed, self.start_tokens, self.chars_per_token)
        while True:
            (session,) = generate_sessions(shape, first=self.next)
            self.next += 1
            yield session


class SessionPhase(EngineWatch):
    """The phase's I/O: the levels in order, each its sessions at once."""

    session_source: SessionSource | None = None  # set before the run, so a bad trace is refused before any load
    chars_per_token: float | None = None  # the server's tokenizer on the filler words (measured by the phase)

    async def _sessions(self) -> str:
        plan = self.plan
        source = self.session_source or SessionSource(self.params)
        self.session_run: dict[str, Any] = {"source": source.kind, "planned_sessions": plan.planned_sessions,
                            "levels": [], "longest_exchange_tokens": longest_exchange(self.params)}
        cut = self.resume
        client = self._client(plan.request_timeout_s)
        try:
            if cut is None:
                self.session_run["shared_prefix_tokens"] = await self._shared_prefix(client, source)
                self.chars_per_token = await self._chars_per_token(client)
            else:  # the cut attempt's measures: its sessions and this one's grow alike
                self.session_run.update(levels=[dict(lv) for lv in cut.levels],
                                        shared_prefix_tokens=cut.run["sessions"].get("shared_prefix_tokens"))
                self.chars_per_token = cut.run["sessions"].get("chars_per_token")
                source.next = cut.next_session
            source.start_tokens = self.session_run["shared_prefix_tokens"] or 0
            source.chars_per_token = self.chars_per_token
            self.session_run["chars_per_token"] = self.chars_per_token
            for level in plan.session_levels[len(self.session_run["levels"]):]:
                if self.dead:
                    self.session_run["levels"].append({"sessions": level, "status": "skipped",
                                                       "note": "engine dead"})
                    continue
                await self._session_level(client, source, level)
            self.session_run.pop("current", None)
        finally:
            await client.aclose()
        turns = sum(lv.get("turns", 0) for lv in self.session_run["levels"])
        resumed = f"; resumed from {cut.under}, cut in a level of {cut.level}" if cut is not None else ""
        return f"{turns} turns over {len(plan.session_levels)} level(s) of sessions ({source.kind}){resumed}"

    async def _shared_prefix(self, client: ChatClient, source: SessionSource) -> int | None:
        """The system prompt and tools in tokens, from the server's /tokenize (None where it has none): the part of
        every prompt that sessions share, told apart from each session's own history."""
        system, tools = source.head()
        if system is None:
            return None
        try:
            return (await client.tokenize(messages=[{"role": "system", "content": system}], tools=tools)).count
        except (APIError, TargetError):
            self.notes.append("the session phase's shared prefix was not measured: /tokenize did not answer")
            return None

    async def _chars_per_token(self, client: ChatClient) -> float | None:
        """The server's tokenizer on the generator's filler words (/tokenize; None where it does not answer): the
        tiny K3-format model's spends twice the four characters a token planned (growth 476 tokens for 241)."""
        try:
            count = (await client.tokenize(prompt=FILLER_SAMPLE)).count
        except (APIError, TargetError):
            return None
        return round(len(FILLER_SAMPLE) / count, 3) if count > 0 else None

    def _config(self) -> ReplayConfig:
        block = str(self.cache_info.get("block_size") or "")
        return ReplayConfig(model=self.params.target.model, request_timeout_s=self.plan.request_timeout_s,
                            sampling=sampling_of(self.params),
                            block_tokens=int(block) if block.isdigit() else 16,
                            chars_per_token=self.chars_per_token or 4.0)

    async def _session_level(self, client: ChatClient, source: SessionSource, level: int) -> None:
        plan = self.plan
        progress.phase(f"sessions: {level} at once", duration_s=plan.session_duration_s)
        label = f"sessions {level}"
        cut = self.resume if self.resume is not None and self.resume.level == level else None
        # a resumed level starts from the sessions its cut attempt ended: their turns and requests, kept once
        kept = cut.level_turns(level) if cut is not None else []
        done = list(cut.finished) if cut is not None else []
        bucket = [dict(r) for r in cut.requests if r.get("step") == label] if cut is not None else []
        turns: list[dict[str, Any]] = list(kept)
        sessions = (s for s in source.level() if s[0].session not in done)  # a trace's ended sessions not again
        counts = {"started": len(done), "finished": len(done)}
        # the level in progress, rewritten as each session starts and ends: a kill keeps the ended ones
        current = self.session_run["current"] = {"sessions": level, "finished": list(done), "next": source.next}
        request_sink = self._sink("sessions", label, bucket, level)

        def sink(d: dict[str, Any]) -> None:
            d["level"] = level
            turns.append(d)
            self.store.append_jsonl(SESSIONS_JSONL, d)  # as it ends: a killed run keeps every finished turn

        async def worker() -> None:
            while time.perf_counter_ns() < stop_at:
                session = next(sessions, None)
                if session is None:
                    return
                counts["started"] += 1
                current["next"] = source.next
                self._write_run()
                await SessionReplay(client, session, self._config(), sink=sink, on_request=request_sink,
                                    label=f"L{level}-", stop_at_ns=stop_at, min_turns=SESSION_MIN_TURNS).run()
                counts["finished"] += 1
                current["finished"].append(session[0].session)
                self._write_run()

        before = await boundary_snapshot(self.urls)
        t0 = time.time()
        stop_at = time.perf_counter_ns() + int(plan.session_duration_s * 1e9)
        self._in_flight = level
        early = await self._hold(worker, level)
        self._in_flight = 0
        t1 = time.time()
        after = await boundary_snapshot(self.urls)
        alive = await self._check_alive(client, "sessions", level)
        self.session_run["levels"].append({
            "sessions": level, "status": "done" if early is None else "stopped", "note": early or "",
            "start_wall": t0, "end_wall": t1, "turns": len(turns), "sessions_started": counts["started"],
            "sessions_finished": counts["finished"], "engine_alive_after": alive,
            **record_stats(bucket), **window_numbers(before, after), **cache_counters(before, after),
            "usage_cached_tokens": sum(t.get("cached_tokens") or 0 for t in turns),
            **({"resumed": {"from": cut.under, "kept_sessions": len(done), "kept_turns": len(kept)}}
               if cut is not None else {})})
        # between levels: none in progress, the numbering kept (the run's end drops it)
        self.session_run["current"] = {"sessions": None, "finished": [], "next": source.next}
        self._write_run()

    async def _hold(self, worker: Callable[[], Any], level: int) -> str | None:
        """`level` workers until the level's duration (each session plays its first turns), cut at the level's
        bound; a server gone (the watch's sink) stops them all."""
        tasks = [asyncio.ensure_future(worker()) for _ in range(level)]
        try:
            done, pending = await asyncio.wait(tasks, timeout=self.plan.session_level_bound_s)
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            errors = [t.exception() for t in done if not t.cancelled() and t.exception() is not None]
            if errors:
                return f"stopped early: {errors[0]}"[:300]
            return "cut at the level's bound" if pending else None
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    # -- the run folder ------------------------------------------------------------------------------------
    def _write_run(self) -> None:
        self.store.write_json(RUN_JSON, self.describe())

    def _flush(self) -> None:
        super()._flush()
        if self.store.path(SESSIONS_JSONL).exists():
            self.store.adopt(SESSIONS_JSONL)

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out["sessions"] = getattr(self, "session_run", None)
        out["files"]["sessions"] = SESSIONS_JSONL if self.store.path(SESSIONS_JSONL).exists() else None
        return out
