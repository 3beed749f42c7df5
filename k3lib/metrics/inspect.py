"""`k3 inspect metrics`: one exposition text → model name, engine count and the headline canonical values."""

from __future__ import annotations

from k3lib.metrics.names import INSPECT_SERIES
from k3lib.metrics.snapshot import Snapshot


def inspect_metrics(text: str) -> dict[str, object]:
    """Exactly {"model_name", "engines", "values": {canonical: number | None}}. Usage is the max over engines,
    counters and running/waiting gauges the sum (request_success_total also over finished_reason); a value is
    None when no series carries it."""
    snapshot = Snapshot.from_text(text)
    return inspect_snapshot(snapshot)


def inspect_snapshot(snapshot: Snapshot) -> dict[str, object]:
    """The same report for a live snapshot of one or many endpoints."""
    return {
        "model_name": snapshot.model_name(),
        "engines": snapshot.engines(),
        "values": snapshot.values(INSPECT_SERIES),
    }
