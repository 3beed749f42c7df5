"""The batch's lines on stderr: the running notebooks' progress, then one line per finished notebook.

While a notebook runs, its axis writes `RUN/.progress/<axis>.json` (`k3lib.core.progress`): phase, requests done
of planned, time left. On a terminal each running notebook gets a tqdm bar fed from that file; elsewhere (a CI log,
a pipe) the same words are printed as a line every `interval_s`. A finished notebook prints
`[3/7] 02_agent_tools.ipynb   fail    10.0s`: the axis' own verdict when the notebook ran to its end (`pass`,
`warn`, `fail`, `open`…, never `ok` for checks that failed), else how it ended (`error`, `timeout`, `dead-kernel`,
`interrupted`); `kept-pass` for an axis `--resume` kept.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from tqdm import tqdm

from ..core.progress import ProgressStatus, counts, describe, read_status

#: without a terminal, how often the running notebooks' progress is printed
LINE_EVERY_S = 30.0
POLL_S = 0.5
SHOWN = {"failed": "error"}  # how a notebook that did not run to its end is shown


@dataclasses.dataclass
class _Running:
    """A running notebook as the lines follow it: its axis, its bar (on a terminal) and when its line last printed."""

    axis: str | None
    printed: float
    bar: Any = None  # a tqdm bar, once its axis wrote a status


class Progress:
    """Progress of one batch on `stream` (stderr by default). `run_dir`: where the axes write their status
    files; without it, only the finished-notebook lines are printed."""

    def __init__(self, total: int, stream: TextIO | None = None, *, run_dir: str | Path | None = None,
                 interval_s: float = LINE_EVERY_S, bars: bool | None = None) -> None:
        self.total, self.n, self.stream = total, 0, stream or sys.stderr
        self.run_dir, self.interval_s = run_dir, interval_s
        self.bars = _isatty(self.stream) if bars is None else bars
        self._lock = threading.Lock()
        self._running: dict[str, _Running] = {}  # by notebook
        self._poller: threading.Thread | None = None
        self._stop = threading.Event()

    def note(self, line: str) -> None:
        """A line between the progress lines (the acceptance batch's target recovery), on the same stream."""
        with self._lock:
            self._print(line)

    def start(self, notebook: str, axis: str | None) -> None:
        """A notebook started: follow its axis' status file."""
        with self._lock:
            self._running[notebook] = _Running(axis, time.monotonic())
            if self.run_dir is not None and axis is not None and self._poller is None:
                self._poller = threading.Thread(target=self._poll, name="k3-progress", daemon=True)
                self._poller.start()

    def done(self, outcome: Any, axis_status: str | None = None) -> None:
        """A notebook ended: its line, with the axis' verdict when it ran to its end."""
        with self._lock:
            entry = self._running.pop(outcome.notebook, None)
            if entry and entry.bar is not None:
                entry.bar.close()
            self.n += 1
            self._print(f"[{self.n}/{self.total}] {outcome.notebook:<28} {shown_status(outcome.status, axis_status):<11} "
                        f"{outcome.duration_s:6.1f}s")

    def close(self) -> None:
        self._stop.set()
        if self._poller is not None:
            self._poller.join(timeout=2)
        with self._lock:
            for entry in self._running.values():
                if entry.bar is not None:
                    entry.bar.close()
            self._running.clear()

    # -- the running notebooks' status ----------------------------------------------------------------------------

    def _poll(self) -> None:
        while not self._stop.wait(POLL_S):
            with self._lock:
                for notebook, entry in self._running.items():
                    status = read_status(self.run_dir, entry.axis) if entry.axis else None  # type: ignore[arg-type]
                    if status is not None and status.get("phase") != "finished":
                        self._show(notebook, entry, status)

    def _show(self, notebook: str, entry: _Running, status: ProgressStatus) -> None:
        if not self.bars:
            if time.monotonic() - entry.printed >= self.interval_s:
                entry.printed = time.monotonic()
                self._print(f"      {notebook}: {describe(status)}")
            return
        if entry.bar is None:
            # no tqdm monitor thread: it refreshes a bar on its own, outside this lock, and its write could land in
            # the middle of a finished notebook's line (a stray `[` before `2/7]`); the poll below refreshes them
            tqdm.monitor_interval = 0
            entry.bar = tqdm(total=0, file=self.stream, leave=False, dynamic_ncols=True,
                                bar_format="{desc} {bar}{postfix}", position=len(self._running) - 1)
        bar = entry.bar
        bar.total = status.get("planned") or None
        bar.n = status.get("done") or 0
        bar.set_description_str(f"{notebook[:-6]}: {status.get('phase')}", refresh=False)
        bar.set_postfix_str(counts(status), refresh=False)  # the phase is the label, shown once
        bar.refresh()

    def _print(self, line: str) -> None:
        if any(e.bar is not None for e in self._running.values()):
            tqdm.write(line, file=self.stream)
        else:
            print(line, file=self.stream, flush=True)


def shown_status(status: str, axis_status: str | None) -> str:
    """One word for a finished notebook: the axis' verdict when it ran to its end, else how it ended."""
    if status == "ok":
        return axis_status or "ok"
    if status == "kept":
        return f"kept-{axis_status}" if axis_status else "kept"
    return SHOWN.get(status, status)


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
