"""The OOM explorer in a real JupyterLab: `jupyter lab` on loopback with a token, Debian's headless Chromium driven
over the DevTools protocol (no browser download), the notebook run against the embedded emulator, the widgets
rendered, a changed widget re-drawing the plot, and a screenshot kept under the test's temporary folder."""

from __future__ import annotations

import base64
import itertools
import json
import os
import re
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import nbformat
import pytest

from k3lib.core.procs import end_process

from chromium import CHROMIUM, QUIET, needs_chromium

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "explore" / "oom_explorer.ipynb"
pytestmark = [pytest.mark.slow, needs_chromium]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(what: str, check, timeout_s: float, every_s: float = 0.5):
    """Poll until `check()` is truthy. The bound is a deadlock guard on a loaded machine, not a timing claim."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s:.0f} s")
        time.sleep(every_s)


class DevTools:
    """The few Chrome DevTools protocol calls the test needs, over one page's websocket."""

    def __init__(self, ws_url: str) -> None:
        import websocket  # websocket-client, a dependency of jupyter_server

        self.ws = websocket.create_connection(ws_url, timeout=120, suppress_origin=True)
        self.ids = itertools.count(1)

    def call(self, method: str, **params):
        n = next(self.ids)
        self.ws.send(json.dumps({"id": n, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == n:
                if "error" in msg:
                    raise AssertionError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def js(self, expression: str):
        res = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if res.get("exceptionDetails"):
            raise AssertionError(f"page script failed: {res['exceptionDetails'].get('text')} "
                                 f"{res['exceptionDetails'].get('exception', {}).get('description', '')[:300]}")
        return res.get("result", {}).get("value")

    def close(self) -> None:
        self.ws.close()


@pytest.fixture()
def lab(tmp_path):
    """JupyterLab on 127.0.0.1 with a token, its config, runtime and workspaces under tmp_path; the notebook copied
    there with parameters for a short burst (run folder in tmp_path, widgets on)."""
    work = tmp_path / "lab"
    work.mkdir()
    nb = nbformat.read(NOTEBOOK, as_version=4)
    params = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    params.source = "\n".join([
        f"params_file = {str(ROOT / 'parameters' / 'emulator.yaml')!r}",
        'overrides = ["axes.capacity.explore_max_requests=6", "axes.capacity.explore_duration_s=4", '
        '"axes.capacity.explore_concurrency=2", "axes.capacity.explore_output_tokens=16", '
        '"axes.capacity.explore_context_tokens=256", "axes.capacity.sample_interval_s=0.25"]',
        f"run_dir = {str(tmp_path / 'run')!r}",
        "interactive = True"])
    nbformat.write(nb, work / NOTEBOOK.name)
    port, token = _free_port(), secrets.token_hex(16)
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp_path / "cfg"), "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt"),
           "JUPYTER_DATA_DIR": str(Path(sys.prefix) / "share" / "jupyter")}
    log = open(tmp_path / "lab.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", "--ServerApp.terminals_enabled=False",
         "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
         "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={work}",
         "--LabApp.expose_app_in_browser=True", "--LabApp.news_url=None",
         f"--LabApp.workspaces_dir={tmp_path / 'ws'}", "--LabServerApp.check_for_updates_class="
         "jupyterlab.NeverCheckForUpdate"], cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        try:
            _wait("jupyter lab answers", lambda: proc.poll() is not None
                  or _status(f"{base}/api/status?token={token}") == 200, 120)
        except AssertionError:
            proc.poll()
        assert proc.returncode is None, "jupyter lab exited: " + (tmp_path / "lab.log").read_text()[-2000:]
        assert _status(f"{base}/api/contents") == 403, "the server must refuse requests without the token"
        yield base, token, work
    finally:
        end_process(proc, 30)
        log.close()


def _status(url: str) -> int | None:
    try:
        return httpx.get(url, timeout=5).status_code
    except httpx.HTTPError:
        return None


@pytest.fixture()
def browser(tmp_path):
    port = _free_port()
    proc = subprocess.Popen(
        [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", *QUIET,
         f"--user-data-dir={tmp_path / 'chromium'}", f"--remote-debugging-port={port}", "--remote-allow-origins=*",
         # everything but loopback (which Chromium never proxies) goes to a closed port: nothing leaves the machine
         "--proxy-server=http://127.0.0.1:9", "--window-size=1400,1600",
         "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        pages = _wait("chromium's DevTools endpoint", lambda: _pages(port), 60)
        tools = DevTools(pages[0]["webSocketDebuggerUrl"])
        yield tools
        tools.close()
    finally:
        end_process(proc, 30)


def _pages(port: int):
    try:
        return [t for t in httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=5).json() if t["type"] == "page"]
    except (httpx.HTTPError, ValueError):
        return None


def _state(b: DevTools) -> str:
    return b.js("JSON.stringify({dialog: Array.from(document.querySelectorAll('.jp-Dialog')).map(e => e.innerText),"
                " widget: String(window.k3panel() && window.k3panel().title.label),"
                " kernel: (() => { const w = window.k3panel(); const c = w && w.sessionContext;"
                " return c ? [c.kernelDisplayName, c.kernelDisplayStatus,"
                " c.session && c.session.kernel && c.session.kernel.status] : null; })()})")


# the notebook panel in the main area (shell.currentWidget follows focus, which a headless window may not have)
PANEL = "Array.from(window.jupyterapp.shell.widgets('main')).find(w => w.sessionContext)"
TITLES = "Array.from(document.querySelectorAll('.jp-OutputArea .js-plotly-plot .gtitle')).map(e => e.textContent)"


def test_oom_explorer_runs_in_jupyterlab_and_its_widgets_redraw(lab, browser, tmp_path):
    base, token, work = lab
    b = browser
    b.call("Page.enable")
    b.call("Page.navigate", url=f"{base}/lab/tree/{NOTEBOOK.name}?token={token}")
    _wait("JupyterLab opened the notebook",
          lambda: b.js("!!(window.jupyterapp && document.querySelector('.jp-Notebook .jp-Cell'))"), 180)
    b.js(f"window.k3panel = () => {PANEL}; true")
    try:
        _wait("the kernel is ready",
              lambda: b.js("(() => { const w = window.k3panel(); const k = w && w.sessionContext"
                           " && w.sessionContext.session && w.sessionContext.session.kernel;"
                           " return !!k && k.status === 'idle'; })()"), 180)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; page state: {_state(b)}; server log: "
                             + (tmp_path / "lab.log").read_text()[-1500:]) from None
    b.js("(() => { window.jupyterapp.shell.activateById(window.k3panel().id);"
         " void window.jupyterapp.commands.execute('notebook:run-all-cells'); })()")

    # the widget panel: three sliders, the numeric fields and the fire button, drawn by the widget manager
    _wait("the widgets render", lambda: b.js(
        "document.querySelectorAll('.jp-OutputArea .widget-slider').length >= 3 && "
        "Array.from(document.querySelectorAll('.jp-OutputArea button')).some(e => /Fire burst/.test(e.textContent))"),
        240)
    # the headless burst cell (same figure, drawn statically) completes: one plotly figure with its title
    _wait("the burst figure draws", lambda: any("ok" in t for t in b.js(TITLES) or []), 300)
    before = b.js(TITLES)
    errors = b.js("Array.from(document.querySelectorAll('.jp-OutputArea-output[data-mime-type="
                  "\"application/vnd.jupyter.stderr\"]')).map(e => e.textContent).filter(t => /Error/.test(t))")
    assert errors == [], errors

    # change the concurrency slider (its editable readout, as a user types in it), then fire a burst
    b.js("""(() => {
        const slider = Array.from(document.querySelectorAll('.jp-OutputArea .widget-slider'))
            .find(s => /concurrency/.test(s.textContent));
        const readout = slider.querySelector('.widget-readout');
        readout.focus(); readout.textContent = '3';
        readout.dispatchEvent(new KeyboardEvent('keydown', {key: 'Enter', keyCode: 13, bubbles: true}));
        readout.dispatchEvent(new Event('blur'));
        return readout.textContent; })()""")
    _wait("the slider took the new value", lambda: b.js(
        "Array.from(document.querySelectorAll('.jp-OutputArea .widget-slider')).find(s => "
        "/concurrency/.test(s.textContent)).querySelector('.widget-readout').textContent.trim() === '3'"), 60)
    b.js("Array.from(document.querySelectorAll('.jp-OutputArea button'))"
         ".find(e => /Fire burst/.test(e.textContent)).click()")
    after = _wait("the panel's plot redraws for the new shape",
                  lambda: [t for t in b.js(TITLES) or [] if "× 3 concurrent" in t
                           and re.search(r"— [1-9]\d* ok", t)], 300)
    assert after and after[0] not in before
    _wait("the panel says the burst is done", lambda: b.js(
        "Array.from(document.querySelectorAll('.jp-OutputArea .widget-html')).some(e => /done:/.test(e.textContent))"),
        120)

    shot = b.call("Page.captureScreenshot", format="png")
    png = tmp_path / "jupyterlab-oom-explorer.png"
    png.write_bytes(base64.b64decode(shot["data"]))
    assert png.stat().st_size > 10_000
    # the bursts are kept in the run folder, outside the evidence
    bursts = sorted((tmp_path / "run" / "explore").glob("burst-*/burst.json"))
    assert len(bursts) >= 2 and json.loads(bursts[-1].read_text())["settings"]["concurrency"] == 3


def test_make_lab_uses_current_flags_and_runs_as_root():
    """`make lab`, the documented command: --allow-root for root (JupyterLab as root exits at once without it), the
    token as --IdentityProvider.token (--ServerApp.token and --NotebookApp.* are deprecated), on the loopback."""
    out = subprocess.run(["make", "-n", "lab", "K3_LAB_TOKEN=t0ken"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, check=True).stdout
    line = " ".join(out.replace("\\\n", " ").split())
    assert "jupyter lab" in line and "--IdentityProvider.token=t0ken" in line and "--ServerApp.ip=127.0.0.1" in line
    assert ("--allow-root" in line) == (os.geteuid() == 0)
    assert "--ServerApp.token" not in line and "NotebookApp" not in line
    assert "make lab" in (ROOT / "docs" / "notebooks.md").read_text()
