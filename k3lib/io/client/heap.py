"""Keep the garbage collector off a measured phase's timing path (`quiet_collector`)."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0


@contextmanager
def quiet_collector() -> Iterator[None]:
    """While a phase measures, what the process held before it is out of the collector's generations.

    A full collection walks every tracked object: in a notebook kernel (pandas, plotly, the kit) that is tens of
    milliseconds with the event loop stopped, and whichever chunks arrive meanwhile get late arrival marks: a
    client timing error of the same size, seen as a 12 ms TTFT outlier among 64 streams. So the heap is frozen
    for the phase (`gc.freeze`, as vLLM does with its own once warmed up); collections during the phase walk only
    what the phase made, and the heap is unfrozen after it. It is not collected first: that took ~1 s in a long
    process, inside a capacity step's server-side window (its gauges then showed an idle engine). Garbage frozen
    with the heap is collected after the phase. Nested phases (a calibration inside a run) freeze and unfreeze
    once, at the outermost.
    """
    global _depth
    with _lock:
        _depth += 1
        if _depth == 1:
            gc.freeze()
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                gc.unfreeze()
