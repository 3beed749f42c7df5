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
import dataclasses
import json
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, cast

from ...core import progress
from ...core.errors import APIError, TargetError
from ...core.evidence import Row
from ...core.session import find_path
from ...io.client import ChatClient
from ...io.metrics import Snapshot, delta
from ...io.sessions import (
    FILLER_SAMPLE,
    Question,
    ReplayConfig,
    SessionReplay,
    SessionShape,
    SessionTurn,
    TurnRecord,
    convert_trace,
    generate_sessions,
    read_trace,
)
from ..agent.sample import load_sample
from .config import SESSION_MAX_TURNS, SESSION_MIN_TURNS
from .result import SESSIONS_JSONL
from .resume import CutSessions
from .shapes import RequestRow
from .state import Recorder
from .watch import boundary_snapshot
from .window import record_stats, window_numbers

__all__ = ["SESSIONS_JSONL", "SessionRun", "SessionSource", "cache_counters", "longest_exchange", "play_sessions",
           "sample_shape", "sampling_of"]
#: a generated session's recorded tool result, when the sample's tool has no canned one
_RESULT = {"status": "ok", "source": "recorded result (k3kit session replay)"}


def longest_exchange(params: Any) -> int:
    return int(params.contract.max_context_tokens * params.axes.agent.long_context_fraction)


def sample_shape(params: Any, sessions: int, seed: int, start_tokens: int = 0,
                 chars_per_token: float | None = None) -> SessionShape:
    """Generated sessions from the contract and the agent sample (system prompt, tools, questions that need one);
    `start_tokens`: the system prompt and tools as the server counts them (0: estimated from their characters);
    `chars_per_token`: the server's tokenizer on the filler words (None: four characters a token)."""

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


def cache_counters(before: Snapshot | None, after: Snapshot | None) -> Row:
    """The server's own prefix-cache counters over a level (vllm:prefix_cache_hits/queries, in tokens): what the
    turns' usage `cached_tokens` is reconciled with (None where a scrape failed or the server has none)."""
    if before is None or after is None:
        return {"prefix_cache_hits": None, "prefix_cache_queries": None}
    return {"prefix_cache_hits": delta(before, after, "prefix_cache_hits_total").value,
            "prefix_cache_queries": delta(before, after, "prefix_cache_queries_total").value}


def sampling_of(params: Any) -> Row:
    """The production sampling the sessions are sent with (the recipe's; the server's defaults where unset)."""
    s = params.recipe.sampling
    out: Row = {}
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

    def head(self) -> tuple[str | None, list[Row]]:
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


@dataclasses.dataclass(frozen=True)
class SessionRun:
    """The session phase as far as it went: the levels that ended and, while one holds, the level in progress
    (`current`: its sessions that ended, the generator's next number), rewritten as each session starts and ends so
    that a kill keeps the ended ones (resume.py)."""

    source: str
    planned_sessions: int
    longest_exchange_tokens: int
    levels: tuple[Row, ...] = ()
    shared_prefix_tokens: int | None = None
    chars_per_token: float | None = None
    current: Row | None = None

    def describe(self) -> Row:
        out = {"source": self.source, "planned_sessions": self.planned_sessions, "levels": list(self.levels),
               "longest_exchange_tokens": self.longest_exchange_tokens,
               "shared_prefix_tokens": self.shared_prefix_tokens, "chars_per_token": self.chars_per_token}
        return out if self.current is None else {**out, "current": self.current}

    def note(self, planned_levels: int, cut: CutSessions | None) -> str:
        turns = sum(lv.get("turns", 0) for lv in self.levels)
        resumed = f"; resumed from {cut.under}, cut in a level of {cut.level}" if cut is not None else ""
        return f"{turns} turns over {planned_levels} level(s) of sessions ({self.source}){resumed}"


async def play_sessions(rec: Recorder, source: SessionSource, cache_info: Mapping[str, str],
                        cut: CutSessions | None, publish: Callable[[SessionRun], None]) -> SessionRun:
    """The levels in order, each its sessions at once; `cut`: a cut attempt this run continues (resume.py);
    `publish` gets the phase as it goes."""
    plan = rec.plan
    run = SessionRun(source.kind, plan.planned_sessions, longest_exchange(rec.params))
    client = rec.client(rec.cap.request_timeout_s)
    try:
        if cut is None:
            run = dataclasses.replace(run, shared_prefix_tokens=await _shared_prefix(rec, client, source),
                                      chars_per_token=await _chars_per_token(client))
        else:  # the cut attempt's measures: its sessions and this one's grow alike
            kept = cut.run["sessions"]
            run = dataclasses.replace(run, levels=tuple(dict(lv) for lv in cut.levels),
                                      shared_prefix_tokens=kept.get("shared_prefix_tokens"),
                                      chars_per_token=kept.get("chars_per_token"))
            source.next = cut.next_session
        source.start_tokens = run.shared_prefix_tokens or 0
        source.chars_per_token = run.chars_per_token
        config = _config(rec, cache_info, run.chars_per_token)
        publish(run)
        for level in plan.session_levels[len(run.levels):]:
            if rec.dead:
                run = dataclasses.replace(run, levels=(*run.levels, {"sessions": level, "status": "skipped",
                                                                     "note": "engine dead"}))
                continue
            row = await _session_level(rec, client, source, level, config,
                                       cut if cut and cut.level == level else None, _checkpoint(run, publish))
            # between levels: none in progress, the numbering kept (the phase's end drops it)
            run = dataclasses.replace(run, levels=(*run.levels, row),
                                      current={"sessions": None, "finished": [], "next": source.next})
            publish(run)
        run = dataclasses.replace(run, current=None)
    finally:
        await client.aclose()
    return run


def _checkpoint(run: SessionRun, publish: Callable[[SessionRun], None]) -> Callable[[Row], None]:
    """A level's progress published over the phase as it stood when the level began."""
    return lambda now: publish(dataclasses.replace(run, current={**now, "finished": list(now["finished"])}))


async def _shared_prefix(rec: Recorder, client: ChatClient, source: SessionSource) -> int | None:
    """The system prompt and tools in tokens, from the server's /tokenize (None where it has none): the part of
    every prompt that sessions share, told apart from each session's own history."""
    system, tools = source.head()
    if system is None:
        return None
    try:
        return (await client.tokenize(messages=[{"role": "system", "content": system}], tools=tools)).count
    except (APIError, TargetError):
        rec.notes.append("the session phase's shared prefix was not measured: /tokenize did not answer")
        return None


async def _chars_per_token(client: ChatClient) -> float | None:
    """The server's tokenizer on the generator's filler words (/tokenize; None where it does not answer): the
    tiny K3-format model's spends twice the four characters a token planned (growth 476 tokens for 241)."""
    try:
        count = (await client.tokenize(prompt=FILLER_SAMPLE)).count
    except (APIError, TargetError):
        return None
    return round(len(FILLER_SAMPLE) / count, 3) if count > 0 else None


def _config(rec: Recorder, cache_info: Mapping[str, str], chars_per_token: float | None) -> ReplayConfig:
    block = str(cache_info.get("block_size") or "")
    return ReplayConfig(model=rec.params.target.model, request_timeout_s=rec.cap.request_timeout_s,
                        sampling=sampling_of(rec.params), block_tokens=int(block) if block.isdigit() else 16,
                        chars_per_token=chars_per_token or 4.0)


async def _session_level(rec: Recorder, client: ChatClient, source: SessionSource, level: int,
                         config: ReplayConfig, cut: CutSessions | None,
                         checkpoint: Callable[[Row], None]) -> Row:
    """One level: `level` sessions at once for its duration, every turn written as it ends; `cut`: the level a
    stop cut, whose ended sessions (their turns and requests) it starts from, kept once."""
    plan = rec.plan
    progress.phase(f"sessions: {level} at once", duration_s=rec.cap.session_duration_s)
    label = f"sessions {level}"
    kept = cut.level_turns(level) if cut is not None else []
    done = list(cut.finished) if cut is not None else []
    bucket = [cast(RequestRow, dict(r)) for r in cut.requests if r.get("step") == label] if cut is not None else []
    turns: list[Row] = list(kept)
    sessions = (s for s in source.level() if s[0].session not in done)  # a trace's ended sessions not again
    counts = {"started": len(done), "finished": len(done)}
    current: Row = {"sessions": level, "finished": list(done), "next": source.next}
    request_sink = rec.sink("sessions", label, bucket, level)

    def sink(d: TurnRecord) -> None:
        d["level"] = level
        turns.append(cast(Row, d))
        rec.store.append_jsonl(SESSIONS_JSONL, d)  # as it ends: a killed run keeps every finished turn

    async def worker() -> None:
        while time.perf_counter_ns() < stop_at:
            session = next(sessions, None)
            if session is None:
                return
            counts["started"] += 1
            current["next"] = source.next
            checkpoint(current)
            await SessionReplay(client, session, config, sink=sink, on_request=request_sink,
                                label=f"L{level}-", stop_at_ns=stop_at, min_turns=SESSION_MIN_TURNS).run()
            counts["finished"] += 1
            current["finished"].append(session[0].session)
            checkpoint(current)

    checkpoint(current)
    before = await boundary_snapshot(rec.urls)
    t0 = time.time()
    stop_at = time.perf_counter_ns() + int(rec.cap.session_duration_s * 1e9)
    early = await _hold(worker, level, plan.session_level_bound_s)
    t1 = time.time()
    after = await boundary_snapshot(rec.urls)
    alive = await rec.check_alive(client, "sessions", level)
    return {"sessions": level, "status": "done" if early is None else "stopped", "note": early or "",
            "start_wall": t0, "end_wall": t1, "turns": len(turns), "sessions_started": counts["started"],
            "sessions_finished": counts["finished"], "engine_alive_after": alive,
            **record_stats(bucket), **window_numbers(before, after), **cache_counters(before, after),
            "usage_cached_tokens": sum(t.get("cached_tokens") or 0 for t in turns),
            **({"resumed": {"from": cut.under, "kept_sessions": len(done), "kept_turns": len(kept)}}
               if cut is not None else {})}


async def _hold(worker: Callable[[], Any], level: int, bound_s: float) -> str | None:
    """`level` workers until the level's duration (each session plays its first turns), cut at the level's
    bound; a server gone (the watch's sink) stops them all."""
    tasks = [asyncio.ensure_future(worker()) for _ in range(level)]
    try:
        done, pending = await asyncio.wait(tasks, timeout=bound_s)
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
