"""A background sampler: calls a function at a set interval in a daemon thread until a stop event, a maximum
duration or an explicit stop, and collects its rows into a pandas DataFrame. The metrics and GPU samplers share it.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

Row = Mapping[str, Any]


@dataclass(frozen=True)
class SampleError:
    t_wall: float
    t_rel_s: float
    error: str


class IntervalSampler:
    """Runs `sample_rows()` every `interval_s` seconds; each call returns zero or more rows (one per GPU, one per
    scrape), stamped with `t_wall` (unix s) and `t_rel_s` (s since start, monotonic). Always stops by itself after
    `max_duration_s`. A failing call is recorded in `errors` and sampling goes on: one refused scrape must not end
    the record of a load phase."""

    def __init__(self, sample_rows: Callable[[], Iterable[Row]], *, interval_s: float = 1.0,
                 max_duration_s: float = 3600.0, stop_event: threading.Event | None = None,
                 name: str = "k3-sampler", on_finish: Callable[[], None] | None = None) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be positive")
        if max_duration_s <= 0:
            raise ValueError("max_duration_s must be positive")
        self._sample_rows = sample_rows
        self._on_finish = on_finish
        self.interval_s = interval_s
        self.max_duration_s = max_duration_s
        self.stop_event = stop_event or threading.Event()
        self._rows: list[dict[str, Any]] = []
        self.errors: list[SampleError] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._t0_ns = 0

    def start(self) -> IntervalSampler:
        self._t0_ns = time.perf_counter_ns()
        self._thread.start()
        return self

    def stop(self, timeout_s: float | None = None) -> None:
        self.stop_event.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def join(self, timeout_s: float | None = None) -> None:
        self._thread.join(timeout_s)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def __enter__(self) -> IntervalSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        try:
            self._loop()
        finally:
            if self._on_finish is not None:
                self._on_finish()

    def _loop(self) -> None:
        deadline_ns = self._t0_ns + int(self.max_duration_s * 1e9)
        next_ns = self._t0_ns
        while not self.stop_event.is_set():
            now_ns = time.perf_counter_ns()
            if now_ns >= deadline_ns:
                break
            self._tick(now_ns)
            # Schedule on a fixed grid so a slow scrape does not drift every later sample.
            next_ns += int(self.interval_s * 1e9)
            while next_ns <= time.perf_counter_ns():
                next_ns += int(self.interval_s * 1e9)
            wait_ns = min(next_ns, deadline_ns) - time.perf_counter_ns()
            if self.stop_event.wait(max(wait_ns, 0) / 1e9):
                break

    def _tick(self, now_ns: int) -> None:
        t_wall = time.time()
        t_rel_s = (now_ns - self._t0_ns) / 1e9
        try:
            rows = [dict(r) for r in self._sample_rows()]
        except Exception as exc:  # recorded as data, see the class docstring
            with self._lock:
                self.errors.append(SampleError(t_wall, t_rel_s, f"{type(exc).__name__}: {exc}"))
            return
        with self._lock:
            for row in rows:
                self._rows.append({"t_wall": row.pop("t_wall", t_wall), "t_rel_s": t_rel_s, **row})

    def rows(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(r) for r in self._rows]

    def frame(self):  # -> pandas.DataFrame; pandas imported here, not at module import
        import pandas as pd

        rows = self.rows()
        frame = pd.DataFrame(rows)
        if frame.empty:
            return pd.DataFrame(columns=["t_wall", "t_rel_s"])
        return frame
