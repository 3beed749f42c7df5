"""The preflight: a wrong target is refused in seconds, in one line naming the parameter, exit 2, before a run folder
or a notebook exists — never read as a strong, wrong decision after minutes of load (issue 36).

Every target here is a real server on a loopback socket: the embedded emulator (with a key, or not), a server of
another kind written below (an OpenAI-compatible engine that is not vLLM, a plain web server), a closed port, and a
host name that cannot resolve (`.invalid`, RFC 2606). The renewal review's bad inputs are refused the same way.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from k3lib.cli.main import main
from test_hardening_server import closed_port

ROOT = Path(__file__).resolve().parents[1]
EMULATOR_YAML = str(ROOT / "parameters" / "emulator.yaml")
BOUND_S = 10.0  # the bound for a refusal, timeouts included


def _validate(tmp_path: Path, capsys: Any, *sets: str, plan: bool = False) -> tuple[int, str, float]:
    out = tmp_path / "out"
    argv = ["validate", "-p", EMULATOR_YAML, "--out", str(out), *(a for s in sets for a in ("--set", s))]
    t0 = time.monotonic()
    code = main(argv + (["--plan"] if plan else []))
    took = time.monotonic() - t0
    err = capsys.readouterr().err
    if code == 2:
        assert not out.exists() or not any(out.iterdir()), "a refused target left a run folder"
    return code, err, took


def _refused(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, f"a refusal is one line, got {lines}"
    assert lines[0].startswith("k3: ") and "Traceback" not in err
    return lines[0]


# -- servers of another kind -------------------------------------------------------------------------------------

class _OtherEngine(http.server.BaseHTTPRequestHandler):
    """An OpenAI-compatible engine that is not vLLM (no /version, no vllm: metrics), or a plain web server."""

    openai = True

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        if self.openai and self.path == "/v1/models":
            self._send(200, json.dumps({"object": "list", "data": [{"id": "other-model"}]}).encode(),
                       "application/json")
        elif self.openai and self.path == "/health":
            self._send(200, b'{"status": "ok"}', "application/json")
        else:
            self._send(404, b"<html><body>Not Found</body></html>", "text/html")

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if not self.openai:
            self._send(404, b"<html>Not Found</html>", "text/html")
            return
        events = [{"choices": [{"index": 0, "delta": {"content": f"{i} "}}]} for i in range(1, 5)]
        events.append({"choices": [], "usage": {"completion_tokens": 4}})
        body = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
        self._send(200, body.encode(), "text/event-stream")


class _WebServer(_OtherEngine):
    openai = False


def _serve(handler: type) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def other_engine() -> Iterator[str]:
    yield from _serve(_OtherEngine)


@pytest.fixture(scope="module")
def web_server() -> Iterator[str]:
    yield from _serve(_WebServer)


@pytest.fixture(scope="module")
def keyed_emulator() -> Iterator[Any]:
    """The emulator guarding /v1 with a key, as `vllm serve --api-key` does."""
    from k3lib.emulator import EmulatorConfig, start_emulator

    handle = start_emulator(EmulatorConfig.from_profile("demo", time_scale=0.05, api_key="the-right-key"),
                            host="127.0.0.1", port=0)
    yield handle
    handle.stop()


# -- the refusals ------------------------------------------------------------------------------------------------

def test_a_wrong_key_names_the_variable_never_its_value(tmp_path, capsys, clean_env, keyed_emulator):
    clean_env.setenv("K3_PREFLIGHT_KEY", "a-wrong-key-value")
    code, err, took = _validate(tmp_path, capsys, f"target.base_url={keyed_emulator.url}",
                                "target.api_key_env=K3_PREFLIGHT_KEY")
    line = _refused(err)
    assert code == 2 and took < BOUND_S
    assert "target.api_key_env" in line and "$K3_PREFLIGHT_KEY" in line and "401" in line
    assert "a-wrong-key-value" not in err


def test_a_key_the_server_asks_for_is_named_as_missing(tmp_path, capsys, clean_env, keyed_emulator):
    code, err, took = _validate(tmp_path, capsys, f"target.base_url={keyed_emulator.url}")
    line = _refused(err)
    assert code == 2 and took < BOUND_S and "target.api_key_env" in line and "asks for an API key" in line


def test_the_right_key_passes_and_the_plan_is_printed(tmp_path, capsys, clean_env, keyed_emulator):
    clean_env.setenv("K3_PREFLIGHT_KEY", "the-right-key")
    code = main(["validate", "-p", EMULATOR_YAML, "--plan", "--set", f"target.base_url={keyed_emulator.url}",
                 "--set", "target.api_key_env=K3_PREFLIGHT_KEY"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "preflight: " in err and "key accepted ($K3_PREFLIGHT_KEY)" in err and "vLLM" in err
    assert out.startswith("plan: 6 axes") and "02_agent_tools.ipynb" in out and "03_capacity.ipynb" in out
    assert "the-right-key" not in out + err


def test_a_v1_base_url_is_named_with_the_root_to_give(tmp_path, capsys, emulator):
    code, err, took = _validate(tmp_path, capsys, f"target.base_url={emulator.url}/v1")
    line = _refused(err)
    assert code == 2 and took < BOUND_S
    assert "target.base_url" in line and "ends in /v1" in line and f"give the server root {emulator.url} " in line


def test_a_server_that_is_down_is_refused(tmp_path, capsys):
    code, err, took = _validate(tmp_path, capsys, f"target.base_url=http://127.0.0.1:{closed_port()}")
    line = _refused(err)
    assert code == 2 and took < BOUND_S and "nothing answers" in line and "target.base_url" in line


def test_an_unknown_host_is_refused(tmp_path, capsys):
    code, err, took = _validate(tmp_path, capsys, "target.base_url=http://k3kit-no-such-host.invalid:8000",
                                "target.allow_remote_load=true")
    line = _refused(err)
    assert code == 2 and took < BOUND_S and "unknown host 'k3kit-no-such-host.invalid'" in line


def test_a_remote_target_needs_the_yaml_consent_key_before_any_request(tmp_path, capsys):
    # 192.0.2.0/24 is TEST-NET-1 (RFC 5737): never reached, the consent is asked before any request
    code, err, took = _validate(tmp_path, capsys, "target.base_url=http://192.0.2.10:8000")
    line = _refused(err)
    assert code == 2 and took < 2.0
    assert "allow_remote_load: true" in line and "under `target:`" in line and "allow_remote_load=True" not in line


def test_a_server_of_another_kind_is_refused_for_a_vllm_recipe(tmp_path, capsys, other_engine):
    code, err, took = _validate(tmp_path, capsys, f"target.base_url={other_engine}")
    line = _refused(err)
    assert code == 2 and took < BOUND_S
    assert "is not a vLLM server" in line and "kimi-k3" in line and "vllm_min" in line


def test_a_server_of_another_kind_passes_a_recipe_that_asks_no_vllm(tmp_path, capsys, other_engine):
    """llama.cpp-like engines are a deliberate target of a generic recipe: said in a note, not refused."""
    code = main(["validate", "-p", str(ROOT / "parameters" / "llamacpp.example.yaml"), "--plan",
                 "--set", f"target.base_url={other_engine}"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "not a vLLM server" in err and "not observable" in err and "other-model" in err


def test_a_web_server_is_not_an_openai_compatible_server(tmp_path, capsys, web_server):
    code, err, took = _validate(tmp_path, capsys, f"target.base_url={web_server}")
    line = _refused(err)
    assert code == 2 and took < BOUND_S and "not an OpenAI-compatible server" in line and "404" in line


def test_a_model_that_is_not_served_is_named_with_what_is(tmp_path, capsys, emulator):
    code, err, took = _validate(tmp_path, capsys, f"target.base_url={emulator.url}", "target.model=kimi-k2")
    line = _refused(err)
    assert code == 2 and took < BOUND_S and "target.model" in line and "'kimi-k2'" in line and "'kimi-k3'" in line


@pytest.mark.slow
def test_a_stalled_server_is_refused_within_the_bound(tmp_path, capsys):
    """A socket that accepts and never answers (a server still loading its model looks like this)."""
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    try:
        code, err, took = _validate(tmp_path, capsys, f"target.base_url=http://127.0.0.1:{sock.getsockname()[1]}")
    finally:
        sock.close()
    line = _refused(err)
    assert code == 2 and took < BOUND_S and "gave no answer" in line


def test_the_preflight_report_reads_the_emulator(emulator):
    from k3lib.batch.preflight import preflight
    from k3lib.core.params import load_params

    params = load_params([EMULATOR_YAML], [f"target.base_url={emulator.url}"])
    report = preflight(params, emulator.url, (f"{emulator.url}/metrics",), {})
    assert (report.kind, report.model, report.max_model_len) == ("vLLM", "kimi-k3", 4096)
    assert report.version and report.speed is not None and report.speed.tokens > 1
    assert report.metrics == "/metrics vLLM's" and report.duration_s < BOUND_S


# -- the renewal review: every input and Prometheus before any notebook --------------------------------------------

def _review_files(tmp_path: Path, **change: str) -> Path:
    """A real review's parameters over the steady demo's generated inputs (written once here)."""
    from k3lib.core.params import load_params  # noqa: F401 - the kit installed
    from k3lib.renewal.demo import materialise
    from k3lib.batch.renewal import load_review_request

    params = materialise(load_review_request([], [], "steady"), tmp_path / "inputs")
    data = params.public_dict()["review"]
    inputs, series = dict(data["inputs"]), dict(data["series"])
    inputs.update({k: v for k, v in change.items() if k in inputs})
    if "prometheus_url" in change:
        series.pop("history_file", None)
        series["prometheus_url"] = change["prometheus_url"]
    path = tmp_path / "review.yaml"
    path.write_text(json.dumps({"extends": str(ROOT / "parameters" / "renewal-demo.yaml"),
                                "review": {"demo": None, "inputs": inputs, "series": series,
                                           "deployment": data["deployment"]}}))
    return path


def _review(tmp_path: Path, capsys: Any, params: Path) -> tuple[int, str]:
    out = tmp_path / "out"
    code = main(["review", "-p", str(params), "--out", str(out)])
    err = capsys.readouterr().err
    assert not out.exists() or not any(out.iterdir()), "a refused review left a run folder"
    return code, err


def test_a_review_with_a_bad_tasks_csv_stops_before_any_notebook(tmp_path, capsys):
    bad = tmp_path / "tasks.csv"
    bad.write_text("id,kind,when\n1,agent,yesterday\n")
    code, err = _review(tmp_path, capsys, _review_files(tmp_path, tasks=str(bad)))
    line = _refused(err)
    assert code == 2 and "tasks.csv" in line


def test_a_review_with_an_unreachable_prometheus_stops_before_any_notebook(tmp_path, capsys):
    t0 = time.monotonic()
    code, err = _review(tmp_path, capsys,
                        _review_files(tmp_path, prometheus_url=f"http://127.0.0.1:{closed_port()}"))
    line = _refused(err)
    assert code == 2 and time.monotonic() - t0 < BOUND_S
    assert "review.series.prometheus_url" in line and "Prometheus does not answer" in line


def test_the_right_server_with_an_engine_not_ready_is_judged_not_refused(capsys):
    """A vLLM whose engine never became ready (a startup OOM: /health and /v1/models answer 503) is the right target in
    a bad state: the batch runs and judges it (tests/test_batch.py: environment-rebuild), the preflight says so."""
    code = main(["validate", "-p", EMULATOR_YAML, "--fault", "oom-startup", "--plan"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "the engine is not ready or dead (/health 503, /v1/models 503)" in err and "target.restart" in err
