"""Client vs server over the same window: what the client measured against what the server counted.

Token counts must agree exactly on an isolated instance (the client reads them from `usage`, the server counts
them itself); latency quantiles agree only to a histogram bucket, and the client's TTFT includes the network and
HTTP framing that the server's `time_to_first_token_seconds` (measured from frontend arrival) does not. A gap
beyond those is recorded as a disagreement: another client is loading the target, or one side is wrong.
A load window cut at its deadline leaves requests the client gave up on: the server may still have finished them,
or counted their prompt and some output before the abort, so those few widen the count bounds on one side only.
A request answered with a client-error status (a 429 from a gateway in front, a 400) never reached the engine:
it widens nothing. Every request that did not complete is counted by kind and status (`incomplete`,
`error_statuses`), so a window the engine saw little of says so instead of agreeing on that little.
"""

from __future__ import annotations

from typing import Any, Sequence, TypedDict

from pydantic import ConfigDict, Field, computed_field, field_serializer

from .metrics import Snapshot, delta, window_histogram
from ..core.record import Record
from ..core.stats import percentile


class CrossCheckItem(Record):
    quantity: str
    client: float | None
    server: float | None
    tolerance: float  # absolute, in the quantity's unit
    unit: str
    note: str = ""
    #: one-sided slack: how far the server may count above (`server_extra`) or below (`server_short`) the client
    #: beyond `tolerance` — what requests the client cut at a deadline may or may not have left on the server
    server_extra: float = 0.0
    server_short: float = 0.0

    # derived from the fields above, so that `model_dump` writes them after the fields

    @computed_field  # type: ignore[prop-decorator]
    @property
    def diff(self) -> float | None:
        """client − server; None when either is unknown."""
        return None if self.client is None or self.server is None else self.client - self.server

    @computed_field  # type: ignore[prop-decorator]
    @property
    def agrees(self) -> bool | None:
        """Whether `diff` is within the tolerance and the slack; None when it is unknown."""
        d = self.diff
        return None if d is None else -(self.tolerance + self.server_extra) <= d <= self.tolerance + self.server_short


class CrossCheckItemDict(TypedDict):
    """A `CrossCheckItem` as `model_dump` writes it (and a reader of the evidence reads it back)."""

    quantity: str
    client: float | None
    server: float | None
    tolerance: float
    unit: str
    note: str
    server_extra: float
    server_short: float
    diff: float | None
    agrees: bool | None


class CrossCheckDict(TypedDict):
    """A `CrossCheck` as `model_dump` writes it: the items, the quantities that disagree, what did not complete,
    per endpoint."""

    items: list[CrossCheckItemDict]
    disagreements: list[str]
    incomplete: dict[str, int]
    error_statuses: dict[str, int]
    by_endpoint: dict[str, dict[str, float | None]]


class CrossCheck(Record):
    """The comparison over one window, written as `model_dump()` (`CrossCheckDict`)."""

    model_config = ConfigDict(frozen=True, serialize_by_alias=True)

    items: tuple[CrossCheckItem, ...]
    #: the quantities whose items disagree, read from the items (written second, as `disagreements`)
    disagreeing: tuple[str, ...] = Field(default_factory=lambda fields: tuple(
        i.quantity for i in fields["items"] if i.agrees is False), serialization_alias="disagreements")
    #: the client's requests that did not complete, per kind (refused, server_errors, timeouts, unreachable,
    #: cancelled; only the kinds that occurred), and their HTTP statuses
    incomplete: dict[str, int] = Field(default_factory=dict)
    error_statuses: dict[str, int] = Field(default_factory=dict)
    #: what each metrics endpoint counted over the window (requests finished, prompt tokens): an endpoint of the
    #: target moves with the kit's requests; one that stays still is another server's
    by_endpoint: dict[str, dict[str, float | None]] = Field(default_factory=dict)

    @field_serializer("items", "disagreeing")
    def _listed(self, values: tuple[Any, ...]) -> list[Any]:
        return [v.model_dump() if isinstance(v, CrossCheckItem) else v for v in values]

    @property
    def disagreements(self) -> list[CrossCheckItem]:
        return [i for i in self.items if i.agrees is False]

    def table(self) -> Any:
        import pandas as pd

        return pd.DataFrame([i.model_dump() for i in self.items])


def _bucket_width_at(before: Snapshot, after: Snapshot, canonical: str, value_s: float | None) -> float:
    """Width of the histogram bucket holding `value_s`: the resolution the server side can be trusted to."""
    window = window_histogram(before, after, canonical)
    if window is None or value_s is None:
        return 0.0
    lower = 0.0
    for upper, _ in window.buckets:
        if value_s <= upper:
            return (upper - lower) if upper != float("inf") else value_s
        lower = upper
    return value_s


# vLLM's finished_reason values for a request that did not end on its own (notes: request_success_total)
_CUT_REASONS = frozenset({"abort", "error"})


def _counter_by_reason(before: Snapshot, after: Snapshot) -> tuple[float | None, float | None]:
    """`request_success_total` increase split into (finished normally, aborted or errored), by `finished_reason`."""
    if delta(before, after, "request_success_total").value is None:
        return None, None
    done = cut = 0.0
    old = {(e, s.label_key()): s.value for e, s in before.samples("request_success_total")}
    for endpoint, sample in after.samples("request_success_total"):
        prev = old.get((endpoint, sample.label_key()), 0.0)
        inc = sample.value - prev if sample.value >= prev else sample.value  # a reset counts its new value
        if sample.labels.get("finished_reason") in _CUT_REASONS:
            cut += inc
        else:
            done += inc
    return done, cut



def endpoint_counts(before: Snapshot, after: Snapshot) -> dict[str, dict[str, float | None]]:
    """Each endpoint's own counter increases over the window (requests finished, prompt tokens)."""
    out: dict[str, dict[str, float | None]] = {}
    for url in after.urls:
        if url not in before.urls:
            continue
        b = Snapshot((before.endpoint(url),), t_wall=before.t_wall, t_mono_ns=before.t_mono_ns)
        a = Snapshot((after.endpoint(url),), t_wall=after.t_wall, t_mono_ns=after.t_mono_ns)
        out[url] = {"requests": delta(b, a, "request_success_total").value,
                    "prompt_tokens": delta(b, a, "prompt_tokens_total").value}
    return out


def _sent(rec: Any) -> bool:
    return getattr(rec, "sent_ns", 1) is not None


def incomplete_kind(rec: Any) -> str | None:
    """How a request (a ChatRecord or an object with its attributes) did not complete: None (it did), "cancelled",
    "refused" (a 4xx status: a gateway's 429, a 400), "server_errors" (5xx, or an error event inside a 200 stream),
    "timeouts" or "unreachable" — the kinds and names of a capacity step's counts."""
    if getattr(rec, "ok", False):
        return None
    if getattr(rec, "cancelled", False):
        return "cancelled"
    status = getattr(rec, "http_status", None)
    kind = getattr(rec, "error_kind", None)
    if isinstance(status, int) and 400 <= status < 500:
        return "refused"
    if isinstance(status, int) and status >= 500:
        return "server_errors"
    if kind == "Timeout":
        return "timeouts"
    if kind == "TargetUnreachable" and status is None:
        return "unreachable"
    return "server_errors"


def cross_check(records: Sequence[Any], before: Snapshot, after: Snapshot, *,
                network_allowance_ms: float = 50.0) -> CrossCheck:
    """Compare finished requests (ChatRecords, or objects with the same attributes) with the server's counters
    and histograms between two scrapes. `records` should hold every request of the window, the failed and
    cancelled ones too: a request that left the client but did not finish ok widens the count bounds by what
    the server may have counted for it (one request; the largest prompt and output of a finished one)."""
    ok = [r for r in records if getattr(r, "ok", False)]
    kinds = [(r, incomplete_kind(r)) for r in records]
    incomplete: dict[str, int] = {}
    statuses: dict[str, int] = {}
    for r, kind in kinds:
        if kind is None:
            continue
        incomplete[kind] = incomplete.get(kind, 0) + 1
        if isinstance(status := getattr(r, "http_status", None), int):
            statuses[str(status)] = statuses.get(str(status), 0) + 1
    # refused by status: nothing the engine could have counted (vLLM validates before its engine; a gateway in
    # front answers for it), so only the other unfinished requests widen the bounds
    refused = [r for r, kind in kinds if kind == "refused"]
    unfinished = [r for r, kind in kinds if kind not in (None, "refused") and _sent(r)]
    items: list[CrossCheckItem] = []

    def counter(canonical: str) -> float | None:
        d = delta(before, after, canonical)
        return None if d is None else d.value

    done, cut = _counter_by_reason(before, after)
    n_cut = float(len(unfinished))
    items.append(CrossCheckItem(quantity="requests finished", client=float(len(ok)), server=done, tolerance=0.0,
                                unit="requests", note="server: request_success_total, finished_reason other than "
                                "abort/error; it may count the requests the client cut as they finished",
                                server_extra=n_cut))
    items.append(CrossCheckItem(quantity="requests cut", client=n_cut, server=cut, tolerance=0.0, unit="requests",
                                note="client: sent, not finished ok; server: finished_reason abort/error (a "
                                "disconnect may register after the window)", server_short=n_cut))
    # the sum is exact whichever way a cut request ended on the server: only a late disconnect makes it short
    items.append(CrossCheckItem(quantity="requests sent", client=float(len(ok)) + n_cut,
                                server=None if done is None or cut is None else done + cut, tolerance=0.0,
                                unit="requests", note="client: finished ok + cut; server: every finished_reason",
                                server_short=n_cut))
    prompt = [r.prompt_tokens for r in ok if r.prompt_tokens is not None]
    gen = [r.completion_tokens for r in ok if r.completion_tokens is not None]
    items.append(CrossCheckItem(quantity="prompt tokens", client=float(sum(prompt)) if prompt else None,
                                server=counter("prompt_tokens_total"), tolerance=0.0, unit="tokens",
                                note="client: usage.prompt_tokens", server_extra=n_cut * max(prompt, default=0)))
    items.append(CrossCheckItem(quantity="generation tokens", client=float(sum(gen)) if gen else None,
                                server=counter("generation_tokens_total"), tolerance=0.0, unit="tokens",
                                note="client: usage.completion_tokens", server_extra=n_cut * max(gen, default=0)))
    for q in (0.5, 0.9):
        for label, attr, canonical in (("TTFT", "ttft_ms", "time_to_first_token_seconds"),
                                       ("e2e", "e2e_ms", "e2e_request_latency_seconds")):
            client = percentile((getattr(r, attr) for r in ok), q * 100)
            window = window_histogram(before, after, canonical)
            server_s = window.quantile(q) if window is not None and window.count else None
            server = None if server_s is None else server_s * 1000.0
            width_ms = _bucket_width_at(before, after, canonical, server_s) * 1000.0
            items.append(CrossCheckItem(
                quantity=f"{label} p{int(q * 100)}", client=client, server=server,
                tolerance=width_ms + network_allowance_ms, unit="ms",
                note="server quantile interpolated inside its histogram bucket; tolerance = bucket width + network"))
    if refused:
        said = ", ".join(f"HTTP {code} ×{n}" for code, n in sorted(statuses.items()) if code.startswith("4"))
        items.append(CrossCheckItem(quantity="requests refused", client=float(len(refused)), server=None,
                                    tolerance=0.0, unit="requests",
                                    note=f"client: answered with a client-error status ({said}); the engine counts "
                                    "none of them: not compared, counted as load that did not complete"))
    return CrossCheck(items=tuple(items), incomplete=dict(sorted(incomplete.items())),
                      error_statuses=dict(sorted(statuses.items())), by_endpoint=endpoint_counts(before, after))
