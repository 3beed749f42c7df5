"""What happened between two snapshots: counter deltas with reset detection, and histogram bucket deltas with
PromQL-style quantile estimation (linear interpolation inside the bucket that holds the rank).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from k3lib.io.metrics.names import spec_for
from k3lib.io.metrics.parse import Sample
from k3lib.io.metrics.snapshot import Snapshot

SeriesKey = tuple[str, tuple[tuple[str, str], ...]]  # (endpoint, labels without `le`)


@dataclass(frozen=True)
class CounterDelta:
    """Increase of a counter over a window.

    A series that went down was reset (server restart, engine respawn): it is reported in `reset_series` and
    contributes its post-reset value instead of a negative difference, so `value` is then a lower bound
    (Prometheus' `increase()` does the same). Series absent after the window are listed in `vanished_series`.
    """

    canonical: str
    value: float | None
    elapsed_s: float
    reset: bool = False
    reset_series: tuple[str, ...] = ()
    vanished_series: tuple[str, ...] = ()

    @property
    def rate_per_s(self) -> float | None:
        if self.value is None or self.elapsed_s <= 0:
            return None
        return self.value / self.elapsed_s


@dataclass(frozen=True)
class HistogramWindow:
    """Observations of a histogram inside a window, merged over engines, labels and endpoints.
    `buckets` are cumulative (upper bound, count) pairs sorted by bound, the last one +Inf."""

    canonical: str
    buckets: tuple[tuple[float, float], ...]
    count: float
    sum: float
    reset: bool = False

    def quantile(self, q: float) -> float | None:
        return histogram_quantile(q, self.buckets)

    def quantile_bounds(self, q: float) -> QuantileBounds | None:
        """What the buckets (and sum/count) prove about the q-quantile; None when the window is empty."""
        return quantile_bounds(q, self.buckets, self.mean)

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count > 0 else None


@dataclass(frozen=True)
class QuantileBounds:
    """The q-quantile as far as a histogram can tell: `low` ≤ quantile ≤ `high`, and `estimate` (PromQL's
    interpolation inside the bucket) only where that bucket has a lower edge worth interpolating from.

    `basis` says where the rank fell: "bucket" (between two finite edges), "below-first-bucket" (at or under the
    first edge: the histogram only says "≤ first edge"; interpolating inside [0, edge] invents a figure such as
    285 ms for requests that waited 0.1 ms) or "above-last-bucket" (beyond the last finite edge). `high` is
    tightened by Markov's inequality where the mean is known: observations are non-negative, so at most a share
    mean/t of them exceed t, and the q-quantile is at most mean / (1 - q)."""

    q: float
    low: float
    high: float
    estimate: float | None
    basis: str
    first_edge: float
    mean: float | None = None
    markov_bound: bool = False  # True when `high` came from the mean rather than a bucket edge

    def describe(self, scale: float = 1.0, unit: str = "") -> str:
        f = lambda v: f"{v * scale:.0f}{unit}" if abs(v * scale) >= 100 else f"{v * scale:.3g}{unit}"  # noqa: E731
        mean = f"; mean {f(self.mean)} from sum/count" if self.mean is not None else ""
        if self.basis == "below-first-bucket":
            if self.markov_bound:
                return (f"≤ {f(self.high)} (below the first bucket edge {f(self.first_edge)}; the mean {f(self.mean)} "
                        f"from sum/count bounds it: p{self.q * 100:g} ≤ mean/(1-{self.q:g}))")
            return f"≤ {f(self.high)} (below the first bucket edge, which is all the buckets say{mean})"
        if self.basis == "above-last-bucket":
            return f"> {f(self.low)} (above the last finite bucket edge{mean})"
        est = f"≈ {f(self.estimate)}, " if self.estimate is not None else ""
        return f"{est}between {f(self.low)} and {f(self.high)} (the bucket holding the rank{mean})"


def _cumulative(q: float, buckets: tuple[tuple[float, float], ...] | list[tuple[float, float]]
                ) -> list[tuple[float, float]] | None:
    """Buckets sorted by bound with monotone counts, or None when they hold no observation or PromQL could not
    read them (fewer than two buckets, the last not +Inf). Counts are cumulative; scrapes of several engines at
    slightly different moments can break monotonicity, which PromQL also repairs by carrying the running maximum
    forward."""
    if not 0.0 <= q <= 1.0 or math.isnan(q):
        raise ValueError(f"quantile must be within [0, 1], got {q}")
    ordered = sorted(buckets)
    if len(ordered) < 2 or not math.isinf(ordered[-1][0]):
        return None
    fixed: list[tuple[float, float]] = []
    running = 0.0
    for le, c in ordered:
        running = max(running, c)
        fixed.append((le, running))
    return fixed if fixed[-1][1] > 0 else None


def quantile_bounds(q: float, buckets: tuple[tuple[float, float], ...] | list[tuple[float, float]],
                    mean: float | None = None) -> QuantileBounds | None:
    """The interval the q-quantile of cumulative (upper bound, count) buckets lies in; see QuantileBounds."""
    fixed = _cumulative(q, buckets)
    if fixed is None:
        return None
    total = fixed[-1][1]
    rank = q * total
    i = next(i for i, (_, c) in enumerate(fixed) if c >= rank)
    first_edge = fixed[0][0]
    markov = mean / (1.0 - q) if mean is not None and mean >= 0 and q < 1.0 else math.inf
    if math.isinf(fixed[i][0]):
        return QuantileBounds(q, fixed[-2][0], markov, None, "above-last-bucket", first_edge, mean,
                              markov < math.inf)
    upper = fixed[i][0]
    lower = 0.0 if i == 0 else fixed[i - 1][0]
    high = min(upper, markov)
    if i == 0:
        return QuantileBounds(q, 0.0, high, None, "below-first-bucket", first_edge, mean, markov < upper)
    estimate = histogram_quantile(q, fixed)
    return QuantileBounds(q, lower, high, None if estimate is None else min(estimate, high), "bucket",
                          first_edge, mean, markov < upper)


def _series_name(key: SeriesKey) -> str:
    endpoint, labels = key
    inner = ",".join(f'{k}="{v}"' for k, v in labels)
    return f"{endpoint}{{{inner}}}"


def _by_series(snapshot: Snapshot, canonical: str, suffix: str = "") -> dict[SeriesKey, Sample]:
    out: dict[SeriesKey, Sample] = {}
    for endpoint, s in snapshot.samples(canonical):
        if suffix and not s.name.endswith(suffix):
            continue
        out[(endpoint, s.label_key())] = s
    return out


def delta(before: Snapshot, after: Snapshot, canonical: str) -> CounterDelta:
    """Increase of a counter between two snapshots; None when neither snapshot carries it."""
    spec = spec_for(canonical)
    if spec.kind != "counter":
        raise ValueError(f"{canonical} is a {spec.kind}, not a counter")
    elapsed_s = (after.t_mono_ns - before.t_mono_ns) / 1e9
    old = _by_series(before, canonical)
    new = _by_series(after, canonical)
    if not old and not new:
        return CounterDelta(canonical, None, elapsed_s)
    total = 0.0
    resets: list[str] = []
    for key, sample in new.items():
        # A series first seen after `before` (a finished_reason label created lazily, a new engine) started at 0.
        prev = old[key].value if key in old else 0.0
        if sample.value < prev:
            resets.append(_series_name(key))
            total += sample.value
        else:
            total += sample.value - prev
    vanished = tuple(_series_name(k) for k in old if k not in new)
    return CounterDelta(canonical, total, elapsed_s, bool(resets), tuple(resets), vanished)


def window_histogram(before: Snapshot | None, after: Snapshot, canonical: str) -> HistogramWindow | None:
    """Bucket deltas of a histogram between two snapshots (`before=None`: since each server started).
    None when `after` carries no buckets for it. A series whose _count went down was reset: it contributes
    its post-reset buckets and `reset` is set."""
    spec = spec_for(canonical)
    if spec.kind != "histogram":
        raise ValueError(f"{canonical} is a {spec.kind}, not a histogram")
    new_b = _group_buckets(after, canonical)
    if not new_b:
        return None
    old_b = _group_buckets(before, canonical) if before is not None else {}
    new_c, new_s = _by_series(after, canonical, "_count"), _by_series(after, canonical, "_sum")
    old_c = _by_series(before, canonical, "_count") if before is not None else {}
    old_s = _by_series(before, canonical, "_sum") if before is not None else {}
    merged: dict[float, float] = {}
    count = total = 0.0
    reset = False
    for key, buckets in new_b.items():
        prev = old_b.get(key, {})
        is_reset = any(buckets.get(le, 0.0) < v for le, v in prev.items())
        if key in old_c and key in new_c and new_c[key].value < old_c[key].value:
            is_reset = True
        reset |= is_reset
        base = {} if is_reset else prev
        for le, v in buckets.items():
            merged[le] = merged.get(le, 0.0) + v - base.get(le, 0.0)
        if key in new_c:
            count += new_c[key].value - (0.0 if is_reset or key not in old_c else old_c[key].value)
        if key in new_s:
            total += new_s[key].value - (0.0 if is_reset or key not in old_s else old_s[key].value)
    bucket_list = tuple(sorted(merged.items()))
    if not new_c and bucket_list:
        count = bucket_list[-1][1]  # grep-filtered dumps may lack _count; +Inf holds the same number
    return HistogramWindow(canonical, bucket_list, count, total, reset)


def _group_buckets(snapshot: Snapshot, canonical: str) -> dict[SeriesKey, dict[float, float]]:
    out: dict[SeriesKey, dict[float, float]] = {}
    for endpoint, s in snapshot.samples(canonical):
        if not s.name.endswith("_bucket") or "le" not in s.labels:
            continue
        try:
            le = float(s.labels["le"])
        except ValueError:
            continue
        out.setdefault((endpoint, s.label_key(drop=("le",))), {})[le] = s.value
    return out


def window_quantile(before: Snapshot | None, after: Snapshot, canonical: str, q: float) -> float | None:
    window = window_histogram(before, after, canonical)
    return None if window is None else window.quantile(q)


def histogram_quantile(q: float, buckets: tuple[tuple[float, float], ...] | list[tuple[float, float]]) -> float | None:
    """The q-quantile of cumulative (upper bound, count) buckets, as PromQL's histogram_quantile computes it:
    find the bucket holding rank q·total and interpolate linearly inside it (the first bucket's lower bound is 0
    when its bound is positive); a rank in the +Inf bucket returns the highest finite bound. None when the
    window holds no observations."""
    fixed = _cumulative(q, buckets)
    if fixed is None:
        return None
    total = fixed[-1][1]
    rank = q * total
    for i, (le, c) in enumerate(fixed):  # noqa: B007 - the bucket the loop stops on is used below
        if c >= rank:
            break
    if math.isinf(le):
        return fixed[-2][0]
    if i == 0:
        if le <= 0:
            return le
        lower, prev_count = 0.0, 0.0
    else:
        lower, prev_count = fixed[i - 1]
    in_bucket = c - prev_count
    if in_bucket <= 0:
        return le
    return lower + (le - lower) * (rank - prev_count) / in_bucket
