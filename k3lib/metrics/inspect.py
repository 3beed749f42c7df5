"""`k3 inspect metrics`: one exposition text → model name, engine count and the headline canonical values."""

from __future__ import annotations

from k3lib.errors import ArtifactError
from k3lib.metrics.names import INSPECT_SERIES
from k3lib.metrics.parse import parse_exposition
from k3lib.metrics.snapshot import Snapshot


def inspect_metrics(text: str) -> dict[str, object]:
    """{"engine" (vllm|sglang|None), "model_name", "engines", "values": {canonical: number | None}}. Usage is the max over engines,
    counters and running/waiting gauges the sum (request_success_total also over finished_reason); a value is
    None when no series carries it. ArtifactError when the text holds no sample line at all."""
    exposition = parse_exposition(text)
    if not exposition.samples:
        first = exposition.skipped[0] if exposition.skipped else None
        seen = f"; line {first.line_no} reads {first.line.strip()[:80]!r}" if first else ""
        raise ArtifactError(f"not a Prometheus exposition: no `name{{labels}} value` sample line{seen}")
    return inspect_snapshot(Snapshot.from_expositions({"<text>": exposition}))


def engine_family(snapshot: Snapshot) -> str | None:
    """Which server wrote the exposition, from its metric namespace: vllm, sglang, or None."""
    names = {s.name for ep in snapshot.endpoints for s in ep.samples}
    for family in ("vllm", "sglang"):
        if any(n.startswith(family + ":") for n in names):
            return family
    return None


def inspect_snapshot(snapshot: Snapshot) -> dict[str, object]:
    """The same report for a live snapshot of one or many endpoints."""
    return {
        "engine": engine_family(snapshot),
        "model_name": snapshot.model_name(),
        "engines": snapshot.engines(),
        "values": snapshot.values(INSPECT_SERIES),
    }
