"""Nothing leaked or injected: the API key exists only as an environment-variable name in every output of a
review, and of an acceptance run against a server whose model name, replies and log lines carry HTML/JS markup,
and no report page runs that markup when opened in headless Chromium.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import needs_tool

from chromium import CHROMIUM, Recorder, console_errors, page_requests, proxy, render  # noqa: F401 - fixture
from k3lib.cli.main import main
from k3lib.core.store import RunStore
from k3lib.renewal.decision import EXIT_CODES as RENEWAL_EXIT_CODES
from k3lib.verdict.decision import EXIT_CODES
from test_hardening_faults import EMULATOR_YAML, TINY
from test_hardening_server import IMG_PAYLOAD, LOG_PAYLOAD, PAYLOAD, SCRIPT_PAYLOAD, Misbehaving

SECRET = "k3-test-secret-9d2e7a41c0b5"
KEY_ENV = "K3_HARDENING_API_KEY"
# The emulator serves its model under a name carrying the markup; the proxy adds it to every reply and log.
INJECTED_MODEL = f"kimi-k3{PAYLOAD}"
OOM_ABOVE_TOKENS = 5000


def _only_run(out: Path) -> RunStore:
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    return RunStore(run)


def assert_no_secret(root: Path, *texts: str) -> int:
    """The key's value is in no file under `root` and in none of `texts` (the CLI's stdout and stderr)."""
    files = [p for p in root.rglob("*") if p.is_file()]
    for path in files:
        assert SECRET.encode() not in path.read_bytes(), f"the key leaked into {path}"
    for text in texts:
        assert SECRET not in text, "the key leaked into the command's output"
    return len(files)


def pwned(dom: str) -> list[str]:
    """What the payload would leave in the DOM had it run: a <k3-pwned> element, a retitled page."""
    out = []
    if "<k3-pwned" in dom:
        out.append("a <k3-pwned> element was created")
    if re.search(r"<title>[^<]*K3PWNED", dom):
        out.append("document.title was set")
    return out


# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_review_drill_never_writes_the_key(tmp_path, capsys, monkeypatch):
    """`k3 review` drills a key-guarded emulator: the drill must send the key, and write it nowhere."""
    monkeypatch.setenv(KEY_ENV, SECRET)
    code = main(["review", "--demo", "steady", "--set", f"target.api_key_env={KEY_ENV}", "--out", str(tmp_path)])
    out, err = capsys.readouterr()
    store = _only_run(tmp_path)
    decided = json.loads(store.path("decision.json").read_text())["decision"]
    assert code == RENEWAL_EXIT_CODES[decided], (code, decided, err)
    drill = json.loads(store.path("drill/drill.json").read_text())
    # the emulator refuses /v1 without the key (401): a chat answered 200 proves the drill sent it. A demo's
    # deployment is the embedded emulator its series describe (issue 44: a real review never drills it)
    assert drill["deployment"]["is_deployment"] is True
    evidence = " ".join(str(a.get("evidence")) for a in drill["answers"].values())
    assert "HTTP 200" in evidence, evidence
    assert assert_no_secret(store.root, out, err) > 10
    assert KEY_ENV in store.path("params.json").read_text()


@pytest.fixture(scope="module")
def injected_run(tmp_path_factory):
    """The acceptance batch (tiny bounds) against a key-guarded emulator serving `INJECTED_MODEL`, behind a proxy
    that adds the markup to every reply and to the server log: (exit code, RunStore, stdout + stderr)."""
    import os

    from k3lib.emulator import EmulatorConfig, start_emulator

    out = tmp_path_factory.mktemp("injected")
    old = os.environ.get(KEY_ENV)
    os.environ[KEY_ENV] = SECRET
    # an OOM on the long prompt makes the capacity page quote the server log's lines around it; above 5,000 tokens
    # (the context raised to 8,192 for it), so that the agent's history, swollen by the injected markup (3,727 tokens
    # after the tool call's round, measured), never kills the engine before its replies carry the markup to its page
    upstream = start_emulator(EmulatorConfig.from_profile("demo", time_scale=0.05, api_key=SECRET,
                                                          served_model_name=INJECTED_MODEL, max_model_len=8192,
                                                          faults=(f"oom-long-context={OOM_ABOVE_TOKENS}",)),
                              host="127.0.0.1", port=0)
    try:
        with Misbehaving(upstream.url, "inject") as proxy_server:
            argv = ["validate", "-p", EMULATOR_YAML, "--out", str(out), "--set", f"target.base_url={proxy_server.url}",
                    "--set", f"target.api_key_env={KEY_ENV}"]
            for s in [*TINY, f"axes.capacity.context_lengths_tokens=[{OOM_ABOVE_TOKENS + 1000}]"]:
                argv += ["--set", s]
            import contextlib
            import io

            stdout, stderr = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
                code = main(argv)
            chats = proxy_server.chat_requests
    finally:
        upstream.stop()
        if old is None:
            os.environ.pop(KEY_ENV, None)
        else:
            os.environ[KEY_ENV] = old
    return code, _only_run(out), stdout.getvalue() + stderr.getvalue(), chats


@pytest.mark.slow
def test_acceptance_outputs_never_hold_the_key(injected_run):
    code, store, output, chats = injected_run
    assert chats > 5, "the batch must have talked to the key-guarded server"
    decided = json.loads(store.path("decision.json").read_text())["decision"]
    assert code == EXIT_CODES[decided], (code, decided, output)
    assert assert_no_secret(store.root, output) > 20
    assert store.verify() == []


@pytest.mark.slow
def test_injected_markup_reached_the_evidence(injected_run):
    """The check below can only pass for the right reason if the markup is in the evidence and the pages."""
    _, store, _, _ = injected_run
    probe = json.loads(store.path("evidence/probe.json").read_text())
    assert probe["data"]["model"] == INJECTED_MODEL
    pages = {p.name: p.read_text() for p in store.path("report").glob("*.html")}
    carrying = [name for name, text in pages.items() if "K3PWNED" in text]
    # the model name (probe), the replies (agent), the server log's lines around the OOM (capacity)
    assert {"00_probe.html", "02_agent_tools.html", "03_capacity.html"} <= set(carrying), carrying
    for name, text in pages.items():
        for markup in (SCRIPT_PAYLOAD, IMG_PAYLOAD, LOG_PAYLOAD):
            assert markup not in text, f"{name} holds the markup unescaped"


@needs_tool(CHROMIUM is not None, "Debian's chromium is installed by .ci/run")
def test_the_payload_runs_in_a_page_that_does_not_escape_it(tmp_path, proxy):
    """The check can fail: the same markup, unescaped, does run."""
    page = tmp_path / "unescaped.html"
    page.write_text(f"<html><head><title>report</title></head><body><p>{PAYLOAD}</p></body></html>")
    dom, _ = render(page, proxy)
    assert pwned(dom), dom[:500]


@pytest.mark.slow
@needs_tool(CHROMIUM is not None, "Debian's chromium is installed by .ci/run")
def test_no_report_page_runs_server_provided_markup(injected_run, proxy):
    _, store, _, _ = injected_run
    pages = sorted(store.path("report").glob("*.html"))
    assert store.path("report/index.html") in pages and len(pages) >= 7
    for page in pages:
        Recorder.seen.clear()
        dom, log = render(page, proxy)
        assert "</html>" in dom, f"{page.name}: the page did not load"
        assert pwned(dom) == [], f"{page.name}: server-provided markup ran: {pwned(dom)}"
        # a plotly shape drawn at a NaN position is a figure defect that test_report_offline reports; any other
        # console error (an injected script's syntax error, an uncaught exception) is this test's concern
        errors = [e for e in console_errors(log) if "attribute d: Expected number" not in e]
        assert errors == [], f"{page.name}: console errors {errors}"
        assert page_requests() == [], f"{page.name} tried to reach the network: {page_requests()}"
