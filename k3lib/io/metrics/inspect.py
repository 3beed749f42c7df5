"""`k3 inspect metrics`: one exposition text → model name, engine count, the headline canonical values, and the
samples whose value is outside what their meaning allows."""

from __future__ import annotations

import math
from collections.abc import Iterable

from k3lib.core.errors import ArtifactError
from k3lib.io.metrics.names import INSPECT_SERIES
from k3lib.io.metrics.parse import Sample, parse_exposition
from k3lib.io.metrics.snapshot import Snapshot

# Fractions in [0, 1] by definition (vLLM's *_usage_perc are fractions despite the name).
_FRACTIONS = frozenset({"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "vllm:cpu_cache_usage_perc",
                        "sglang:token_usage"})
# Gauges that count requests: never negative.
_COUNTS = frozenset({"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:num_requests_swapped",
                     "sglang:num_running_reqs", "sglang:num_queue_reqs"})
# Cumulative samples (counters and histogram parts): never negative.
_CUMULATIVE_SUFFIXES = ("_total", "_count", "_sum", "_bucket", "_created")


def out_of_domain(samples: Iterable[Sample]) -> list[dict[str, object]]:
    """Samples whose value their meaning forbids: a usage fraction outside [0, 1], a negative count or counter.

    The value is still reported as exposed; this list says it cannot be right (a broken exporter, an edited dump).
    """
    found: list[dict[str, object]] = []
    for s in samples:
        if math.isnan(s.value):
            continue
        why = None
        if s.name in _FRACTIONS and not 0.0 <= s.value <= 1.0:
            why = "a usage fraction outside [0, 1]"
        elif s.name in _COUNTS and s.value < 0:
            why = "a negative request count"
        elif s.name.endswith(_CUMULATIVE_SUFFIXES) and s.value < 0:
            why = "a negative counter"
        if why:
            found.append({"name": s.name, "labels": dict(s.labels), "value": s.value, "why": why})
    return found


def inspect_metrics(text: str) -> dict[str, object]:
    """{"engine" (vllm|sglang|None), "model_name", "engines", "values": {canonical: number | None},
    "out_of_domain": [...]}. Usage is the max over engines, counters and running/waiting gauges the sum
    (request_success_total also over finished_reason); a value is None when no series carries it. An exposition
    with HELP/TYPE lines and no sample (metrics on, nothing served yet) is an empty reading of one engine.
    ArtifactError when the text holds neither a sample line nor a TYPE line."""
    exposition = parse_exposition(text)
    if not exposition.samples and not exposition.types:
        first = exposition.skipped[0] if exposition.skipped else None
        seen = f"; line {first.line_no} reads {first.line.strip()[:80]!r}" if first else ""
        raise ArtifactError("not a Prometheus exposition: no `name{labels} value` sample line and no "
                            f"`# TYPE` line (also tried without a prefix shared by every line){seen}")
    result = inspect_snapshot(Snapshot.from_expositions({"<text>": exposition}))
    if not exposition.samples:
        names = set(exposition.types)
        result["engine"] = next((f for f in ("vllm", "sglang") if any(n.startswith(f + ":") for n in names)), None)
        result["engines"] = 1  # one server said what it exports; it has not served yet
    return result


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
        "out_of_domain": out_of_domain(s for ep in snapshot.endpoints for s in ep.samples),
    }
