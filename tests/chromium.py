"""Headless Chromium for the report tests: open a page offline behind a recording proxy, dump its DOM and log.

`render(path, proxy)` → (dumped DOM, browser log); the `proxy` fixture records every request the page tries to
send out, `page_requests()` lists the ones the page made (Chromium's own background calls filtered out), and
`console_errors(log)` the console lines that report an error.
"""

from __future__ import annotations

import http.server
import re
import shutil
import subprocess
import tempfile
import threading

import pytest

from conftest import needs_tool

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = needs_tool(CHROMIUM is not None, "Debian's chromium is installed by .ci/run")


class Recorder(http.server.BaseHTTPRequestHandler):
    """Stands in as the browser's proxy: any request that tries to leave the file is recorded here."""

    seen: list[str] = []

    def _any(self) -> None:
        Recorder.seen.append(f"{self.command} {self.path}")
        self.send_response(502)
        self.end_headers()

    do_GET = do_POST = do_CONNECT = do_HEAD = _any

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def proxy():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()


# Chromium's own services (component updater, sync, safe browsing…) are switched off, so that any request the
# recorder sees comes from the page.
QUIET = ["--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-default-apps",
         "--no-default-browser-check", "--disable-client-side-phishing-detection", "--disable-domain-reliability",
         "--metrics-recording-only", "--disable-features=OptimizationHints,MediaRouter,Translate"]


# What Chromium itself still asks for despite the switches (network time, component updater, account check;
# Debian's Chromium 150 also CONNECTs to www.google.com:443 for a blank page): requests of the browser, not of the
# page under test.
BROWSER_OWN = re.compile(r"(clients\d*\.google\.com|www\.google\.com|update\.googleapis\.com|accounts\.google\.com|"
                         r"[a-z0-9-]+\.gvt1\.com|optimizationguide-pa\.googleapis\.com)(:443)?[/ ]?")


def page_requests() -> list[str]:
    return [r for r in Recorder.seen if not BROWSER_OWN.search(r.split(" ", 1)[1].split("//")[-1] + " ")]


def render(path, proxy) -> tuple[str, str]:
    profile = tempfile.mkdtemp(prefix="k3-chromium-")
    proc = subprocess.run(
        [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", *QUIET,
         f"--user-data-dir={profile}",
         f"--proxy-server=http://127.0.0.1:{proxy.server_address[1]}", "--proxy-bypass-list=<-loopback>",
         "--enable-logging=stderr", "--v=0", "--virtual-time-budget=8000", "--dump-dom", path.as_uri()],
        capture_output=True, text=True, timeout=120)
    shutil.rmtree(profile, ignore_errors=True)
    return proc.stdout, proc.stderr


def console_errors(log: str) -> list[str]:
    """The page's console lines that report an error (Chromium logs them with ':CONSOLE' on stderr)."""
    console = [line for line in log.splitlines() if ":CONSOLE" in line]
    return [line for line in console if re.search(r"error|uncaught|failed", line, re.I)]
