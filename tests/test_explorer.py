"""The OOM explorer: a bounded burst against the emulator, the widget panel driven without a browser, and the
notebook headless under papermill (no widget state, the same figure drawn statically)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import papermill as pm
import pytest

import k3lib
import k3lib.report.explorer as explorer
from k3lib.emulator import EmulatorConfig, start_emulator

ROOT = Path(__file__).resolve().parents[1]
PARAMS = str(ROOT / "parameters" / "emulator.yaml")


def _ctx(tmp_path, h, *extra: str, interactive: bool = False):
    return k3lib.open_axis("oom-explorer", PARAMS, [f"target.base_url={h.url}", "target.gpu_metrics.source=dcgm",
                                                    f"target.gpu_metrics.url={h.dcgm_url}",
                                                    "axes.capacity.sample_interval_s=0.2", *extra],
                           str(tmp_path / "run"), interactive)


def test_settings_follow_the_parameters_then_the_contract(tmp_path):
    with start_emulator(EmulatorConfig.from_profile("demo", time_scale=0.02), host="127.0.0.1", port=0) as h:
        ctx = _ctx(tmp_path, h, "axes.capacity.explore_concurrency=7")
    s = explorer.settings_from(ctx)
    contract = ctx.params.contract
    assert s.concurrency == 7 and s.output_tokens == (contract.typical_output_tokens or contract.max_output_tokens)
    assert s.context_tokens == ctx.params.contract.max_context_tokens - s.output_tokens
    assert explorer.settings_from(ctx, concurrency=2).concurrency == 2
    table = explorer.explorer(ctx)  # headless: a table, no widget is created
    assert table.loc[0, "concurrency"] == 7 and "headless" in table.loc[0, "mode"]


@pytest.mark.slow
def test_a_burst_is_bounded_and_kept_outside_the_evidence(tmp_path):
    with start_emulator(EmulatorConfig.from_profile("demo", faults=("oom-long-context=1500",), time_scale=0.02),
                        host="127.0.0.1", port=0) as h:
        ctx = _ctx(tmp_path, h)
        t0 = time.monotonic()
        small = explorer.fire_burst(ctx, explorer.settings_from(ctx, context_tokens=800, concurrency=3,
                                                                output_tokens=16, max_requests=6, duration_s=3))
        big = explorer.fire_burst(ctx, explorer.settings_from(ctx, context_tokens=2000, concurrency=2,
                                                              output_tokens=16, max_requests=6, duration_s=3))
        elapsed = time.monotonic() - t0
    assert small.stats["ok"] == 6 and small.engine_alive_after is True
    assert big.engine_alive_after is False and big.stats["server_errors"] >= 1
    assert elapsed < 2 * (3 + 5) + 5
    assert small.metrics and small.gpu and len(small.requests) == 6
    run = ctx.store.root
    assert (run / "explore/burst-1/burst.json").exists() and (run / "explore/burst-2/requests.jsonl").exists()
    assert not list((run / "evidence").glob("*.json"))
    fig = explorer.burst_figure(big)
    assert "ENGINE DEAD" in fig.layout.title.text and len(fig.data) >= 4
    assert explorer.burst_table(small).loc[0, "ok"] == 6


@pytest.mark.slow
def test_the_widget_panel_fires_a_burst_and_redraws(tmp_path):
    import ipywidgets  # a dependency of the kit: missing, the panel is broken, not skipped

    with start_emulator(EmulatorConfig.from_profile("demo", time_scale=0.02), host="127.0.0.1", port=0) as h:
        ctx = _ctx(tmp_path, h, "axes.capacity.explore_max_requests=4", "axes.capacity.explore_duration_s=2",
                   interactive=True)
        panel = explorer.explorer(ctx)
        assert isinstance(panel, ipywidgets.VBox)
        (context, conc, out_tok), (_requests, _duration, fire), status, fig = \
            panel.children[0].children, panel.children[1].children, panel.children[2], panel.children[3]
        context.value, conc.value, out_tok.value = 400, 2, 8
        fire.click()  # runs the burst and redraws from this thread, as the kernel would on a click
    assert status.value.startswith("done: 4 ok of 4"), status.value
    assert isinstance(fig, ipywidgets.DOMWidget)  # a FigureWidget, or an Output redrawn live without anywidget
    assert (ctx.store.root / "explore/burst-1/burst.json").exists()


@pytest.mark.slow
def test_explorer_notebook_headless_under_papermill(tmp_path, monkeypatch):
    startup = tmp_path / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True)
    # until k3lib/__init__.py imports them, the kernel imports the capacity and explorer modules at start
    (startup / "00-k3lib.py").write_text("import k3lib.axes.capacity, k3lib.report.explorer\n")
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    run = tmp_path / "run"
    with start_emulator(EmulatorConfig.from_profile("demo", time_scale=0.02), host="127.0.0.1", port=0) as h:
        pm.execute_notebook(
            str(ROOT / "notebooks/explore/oom_explorer.ipynb"), str(tmp_path / "out.ipynb"), kernel_name="python3",
            progress_bar=False, cwd=str(ROOT),
            parameters={"params_file": PARAMS, "run_dir": str(run),
                        "overrides": [f"target.base_url={h.url}", "target.gpu_metrics.source=dcgm",
                                      f"target.gpu_metrics.url={h.dcgm_url}", "axes.capacity.explore_max_requests=8",
                                      "axes.capacity.explore_duration_s=3"]})
    out = json.loads((tmp_path / "out.ipynb").read_text())
    assert "widgets" not in out["metadata"]
    text = json.dumps(out)
    assert "application/vnd.jupyter.widget-view+json" not in text and "text/html" in text
    burst = json.loads((run / "explore/burst-1/burst.json").read_text())
    assert burst["stats"]["ok"] == 8


def test_the_sliders_stop_at_what_the_server_serves_and_a_bad_override_names_its_key(tmp_path, emulator):
    """The demo serves 4,096 tokens: the context slider stops below it, not at twice a larger contract; a bad
    override says which key; the explorer's run folder is listed in `k3 history` as an explorer run, not as an
    acceptance that decided nothing."""
    from k3lib.core.errors import BadInputError
    from k3lib.report.history import read_point

    ctx = k3lib.open_axis("oom-explorer", PARAMS, [f"target.base_url={emulator.url}",
                                                   "contract.max_context_tokens=4096"], str(tmp_path / "run"))
    assert explorer.served_context(ctx) == 4096
    bounds = explorer.slider_bounds(ctx, explorer.settings_from(ctx))
    assert bounds["context_tokens"] < 4096 and bounds["output_tokens"] < 4096
    with pytest.raises(BadInputError) as info:
        k3lib.open_axis("oom-explorer", PARAMS, ["axes.capacity.explore_contex_tokens=100"], str(tmp_path / "r2"))
    assert "axes.capacity.explore_contex_tokens" in str(info.value)  # a notebook's traceback shows str()
    ctx.store.write_json("explore/burst-1/settings.json", {"concurrency": 1})
    assert read_point(ctx.store.root).kind == "explorer"
