"""The load series of the review window, on one time grid, from a history file or from a Prometheus server.

Both sources end in the same `RawSeries` (label set → values on the grid), so the analysis cannot tell them apart.
Each slot (t − step, t] holds a *measure of the slot*, never one instant: a gauge's mean over the slot (a server
evaluates `avg_over_time(x[step])`), a counter's last value in it (`last_over_time`), turned into per-slot increases
after that, with resets detected. A slot without a sample is NaN: not shown, never idle and never busy.

Only the reviewed deployment's series are kept (`review.deployment`, see selector.py): the others are counted by
reason and reported.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import warnings
from bisect import bisect_right
from pathlib import Path
from typing import Any, Iterable, Mapping

from prometheus_client.openmetrics.parser import text_string_to_metric_families

from ..core.errors import ArtifactError, BadInputError, TargetUnreachable
from ..io.metrics.names import spec_for
from .params import DeploymentLabels
from .selector import LeftOut, gpu_hosts, gpu_key, matchers, select

MAX_POINTS_PER_SERIES = 11_000  # Prometheus refuses a range query above this resolution
MAX_STEP_S = 900.0  # a slot stays well under the idle stretches it must show (review.series.step_s is bounded so)
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

# dcgm-exporter writes DCGM's "blank" values as numbers when a field has no reading: DCGM_INT32_BLANK 0x7FFFFFF0
# (2147483632) and its NOT_FOUND/NOT_SUPPORTED/NOT_PERMISSIONED neighbours, DCGM_INT64_BLANK 0x7FFFFFFFFFFFFFF0,
# DCGM_FP64_BLANK 2^47 (140737488355328) and theirs. No GPU utilisation (percent) or framebuffer size (MiB) reaches
# them: any DCGM value at or above the smallest is a blank, never a measure.
DCGM_BLANK_MIN = float(0x7FFFFFF0)
_PERCENT = {"DCGM_FI_DEV_GPU_UTIL"}  # 0–100
_FRACTION = {"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"}  # 0–1


def sample_problem(name: str, value: float) -> str | None:
    """Why a sample of `name` is no measure (None: it is one): NaN or ±Inf, a DCGM blank sentinel, a utilisation
    outside 0–100, a share outside 0–1, a negative gauge or counter."""
    if not math.isfinite(value):
        return f"{name} is {value}; expected a finite number (a missing reading is a missing sample, not NaN or Inf)"
    if name.startswith("DCGM_FI_") and value >= DCGM_BLANK_MIN:
        return (f"{name} is {value:.0f}, a DCGM blank value (no reading: 0x7FFFFFF0 and above); expected a measure — "
                "drop the sample")
    if value < 0:
        return f"{name} is {value:g}; expected a value ≥ 0"
    if name in _PERCENT and value > 100:
        return f"{name} is {value:g}; expected a utilisation in percent, 0–100"
    if name in _FRACTION and value > 1:
        return f"{name} is {value:g}; expected a share 0–1"
    return None


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
        if step > MAX_STEP_S:
            raise BadInputError(f"a window of {duration / 86400:.0f} days needs a step of {step:g} s under "
                                f"Prometheus' {MAX_POINTS_PER_SERIES:,} points per series, above the {MAX_STEP_S:g} s a "
                                "slot may last; expected a window of at most "
                                f"{MAX_STEP_S * (MAX_POINTS_PER_SERIES - 1) / 86400:.0f} days (review one cycle at a time)",
                                source="review.series.window")
        return cls(start.timestamp(), end.timestamp(), step)

    def times(self) -> list[float]:
        n = int((self.end_s - self.start_s) // self.step_s)
        return [self.start_s + (k + 1) * self.step_s for k in range(n)]


@dataclasses.dataclass(frozen=True)
class RawSeries:
    """Every kept label set of one exposed name, measured per slot on the grid (NaN: no sample in the slot)."""

    name: str
    values: Mapping[LabelKey, tuple[float, ...]]


@dataclasses.dataclass(frozen=True)
class ReviewSeries:
    """The deployment's series on the grid and what was left out of them (other hosts, GPUs, models)."""

    raw: dict[str, RawSeries]
    left_out: tuple[LeftOut, ...]
    gpus_in_series: int  # distinct GPUs of the deployment in the utilisation series


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
                value, ts = _value_and_time(rest, line_no, source)
            if ts > 1e11:
                # promtool accepts milliseconds silently and writes blocks in the year 58877
                raise ArtifactError(f"line {line_no}: timestamp {rest[1]} looks like milliseconds; OpenMetrics "
                                    "timestamps are Unix seconds", source=source)
            problem = sample_problem(name, value)
            if problem is not None:
                raise ArtifactError(f"line {line_no}: {problem}", source=source)
            series = out.setdefault(name, {}).setdefault(key, [])
            if series and ts <= series[-1][0]:
                # promtool drops out-of-order and duplicate samples silently; say so instead
                raise ArtifactError(f"line {line_no}: sample at {rest[1]} is not after the previous one of "
                                    f"{name}; write each series in ascending time order", source=source)
            series.append((ts, value))
    if not seen_sample:
        raise ArtifactError("no samples; expected OpenMetrics text with timestamps", source=source)
    return out


def _value_and_time(rest: list[str], line_no: int, source: str) -> tuple[float, float]:
    """The value and Unix-seconds timestamp after a series' head already read (the fast path of `read_history`)."""
    try:
        value, ts = _number(rest[0]), _number(rest[1])
        if len(rest) > 2 or not math.isfinite(ts):
            raise ValueError(rest[1])
    except ValueError:
        raise ArtifactError(f"line {line_no}: expected a number and a Unix timestamp in seconds, got "
                            f"{' '.join(rest[:3])!r}", source=source) from None
    return value, ts


def evaluate_on_grid(points: list[tuple[float, float]], grid: Grid, how: str = "mean") -> tuple[float, ...]:
    """Each slot (t − step, t] of the grid measured from the samples in it: their mean (`avg_over_time`) or the last
    one (`last_over_time`, for counters); NaN where the slot holds no sample. (Prometheus 2.x closes the range on
    the left too; the demo's samples sit mid-slot, so both give the same slots.)"""
    times = [t for t, _ in points]
    values = [v for _, v in points]
    out = []
    for t in grid.times():
        hi = bisect_right(times, t)
        lo = bisect_right(times, t - grid.step_s)
        if hi <= lo:
            out.append(math.nan)
        elif how == "last":
            out.append(values[hi - 1])
        else:  # an exact sum (one sample is itself, as Prometheus gives it back)
            out.append(math.fsum(values[lo:hi]) / (hi - lo))
    return tuple(out)


def _pick_names(available: Iterable[str]) -> list[str]:
    have = set(available)
    picked = [next((n for n in spec_for(c).names if n in have), spec_for(c).names[0]) for c in VLLM_SERIES]
    return picked + [DCGM_GPU_UTIL, DCGM_FB_USED]


def _how(name: str) -> str:
    return "last" if name.endswith("_total") else "mean"


def _kept(name: str, values: Mapping[LabelKey, tuple[float, ...]], deployment: DeploymentLabels
          ) -> tuple[RawSeries | None, list[LeftOut]]:
    keys, left = select(name, sorted(values), deployment)
    return (RawSeries(name, {k: values[k] for k in keys}) if keys else None), left


def review_series(evaluated: Mapping[str, Mapping[LabelKey, tuple[float, ...]]], deployment: DeploymentLabels,
                  left_before: list[LeftOut], source: str) -> ReviewSeries:
    """The deployment's series among those evaluated, the others counted; the GPUs kept must be the GPUs the
    capacity reserves (`deployment.gpus`), else one line naming the source."""
    raw: dict[str, RawSeries] = {}
    left = list(left_before)
    for name, values in evaluated.items():
        kept, out = _kept(name, values, deployment)
        left += out
        if kept is not None:
            raw[name] = kept
    util = raw.get(DCGM_GPU_UTIL)
    gpus = len({gpu_key(k) for k in util.values}) if util else 0
    if util and deployment.gpus is not None and gpus != deployment.gpus:
        hosts = ", ".join(gpu_hosts(util.values))
        raise BadInputError(f"{gpus} GPUs of the deployment ({hosts}) in {DCGM_GPU_UTIL} but review.deployment.gpus "
                            f"is {deployment.gpus}; expected the reserved GPUs alone — name them by "
                            "review.deployment.gpu_uuids when their nodes hold others", source=source)
    merged: dict[tuple[str, str], LeftOut] = {}
    for x in left:
        have = merged.get((x.name, x.reason))
        merged[(x.name, x.reason)] = LeftOut(x.name, x.reason, x.series + (have.series if have else 0))
    return ReviewSeries(raw, tuple(merged.values()), gpus)


def _refuse_fraction(values: list[float], source: str) -> None:
    """A utilisation series that never exceeds 1 while reading fractions (0.38) was written as a share, not in
    dcgm-exporter's percent: read as percent it would show a busy deployment idle. Refused, naming the series. A
    history file is judged on its raw samples (dcgm-exporter writes whole percents); Prometheus on its slot means,
    so there a deployment whose GPUs never exceed 1 % in the whole window is refused too (and says why)."""
    values = [v for v in values if not math.isnan(v)]
    if values and max(values) <= 1.0 and any(0 < v < 1 for v in values):
        raise BadInputError(f"{DCGM_GPU_UTIL} of the deployment never exceeds {max(values):g} and reads fractions such "
                            f"as {next(v for v in values if 0 < v < 1):g}: a share written where dcgm-exporter writes "
                            "percent; expected utilisation in percent, 0–100 (multiply the series by 100)",
                            source=source)


def series_from_file(path: str | Path, grid: Grid, deployment: DeploymentLabels) -> ReviewSeries:
    """The deployment's review series from a history file, measured on `grid` as the range queries would be."""
    wanted = {n for c in VLLM_SERIES for n in spec_for(c).names} | {DCGM_GPU_UTIL, DCGM_FB_USED}
    history = read_history(path, wanted)
    evaluated = {}
    for name in _pick_names(history):
        if name in history:
            keys, _ = select(name, history[name], deployment)
            if name == DCGM_GPU_UTIL:
                _refuse_fraction([v for k in keys for _, v in history[name][k]], str(path))
            # only the deployment's label sets are measured; the others are counted by review_series
            evaluated[name] = {k: evaluate_on_grid(v, grid, _how(name)) if k in keys else () for k, v in
                               sorted(history[name].items())}
    return review_series(evaluated, deployment, [], str(path))


# --- a Prometheus server -----------------------------------------------------------------------------------------

def _connect(url: str) -> Any:
    try:
        from prometheus_api_client import PrometheusConnect
    except ImportError:  # pragma: no cover - an optional part, installed with the kit
        raise BadInputError("prometheus-api-client is not installed (pip install prometheus-api-client)",
                            source="review.series.prometheus_url") from None
    return PrometheusConnect(url=url, disable_ssl=True)


def series_from_prometheus(url: str, grid: Grid, deployment: DeploymentLabels, *, selector: str = "",
                           timeout_s: float = 30.0) -> ReviewSeries:
    """The same series by range queries: each slot the gauge's `avg_over_time` (a counter's `last_over_time`) over
    the step, the deployment's label matchers added to `selector` (extra matchers, e.g. `job="vllm"`). What the
    matchers leave out is counted from the series metadata of the window (`/api/v1/series`, labels only)."""
    prom = _connect(url)
    start = dt.datetime.fromtimestamp(grid.start_s + grid.step_s, dt.timezone.utc)
    end = dt.datetime.fromtimestamp(grid.times()[-1], dt.timezone.utc)
    times = grid.times()
    index = {t: i for i, t in enumerate(times)}

    def call(what: str, fn: Any) -> Any:
        try:
            return fn()
        except Exception as exc:  # requests' and the client's own errors: the server is the problem
            raise TargetUnreachable(f"Prometheus {what} at {url} failed: {exc}") from exc

    def fetch(name: str) -> dict[LabelKey, tuple[float, ...]]:
        match = ",".join(m for m in (f'__name__="{name}"', matchers(name, deployment), selector) if m)
        fn = "last_over_time" if _how(name) == "last" else "avg_over_time"
        result = call(f"range query for {name}", lambda: prom.custom_query_range(
            f"{fn}({{{match}}}[{grid.step_s:g}s])", start_time=start, end_time=end, step=f"{grid.step_s:g}s",
            params={"timeout": f"{timeout_s:g}s"}))
        series = {}
        for item in result:
            labels = tuple(sorted((k, v) for k, v in item["metric"].items() if k != "__name__"))
            vals = [math.nan] * len(times)
            for ts, val in item["values"]:
                i = index.get(float(ts))
                if i is not None:
                    vals[i] = float(val)
                    problem = sample_problem(name, vals[i])
                    if problem is not None:
                        at = dt.datetime.fromtimestamp(float(ts), dt.timezone.utc).isoformat()
                        raise BadInputError(f"{problem} ({dict(labels)} at {at})", source=url)
            series[labels] = tuple(vals)
        return dict(sorted(series.items()))

    def others(name: str) -> list[LeftOut]:
        """The series of `name` in the window that the deployment's matchers left out, counted by reason."""
        match = ",".join(m for m in (f'__name__="{name}"', selector) if m)
        found = call(f"series look-up for {name}", lambda: prom.get_series(
            start=dt.datetime.fromtimestamp(grid.start_s, dt.timezone.utc), end=end, params={"match[]": f"{{{match}}}"}))
        keys = {tuple(sorted((k, v) for k, v in s.items() if k != "__name__")) for s in found or ()}
        _, left = select(name, keys, deployment)
        return left

    evaluated: dict[str, dict[LabelKey, tuple[float, ...]]] = {}
    left: list[LeftOut] = []
    families = [spec_for(c).names for c in VLLM_SERIES] + [(DCGM_GPU_UTIL,), (DCGM_FB_USED,)]
    for names in families:  # the preferred name first, as on a live endpoint
        for name in names:
            got = fetch(name)
            left += others(name)
            if got:
                evaluated[name] = got
                break
    if DCGM_GPU_UTIL in evaluated:
        _refuse_fraction([v for vals in evaluated[DCGM_GPU_UTIL].values() for v in vals], url)
    return review_series(evaluated, deployment, left, url)


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


def _per_gpu(rs: RawSeries):
    """One row per GPU (its series merged: a relabelled GPU keeps one row), slot by slot the mean of its values."""

    import numpy as np

    rows: dict[str, list[tuple[float, ...]]] = {}
    for key, values in rs.values.items():
        rows.setdefault(gpu_key(key), []).append(values)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "mean of empty slice": a slot none of its series covers
        return np.array([np.nanmean(np.array(v, dtype=float), axis=0) for _, v in sorted(rows.items())])


def load_frame(raw: Mapping[str, RawSeries], grid: Grid, gpus: int | None = None):
    """RawSeries → a pandas DataFrame on the grid (UTC index) with FRAME_COLUMNS. A slot's `gpu_util` is the mean
    over the reserved GPUs (`gpus`; None: those in the series) and is shown only when every one of them reports in
    it: a missing GPU is never read as idle, and dropping an idle GPU's samples never raises the mean."""
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
        arr = _per_gpu(util) / 100.0  # dcgm reports percent
        reporting = (~np.isnan(arr)).sum(axis=0)
        need = gpus if gpus is not None else len(arr)
        frame["gpu_util"] = np.where(reporting >= need, np.nansum(arr, axis=0) / np.maximum(reporting, 1), np.nan)
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
    """Distinct GPUs in the utilisation series (a GPU relabelled across a restart counts once)."""
    util = raw.get(DCGM_GPU_UTIL)
    return len({gpu_key(k) for k in util.values}) if util else 0
