"""Judging a figure measured on noisy timings: a bootstrap interval of the median (or of a percentile, such as a
load step's p95 latency over its requests) over repeated measurements, compared with a threshold. An interval that
straddles the threshold is "inconclusive" — never a pass or a fail that a busier machine would flip."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Literal, Sequence

from pydantic import ConfigDict, Field, field_serializer

from .record import Record

CONFIDENCE = 0.95
RESAMPLES = 4000
MIN_SAMPLES = 3  # fewer repeated measurements give no interval at all
Side = Literal["above", "below", "inconclusive"]


class Interval(Record):
    """The median (or the `q`th percentile) of `n` measurements and its bootstrap percentile interval at
    `confidence`; `model_dump()` writes the figures to 3 decimals (`MedianInterval`: a median's)."""

    estimate: float
    low: float
    high: float
    n: int
    confidence: float = CONFIDENCE
    q: int | float = 50.0  # as given: a p95 is written `95`

    def versus(self, threshold: float) -> Side:
        """above: the whole interval clears the threshold; below: the whole interval is under it."""
        if self.low >= threshold:
            return "above"
        if self.high < threshold:
            return "below"
        return "inconclusive"

    def at_most(self, limit: float) -> Literal["pass", "fail", "inconclusive"]:
        """Against an upper objective (a p95 latency ≤ limit): pass when the whole interval is at or under it,
        fail when the whole interval is above it, inconclusive when it straddles the limit."""
        if self.high <= limit:
            return "pass"
        if self.low > limit:
            return "fail"
        return "inconclusive"

    def text(self, unit: str = "") -> str:
        what = "median" if self.q == 50 else f"p{self.q:g}"
        return (f"{self.estimate:.1f}{unit} ({what} of {self.n}; {self.confidence:.0%} interval "
                f"{self.low:.1f}–{self.high:.1f}{unit})")

    @field_serializer("estimate", "low", "high")
    def _rounded(self, value: float) -> float:
        return round(value, 3)


class MedianInterval(Interval):
    """The interval of a median (`median_interval`), written with its estimate as `median` and without `q`."""

    model_config = ConfigDict(frozen=True, serialize_by_alias=True)

    estimate: float = Field(serialization_alias="median")
    q: int | float = Field(default=50.0, exclude=True)


def median_interval(values: Sequence[float], *, confidence: float = CONFIDENCE, resamples: int = RESAMPLES,
                    seed: int = 0) -> Interval | None:
    """Percentile bootstrap of the median (seeded: the same data give the same interval). None below
    MIN_SAMPLES measurements. The interval never leaves the range of the data."""
    return percentile_interval(values, 50.0, confidence=confidence, resamples=resamples, seed=seed)


def min_samples(q: float) -> int:
    """Measurements a percentile needs before it has an interval: MIN_SAMPLES for the median, and enough that
    at least one falls above the `q`th percentile (20 for a p95) — fewer make the p95 the maximum, no interval."""

    return max(MIN_SAMPLES, math.ceil(100.0 / (100.0 - q)) if q > 50 else MIN_SAMPLES)


def percentile_interval(values: Sequence[float | None], q: float, *, confidence: float = CONFIDENCE,
                        resamples: int = RESAMPLES, seed: int = 0) -> Interval | None:
    """The `q`th percentile (numpy's linear method, as k3lib.io.calibration.percentile) with its percentile-bootstrap
    interval, seeded; None below `min_samples(q)` measurements. The interval never leaves the range of the data."""
    import numpy as np

    data = np.asarray([float(v) for v in values if v is not None], dtype=float)
    if data.size < min_samples(q):
        return None
    rng = np.random.default_rng(seed)
    stats = np.percentile(data[rng.integers(0, data.size, size=(resamples, data.size))], q, axis=1)
    alpha = (1.0 - confidence) / 2
    low, high = np.quantile(stats, [alpha, 1.0 - alpha])
    kind = MedianInterval if q == 50 else Interval
    return kind(estimate=float(np.percentile(data, q)), low=float(low), high=float(high), n=int(data.size),
                confidence=confidence, q=q)


def percentile(values: Iterable[float | None], q: float) -> float | None:
    """The q-th percentile (q from 0 to 100) of `values`, None values left out; None when no value is left.

    The kit's one definition, wherever a percentile is reported (client timings, loop lag, crosscheck, renewal
    demand and delivery, paths, the emulator's own lag): numpy's `method="linear"`, its default, which is
    Hyndman & Fan's type 7 (also R's default and a spreadsheet's PERCENTILE.INC). With the n values sorted as
    x[0] ≤ … ≤ x[n-1] and h = (n - 1)·q/100, it is x[⌊h⌋] + (h - ⌊h⌋)·(x[⌊h⌋+1] - x[⌊h⌋]): the median of an even
    count is the mean of the middle two, p0 the minimum and p100 the maximum."""
    import numpy as np

    data = [float(v) for v in values if v is not None]
    if not data:
        return None
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile {q!r} is outside 0–100")
    return float(np.percentile(np.asarray(data, dtype=float), q, method="linear"))


def percentile_rounded(values: Iterable[float | None], q: float, digits: int = 3) -> float | None:
    """`percentile` (q from 0 to 100) rounded to `digits` decimals, as the records store it."""
    got = percentile(values, q)
    return None if got is None else round(got, digits)


Z95 = 1.959963984540054  # the two-sided 95 % normal quantile


def wilson_interval(successes: int, n: int, *, z: float = Z95) -> tuple[float, float] | None:
    """Wilson score interval of a proportion (well-behaved at 0 and n successes); None with no trials."""

    if n <= 0:
        return None
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def trials_to_bound(max_rate: float, *, z: float = Z95) -> int:
    """The fewest trials whose Wilson upper bound, with no failure among them, is at or below `max_rate` (z²/(n+z²)
    ≤ max_rate): 381 for 1 %, 73 for 5 %."""

    n = max(1, math.ceil(z * z * (1 - max_rate) / max_rate))
    while z * z / (n + z * z) > max_rate:
        n += 1
    return n


def paired_difference_interval(both: int, a_only: int, b_only: int, neither: int, *,
                               z: float = Z95) -> tuple[float, float, float] | None:
    """Difference of two paired proportions (A's rate − B's rate over the same items) with Newcombe's hybrid score
    interval (his method 10, built from the two Wilson intervals and the phi correlation); None with no pairs."""

    n = both + a_only + b_only + neither
    if n == 0:
        return None
    p1, p2 = (both + a_only) / n, (both + b_only) / n
    l1, u1 = wilson_interval(both + a_only, n, z=z)  # type: ignore[misc]
    l2, u2 = wilson_interval(both + b_only, n, z=z)  # type: ignore[misc]
    denom = (both + a_only) * (b_only + neither) * (both + b_only) * (a_only + neither)
    phi = 0.0 if denom == 0 else (both * neither - a_only * b_only) / math.sqrt(denom)
    d = p1 - p2
    delta = math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    eps = math.sqrt(max(0.0, (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2))
    return d, max(-1.0, d - delta), min(1.0, d + eps)
