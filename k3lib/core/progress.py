"""An axis' progress while it runs: its phase, requests done of planned, and the time left.

One reporter per axis (`AxisProgress`, made current by the notebook's opener). The axes name their phases
(`phase(...)`), the client counts each finished request (`tick()`), and the reporter writes a small status file,
`RUN/.progress/<axis>.json`, at most twice a second: the batch reads it and draws the terminal's bar
(`k3lib.batch.progress`), and in JupyterLab (`interactive=True`) the same numbers draw a tqdm bar under the cell.
The status file is a view, not evidence: it stays out of the manifest, and a missing or stale one changes nothing.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, TypedDict, cast

from .errors import K3Error

__all__ = ["PROGRESS_DIR", "AxisProgress", "ConsentExceeded", "admit", "current", "over", "phase", "read_status",
           "set_current", "tick"]

PROGRESS_DIR = ".progress"
WRITE_EVERY_S = 0.5


class ConsentExceeded(K3Error):
    """An axis was about to send more requests to the target than the plan the operator consented to."""


class ProgressStatus(TypedDict):
    """What an axis' progress file holds (`<run>/progress/<axis>.json`), written as the axis runs."""

    axis: str
    phase: str | None
    done: int
    phase_done: int
    planned: int
    approx: bool
    request_bound: int
    at_most: int | None
    elapsed_s: float
    left_s: float | None
    estimate_s: float | None
    at: float


class AxisProgress:
    """Phase, requests sent of planned, and time left of one axis. `estimate_s`, `planned`, `at_most`: the axis'
    estimated duration, its expected requests and the most it may send, as the plan showed them
    (`k3lib.axes.estimate`, `plan.json`). With a plan, the requests are the axis' own total (every phase, the
    series and checks between them) against the plan's count, the time left is the estimate's, and a request
    past `at_most` is refused before it is sent (`admit`). Without one, each phase's own bounds are shown.
    `target`: the server the plan counts (a request to another, the kit's local calibration, is not counted)."""

    def __init__(self, axis: str, run_dir: str | Path | None = None, *, estimate_s: float | None = None,
                 show: bool = False, planned: int | None = None, at_most: int | None = None,
                 target: str | None = None) -> None:
        self.axis, self.estimate_s = axis, estimate_s
        self.axis_planned, self.at_most, self.target = planned, at_most, target
        self.path = Path(run_dir) / PROGRESS_DIR / f"{axis}.json" if run_dir else None
        self.started = time.monotonic()
        self.phase_name, self.done, self.planned = "starting", 0, 0
        self.phase_done = 0  # requests ended in the running phase
        self.sent = 0  # requests to the target admitted so far (the consent's count)
        self.phase_started, self.phase_s = self.started, None  # type: float, float | None
        self._lock = threading.Lock()
        self._written = 0.0
        self._bar: Any = _notebook_bar(axis) if show else None
        self._write(force=True)

    def phase(self, name: str, *, requests: int = 0, duration_s: float | None = None) -> None:
        """A new phase: its name, its request bound (0: none) and its duration bound (None: none); whichever ends
        it first, the display projects from the rate so far (`expected`). With a plan the count runs on."""
        with self._lock:
            self.phase_name, self.planned, self.phase_done = name, max(0, int(requests)), 0
            if self.axis_planned is None:
                self.done = 0
            self.phase_started, self.phase_s = time.monotonic(), duration_s
        self._write(force=True)

    def counts(self, url: str | None) -> bool:
        return url is None or self.target is None or url.rstrip("/").startswith(self.target.rstrip("/"))

    def admit(self, url: str | None = None) -> None:
        """One request about to be sent to `url`: refused (ConsentExceeded) when it would pass `at_most`."""
        if not self.counts(url):
            return
        with self._lock:
            if self.at_most is not None and self.sent >= self.at_most:
                raise ConsentExceeded(
                    f"{self.axis}: the next request would pass the {self.at_most} requests the plan showed for this "
                    "axis (the operator's consent to load the target); the axis stops here")
            self.sent += 1

    def over(self) -> bool:
        """More requests ended than the plan allowed (load sent by worker processes, counted as they end)."""
        return self.at_most is not None and self.done > self.at_most

    def tick(self, n: int = 1, url: str | None = None) -> None:
        if not self.counts(url):
            return
        with self._lock:
            self.done += n
            self.phase_done += n
        self._write()

    def left_s(self) -> float | None:
        """Seconds left: the plan's estimate less the time spent (never below 0) when there is one, else the
        running phase's bound less its time spent; None when neither is known."""
        now = time.monotonic()
        if self.estimate_s is not None:
            return max(0.0, self.estimate_s - (now - self.started))
        return None if self.phase_s is None else max(0.0, self.phase_s - (now - self.phase_started))

    def expected(self) -> tuple[int, bool]:
        """The requests to count against: the axis' planned total with a plan; else this phase's request bound,
        or, for a phase its duration may end first, what the rate so far reaches by then (`True`: a
        projection)."""
        if self.axis_planned is not None:
            return self.axis_planned, False
        elapsed = time.monotonic() - self.phase_started
        if self.phase_s is None or not self.planned or elapsed < 2.0 or not self.done:
            return self.planned, False
        projected = int(self.done / elapsed * self.phase_s)
        return (projected, True) if projected < self.planned else (self.planned, False)

    def status(self) -> ProgressStatus:
        with self._lock:
            planned, approx = self.expected()
            return {"axis": self.axis, "phase": self.phase_name, "done": self.done, "phase_done": self.phase_done,
                    "planned": planned,
                    "approx": approx, "request_bound": self.planned, "at_most": self.at_most,
                    "elapsed_s": round(time.monotonic() - self.started, 1),
                    "left_s": None if (left := self.left_s()) is None else round(left, 1),
                    "estimate_s": self.estimate_s, "at": time.time()}

    def close(self) -> None:
        with self._lock:
            self.phase_name, self.phase_s = "finished", None
        self._write(force=True)
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def _write(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._written < WRITE_EVERY_S:
            return
        self._written = now
        status = self.status()
        if self._bar is not None:
            _draw(self._bar, status)
        if self.path is not None:
            _write_status(self.path, status)


def _write_status(path: Path, status: ProgressStatus) -> None:
    """Replace the status file in one step (a reader never sees half of it); no fsync: it is a view, not evidence."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(status, fh)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only or vanished run folder: the progress is lost, never the run


def read_status(run_dir: str | Path, axis: str) -> ProgressStatus | None:
    """The axis' last status, or None when it has written none (yet) or it cannot be read."""
    try:
        data = json.loads((Path(run_dir) / PROGRESS_DIR / f"{axis}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return cast(ProgressStatus, data) if isinstance(data, dict) else None


def describe(status: ProgressStatus) -> str:
    """`phase: 48/98 requests, 31 s elapsed, about 25 s left` — the line both displays print."""
    return f"{status.get('phase') or ''}: {counts(status)}"


def counts(status: ProgressStatus) -> str:
    """`48/98 requests, 31 s elapsed, about 25 s left`: the status without its phase (a bar shows the phase as its
    label, once)."""
    parts = []
    done, planned = status.get("done") or 0, status.get("planned") or 0
    if planned:
        parts.append(f"{done}/{'~' if status.get('approx') else ''}{planned} requests")
    elif done:
        parts.append(f"{done} requests")
    parts.append(f"{_clock(status.get('elapsed_s'))} elapsed")
    if status.get("left_s") is not None:
        parts.append(f"about {_clock(status['left_s'])} left")
    return ", ".join(parts)


def _clock(seconds: Any) -> str:
    s = int(round(float(seconds or 0)))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def _notebook_bar(axis: str) -> Any:
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover - tqdm comes with papermill
        return None
    return tqdm(total=0, desc=axis, unit="req", leave=True, bar_format="{desc} {bar} {n_fmt}/{total_fmt} {postfix}")


def _draw(bar: Any, status: ProgressStatus) -> None:
    bar.total = status["planned"] or None
    bar.n = status["done"]
    bar.set_description_str(f"{status['axis']}: {status['phase']}", refresh=False)
    left = status.get("left_s")
    bar.set_postfix_str("" if left is None else f"about {_clock(left)} left", refresh=False)
    bar.refresh()


# -- the running axis of this process (one notebook kernel runs one axis) ---------------------------------------------

_CURRENT: AxisProgress | None = None


def set_current(reporter: AxisProgress | None) -> None:
    global _CURRENT
    _CURRENT = reporter


def current() -> AxisProgress | None:
    return _CURRENT


def phase(name: str, *, requests: int = 0, duration_s: float | None = None) -> None:
    """Name the running axis' new phase (nothing when no axis runs here, e.g. a load worker process)."""
    if _CURRENT is not None:
        _CURRENT.phase(name, requests=requests, duration_s=duration_s)


def tick(n: int = 1, url: str | None = None) -> None:
    """One more request to `url` finished in the running axis (called by the client and by the worker pool's
    parent)."""
    if _CURRENT is not None:
        _CURRENT.tick(n, url)


def admit(url: str | None = None) -> None:
    """A request to `url` is about to be sent: ConsentExceeded when it would pass the plan (nothing when no axis
    runs here)."""
    if _CURRENT is not None:
        _CURRENT.admit(url)


def over() -> bool:
    """The running axis has seen more requests end than its plan allowed."""
    return _CURRENT is not None and _CURRENT.over()
