"""The cold/warm protocol: per session and prefix length, a never-sent prefix then the same prefix with the last
user turn changed, each request bracketed by /metrics scrapes so counter deltas are tied to what was sent; then a
third sighting of the prefix (another last turn), because a hybrid model (Kimi K3's KDA state) may keep a prefix only
on its second hit, so reuse first shows on the third request.

Isolation is a unique `cache_salt` per session (vLLM mixes it into the first block) and/or a fresh nonce at
the head of the system prompt; both are recorded. Sequential requests only, bounded in count and seconds.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import httpx

from ...core import progress
from ...core.errors import APIError, TargetError
from ...core.numbers import figure
from ...core.stats import median_interval
from ...core.floors import prefix_floor_tokens
from ...core.params import PrefixCacheParams
from ...io.client import WITHOUT_RAW, ChatRecord, SyncChatClient
from ...io.load import check_load_target
from ...io.metrics import Snapshot, delta, scrape
from ...io.prompts import EstimateCounter, ServerTokenCounter, TokenCounter, filler_text, fit_count
from ...io.shapes import ChatMessage
from ..environment.run import fetch_text
from .blocks import common_prefix_len, designed_hits, expected_hits, first_divergence, hit_unit
from .result import (
    CONFIG_LABELS,
    COUNTERS_JSON,
    KINDS,
    REQUESTS_JSONL,
    RESULT_JSON,
    SAMPLES_JSONL,
    TOKEN_IDS_JSONL,
    PrefixCacheResult,
    RequestSample,
    judged_sighting,
)
from .retention import retention_settings
from ...core.jsonvalue import JsonObject
from .shapes import CounterRow

if TYPE_CHECKING:
    from ...core.session import AxisContext

# Two fixed tool schemas: an agent's tool definitions are part of the prefix it expects to be reused.
TOOLS: tuple[JsonObject, ...] = (
    {"type": "function", "function": {
        "name": "search_runbook", "description": "Search the operations runbook and return matching steps.",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string", "description": "words to look for"},
            "max_results": {"type": "integer", "minimum": 1, "maximum": 20}},
            "required": ["query"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "get_metric", "description": "Read the current value of a named service metric.",
        "parameters": {"type": "object", "properties": {
            "name": {"type": "string"}, "window_s": {"type": "integer", "minimum": 1}},
            "required": ["name"], "additionalProperties": False}}},
)


# ---------------------------------------------------------------------------------------------------------
# Prompts: system prompt + tools + shared history + last user turn, sized with /tokenize
# ---------------------------------------------------------------------------------------------------------


def session_messages(nonce: str, words: int, pads: int, question: int, *, early_change: bool = False
                     ) -> list[ChatMessage]:
    """One request of a session. Everything but the last user turn is identical for a given nonce and size;
    `early_change` swaps one word at the head of the system prompt (the protocol's negative control)."""
    role = "on-duty" if early_change else "on-call"
    system = (f"[session {nonce}] You are the {role} assistant of the platform team. Runbook follows. "
              + filler_text(f"prefix-cache:{words}", words) + " x" * pads)
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": "Which tool reads a service metric?"},
        {"role": "assistant", "content": "get_metric reads the current value of a named service metric."},
        {"role": "user", "content": f"Question {question}: name the first runbook step in one line."},
    ]


async def _size_session(counter: TokenCounter, nonce: str, target: int) -> tuple[int, int, int]:
    async def count(words: int, pads: int) -> int:
        return await counter.count_chat(session_messages(nonce, words, pads, 1), list(TOOLS))

    return await fit_count(count, target)


# ---------------------------------------------------------------------------------------------------------
# Counters around one request
# ---------------------------------------------------------------------------------------------------------


def replica_values(snapshot: Snapshot, canonical: str) -> dict[str, float]:
    """A counter per replica: `endpoint` or `endpoint engine=N` (DP ranks behind one /metrics)."""
    out: dict[str, float] = {}
    for endpoint, s in snapshot.samples(canonical):
        key = endpoint + (f" engine={s.labels['engine']}" if "engine" in s.labels else "")
        out[key] = out.get(key, 0.0) + s.value
    return out


def _replica_delta(before: Snapshot, after: Snapshot, canonical: str) -> dict[str, float]:
    old, new = replica_values(before, canonical), replica_values(after, canonical)
    # a counter that went down was reset: its new value is what it counted since
    return {k: (v - old.get(k, 0.0)) if v >= old.get(k, 0.0) else v for k, v in new.items()}


def contamination(prompt_tokens: int | None, queries_delta: float | None, success_delta: float | None
                  ) -> str | None:
    """Why a request's window holds more than that request, or None. vLLM counts `queries` as the full prompt
    length once per admitted request (0.12+ excludes preemption re-admissions), so more means other traffic."""
    if success_delta is not None and success_delta > 1:
        return f"{figure(success_delta)} requests finished during a one-request window"
    if prompt_tokens is not None and queries_delta is not None and queries_delta > prompt_tokens:
        return (f"prefix-cache queries rose by {figure(queries_delta)} tokens for a {prompt_tokens}-token prompt: "
                "another client is using the target")
    return None


def _counter_row(snapshot: Snapshot, request_id: str, kind: str, phase: str) -> CounterRow:
    return {"t_wall": snapshot.t_wall, "request_id": request_id, "kind": kind, "phase": phase,
            "queries": snapshot.value("prefix_cache_queries_total"),
            "hits": snapshot.value("prefix_cache_hits_total"),
            "cached": snapshot.value("prompt_tokens_cached_total"),
            "sparse_retention_misses": snapshot.value("prefix_cache_sparse_retention_misses_total"),
            "endpoints_ok": sum(1 for e in snapshot.endpoints if e.error is None)}


def measure_request(client: SyncChatClient, http: httpx.Client, metrics_urls: Sequence[str],
                    body: Mapping[str, Any], *, request_id: str, timeout_s: float, settle_s: float
                    ) -> tuple[ChatRecord, Snapshot, Snapshot, list[Snapshot]]:
    """Scrape, send one streamed request, scrape again until the queries counter has taken its prompt (the
    server may export counters a little after the last byte) or `settle_s` passes. Never raises for the target."""
    before = scrape(metrics_urls, http, strict=False)
    record = client.chat_body(body, strict=False, request_id=request_id, timeout_s=timeout_s)
    after = scrape(metrics_urls, http, strict=False)
    extra: list[Snapshot] = []
    deadline = time.monotonic() + settle_s
    want = record.prompt_tokens
    while want and time.monotonic() < deadline:
        got = delta(before, after, "prefix_cache_queries_total").value
        if got is None or got >= want:
            break
        time.sleep(0.05)
        extra.append(after)
        after = scrape(metrics_urls, http, strict=False)
    return record, before, after, extra


# ---------------------------------------------------------------------------------------------------------
# The protocol
# ---------------------------------------------------------------------------------------------------------


def gain_undecided(samples: Sequence[RequestSample], min_gain_pct: float) -> bool:
    """True while the warm-vs-cold TTFT gain of the pairs answered so far has no interval, or one that straddles
    `min_gain_pct` (the verdict judges the same way on the pairs it finds clean)."""

    cold = {(s.session, s.prefix_target): s.ttft_ms for s in samples if s.kind == "cold" and s.ok and s.ttft_ms}
    third = {(s.session, s.prefix_target): s for s in samples if s.kind == "third"}
    judged = [judged_sighting(s, third.get((s.session, s.prefix_target)))[0] for s in samples if s.kind == "warm"]
    gains = [100.0 * (cold[k] - s.ttft_ms) / cold[k] for s in judged if s.ok
             and s.ttft_ms is not None and (k := (s.session, s.prefix_target)) in cold]
    interval = median_interval(gains)
    return interval is None or interval.versus(min_gain_pct) == "inconclusive"


def prefix_lengths(params: Any) -> tuple[int, ...]:
    """The cold prompt sizes: `axes.prefix_cache.prefix_tokens`, else a quarter of the contract's typical prompt and
    the typical prompt itself (within the context limit: `k3lib.core.floors.prefix_floor_tokens`)."""

    if params.axes.prefix_cache.prefix_tokens:
        return tuple(params.axes.prefix_cache.prefix_tokens)
    longest = prefix_floor_tokens(params.public_dict())
    return tuple(sorted({max(16, longest // 4), longest}))


def run_prefix_cache(ctx: AxisContext) -> PrefixCacheResult:
    """Cold then warm, for each prefix length and session, within the axis' request and time bounds.

    Request records stream to `evidence/prefix_cache/requests.jsonl` as they finish, so a killed run keeps
    what it measured; the whole result is written to `result.json` for re-rendering.
    """
    p: PrefixCacheParams = ctx.params.axes.prefix_cache
    target = ctx.target
    # before the first scrape or request: a mistyped URL must not send the protocol to a remote deployment
    check_load_target(target.base_url, ctx.params.target.allow_remote_load)
    urls = tuple(target.metrics_urls)
    run_tag = secrets.token_hex(4)
    use_salt = p.isolation in ("salt", "salt+fresh-prefix")
    fresh = p.isolation in ("fresh-prefix", "salt+fresh-prefix")
    samples: list[RequestSample] = []
    counters: list[CounterRow] = []
    sent: dict[str | None, list[list[int]]] = {}  # prompts sent this run, by salt (hash chains never cross salts)
    stopped: str | None = None
    t_end = time.monotonic() + p.max_duration_s
    lengths = prefix_lengths(ctx.params)
    planned = [(size, s) for size in lengths for s in range(p.sessions)]
    progress.phase(f"cold/warm pairs: {len(lengths)} lengths x {p.sessions} sessions",
                   requests=len(KINDS) * len(planned), duration_s=p.max_duration_s)
    client = SyncChatClient(target.base_url, model=ctx.params.target.model, api_key_env=target.api_key_env,
                            timeout_s=p.request_timeout_s)
    http = httpx.Client(timeout=min(10.0, p.request_timeout_s), headers=target.headers())
    try:
        first = scrape(urls, http, strict=False)
        cache_config = {k: v for k, v in first.cache_config_info().items() if k in CONFIG_LABELS}
        unit, unit_source = hit_unit(cache_config, p.block_size_tokens)
        counter, sized_by = _token_counter(client)
        for size, session in _sessions(planned, lengths, p, samples):
            if time.monotonic() >= t_end:
                stopped = f"max_duration_s ({figure(p.max_duration_s, ' s')}) reached before every session ran"
                break
            # Without a fresh nonce the prefix is the same in every session: only the salt isolates them.
            nonce = f"{run_tag}-{size}-{session}" if fresh else f"{run_tag}-{size}"
            salt = f"{run_tag}-{size}-{session}-s" if use_salt else None
            words, pads, counter, sized_by = _sized_session(client, counter, sized_by, nonce, size)
            prompts = _session_prompts(nonce, words, pads, early_change=p.warm_change == "early-token")
            ids = {name: _ids(client, msgs) for name, msgs in prompts.items()}
            for kind in KINDS:
                if time.monotonic() >= t_end:
                    stopped = f"max_duration_s ({figure(p.max_duration_s, ' s')}) reached mid-session"
                    break
                body = {"messages": prompts[kind], "tools": list(TOOLS), "tool_choice": "none", "stream": True,
                        "max_tokens": p.max_tokens, "temperature": 0.0, **({"cache_salt": salt} if salt else {})}
                rid = f"prefix-{run_tag}-{size}-{session}-{kind}"
                record, before, after, extra = measure_request(
                    client, http, urls, body, request_id=rid, timeout_s=p.request_timeout_s, settle_s=p.settle_s)
                ctx.store.append_jsonl(REQUESTS_JSONL, record.model_dump(context=WITHOUT_RAW))
                for snap, phase in [(before, "before"), *((s, "settling") for s in extra), (after, "after")]:
                    counters.append(_counter_row(snap, rid, kind, phase))
                my_ids = ids[kind]
                design = _design(kind, ids, sent.get(salt, []), unit)
                if my_ids is not None and record.ok:
                    sent.setdefault(salt, []).append(list(my_ids))
                    ctx.store.append_jsonl(TOKEN_IDS_JSONL, {"request_id": rid, "salt": salt, "ids": list(my_ids)})
                sample = _sample(record, before, after, session=session, size=size, kind=kind, rid=rid, salt=salt,
                                 nonce=nonce, tokenized=None if my_ids is None else len(my_ids), **design)
                samples.append(sample)
                ctx.store.append_jsonl(SAMPLES_JSONL, sample.model_dump())
            if stopped:
                break
    except progress.ConsentExceeded as exc:  # the plan's at-most reached: stop, judged on what was measured
        stopped = str(exc)
    finally:
        http.close()
        client.close()
    for rel in (REQUESTS_JSONL, SAMPLES_JSONL, TOKEN_IDS_JSONL):
        if ctx.store.path(rel).exists():
            ctx.store.adopt(rel)
    result = PrefixCacheResult(
        samples=tuple(samples), counters=tuple(counters), cache_config=cache_config, unit=unit,
        unit_source=unit_source, isolation=p.isolation, warm_change=p.warm_change, metrics_urls=urls,
        sized_by=sized_by, min_ttft_gain_pct=p.min_ttft_gain_pct, stopped=stopped, planned_pairs=len(planned),
        retention=retention_settings(cache_config, _server_log(ctx)))
    ctx.store.write_json(COUNTERS_JSON, list(counters))
    ctx.store.write_json(RESULT_JSON, result.model_dump())
    return result


def _sessions(planned: list[tuple[int, int]], lengths: Sequence[int], p: PrefixCacheParams,
              samples: list[RequestSample]) -> Iterator[tuple[int, int]]:
    """The planned sessions, then more at the longest prefix (where the verdict judges the gain) while the
    warm-vs-cold gain measured so far straddles its threshold: repeated measurements decide it, not one noisy
    median. `samples` is read as it grows."""
    yield from planned
    longest = max(lengths)
    for extra in range(p.max_extra_sessions):
        if not gain_undecided([s for s in samples if s.prefix_target == longest], p.min_ttft_gain_pct):
            return
        yield longest, p.sessions + extra


def _sized_session(client: SyncChatClient, counter: TokenCounter, sized_by: str, nonce: str,
                   size: int) -> tuple[int, int, TokenCounter, str]:
    """The session's (words, pads) for a `size`-token cold prompt, and the counter to size the next one with."""
    try:
        words, pads, _ = client.run(_size_session(counter, nonce, size))
    except TargetError as exc:  # /tokenize broke mid-run: estimate from here on, and say so
        counter, sized_by = EstimateCounter(), f"estimate (/tokenize failed: {str(exc)[:200]})"
        words, pads, _ = client.run(_size_session(counter, nonce, size))
    return words, pads, counter, sized_by


def _session_prompts(nonce: str, words: int, pads: int, *, early_change: bool) -> dict[str, list[ChatMessage]]:
    """The session's three sightings, and the warm prompt as intended (changed only in its last user turn)."""
    return {"cold": session_messages(nonce, words, pads, 1),
            "warm": session_messages(nonce, words, pads, 2, early_change=early_change),
            "third": session_messages(nonce, words, pads, 3, early_change=early_change),
            "intended": session_messages(nonce, words, pads, 2)}


def _design(kind: str, ids: Mapping[str, tuple[int, ...] | None], sent: list[list[int]],
            unit: int | None) -> dict[str, int | None]:
    """What a request should hit: its designed hits over the prompts sent before it with its salt; for a warm or
    third sighting, where it leaves the cold prompt, their common prefix, and what the intended warm prompt hits."""
    mine, cold = ids[kind], ids["cold"]
    design: dict[str, int | None] = dict(designed=None, intended=None, div=None, common=None)
    if mine is not None and unit is not None:
        design["designed"] = designed_hits(mine, sent, unit)
    if kind != "cold" and mine is not None and cold is not None:
        design.update(div=first_divergence(cold, mine), common=common_prefix_len(cold, mine))
        if unit is not None and ids["intended"] is not None:
            design["intended"] = expected_hits(cold, ids["intended"], unit)
    return design


def _token_counter(client: SyncChatClient) -> tuple[TokenCounter, str]:
    """The server's /tokenize when it has one (exact, template included), else a chars-per-token estimate."""
    counter = ServerTokenCounter(client.client)
    try:
        client.run(counter.count_text("k3kit"))
    except TargetError as exc:
        estimate = EstimateCounter()
        if isinstance(exc, APIError) and exc.status in (404, 405, 501):
            return estimate, estimate.sized_by
        # /tokenize exists but fails (5xx, no reply, a broken body): the requests that follow show the target's
        # state as findings; sizing by estimate keeps the protocol going and says why
        return estimate, f"{estimate.sized_by} (/tokenize failed: {str(exc)[:200]})"
    return counter, counter.sized_by


def _ids(client: SyncChatClient, messages: list[ChatMessage]) -> tuple[int, ...] | None:
    """The prompt's token ids as the server's chat template makes them; None when /tokenize gives none."""
    try:
        res = client.tokenize(messages=messages, tools=list(TOOLS))
    except TargetError:
        return None
    return res.tokens if res.tokens and len(res.tokens) == res.count else None


def _sample(record: ChatRecord, before: Snapshot, after: Snapshot, *, session: int, size: int, kind: str, rid: str,
            salt: str | None, nonce: str, tokenized: int | None, designed: int | None, intended: int | None,
            div: int | None, common: int | None) -> RequestSample:
    q = delta(before, after, "prefix_cache_queries_total")
    h = delta(before, after, "prefix_cache_hits_total")
    c = delta(before, after, "prompt_tokens_cached_total")
    ok_reqs = delta(before, after, "request_success_total")
    sparse = delta(before, after, "prefix_cache_sparse_retention_misses_total")
    prompt = record.prompt_tokens if record.prompt_tokens is not None else tokenized
    settled = q.value is not None and prompt is not None and q.value >= prompt
    sent_wall = (record.wall_ns(record.sent_ns) or record.wall_anchor_ns) / 1e9
    return RequestSample(
        session=session, prefix_target=size, kind=kind, request_id=rid, salt=salt, nonce=nonce,
        sent_wall_s=sent_wall, ok=record.ok, error=record.error, prompt_tokens=record.prompt_tokens,
        tokenized_tokens=tokenized, ttft_ms=record.ttft_ms, e2e_ms=record.e2e_ms, cached_tokens=record.cached_tokens,
        queries_delta=q.value, hits_delta=h.value, cached_counter_delta=c.value, success_delta=ok_reqs.value,
        replica_queries=_replica_delta(before, after, "prefix_cache_queries_total"),
        replica_hits=_replica_delta(before, after, "prefix_cache_hits_total"),
        counter_reset=q.reset or h.reset, settled=settled,
        contaminated=contamination(prompt, q.value, ok_reqs.value),
        designed_hits=designed, intended_hits=intended, divergence_at=div,
        common_prefix_tokens=common, sparse_misses_delta=sparse.value)


def _server_log(ctx: AxisContext) -> str | None:
    """The server log's text, when the parameters name one (`axes.environment.server_log`); None otherwise or when
    it cannot be read (the retention settings then come from /metrics alone, and say so)."""
    source = ctx.params.axes.environment.server_log
    if not source:
        return None

    with httpx.Client(timeout=15.0, headers=ctx.target.headers()) as http:
        text = fetch_text("server_log", source, ctx.target.base_url, http)
    return text.text if text.ok else None  # unreadable: the settings come from
    # /metrics; the environment axis reports the log
