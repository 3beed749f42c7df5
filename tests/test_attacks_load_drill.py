"""Attacks that steered the acceptance decision to `production` (issue 30, points 1, 6 and 7), each written to fail:
load that did not complete, a rollback drill that changed nothing or never rolled forward, a stale or placeholder
attestation, and a tool-error "recovery" that only echoed the kit's own error text. Each must end in a decision
other than production, with a reason naming it."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from k3lib.axes.capacity.analysis import describe_incomplete, incomplete_load, judge_step
from k3lib.axes.capacity.judge import iter_findings
from k3lib.axes.capacity.window import record_stats
from k3lib.axes.capacity.result import CapacityResult
from k3lib.io.crosscheck import cross_check
from k3lib.verdict.decision import decide, level_for
from k3lib.io.metrics import Snapshot
from k3lib.core.params import load_params

ROOT = Path(__file__).resolve().parents[1]
PARAMS = ROOT / "parameters" / "emulator.yaml"


# -- a real HTTP gateway on 127.0.0.1 in front of the emulator ----------------------------------------------------


class Gateway:
    """A rate-limiting reverse proxy: chat completions beyond `limit` in flight are answered `status` (429 by
    default) without reaching the upstream; everything else (and the requests within the limit) is streamed
    through. What an nginx `limit_conn`, an Envoy overflow or an API gateway does in front of vLLM."""

    def __init__(self, upstream: str, limit: int, status: int = 429, echo_tool_errors: bool = False) -> None:
        self.upstream, self.limit, self.status = upstream.rstrip("/"), limit, status
        self.echo_tool_errors = echo_tool_errors  # play a model that answers a tool error by repeating it
        self.in_flight = self.refused = self.passed = self.echoed = 0

    async def _echo(self, url: str, body: bytes, headers: list, send: Any) -> bool:
        """Answer a whole (non-streamed) chat request after a failed tool with the tool's own error text, the way
        the emulated model used to: "According to the tool result, {...}". False: not such a request."""
        try:
            request = json.loads(body)
        except ValueError:
            return False
        last = (request.get("messages") or [{}])[-1]
        if request.get("stream") or last.get("role") != "tool" or '"error"' not in str(last.get("content")):
            return False
        async with httpx.AsyncClient(timeout=None, trust_env=False) as http:
            resp = await http.post(url, content=body, headers=headers)
        reply = resp.json()
        reply["choices"][0]["message"]["content"] = f"According to the tool result, {last['content']}"
        self.echoed += 1
        await send({"type": "http.response.start", "status": resp.status_code,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": json.dumps(reply).encode()})
        return True

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
        if limited and self.echo_tool_errors and await self._echo(url, body, headers, send):
            return
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
def serve_gateway(upstream: str, limit: int, status: int = 429,
                  echo_tool_errors: bool = False) -> Iterator[tuple[str, Gateway]]:
    import uvicorn

    from k3lib.core.serving import bind_tcp, serve_in_thread

    gateway = Gateway(upstream, limit, status, echo_tool_errors)
    sock = bind_tcp("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(gateway, log_level="warning", lifespan="on"))
    serving = serve_in_thread(server, sock, name="k3-test-gateway", ready_timeout_s=20)
    assert serving is not None, "the gateway did not start"
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", gateway
    finally:
        serving.stop()


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
    from k3lib.core.errors import BadInputError

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
def test_a_gateway_refusing_load_beyond_two_in_flight_is_not_production(healthy_run, tmp_path):
    """The attack as seen: a real gateway in front of the emulator answers 429 beyond 2 requests in flight. Every
    capacity step "held" and `k3 validate` decided production (exit 0). The capacity axis, run against the gateway,
    replaces its record in the healthy run's evidence: the decision is now capacity-extension, and its reasons name
    the refused requests and their status."""
    import k3lib
    from k3lib.core.evidence import read_records
    from k3lib.core.plan import ACCEPTANCE_AXES
    from k3lib.emulator import EmulatorConfig, start_emulator
    from test_batch import _axis_record

    with start_emulator(EmulatorConfig.from_profile("demo", time_scale=0.05)) as emu:
        with serve_gateway(emu.url, limit=2) as (url, gateway):
            ctx = k3lib.open_axis("capacity", str(PARAMS), [f"target.base_url={url}"], str(tmp_path / "run"))
            record = ctx.record(_axis_record("capacity", ctx))
    assert gateway.refused > 0 and gateway.passed > 0
    records = read_records(healthy_run[1])
    assert decide(records, ACCEPTANCE_AXES).decision == "production"
    records["capacity"] = record
    decision = decide(records, ACCEPTANCE_AXES)
    assert decision.exit_code != 0 and decision.decision == "capacity-extension", decision.reasons
    reasons = "\n".join(decision.reasons)
    assert "capacity.incomplete_load" in reasons and "HTTP 429" in reasons and "refused" in reasons, reasons


# -- 6. the rollback drill proves a change and a return; attestations are dated and meaningful ---------------------

from k3lib.axes.attestation import (RULE_LIMITS, RULE_ROLLBACK, DrillResult, Served,  # noqa: E402
                               attestation_findings, parse_attestation)
from k3lib.core.errors import BadInputError  # noqa: E402

TODAY = dt.date(2026, 12, 4)
ACCEPTED = Served("0.33.0", "vllm/vllm-openai:v0.33.0", "sha256:" + "a" * 64)
PREVIOUS = Served("0.32.1", "vllm/vllm-openai:v0.32.1", "sha256:" + "b" * 64)


def _attestation(**change: Any) -> dict[str, Any]:
    data = {"who": "Camille Durand, SRE on-call lead", "when": "2026-12-01",
            "how": "briefing of the on-call team, then a rollback rehearsal on staging",
            "link": "https://tickets.example.internal/OPS-1234",
            "items": {"operator_knows_limits": {"context_limit_tokens": 4096, "concurrency_limit": 4,
                                                "rollback_signal": "queue time above the accepted level"},
                      "rollback_rehearsed": {"previous_image": "vllm/vllm-openai:v0.32.1",
                                             "result": "health 200 and a chat completion after the switch"}}}
    data.update(change)
    return data


def _decide_operations(findings: list) -> Any:
    from k3lib.core.evidence import EvidenceRecord, axis_status

    record = EvidenceRecord(axis="operations", title="ops", status=axis_status(findings), summary="",
                            findings=findings)
    return decide({"operations": record}, ["operations"])


@pytest.mark.parametrize("field, value", [
    pytest.param("who", "x", id="who-x"), pytest.param("how", "x", id="how-x"),
    pytest.param("who", "TBD", id="who-tbd"), pytest.param("how", "done", id="how-done"),
    pytest.param("how", "ok ok", id="how-two-words"), pytest.param("link", "-", id="link-dash"),
    pytest.param("who", "xxx", id="who-repeated"),
])
def test_placeholder_who_how_link_are_refused_in_one_line(field, value):
    with pytest.raises(BadInputError) as err:
        parse_attestation(_attestation(**{field: value}), "att.yaml")
    assert err.value.field == field and "\n" not in err.value.one_line()


@pytest.mark.parametrize("image", ["x", "previous", "vllm/vllm-openai", "the old one"])
def test_an_attested_previous_image_must_be_an_image_reference(image):
    data = _attestation()
    data["items"]["rollback_rehearsed"]["previous_image"] = image
    with pytest.raises(BadInputError) as err:
        parse_attestation(data, "att.yaml")
    assert err.value.field == "items.rollback_rehearsed.previous_image"


@pytest.mark.parametrize("when, why", [
    pytest.param("2001-05-01", "older than the 14-day re-examination window", id="2001"),
    pytest.param("2026-11-19", "older than the 14-day re-examination window", id="fifteen-days"),
    pytest.param("2026-12-05", "after today", id="tomorrow"),
])
def test_an_attestation_outside_the_window_is_not_production(when, why):
    att = parse_attestation(_attestation(when=when), "att.yaml")
    findings = attestation_findings(att, contract_context_tokens=4096, planned_concurrency=4, today=TODAY,
                                    accepted=ACCEPTED)
    assert {f.rule: f.status for f in findings} == {RULE_LIMITS: "fail", RULE_ROLLBACK: "fail"}
    decision = _decide_operations(findings)
    assert decision.decision == "limited-observation"
    assert sum(why in r for r in decision.reasons) == 2, decision.reasons


def test_an_attested_rollback_to_the_accepted_image_itself_fails():
    data = _attestation()
    data["items"]["rollback_rehearsed"]["previous_image"] = f"vllm/vllm-openai:v0.33.0@{ACCEPTED.digest}"
    findings = attestation_findings(parse_attestation(data, "att.yaml"), today=TODAY, accepted=ACCEPTED)
    rollback = next(f for f in findings if f.rule == RULE_ROLLBACK)
    assert rollback.status == "fail" and "is the accepted release" in rollback.message
    unknown = attestation_findings(parse_attestation(_attestation(), "att.yaml"), today=TODAY,
                                   accepted=Served(error="/version answered 404"))
    assert next(f for f in unknown if f.rule == RULE_ROLLBACK).status == "not-observable"
    fine = attestation_findings(parse_attestation(_attestation(), "att.yaml"), today=TODAY, accepted=ACCEPTED)
    assert next(f for f in fine if f.rule == RULE_ROLLBACK).status == "pass"


def _forward(served: Served | None, serving: bool = True) -> dict[str, Any]:
    return {"command": "roll-forward", "detail": "HTTP 200", "serving": serving, "error": None, "served": served}


def _run_drill(before: Served, after: Served, forward: dict[str, Any] | None) -> DrillResult:
    return DrillResult("rollback", "http://127.0.0.1:1", True, "exit status 0", 200, True, None, 2.0, before, after,
                       None, forward)


@pytest.mark.parametrize("before, after, forward, status, why", [
    pytest.param(ACCEPTED, Served("0.32.1", ACCEPTED.image, ACCEPTED.digest), _forward(ACCEPTED), "fail",
                 "never changed", id="only-the-version-changed"),
    pytest.param(ACCEPTED, Served("0.32.1", "vllm/vllm-openai:v0.32.1", ACCEPTED.digest), _forward(ACCEPTED),
                 "fail", "never changed", id="retagged-same-digest"),
    pytest.param(Served("0.33.0"), Served("0.32.1"), _forward(Served("0.33.0")), "not-observable",
                 "a changed /version alone", id="no-image-shown"),
    pytest.param(ACCEPTED, PREVIOUS, None, "fail", "left on the previous release", id="no-roll-forward"),
    pytest.param(ACCEPTED, PREVIOUS, _forward(Served("0.33.0", ACCEPTED.image, "sha256:" + "c" * 64)), "fail",
                 "not the accepted", id="forward-to-another-digest"),
    pytest.param(ACCEPTED, PREVIOUS, _forward(Served("0.33.0", None, None)), "fail", "not the accepted",
                 id="forward-shows-the-version-only"),
    pytest.param(ACCEPTED, PREVIOUS, _forward(ACCEPTED, serving=False), "fail", "did not serve again",
                 id="forward-not-serving"),
    pytest.param(ACCEPTED, PREVIOUS, _forward(ACCEPTED), "pass", "serving the accepted", id="the-real-thing"),
])
def test_a_drill_passes_only_on_a_changed_image_and_a_verified_return(before, after, forward, status, why):
    finding = _run_drill(before, after, forward).finding()
    assert finding.status == status and why in finding.message, finding.message
    if status != "pass":
        decision = _decide_operations([finding])
        assert decision.decision != "production" and any(why in r for r in decision.reasons)


@pytest.fixture(scope="module")
def drill_emulator():
    from k3lib.emulator import EmulatorConfig, start_emulator

    with start_emulator(EmulatorConfig.from_profile("demo", time_scale=0.05)) as handle:
        yield handle.url


def _operations(tmp_path: Path, url: str, *sets: str):
    from k3lib.opening.axis import open_axis
    from k3lib.axes.operations import operations_record, run_operations

    ctx = open_axis("operations", str(PARAMS), [f"target.base_url={url}", *sets], str(tmp_path / "run"))
    record = ctx.record(operations_record(run_operations(ctx), ctx))
    return record, decide({"operations": record}, ["operations"])


def test_the_demo_operations_pass_with_an_attestation_dated_today(tmp_path, drill_emulator):
    record, decision = _operations(tmp_path, drill_emulator)
    assert decision.decision == "production", decision.reasons
    limits = record.by_rule(RULE_LIMITS)
    assert limits.status == "pass" and dt.date.today().isoformat() in limits.message
    assert "rolled forward" in record.by_rule(RULE_ROLLBACK).message


def test_a_drill_read_through_a_static_inspect_file_never_shows_a_change(tmp_path, drill_emulator):
    """The digest never changed: the inspect source is a file taken before the drill, while /version moves."""
    static = tmp_path / "inspect.json"
    static.write_text(httpx.get(f"{drill_emulator}/_emulator/inspect", timeout=10).text)
    record, decision = _operations(tmp_path, drill_emulator, f"axes.environment.image_inspect={static}")
    finding = record.by_rule(RULE_ROLLBACK)
    assert finding.status == "fail" and "never changed" in finding.message, finding.message
    assert decision.decision == "limited-observation"
    assert any("attestation.rollback_rehearsed" in r and "never changed" in r for r in decision.reasons)


def test_a_drill_that_never_rolls_forward_fails_and_says_where_the_target_was_left(tmp_path, drill_emulator):
    try:
        record, decision = _operations(tmp_path, drill_emulator, "axes.operations.roll_forward=null")
        finding = record.by_rule(RULE_ROLLBACK)
        assert finding.status == "fail" and "left on the previous release" in finding.message, finding.message
        assert decision.decision == "limited-observation"
    finally:
        httpx.post(f"{drill_emulator}/_emulator/restart", json={"vllm_version": "0.33.0"}, timeout=30)


# -- 7. tool-error recovery is judged on the model's own words ------------------------------------------------------


@pytest.mark.slow
def test_a_model_that_echoes_the_tool_error_does_not_pass_c14(tmp_path, drill_emulator):
    """The attack as seen: the reply after the planned tool error repeats the error the kit sent, and the echo
    held the acknowledgement words ("timed out", "error"). Played here by a proxy in front of the emulator; the
    emulated model itself answers in its own words and passes (tests/test_agent_emulator.py)."""
    import k3lib.axes.agent as agent
    from k3lib.opening.axis import open_axis

    with serve_gateway(drill_emulator, limit=64, echo_tool_errors=True) as (url, gateway):
        ctx = open_axis("agent", str(PARAMS), [f"target.base_url={url}", "axes.agent.repetitions=1",
                                               "axes.agent.concurrency_levels=[1]",
                                               # the proxy plays the echo on whole replies: the clients' only mode
                                               "contract.client_stream_modes=[non-stream]",
                                               # the scenario's planned tool error is the point, not the series
                                               "axes.agent.tool_turns=4"], str(tmp_path / "run"))
        result = agent.run_agent(ctx)
        record = ctx.record(agent.agent_record(result, ctx))
    assert gateway.echoed > 0
    finding = record.by_rule("agent.tool_error_fallback")
    assert finding.status == "fail", finding.message
    decision = decide({"agent": record}, ["agent"])
    assert decision.decision == "limited-observation"
    assert any("agent.tool_error_fallback" in r for r in decision.reasons), decision.reasons
    fallbacks = [s["decision"] for s in result.steps if str(s.get("decision", "")).startswith("fallback")]
    assert fallbacks and all("only echoes the tool error" in d for d in fallbacks), fallbacks
