"""Attacks that steered the acceptance decision to `production` (issue 30, points 1, 6 and 7), each written to fail:
load that did not complete, a rollback drill that changed nothing or never rolled forward, a stale or placeholder
attestation, and a tool-error "recovery" that only echoed the kit's own error text. Each must end in a decision
other than production, with a reason naming it."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from k3lib.capacity.analysis import describe_incomplete, incomplete_load, judge_step
from k3lib.capacity.findings import iter_findings
from k3lib.capacity.result import CapacityResult
from k3lib.capacity.run import record_stats
from k3lib.crosscheck import cross_check
from k3lib.decision import decide, level_for
from k3lib.metrics import Snapshot
from k3lib.params import load_params

ROOT = Path(__file__).resolve().parents[1]
PARAMS = ROOT / "parameters" / "emulator.yaml"


# -- a real HTTP gateway on 127.0.0.1 in front of the emulator ----------------------------------------------------


class Gateway:
    """A rate-limiting reverse proxy: chat completions beyond `limit` in flight are answered `status` (429 by
    default) without reaching the upstream; everything else (and the requests within the limit) is streamed
    through. What an nginx `limit_conn`, an Envoy overflow or an API gateway does in front of vLLM."""

    def __init__(self, upstream: str, limit: int, status: int = 429) -> None:
        self.upstream, self.limit, self.status = upstream.rstrip("/"), limit, status
        self.in_flight = self.refused = self.passed = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = b""
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        limited = scope["path"] == "/v1/chat/completions"
        if limited and self.in_flight >= self.limit:
            self.refused += 1
            payload = json.dumps({"error": {"message": "too many requests in flight", "type": "rate_limited"}})
            await send({"type": "http.response.start", "status": self.status,
                        "headers": [(b"content-type", b"application/json"), (b"retry-after", b"1")]})
            await send({"type": "http.response.body", "body": payload.encode()})
            return
        url = self.upstream + scope["path"] + (f"?{scope['query_string'].decode()}" if scope["query_string"] else "")
        headers = [(k, v) for k, v in scope["headers"] if k.lower() not in (b"host", b"content-length")]
        self.in_flight += limited
        self.passed += limited
        try:
            async with httpx.AsyncClient(timeout=None, trust_env=False) as http:
                async with http.stream(scope["method"], url, content=body, headers=headers) as resp:
                    keep = [(k.encode(), v.encode()) for k, v in resp.headers.items()
                            if k.lower() in ("content-type", "cache-control")]
                    await send({"type": "http.response.start", "status": resp.status_code, "headers": keep})
                    async for chunk in resp.aiter_raw():
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    await send({"type": "http.response.body", "body": b""})
        finally:
            self.in_flight -= limited


@contextlib.contextmanager
def serve_gateway(upstream: str, limit: int, status: int = 429) -> Iterator[tuple[str, Gateway]]:
    import uvicorn

    from k3lib.emulator.server import _bind

    gateway = Gateway(upstream, limit, status)
    sock = _bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(gateway, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.started, "the gateway did not start"
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", gateway
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


# -- 1. load that does not complete counts --------------------------------------------------------------------


def _records(ok: int, refused: int = 0, status: int = 429, timeouts: int = 0, cancelled: int = 0) -> list[dict]:
    rows = [{"ok": True, "ttft_ms": 50.0, "e2e_ms": 400.0, "prompt_tokens": 100, "completion_tokens": 16}
            for _ in range(ok)]
    rows += [{"ok": False, "http_status": status, "error_kind": "APIError"} for _ in range(refused)]
    rows += [{"ok": False, "http_status": None, "error_kind": "Timeout"} for _ in range(timeouts)]
    rows += [{"ok": False, "cancelled": True, "error_kind": "Cancelled"} for _ in range(cancelled)]
    return rows


@pytest.mark.parametrize("records, kind", [
    pytest.param(_records(4, refused=396), "396 refused with a client-error status (HTTP 429 ×396)", id="429"),
    pytest.param(_records(10, timeouts=1), "1 timed out", id="one-timeout"),
    pytest.param(_records(10, cancelled=2), "2 cut unfinished", id="cut-at-the-end"),
    pytest.param(_records(10, refused=3, status=503), "3 failed on the server side (HTTP 503 ×3)", id="503"),
])
def test_a_step_whose_load_did_not_complete_does_not_hold(records, kind):
    step = {"preemptions": 0, "waiting_mean": 0.0, **record_stats(records)}
    held, why = judge_step(step, queue_objective_ms=None, waiting_tolerance=0.5)
    assert held is False
    assert any(kind in w and "contract.max_error_share" in w for w in why), why


def test_the_contract_share_decides_and_is_bounded():
    step = {"preemptions": 0, "waiting_mean": 0.0, **record_stats(_records(98, refused=2))}
    assert judge_step(step, queue_objective_ms=None, waiting_tolerance=0.5)[0] is False  # default: strict
    assert judge_step(step, queue_objective_ms=None, waiting_tolerance=0.5, max_error_share=0.02)[0] is True
    assert judge_step(step, queue_objective_ms=None, waiting_tolerance=0.5, max_error_share=0.019)[0] is False
    assert load_params([PARAMS]).contract.max_error_share == 0.0
    from k3lib.errors import BadInputError

    for bad in ("1.5", "-0.1"):
        with pytest.raises(BadInputError) as err:
            load_params([PARAMS], [f"contract.max_error_share={bad}"])
        assert err.value.field == "contract.max_error_share"


def _step(c: int, records: list[dict], *, out_of_contract: bool = False) -> dict[str, Any]:
    step = {"concurrency": c, "label": f"c{c}", "status": "done", "out_of_contract": out_of_contract,
            "preemptions": 0, "waiting_mean": 0.0, "engine_alive_after": True, **record_stats(records)}
    held, why = judge_step(step, queue_objective_ms=None, waiting_tolerance=0.5)
    return {**step, "held": held, "why": why}


def _capacity(steps: list[dict], soak: dict | None) -> CapacityResult:
    phases = [{"phase": p, "status": "done", "start_wall": 0.0, "end_wall": 1.0, "note": ""}
              for p in ("concurrency", "soak")]
    return CapacityResult({"plan": {}, "phases": phases, "steps": steps, "soak": soak, "calibration": {}}, [], [], [],
                          None, None)


def test_refused_load_is_a_failing_finding_that_names_it():
    params = load_params([PARAMS])  # planned concurrency 4
    steps = [_step(1, _records(20)), _step(2, _records(40)), _step(4, _records(4, refused=396)),
             _step(5, _records(3, refused=497), out_of_contract=True)]
    soak = {"preemptions": 0.0, "waiting_mean": 0.0, "memory": [], **record_stats(_records(24, refused=1976))}
    findings = {f.rule: f for f in iter_findings(_capacity(steps, soak), params)}
    incomplete = findings["capacity.incomplete_load"]
    assert incomplete.status == "fail" and level_for(incomplete)[0] == "capacity-extension"
    assert "concurrency 4: 396 of 400 request(s) did not complete" in incomplete.message
    assert "HTTP 429 ×396" in incomplete.message and "the soak: 1976 of 2000" in incomplete.message
    assert "concurrency 5" not in incomplete.message  # beyond the contract: it only sets the cap
    assert incomplete.observed["concurrency 4"] == {"sent": 400, "ok": 4, "refused": 396,
                                                    "error_statuses": {"429": 396}}
    assert findings["capacity.saturation"].status == "fail" and "HTTP 429" in findings["capacity.saturation"].message
    assert findings["capacity.soak_saturation"].status == "fail"
    assert "1976 refused" in findings["capacity.soak_saturation"].message


def test_server_errors_alone_stay_limited_observation():
    params = load_params([PARAMS])
    steps = [_step(1, _records(20)), _step(2, _records(38, refused=2, status=500)), _step(4, _records(40))]
    finding = next(f for f in iter_findings(_capacity(steps, None), params) if f.rule == "capacity.incomplete_load")
    assert finding.status == "warn" and "2 failed on the server side (HTTP 500 ×2)" in finding.message
    assert level_for(finding)[0] == "limited-observation"


def test_complete_load_passes_and_says_what_it_counted():
    params = load_params([PARAMS])
    steps = [_step(1, _records(20)), _step(2, _records(40)), _step(4, _records(60))]
    finding = next(f for f in iter_findings(_capacity(steps, None), params) if f.rule == "capacity.incomplete_load")
    assert finding.status == "pass" and "concurrency 4 60/60" in finding.message


def test_the_cross_check_counts_refused_requests_and_widens_nothing_for_them():
    records = [SimpleNamespace(**r, sent_ns=1) for r in _records(4, refused=396)]
    expo = ('vllm:request_success_total{{finished_reason="stop",model_name="m"}} {n}\n'
            'vllm:prompt_tokens_total{{model_name="m"}} {p}\nvllm:generation_tokens_total{{model_name="m"}} {g}\n')
    before = Snapshot.from_text(expo.format(n=0, p=0, g=0))
    check = cross_check(records, before, Snapshot.from_text(expo.format(n=4, p=400, g=64)))
    assert check.incomplete == {"refused": 396} and check.error_statuses == {"429": 396}
    by = {i.quantity: i for i in check.items}
    assert by["requests refused"].client == 396 and "HTTP 429 ×396" in by["requests refused"].note
    assert by["requests finished"].server_extra == 0  # a 429 cannot have finished on the engine
    # a foreign request in the window is still caught, which a 396-request slack used to hide
    foreign = cross_check(records, before, Snapshot.from_text(expo.format(n=5, p=500, g=80)))
    assert "requests finished" in {i.quantity for i in foreign.disagreements}


def test_describe_names_every_kind():
    window = {"sent": 10, "ok": 4, "refused": 2, "timeouts": 1, "unreachable": 1, "cancelled": 1, "server_errors": 1,
              "error_statuses": {"429": 2, "502": 1}}
    said = describe_incomplete(window)
    assert said == ("6 of 10 request(s) did not complete: 2 refused with a client-error status (HTTP 429 ×2); "
                    "1 failed on the server side (HTTP 502 ×1); 1 timed out; 1 unreachable (no connection); "
                    "1 cut unfinished at the window's end")
    assert incomplete_load({"sent": 10, "ok": 10}, 0.0) == (False, None)


@pytest.mark.slow
def test_a_gateway_refusing_load_beyond_two_in_flight_is_not_production(tmp_path):
    """The attack as seen: a real gateway in front of the emulator answers 429 beyond 2 requests in flight. Every
    capacity step "held" and `k3 validate` decided production (exit 0); now the run ends elsewhere, and the
    decision's reasons name the refused requests and their status."""
    from k3lib.cli import main
    from k3lib.emulator import EmulatorConfig, start_emulator

    with start_emulator(EmulatorConfig.from_profile("demo", time_scale=0.05)) as emu:
        with serve_gateway(emu.url, limit=2) as (url, gateway):
            code = main(["validate", "-p", str(PARAMS), "--set", f"target.base_url={url}",
                         "--out", str(tmp_path)])
    assert gateway.refused > 0 and gateway.passed > 0
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    decision = json.loads((run / "decision.json").read_text())
    assert code != 0 and decision["decision"] == "capacity-extension", decision["reasons"]
    reasons = "\n".join(decision["reasons"])
    assert "capacity.incomplete_load" in reasons and "HTTP 429" in reasons and "refused" in reasons, reasons
