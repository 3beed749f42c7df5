"""The load series of the review window, on one time grid, from a history file or from a Prometheus server.

Both sources end in the same `RawSeries` (label set → values on the grid) under Prometheus' own evaluation rule,
so the analysis cannot tell them apart: the value at grid time t is the latest sample in [t − lookback, t]
(lookback 5 min, Prometheus' default). The history file is resampled by that rule here; a server evaluates it
itself in a range query. Counters are turned into per-step increases after that, with resets detected.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from bisect import bisect_right
from pathlib import Path
from typing import Iterable, Mapping

from ..core.errors import ArtifactError, BadInputError, TargetUnreachable
from ..io.metrics.names import spec_for

MAX_POINTS_PER_SERIES = 11_000  # Prometheus refuses a range query above this resolution
LOOKBACK_S = 300.0  # Prometheus' default --query.lookback-delta
DCGM_GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
DCGM_FB_USED = "DCGM_FI_DEV_FB_USED"
# canonical name → how it is aggregated across label sets (engines, ranks, GPUs)
VLLM_SERIES = {"num_requests_running": "sum", "num_requests_waiting": "sum", "kv_cache_usage_perc": "max",
               "prompt_tokens_total": "counter", "generation_tokens_total": "counter",
               "request_success_total": "counter"}
FRAME_COLUMNS = ("running", "waiting", "kv_usage", "prompt_tokens", "generation_tokens", "successes",
                 "gpu_util", "gpu_mem_used_mib", "gpus_reporting")
_COLUMN = {"num_requests_running": "running", "num_requests_waiting": "waiting", "kv_cache_usage_perc": "kv_usage",
           "prompt_tokens_total": "prompt_tokens", "generation_tokens_total": "generation_tokens",
           "request_success_total": "successes"}

LabelKey = tuple[tuple[str, str], ...]


@dataclasses.dataclass(frozen=True)
class Grid:
    """Evaluation times start+step … end (Unix seconds); slot k covers (t_k − step, t_k]."""

    start_s: float
    end_s: float
    step_s: float

    @classmethod
    def for_window(cls, start: dt.datetime, end: dt.datetime, step_s: float) -> "Grid":
        duration = (end - start).total_seconds()
        if duration <= 0:
            raise BadInputError(f"the window ends ({end.isoformat()}) before it starts ({start.isoformat()})",
                                source="review.series.window")
        # A coarser step when the window would exceed Prometheus' per-series limit (both sources use it).
        step = max(float(step_s), math.ceil(duration / (MAX_POINTS_PER_SERIES - 1)))
        return cls(start.timestamp(), end.timestamp(), step)

    def times(self) -> list[float]:
        n = int((self.end_s - self.start_s) // self.step_s)
        return [self.start_s + (k + 1) * self.step_s for k in range(n)]


@dataclasses.dataclass(frozen=True)
class RawSeries:
    """Every label set of one exposed name, evaluated on the grid (NaN where no sample was in the lookback)."""

    name: str
    values: Mapping[LabelKey, tuple[float, ...]]


# --- the history file --------------------------------------------------------------------------------------------

def _numbered_lines(fh: Iterable[str], source: str) -> Iterable[tuple[int, str]]:
    """(line number, line), streamed; a byte that is not UTF-8 is one ArtifactError line, not a traceback."""
    n = 0
    try:
        for n, line in enumerate(fh, start=1):
            yield n, line
    except UnicodeDecodeError:
        raise ArtifactError(f"not UTF-8 text after line {n}; expected an OpenMetrics history file",
                            source=source) from None


def _om_sample(line: str, line_no: int, source: str) -> tuple[str, LabelKey, float, float | None]:
    """One sample line read by `prometheus_client`'s OpenMetrics parser: name, sorted labels, value, timestamp."""
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    try:
        samples = [x for m in text_string_to_metric_families(line + "\n# EOF\n") for x in m.samples]
    except ValueError as exc:
        detail = " ".join(str(exc).split())[:160] or "not an OpenMetrics sample"
        raise ArtifactError(f"line {line_no}: {detail}; expected `name{{labels}} value unix_seconds` (a number "
                            "and a Unix timestamp in seconds)", source=source) from None
    if len(samples) != 1:
        raise ArtifactError(f"line {line_no}: not one OpenMetrics sample; expected `name{{labels}} value "
                            "unix_seconds`", source=source)
    x = samples[0]
    return (x.name, tuple(sorted(x.labels.items())), float(x.value),
            None if x.timestamp is None else float(x.timestamp))


def _number(text: str) -> float:
    """A value or timestamp as the exposition format writes it (Python's float() also takes `1_000`)."""
    if "_" in text:
        raise ValueError(text)
    return float(text)


def read_history(path: str | Path, names: Iterable[str] | None = None
                 ) -> dict[str, dict[LabelKey, list[tuple[float, float]]]]:
    """OpenMetrics text with a timestamp on every sample (what `promtool tsdb create-blocks-from openmetrics`
    reads) → name → label set → [(t_s, value)] in time order. Only `names` are kept when given.

    Sample names and labels are read by `prometheus_client`'s OpenMetrics parser (its label unescaping: `C:\\\\new`
    is a backslash then `new`), once per distinct series: the first line of each series is read whole by it, the
    value and timestamp of the next ones by the same number rules, so an 80,000-line history reads in about the
    time of a plain split. Free `#` comments and blank lines are skipped; what promtool would take silently and
    misplace is refused in one line: a sample without a timestamp, a timestamp in milliseconds, a series out of
    time order or repeating a time."""
    p = Path(path)
    source = str(p)
    keep = set(names) if names is not None else None
    out: dict[str, dict[LabelKey, list[tuple[float, float]]]] = {}
    #: the text before the value (`name{labels}`) → (name, label set), as the parser read it
    heads: dict[str, tuple[str, LabelKey]] = {}
    try:
        fh = open(p, encoding="utf-8")
    except FileNotFoundError:
        raise BadInputError("file not found; expected an OpenMetrics history file", source=source) from None
    except OSError as exc:
        raise BadInputError(f"cannot read ({exc.strerror}); expected an OpenMetrics history file",
                            source=source) from None
    seen_sample = False
    with fh:
        for line_no, line in _numbered_lines(fh, source):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            brace = line.find("{")
            space = line.find(" ")
            if brace >= 0 and (space < 0 or brace < space):
                close = line.rfind("}")
                head, rest = line[:close + 1], line[close + 1:].split()
                raw_name = line[:brace]
            else:
                head, *rest = line.split()
                raw_name = head
            seen_sample = True
            if keep is not None and raw_name not in keep:
                continue
            if len(rest) < 2:
                raise ArtifactError(f"line {line_no}: no timestamp after the value; a history file needs "
                                    "`name{labels} value unix_seconds` on every sample", source=source)
            known = heads.get(head)
            if known is None:
                name, key, value, stamp = _om_sample(line, line_no, source)
                heads[head] = (name, key)
                if stamp is None:  # pragma: no cover - `rest` had two fields; the parser read the second as one
                    raise ArtifactError(f"line {line_no}: no timestamp after the value", source=source)
                ts = stamp
            else:
                name, key = known
                try:
                    value, ts = _number(rest[0]), _number(rest[1])
                    if len(rest) > 2 or not math.isfinite(ts):
                        raise ValueError(rest[1])
                except ValueError:
                    raise ArtifactError(f"line {line_no}: expected a number and a Unix timestamp in seconds, got "
                                        f"{' '.join(rest[:3])!r}", source=source) from None
            if ts > 1e11:
                # promtool accepts milliseconds silently and writes blocks in the year 58877
                raise ArtifactError(f"line {line_no}: timestamp {rest[1]} looks like milliseconds; OpenMetrics "
                                    "timestamps are Unix seconds", source=source)
            series = out.setdefault(name, {}).setdefault(key, [])
            if series and ts <= series[-1][0]:
                # promtool drops out-of-order and duplicate samples silently; say so instead
                raise ArtifactError(f"line {line_no}: sample at {rest[1]} is not after the previous one of "
                                    f"{name}; write each series in ascending time order", source=source)
            series.append((ts, value))
    if not seen_sample:
        raise ArtifactError("no samples; expected OpenMetrics text with timestamps", source=source)
    return out


def evaluate_on_grid(points: list[tuple[float, float]], grid: Grid, lookback_s: float = LOOKBACK_S
                     ) -> tuple[float, ...]:
    """Prometheus' instant-vector rule at each grid time: the latest sample in [t − lookback, t], else NaN."""
    times = [t for t, _ in points]
    out = []
    for t in grid.times():
        i = bisect_right(times, t) - 1
        out.append(points[i][1] if i >= 0 and times[i] >= t - lookback_s else math.nan)
    return tuple(out)


def _pick_names(available: Iterable[str]) -> list[str]:
    have = set(available)
    picked = [next((n for n in spec_for(c).names if n in have), spec_for(c).names[0]) for c in VLLM_SERIES]
    return picked + [DCGM_GPU_UTIL, DCGM_FB_USED]


def series_from_file(path: str | Path, grid: Grid) -> dict[str, RawSeries]:
    """The review series from a history file, evaluated on `grid` as a Prometheus range query would be."""
    wanted = {n for c in VLLM_SERIES for n in spec_for(c).names} | {DCGM_GPU_UTIL, DCGM_FB_USED}
    history = read_history(path, wanted)
    out = {}
    for name in _pick_names(history):
        if name in history:
            out[name] = RawSeries(name, {k: evaluate_on_grid(v, grid) for k, v in sorted(history[name].items())})
    return out


# --- a Prometheus server -----------------------------------------------------------------------------------------

def series_from_prometheus(url: str, grid: Grid, *, selector: str = "", timeout_s: float = 30.0
                           ) -> dict[str, RawSeries]:
    """The same series by range queries; `selector` adds label matchers, e.g. `job="vllm"`."""
    try:
        from prometheus_api_client import PrometheusConnect
    except ImportError:  # pragma: no cover - an optional part, installed with the kit
        raise BadInputError("prometheus-api-client is not installed (pip install prometheus-api-client)",
                            source="review.series.prometheus_url") from None
    prom = PrometheusConnect(url=url, disable_ssl=True)
    start = dt.datetime.fromtimestamp(grid.start_s + grid.step_s, dt.timezone.utc)
    end = dt.datetime.fromtimestamp(grid.times()[-1], dt.timezone.utc)
    extra = f",{selector}" if selector else ""
    times = grid.times()
    index = {t: i for i, t in enumerate(times)}

    def fetch(name: str) -> dict[LabelKey, tuple[float, ...]]:
        try:
            result = prom.custom_query_range(f'{{__name__="{name}"{extra}}}', start_time=start, end_time=end,
                                             step=f"{grid.step_s:g}s", params={"timeout": f"{timeout_s:g}s"})
        except Exception as exc:  # requests' and the client's own errors: the server is the problem
            raise TargetUnreachable(f"Prometheus range query for {name} at {url} failed: {exc}") from exc
        series = {}
        for item in result:
            labels = tuple(sorted((k, v) for k, v in item["metric"].items() if k != "__name__"))
            vals = [math.nan] * len(times)
            for ts, val in item["values"]:
                i = index.get(float(ts))
                if i is not None:
                    vals[i] = float(val)
            series[labels] = tuple(vals)
        return dict(sorted(series.items()))

    out = {}
    for canonical in VLLM_SERIES:
        for name in spec_for(canonical).names:  # preferred name first, as on a live endpoint
            got = fetch(name)
            if got:
                out[name] = RawSeries(name, got)
                break
    for name in (DCGM_GPU_UTIL, DCGM_FB_USED):
        got = fetch(name)
        if got:
            out[name] = RawSeries(name, got)
    return out


# --- the common frame ----------------------------------------------------------------------------------------------

def counter_increases(values: tuple[float, ...]) -> list[float]:
    """Per-step increase of one counter; a drop is a reset (the new value is the increase, as `increase()`
    counts it) and an increase across a gap lands on the first step after it."""
    out, last = [], math.nan
    for v in values:
        if math.isnan(v):
            out.append(0.0)
            continue
        if math.isnan(last):
            out.append(0.0)  # the first sample: nothing known before it
        else:
            out.append(v - last if v >= last else v)
        last = v
    return out


def load_frame(raw: Mapping[str, RawSeries], grid: Grid):
    """RawSeries → a pandas DataFrame on the grid (UTC index) with FRAME_COLUMNS."""
    import numpy as np
    import pandas as pd

    index = pd.to_datetime([int(t) for t in grid.times()], unit="s", utc=True)
    frame = pd.DataFrame(index=index)
    by_canonical = {c: next((raw[n] for n in spec_for(c).names if n in raw), None) for c in VLLM_SERIES}
    for canonical, how in VLLM_SERIES.items():
        col = _COLUMN[canonical]
        rs = by_canonical[canonical]
        if rs is None or not rs.values:
            frame[col] = np.nan
            continue
        arr = np.array(list(rs.values.values()), dtype=float)
        if how == "counter":
            frame[col] = np.array([counter_increases(v) for v in rs.values.values()]).sum(axis=0)
        elif how == "sum":
            frame[col] = np.where(np.isnan(arr).all(axis=0), np.nan, np.nansum(arr, axis=0))
        else:
            frame[col] = np.where(np.isnan(arr).all(axis=0), np.nan, np.nanmax(np.nan_to_num(arr, nan=-1), axis=0))
    util = raw.get(DCGM_GPU_UTIL)
    mem = raw.get(DCGM_FB_USED)
    if util and util.values:
        arr = np.array(list(util.values.values()), dtype=float) / 100.0  # dcgm reports percent
        reporting = (~np.isnan(arr)).sum(axis=0)
        frame["gpu_util"] = np.where(reporting > 0, np.nansum(arr, axis=0) / np.maximum(reporting, 1), np.nan)
        frame["gpus_reporting"] = reporting
    else:
        frame["gpu_util"] = np.nan
        frame["gpus_reporting"] = 0
    if mem and mem.values:
        arr = np.array(list(mem.values.values()), dtype=float)
        frame["gpu_mem_used_mib"] = np.where(np.isnan(arr).all(axis=0), np.nan, np.nansum(arr, axis=0))
    else:
        frame["gpu_mem_used_mib"] = np.nan
    return frame[list(FRAME_COLUMNS)]


def gpu_count(raw: Mapping[str, RawSeries]) -> int:
    util = raw.get(DCGM_GPU_UTIL)
    return len(util.values) if util else 0
