"""Judging a figure measured on noisy timings: a bootstrap interval of the median over repeated measurements,
compared with a threshold. An interval that straddles the threshold is "inconclusive" — never a pass or a fail
that a busier machine would flip."""

from __future__ import annotations

import dataclasses
from typing import Literal, Sequence

CONFIDENCE = 0.95
RESAMPLES = 4000
MIN_SAMPLES = 3  # fewer repeated measurements give no interval at all
Side = Literal["above", "below", "inconclusive"]


@dataclasses.dataclass(frozen=True)
class Interval:
    """The median of `n` measurements and its bootstrap percentile interval at `confidence`."""

    estimate: float
    low: float
    high: float
    n: int
    confidence: float = CONFIDENCE

    def versus(self, threshold: float) -> Side:
        """above: the whole interval clears the threshold; below: the whole interval is under it."""
        if self.low >= threshold:
            return "above"
        if self.high < threshold:
            return "below"
        return "inconclusive"

    def text(self, unit: str = "") -> str:
        return (f"{self.estimate:.1f}{unit} (median of {self.n}; {self.confidence:.0%} interval "
                f"{self.low:.1f}–{self.high:.1f}{unit})")

    def to_dict(self) -> dict[str, float]:
        return {"median": round(self.estimate, 3), "low": round(self.low, 3), "high": round(self.high, 3),
                "n": self.n, "confidence": self.confidence}


def median_interval(values: Sequence[float], *, confidence: float = CONFIDENCE, resamples: int = RESAMPLES,
                    seed: int = 0) -> Interval | None:
    """Percentile bootstrap of the median (seeded: the same data give the same interval). None below
    MIN_SAMPLES measurements. The interval never leaves the range of the data."""
    import numpy as np

    data = np.asarray([float(v) for v in values if v is not None], dtype=float)
    if data.size < MIN_SAMPLES:
        return None
    rng = np.random.default_rng(seed)
    medians = np.median(data[rng.integers(0, data.size, size=(resamples, data.size))], axis=1)
    alpha = (1.0 - confidence) / 2
    low, high = np.quantile(medians, [alpha, 1.0 - alpha])
    return Interval(float(np.median(data)), float(low), float(high), int(data.size), confidence)
