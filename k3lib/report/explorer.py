"""The OOM explorer: pick a context length, a concurrency and an output length, fire one bounded burst at the
target and watch GPU memory, KV usage and the queue. Widgets only when `interactive`; headless it runs from the
parameters and draws the same figure statically (widgets never gate the computation).

Bursts are written under `explore/burst-N/` in the run folder, never under `evidence/` (they are not an axis).
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import TYPE_CHECKING, Any

import httpx
import pandas as pd  # the explorer is imported only by its notebook (k3lib.explorer, on first use)
import plotly.graph_objects as go
from plotly.subplots import make_subplots
from pydantic import Field

from ..axes.capacity.analysis import MIB, gpu_keys, gpu_label, increase
from ..axes.capacity.run import pinned_params
from ..axes.capacity.shapes import ClientStats
from ..axes.capacity.window import failure_kind, record_stats
from ..core.errors import APIError, TargetError
from ..core.record import Record
from ..core.numbers import figure
from ..io.client import WITHOUT_RAW, ChatClient
from ..io.load import check_load_target, run_closed_loop
from ..io.prompts import EstimateCounter, build_prompts
from ..io.sampling import Timeline

if TYPE_CHECKING:
    from ..core.session import AxisContext

ROOT = "explore"


class BurstSettings(Record):
    """The burst's shape; `model_dump()` is `burst.json`'s `settings` and a row of the tables."""

    context_tokens: int
    concurrency: int
    output_tokens: int
    max_requests: int
    duration_s: float


def settings_from(ctx: "AxisContext", **changes: Any) -> BurstSettings:
    """The headless burst: `axes.capacity.explore_*`, else the contract's largest prompt, planned concurrency
    and typical output length (its longest where it names no typical one)."""
    cap = ctx.params.axes.capacity
    contract = ctx.params.contract
    output = cap.explore_output_tokens or contract.typical_output_tokens or contract.max_output_tokens
    base = BurstSettings(
        context_tokens=cap.explore_context_tokens or max(16, contract.max_context_tokens - output),
        concurrency=cap.explore_concurrency or contract.planned_concurrency, output_tokens=output,
        max_requests=cap.explore_max_requests, duration_s=cap.explore_duration_s)
    return base.model_copy(update=changes)


class BurstResult(Record):
    """What one burst saw. `model_dump()` is `burst.json`: the samples and the request lines are kept in files of
    their own (`metrics.json`, `gpu.json`, `requests.jsonl`), not in it."""

    settings: BurstSettings
    folder: str
    start_wall: float
    end_wall: float
    metrics: list[dict[str, Any]] = Field(exclude=True)  # k3lib.io.sampling.Timeline.metric_rows
    gpu: list[dict[str, Any]] = Field(exclude=True)  # k3lib.io.sampling.Timeline.gpu_rows
    requests: list[dict[str, Any]] = Field(exclude=True)  # the request lines, as requests.jsonl holds them
    stats: ClientStats  # k3lib.axes.capacity.window.record_stats
    engine_alive_after: bool | None
    note: str = ""


class Burst:
    """One burst, run on its own thread and event loop so a notebook can redraw while it runs."""

    def __init__(self, ctx: "AxisContext", settings: BurstSettings) -> None:
        self.ctx = ctx
        self.settings = settings
        existing = sorted(ctx.store.path(ROOT).glob("burst-*")) if ctx.store.path(ROOT).exists() else []
        self.folder = f"{ROOT}/burst-{len(existing) + 1}"
        cap = ctx.params.axes.capacity
        self.timeline = Timeline(ctx.target.metrics_urls, pinned_params(ctx).target.gpu_metrics,
                                 interval_s=cap.sample_interval_s, max_duration_s=settings.duration_s + 120)
        self.records: list[dict[str, Any]] = []
        self.start_wall = 0.0
        self.end_wall = 0.0
        self.alive: bool | None = None
        self.note = ""
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="k3-explorer-burst", daemon=True)

    def start(self) -> Burst:

        # before any request, /tokenize included, and before the samplers touch the target
        check_load_target(self.ctx.target.base_url, self.ctx.params.target.allow_remote_load)
        self.ctx.store.path(self.folder).mkdir(parents=True, exist_ok=True)
        self.timeline.start()
        self.start_wall = time.time()
        self._thread.start()
        return self

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException as exc:  # noqa: BLE001 — handed to wait(), which re-raises in the caller's thread
            self.error = exc

    async def _run(self) -> None:
        s = self.settings
        params = self.ctx.params
        sizing = ChatClient(self.ctx.target.base_url, model=params.target.model, api_key_env=params.target.api_key_env,
                            timeout_s=params.target.timeout_s)
        client = ChatClient(self.ctx.target.base_url, model=params.target.model,
                            api_key_env=params.target.api_key_env, timeout_s=params.axes.capacity.request_timeout_s)
        try:
            try:
                prompts = await build_prompts(sizing, count=4, target_tokens=s.context_tokens, seed=7)
            except (APIError, TargetError) as exc:
                self.note = f"prompt sizing fell back to a chars/token estimate: {exc}"[:300]
                prompts = await build_prompts(EstimateCounter(), count=4, target_tokens=s.context_tokens, seed=7)
            bodies = [p.body(max_tokens=s.output_tokens, model=params.target.model, ignore_eos=True, temperature=0)
                      for p in prompts]
            tag = f"k3explore-{self.ctx.store.run_id}-{self.folder}"
            store = self.ctx.store

            def sink(rec: Any) -> None:
                d = rec.model_dump(context=WITHOUT_RAW)
                d.update(raw_json=None, done_wall_ns=rec.wall_ns(rec.done_ns), phase="explore")
                store.append_jsonl(f"{self.folder}/requests.jsonl", d)
                self.records.append(d)

            await run_closed_loop(client, lambda i: {**bodies[i % len(bodies)], "cache_salt": f"{tag}-{i}"},
                                  concurrency=s.concurrency, max_requests=s.max_requests, max_duration_s=s.duration_s,
                                  request_timeout_s=params.axes.capacity.request_timeout_s, sink=sink,
                                  name="explore", allow_remote_load=params.target.allow_remote_load)
            probe = await client.probe("/health", timeout_s=5.0)
            self.alive = probe.status == 200
        finally:
            self.end_wall = time.time()
            await sizing.aclose()
            await client.aclose()

    def wait(self, timeout_s: float | None = None) -> BurstResult:
        self._thread.join(timeout_s)
        self.timeline.stop()
        if self.error is not None:
            raise self.error
        return self._finish()

    def snapshot(self) -> BurstResult:
        """What the burst has seen so far (live plots)."""
        return BurstResult(settings=self.settings, folder=self.folder, start_wall=self.start_wall,
                           end_wall=self.end_wall or time.time(), metrics=self.timeline.metric_rows(),
                           gpu=self.timeline.gpu_rows(), requests=list(self.records),
                           stats=record_stats(self.records), engine_alive_after=self.alive, note=self.note)

    def _finish(self) -> BurstResult:
        result = self.snapshot()
        store = self.ctx.store
        store.write_json(f"{self.folder}/metrics.json", result.metrics)
        store.write_json(f"{self.folder}/gpu.json", result.gpu)
        store.write_json(f"{self.folder}/burst.json", result.model_dump())
        if store.path(f"{self.folder}/requests.jsonl").exists():
            store.adopt(f"{self.folder}/requests.jsonl")
        return result


def fire_burst(ctx: "AxisContext", settings: BurstSettings | None = None) -> BurstResult:
    """One bounded burst (requests AND seconds), blocking until it ends; the headless path and the widgets' path."""
    burst = Burst(ctx, settings or settings_from(ctx)).start()
    return burst.wait()


# -----------------------------------------------------------------------------------------------------------
# Figures and tables (static: they reach the offline HTML)


def burst_figure(result: BurstResult, *, widget: bool = False) -> Any:
    """GPU memory per GPU, KV usage, running vs waiting (the queue) and TTFT of one burst on the wall clock."""
    def when(ts: list[float]) -> list[Any]:
        return list(pd.to_datetime(ts, unit="s", utc=True))

    s = result.settings
    fig = make_subplots(rows=4, cols=1, shared_xaxes=True, vertical_spacing=0.05,
                        subplot_titles=("GPU memory (MiB)", "KV cache usage (%)", "running / waiting",
                                        "TTFT (ms) per request"))
    for key in gpu_keys(result.gpu) or [("", -1)]:
        pts = [(r["t_wall"], r["fb_used_bytes"] / MIB) for r in result.gpu
               if (str(r.get("host")), r.get("gpu")) == key and r.get("fb_used_bytes") is not None]
        fig.add_trace(go.Scatter(x=when([p[0] for p in pts]), y=[p[1] for p in pts], mode="lines",
                                 name=gpu_label(key) if key[1] >= 0 else "GPU memory"), row=1, col=1)
    met = result.metrics
    kv = [(r["t_wall"], r["kv_cache_usage_perc"] * 100) for r in met if r.get("kv_cache_usage_perc") is not None]
    fig.add_trace(go.Scatter(x=when([p[0] for p in kv]), y=[p[1] for p in kv], mode="lines", name="KV usage %"),
                  row=2, col=1)
    for col in ("num_requests_running", "num_requests_waiting"):
        pts = [(r["t_wall"], r[col]) for r in met if r.get(col) is not None]
        fig.add_trace(go.Scatter(x=when([p[0] for p in pts]), y=[p[1] for p in pts], mode="lines",
                                 line=dict(shape="hv"), name=col.replace("num_requests_", "")), row=3, col=1)
    ok = [r for r in result.requests if r.get("ttft_ms") is not None and r.get("sent_wall_ns")]
    fig.add_trace(go.Scatter(x=when([r["sent_wall_ns"] / 1e9 for r in ok]), y=[r["ttft_ms"] for r in ok],
                             mode="markers", marker=dict(size=5), name="TTFT"), row=4, col=1)
    pre = [r["num_preemptions_total"] for r in met if r.get("num_preemptions_total") is not None]
    failed = sum(1 for r in result.requests if failure_kind(r) in ("server-error", "unreachable"))
    fig.update_layout(title=f"Burst: {s.context_tokens} tokens × {s.concurrency} concurrent, "
                            f"{s.output_tokens} out — "
                            f"{result.stats.get('ok', 0)} ok, {failed} failed, "
                            f"{figure(increase(pre) if len(pre) > 1 else 0)} preemptions"
                            + ("" if result.engine_alive_after in (None, True) else " — ENGINE DEAD"),
                      height=720, margin=dict(t=60, b=40, l=70, r=20), legend=dict(orientation="h", y=-0.08))
    return go.FigureWidget(fig) if widget else fig


def burst_table(result: BurstResult) -> Any:
    row = {**result.settings.model_dump(), **result.stats, "engine_alive_after": result.engine_alive_after,
           "duration_s": round(result.end_wall - result.start_wall, 2), "folder": result.folder, "note": result.note}
    return pd.DataFrame([row])


# -----------------------------------------------------------------------------------------------------------
# Widgets (JupyterLab only)


def explorer(ctx: "AxisContext") -> Any:
    """The widget panel when `ctx.interactive`; headless, the settings the burst below will use (a table)."""
    settings = settings_from(ctx)
    if not ctx.interactive:
        return pd.DataFrame([settings.model_dump()]).assign(mode="headless (interactive=False): no widgets")
    return _panel(ctx, settings)


def served_context(ctx: "AxisContext") -> int | None:
    """The context limit the target serves (`max_model_len` of its model on /v1/models), None when it does not
    say (another engine, an unreadable list)."""

    try:
        resp = httpx.get(f"{ctx.target.base_url}/v1/models", headers=ctx.target.headers(), timeout=5.0)
        cards = resp.json().get("data") if resp.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    cards = [c for c in cards or [] if isinstance(c, dict)]
    wanted = ctx.params.target.model
    card = next((c for c in cards if c.get("id") == wanted), cards[0] if cards else {})
    limit = card.get("max_model_len")
    return limit if isinstance(limit, int) and limit > 16 else None


def slider_bounds(ctx: "AxisContext", settings: BurstSettings) -> dict[str, int]:
    """The sliders' maxima: a prompt and its answer within what the server serves (a request past its
    max_model_len is refused with 400 and measures nothing about memory), else twice the contract's context;
    the concurrency up to four times the planned one."""
    served = served_context(ctx)
    context = served - 16 if served else max(ctx.params.contract.max_context_tokens * 2, settings.context_tokens)
    output = min(max(4 * settings.output_tokens, 64), served - 16) if served else max(4 * settings.output_tokens, 64)
    return {"context_tokens": max(16, context), "output_tokens": max(1, output),
            "concurrency": max(4 * settings.concurrency, 8)}


def _panel(ctx: "AxisContext", settings: BurstSettings) -> Any:
    try:
        import ipywidgets as w
    except ImportError as exc:  # optional part: fail lazily with the install hint
        raise ImportError("the OOM explorer's widgets need ipywidgets; pip install ipywidgets") from exc

    b = slider_bounds(ctx, settings)
    context = w.IntSlider(value=min(settings.context_tokens, b["context_tokens"]), min=16, max=b["context_tokens"],
                          step=16, description="context tok", continuous_update=False)
    conc = w.IntSlider(value=settings.concurrency, min=1, max=b["concurrency"],
                       description="concurrency", continuous_update=False)
    out_tok = w.IntSlider(value=min(settings.output_tokens, b["output_tokens"]), min=1, max=b["output_tokens"],
                          description="output tok", continuous_update=False)
    requests = w.BoundedIntText(value=settings.max_requests, min=1, max=100_000, description="max requests")
    duration = w.BoundedFloatText(value=settings.duration_s, min=0.5, max=3600, description="max seconds")
    fire = w.Button(description="Fire burst", button_style="warning", icon="bolt")
    status = w.HTML(value="<i>pick a shape and fire a bounded burst</i>")
    live = _LivePlot(BurstResult(settings=settings, folder="", start_wall=time.time(), end_wall=time.time(), metrics=[],
                                 gpu=[], requests=[], stats={}, engine_alive_after=None))
    redraw = live.update

    def on_fire(_: Any) -> None:
        chosen = settings.model_copy(update={"context_tokens": context.value, "concurrency": conc.value,
                                             "output_tokens": out_tok.value, "max_requests": requests.value,
                                             "duration_s": float(duration.value)})
        fire.disabled = True
        status.value = f"running: {chosen.model_dump()}"
        burst = Burst(ctx, chosen).start()
        try:
            # redraw from this thread while the burst runs on its own: outgoing widget messages still flow
            while burst.running:
                redraw(burst.snapshot())
                time.sleep(max(ctx.params.axes.capacity.sample_interval_s, 0.25))
            result = burst.wait()
            redraw(result)
            status.value = f"done: {result.stats.get('ok', 0)} ok of {result.stats.get('sent', 0)}, kept in " \
                           f"{result.folder}" + ("" if result.engine_alive_after is not False else " — ENGINE DEAD")
        except Exception as exc:  # noqa: BLE001 — shown in the panel; the cell that made it already returned
            status.value = f"<b>failed</b>: {type(exc).__name__}: {exc}"
        finally:
            fire.disabled = False

    fire.on_click(on_fire)
    return w.VBox([w.HBox([context, conc, out_tok]), w.HBox([requests, duration, fire]), status, live.widget])


class _LivePlot:
    """A plotly FigureWidget updated in place; plotly ≥ 6 needs anywidget for it, so without anywidget the
    static figure is redrawn inside an ipywidgets Output (still live, a little more flicker)."""

    def __init__(self, first: BurstResult) -> None:
        import ipywidgets as w

        self.last = burst_figure(first)
        try:
            self.figure: Any = burst_figure(first, widget=True)
            self.widget: Any = self.figure
        except ImportError:
            self.figure = None
            self.widget = w.Output()

    def update(self, result: BurstResult) -> None:
        fresh = self.last = burst_figure(result)
        if self.figure is not None:
            with self.figure.batch_update():
                for i, trace in enumerate(fresh.data):
                    if i < len(self.figure.data):
                        self.figure.data[i].x, self.figure.data[i].y = trace.x, trace.y
                self.figure.layout.title = fresh.layout.title
            return
        from IPython.display import display

        with self.widget:
            self.widget.clear_output(wait=True)
            display(fresh)
