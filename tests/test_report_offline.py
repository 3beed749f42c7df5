"""The rendered report in a real headless Chromium with the network cut: nothing leaves, figures draw."""

from __future__ import annotations


from conftest import needs_tool

from chromium import CHROMIUM, Recorder, console_errors, page_requests, proxy, render  # noqa: F401 - fixture

pytestmark = needs_tool(CHROMIUM is not None, "Debian's chromium is installed by .ci/run")


def test_the_recorder_sees_a_page_that_reaches_out(tmp_path, proxy):
    """The check can fail: a page that fetches a CDN script is caught."""
    page = tmp_path / "leaky.html"
    page.write_text('<html><body><script src="http://cdn.example.invalid/x.js"></script></body></html>')
    Recorder.seen.clear()
    render(page, proxy)
    assert any("cdn.example.invalid" in s for s in page_requests())


def test_report_pages_open_offline_and_every_figure_draws(healthy_run, proxy):
    _, store = healthy_run
    pages = sorted(store.path("report").glob("*.html"))
    assert store.path("report/index.html") in pages and len(pages) >= 3
    figures_total = 0
    for page in pages:
        Recorder.seen.clear()
        dom, log = render(page, proxy)
        assert page_requests() == [], f"{page.name} tried to reach the network: {page_requests()}"
        errors = console_errors(log)
        assert errors == [], f"{page.name}: console errors {errors}"
        source = page.read_text()
        figures = source.count('class="plotly-graph-div"')
        figures_total += figures
        assert dom.count('class="main-svg"') >= figures, f"{page.name}: a plotly figure did not draw"
    assert figures_total >= 1, "the probe notebook draws at least one figure"
