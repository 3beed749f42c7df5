"""The long-context phase: first a prompt beyond the contract's context, which the server must refuse before it
exhausts the GPUs, then each planned context length served one request at a time."""

from __future__ import annotations

import re
import time
from typing import Any

from ...io.client import ChatClient
from ...io.load import run_closed_loop
from ...io.prompts import RUN_SALT, BuiltPrompt
from .window import failure_kind, record_stats, window_numbers
from .watch import EngineWatch, boundary_snapshot

_CONTEXT_REFUSAL = re.compile(r"maximum context length|is too long|too large|longer than the maximum model length",
                              re.IGNORECASE)


class LongContextPhase(EngineWatch):
    """The out-of-contract probe and the planned context lengths."""

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
        body = self._body(prompt, plan.long_context_output_tokens, salt=f"{RUN_SALT}-lc-{label}")
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
                          salt=f"{RUN_SALT}-oc")
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
