"""The probe's findings from what each endpoint answered (pure: no server needed)."""

from __future__ import annotations

import types

import pytest

from k3lib.core.params import load_params
from k3lib.axes.probe import EndpointProbe, ProbeResult, iter_findings


def _probe(name: str, status: int | None, body: str = "", error: str | None = None) -> EndpointProbe:
    return EndpointProbe(name, f"http://127.0.0.1:9/{name}", status, 1.0, body, None, error, "t")


def _ctx(tmp_path, **contract):
    f = tmp_path / "p.yaml"
    f.write_text("target: {base_url: 'http://127.0.0.1:9'}\ncontract: " + repr(contract or {}).replace("'", '"') + "\n")
    return types.SimpleNamespace(params=load_params([f]))


MODELS = '{"data": [{"id": "m", "root": "r", "max_model_len": 4096, "owned_by": "vllm"}]}'


def _result(health, version, models, metrics) -> ProbeResult:
    eps = {"health": health, "version": version, "models": models, "metrics": metrics}
    cards = [{"id": "m", "root": "r", "max_model_len": 4096}] if models.ok else []
    ver = version.json().get("version") if version.ok else None
    return ProbeResult(eps, cards, "m" if cards else None, ver)


@pytest.mark.parametrize("health, expected", [
    pytest.param(_probe("health", 200), "pass", id="vllm-healthy"),
    pytest.param(_probe("health", 503), "fail", id="engine-dead"),
    pytest.param(_probe("health", None, error="ConnectError"), "fail", id="unreachable"),
    pytest.param(_probe("health", 404), "not-observable", id="engine-without-health-route"),
])
def test_health(tmp_path, health, expected):
    r = _result(health, _probe("version", 200, '{"version": "0.33.0"}'), _probe("models", 200, MODELS),
                _probe("metrics", 200, "vllm:num_requests_running 0"))
    found = {f.rule: f for f in iter_findings(r, _ctx(tmp_path))}
    assert found["probe.health"].status == expected


def test_a_server_without_vllm_surfaces_is_not_observable_not_failed(tmp_path):
    r = _result(_probe("health", 404), _probe("version", 404), _probe("models", 200, MODELS),
                _probe("metrics", 404))
    found = {f.rule: f.status for f in iter_findings(r, _ctx(tmp_path, max_context_tokens=4096))}
    assert found == {"probe.health": "not-observable", "probe.version": "not-observable", "probe.models": "pass",
                     "probe.context_limit": "pass", "probe.metrics": "not-observable"}


def test_a_contract_beyond_the_servers_limit_is_a_finding(tmp_path):
    r = _result(_probe("health", 200), _probe("version", 200, '{"version": "0.33.0"}'), _probe("models", 200, MODELS),
                _probe("metrics", 200, "vllm:x 1"))
    found = {f.rule: f for f in iter_findings(r, _ctx(tmp_path, max_context_tokens=32768))}
    assert found["probe.context_limit"].status == "fail"
    assert "32768" in found["probe.context_limit"].message and "4096" in found["probe.context_limit"].message
