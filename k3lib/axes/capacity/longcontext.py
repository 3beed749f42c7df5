"""The long-context phase: first a prompt beyond the contract's context, which the server must refuse before it
exhausts the GPUs, then each planned context length served one request at a time."""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable

from ...core.evidence import Row
from ...io.client import ChatClient
from ...io.load import run_closed_loop
from ...io.prompts import RUN_SALT, BuiltPrompt
from .shapes import RequestRow
from .state import Recorder
from .window import failure_kind, record_stats, window_numbers
from .watch import boundary_snapshot

_CONTEXT_REFUSAL = re.compile(r"maximum context length|is too long|too large|longer than the maximum model length",
                              re.IGNORECASE)
NOT_RUN_REFUSAL = {"outcome": "not-run", "reason": "the long-context phase did not run"}


@dataclasses.dataclass(frozen=True)
class LongContext:
    """What the phase found so far: the out-of-contract probe's outcome, one row per planned length, and the
    lengths' request records (the timing the client's calibration imitates)."""

    refusal: Row = dataclasses.field(default_factory=lambda: dict(NOT_RUN_REFUSAL))
    lengths: tuple[Row, ...] = ()
    measured: tuple[RequestRow, ...] = ()

    @property
    def note(self) -> str:
        served = sum(1 for r in self.lengths if r["status"] == "ok")
        return f"{served}/{len(self.lengths)} lengths served"


async def long_context(rec: Recorder, publish: Callable[[LongContext], None]) -> LongContext:
    """The probe, then each length; `publish` gets the result as it grows (a phase cut at its bound keeps it)."""
    plan = rec.plan
    sizing = rec.client(rec.params.target.timeout_s)
    client = rec.client(rec.cap.request_timeout_s)
    try:
        # The refusal costs the GPUs nothing when the server does its job, so it goes first; if it is not
        # refused and kills the engine, that is the finding.
        found = LongContext(refusal=await _refusal_probe(rec, sizing, client))
        publish(found)
        if rec.dead:
            return found
        prompts = await rec.prompts(sizing, count=len(plan.context_lengths_tokens),
                                    tokens=list(plan.context_lengths_tokens), seed=31)
        for prompt in prompts:
            if rec.dead:
                row: Row = {"target_tokens": prompt.target_tokens, "prompt_tokens": prompt.prompt_tokens,
                                       "sized_by": prompt.sized_by, "status": "skipped", "note": "engine dead"}
                bucket: list[RequestRow] = []
            else:
                row, bucket = await _one_length(rec, client, prompt)
            found = dataclasses.replace(found, lengths=(*found.lengths, row), measured=(*found.measured, *bucket))
            publish(found)
    finally:
        await sizing.aclose()
        await client.aclose()
    return found


async def _one_length(rec: Recorder, client: ChatClient, prompt: BuiltPrompt
                      ) -> tuple[Row, list[RequestRow]]:
    bucket: list[RequestRow] = []
    label = f"{prompt.target_tokens}"
    body = rec.body(prompt, rec.cap.long_context_output_tokens, salt=f"{RUN_SALT}-lc-{label}")
    before = await boundary_snapshot(rec.urls)
    t0 = time.time()
    await run_closed_loop(client, [body], concurrency=1, max_requests=rec.cap.long_context_repeats,
                          max_duration_s=rec.cap.request_timeout_s * rec.cap.long_context_repeats,
                          request_timeout_s=rec.cap.request_timeout_s,
                          sink=rec.sink("long-context", label, bucket, 1, stop_on_death=False),
                          name=f"long-{label}", allow_remote_load=rec.params.target.allow_remote_load)
    t1 = time.time()
    after = await boundary_snapshot(rec.urls)
    stats = record_stats(bucket)
    status = "ok" if stats["ok"] == stats["sent"] and stats["sent"] else \
        ("failed" if stats["server_errors"] or stats["unreachable"] else "incomplete")
    alive = await rec.check_alive(client, "long-context", 1)
    row = {"target_tokens": prompt.target_tokens, "prompt_tokens": prompt.prompt_tokens,
           "sized_by": prompt.sized_by, "output_tokens": rec.cap.long_context_output_tokens,
           "status": status if alive or status != "ok" else "ok",
           "start_wall": t0, "end_wall": t1, "engine_alive_after": alive,
           **stats, **window_numbers(before, after),
           "error": next((r.get("error") for r in bucket if r.get("error")), None)}
    return row, bucket


async def _refusal_probe(rec: Recorder, sizing: ChatClient, client: ChatClient) -> Row:
    plan = rec.plan
    (prompt,) = await rec.prompts(sizing, count=1, tokens=plan.out_of_contract_tokens, seed=97)
    body = rec.body(prompt, rec.cap.long_context_output_tokens, stream=False, salt=f"{RUN_SALT}-oc")
    bucket: list[RequestRow] = []
    sink = rec.sink("long-context", "out-of-contract", bucket, 1, stop_on_death=False)
    t0 = time.time()
    sink(await client.chat_body(body, strict=False, request_id="out-of-contract", timeout_s=rec.cap.request_timeout_s))
    t1 = time.time()
    alive = await rec.check_alive(client, "long-context", 1)
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
    return {"outcome": outcome, "prompt_tokens": prompt.prompt_tokens, "sized_by": prompt.sized_by,
            "contract_limit_tokens": plan.context_limit_tokens, "http_status": d.get("http_status"),
            "message": message[:500], "context_message": bool(_CONTEXT_REFUSAL.search(message)),
            "engine_alive_after": alive, "start_wall": t0, "end_wall": t1, "e2e_ms": d.get("e2e_ms")}
