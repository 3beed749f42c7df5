"""One rule for a figure written in a sentence (a finding's message, a reason, a report line): as many digits as a
person reads, no more. Machine-readable values (records, JSON, Prometheus text) keep every digit; only prose goes
through here.

- a whole number is written whole: `3`, `256`;
- from 100 up, to the unit, thousands separated: `729.952` → `730`, `1890.4` → `1,890`;
- a whole number from 10,000 up, thousands separated: `200000` → `200,000`; an integer below that stays bare
  (a year, a port, 4096 tokens), a measurement (a float) from 1,000 up does not (`1890.0` → `1,890`);
- below 100, three significant digits: `24.234` → `24.2`, `0.016342` → `0.0163`.
"""

from __future__ import annotations

import math
from typing import Any


def figure(value: Any, unit: str = "") -> str:
    """`value` as prose, with `unit` appended as given (`figure(729.952, "/min")` is `730/min`). Anything that is
    not a finite number (None, text, a bool, NaN) is written as `str(value)`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return f"{value}{unit}"
    if float(value).is_integer():
        grouped = abs(value) >= 10_000 or (isinstance(value, float) and abs(value) >= 1000)
        return f"{int(value):,}{unit}" if grouped else f"{int(value)}{unit}"
    if abs(value) >= 100:
        return f"{round(value):,}{unit}"
    text = f"{value:.3g}"
    if "e" in text:  # below 0.0001: still three significant digits, without an exponent
        text = f"{value:.{3 - 1 - math.floor(math.log10(abs(value)))}f}"
    return f"{text}{unit}"
