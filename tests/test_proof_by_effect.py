"""Issue 43, proof by effect: an operator's action counts by what it did to the target, never by its surface (a
command that exits 0, a host string). A restart is observed only when /health left 200 or the server's process start
time changed; a source served by the target under any of its names (localhost, 127.0.0.1, ::1, another DNS name of
the same address) is the target's word about itself."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

import k3lib
from k3lib.axes.capacity.run import CapacityRunner
from k3lib.emulator import EmulatorConfig, start_emulator

ROOT = Path(__file__).resolve().parents[1]
PARAMS = str(ROOT / "parameters" / "emulator.yaml")


def _cold_load(tmp_path, url: str, restart: str) -> dict:
    ctx = k3lib.open_axis("capacity", PARAMS, [f"target.base_url={url}", f"target.restart={restart}",
                                               "axes.capacity.ready_timeout_s=5", "axes.environment.timeout_s=3"],
                          str(tmp_path / "run"))
    runner = CapacityRunner(ctx)
    asyncio.run(runner._cold_load())
    return runner.ready


def test_attack_a_restart_command_that_restarts_nothing_observes_no_cold_load(tmp_path):
    """Attack 5: `target.restart: ["true"]` exits 0 on a server that never restarts — before the fix the cold load
    counted as "not ready → ready"; the emulator's own restart (a new process start time) still counts."""
    with start_emulator(EmulatorConfig.from_profile("demo", time_scale=0.02), host="127.0.0.1", port=0) as h:
        idle = _cold_load(tmp_path / "a", h.url, '["true"]')
        real = _cold_load(tmp_path / "b", h.url, "'http:POST:{base_url}/_emulator/restart:{}'")
    assert idle["restart"]["ok"] is True and idle["observed_transition"] is False
    assert "nothing restarted" in idle["restart"].get("effect", "")
    assert real["observed_transition"] is True
    assert "changed" in real["restart"].get("effect", "") or "left 200" in real["restart"].get("effect", "")


@pytest.mark.parametrize("not_ready, before, after, seen", [
    pytest.param(2, None, None, True, id="health left 200, no start time stated"),
    pytest.param(2, 10.0, 11.5, True, id="health left 200, a new process"),
    pytest.param(2, 10.0, 10.0, False, id="health flapped, the same process"),
    pytest.param(0, 10.0, 11.5, True, id="a new process"),
    pytest.param(0, 10.0, 10.0, False, id="same process, always ready"),
    pytest.param(0, None, None, False, id="no start time stated, always ready"),
])
def test_a_restart_is_proven_by_health_or_start_time(not_ready, before, after, seen):
    from k3lib.axes.capacity.coldload import restart_effect

    assert restart_effect(not_ready, before, after)[0] is seen


def test_attack_a_health_flap_under_a_restart_that_restarts_nothing_is_no_cold_load(tmp_path):
    """`target.restart` restarts nothing while /health answers 503 once for another reason (a probe timeout, a
    drain): before the fix "/health left 200" made it a cold load ("not ready → ready" in the flap's length); the
    process start time the server states did not change, so it is the same process and no load was observed."""
    import http.server
    import threading

    flap = {"left": 0}

    class Handler(http.server.BaseHTTPRequestHandler):
        def _send(self, status: int, body: str) -> None:
            self.send_response(status)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body.encode())

        def do_GET(self):  # noqa: N802 - the stdlib's name
            if self.path == "/health":
                flap["left"], status = max(flap["left"] - 1, 0), 503 if flap["left"] else 200
                return self._send(status, "")
            if self.path == "/metrics":
                return self._send(200, "process_start_time_seconds 1765000000.5\n")
            return self._send(404, "")

        def do_POST(self):  # noqa: N802 - the restart command: restarts nothing, /health flaps once
            flap["left"] = 1
            self._send(200, "{}")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        ready = _cold_load(tmp_path, f"http://127.0.0.1:{server.server_address[1]}",
                           "'http:POST:{base_url}/not-a-restart:{}'")
    finally:
        server.shutdown()
    assert ready["ready"] is True and ready["polls"] == 2  # /health did leave 200, once
    assert ready["observed_transition"] is False and "the same process" in ready["restart"]["effect"]


# -- identity: resolved addresses and the server's own identity ---------------------------------------------------


def _serve(routes: dict[str, str], host: str = "127.0.0.1"):
    """A server the kit did not start, answering `routes[path]` (or `routes["*"]`) on GET."""
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the stdlib's name
            body = routes.get(self.path.split("?")[0], routes.get("*", "")).encode()
            self.send_response(200 if body else 404)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer((host, 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _limits(url: str, attestation: str, tmp_path):
    import types

    from k3lib.axes.operations import run_operations
    from k3lib.core.params import load_params
    from k3lib.core.store import RunStore
    from k3lib.io.target import resolve_target

    params = load_params([PARAMS], [f"target.base_url={url}", f"axes.operations.attestation={attestation}",
                                    "axes.operations.rollback_drill=null"])
    store = RunStore.create_at(tmp_path / f"run-{len(list(tmp_path.iterdir()))}")
    result = run_operations(types.SimpleNamespace(params=params, store=store, target=resolve_target(params)))
    (limits,) = [f for f in result.findings if f.rule == "attestation.operator_knows_limits"]
    return limits


def test_attack_the_targets_own_attestation_reached_under_another_name(emulator, tmp_path):
    """Attack 4: the target is http://localhost:P, its attestation http://127.0.0.1:P/… (or the reverse): before the
    fix the host strings differed, and the deployment's word about itself passed C15."""
    import datetime as dt
    import json

    from k3lib.emulator.envreport import operator_attestation

    text = json.dumps(operator_attestation(emulator.config, dt.date.today().isoformat() + "T00:00:00Z", 4))
    other = _serve({"*": text})
    port = other.server_address[1]
    try:
        for target, att in ((f"http://localhost:{port}", f"http://127.0.0.1:{port}/attestation"),
                            (f"http://127.0.0.1:{port}", f"http://localhost:{port}/attestation")):
            limits = _limits(target, att, tmp_path)
            assert limits.status == "not-observable" and "served by the target under test" in limits.message, \
                limits.message
    finally:
        other.shutdown()


def _interface_address() -> str:
    """A non-loopback address of this machine (the one a packet to a TEST-NET address would leave from)."""
    import ipaddress
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # UDP: nothing is sent
        except OSError:
            pytest.skip("no route off loopback on this machine")
        address = s.getsockname()[0]
    if ipaddress.ip_address(address).is_loopback:
        pytest.skip("no address off loopback on this machine")
    return address


def test_attack_the_targets_own_attestation_reached_through_another_interface_address(emulator, tmp_path):
    """A server bound to every address answers on each: the target http://127.0.0.1:P and its attestation at
    http://<this machine's eth0 address>:P/… are one server. Before the fix this machine's addresses were only what
    its name resolves to (here 127.0.0.1), so the eth0 address was another host and the deployment's word about
    itself passed C15."""
    import datetime as dt

    from k3lib.emulator.envreport import operator_attestation

    address = _interface_address()
    text = json.dumps(operator_attestation(emulator.config, dt.date.today().isoformat() + "T00:00:00Z", 4))
    other = _serve({"*": text}, host="0.0.0.0")
    port = other.server_address[1]
    try:
        limits = _limits(f"http://127.0.0.1:{port}", f"http://{address}:{port}/attestation", tmp_path)
        assert limits.status == "not-observable" and "served by the target under test" in limits.message, \
            limits.message
    finally:
        other.shutdown()


def test_a_name_that_resolves_elsewhere_is_the_target_when_it_states_the_targets_start_time(monkeypatch):
    """A proxy, a NAT or another view of the DNS: the resolver ties the name to another host, but the server there
    states the target's own process start time — it is the target. A model root alone names it on this host only
    (every deployment of one model shares it)."""
    import k3lib.io.addresses as addresses
    from k3lib.axes.attestation import served_by_target

    models = json.dumps({"data": [{"id": "kimi-k3", "root": "/models/moonshotai/Kimi-K3"}]})
    metrics = "process_start_time_seconds 1765000000.5\n"
    target = _serve({"/v1/models": models, "/metrics": metrics})
    proxy = _serve({"/metrics": metrics, "/attestation": "who: me"})
    twin = _serve({"/v1/models": models, "/attestation": "who: a twin elsewhere"})
    base = f"http://127.0.0.1:{target.server_address[1]}"
    monkeypatch.setattr(addresses, "same_host", lambda a, b: False)  # every name resolves elsewhere
    try:
        assert served_by_target(f"http://127.0.0.1:{proxy.server_address[1]}/attestation", base)
        assert not served_by_target(f"http://127.0.0.1:{twin.server_address[1]}/attestation", base)
    finally:
        for s in (target, proxy, twin):
            s.shutdown()


def test_another_port_of_the_same_server_is_the_target(tmp_path):
    """On the same host at another port, the server there is the target when it states the target's identity (a
    served model root, a process start time); another server of the same host is not."""
    from k3lib.axes.attestation import served_by_target

    models = json.dumps({"data": [{"id": "kimi-k3", "root": "/models/moonshotai/Kimi-K3"}]})
    metrics = "process_start_time_seconds 1765000000.5\n"
    target = _serve({"/v1/models": models, "/metrics": metrics})
    twin = _serve({"/v1/models": models, "/attestation": "who: me"})
    clock = _serve({"/metrics": metrics, "/attestation": "who: me"})
    wiki = _serve({"/attestation": "who: someone else"})
    base = f"http://127.0.0.1:{target.server_address[1]}"
    try:
        assert served_by_target(f"http://localhost:{twin.server_address[1]}/attestation", base)
        assert served_by_target(f"http://[::1]:{target.server_address[1]}/attestation", base)  # ::1 is this host
        assert served_by_target(f"http://localhost:{clock.server_address[1]}/attestation", base)
        assert not served_by_target(f"http://localhost:{wiki.server_address[1]}/attestation", base)
        assert not served_by_target("/tmp/attestation.yaml", base)
    finally:
        for s in (target, twin, clock, wiki):
            s.shutdown()


def test_attack_an_image_inspect_served_by_the_target_under_another_name(emulator):
    import httpx

    from k3lib.axes.attestation import served_release

    other = emulator.url.replace("127.0.0.1", "localhost")
    with httpx.Client(base_url=emulator.url, timeout=5) as http:
        own = served_release(http, f"{other}/_emulator/inspect", emulator.url, trust_target=False)
    assert own.image is None and "served by the target under test" in own.error
