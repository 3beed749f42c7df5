"""Two measurements of one quantity must agree, or the window they describe is inconclusive, never a pass.

A load window is read from the server (its gauges, counters and histograms) and from the client (what the kit sent
and got back). Where both measure one thing they are compared, each with a stated tolerance:

- **in flight**: the server's running + waiting gauges at each sample vs the kit's requests in flight at that
  instant (sent, not finished): the engine may not hold more than the kit sent, beyond max(1, 25 %) — another
  client's load, or a busier deployment's gauges (fewer is normal: front-end time is outside the engine's gauges);
- **queue**: the waiting gauge's mean over the window vs the waiting the queue-time histogram implies (Little's law:
  the sum of the window's queue times ÷ its length): within max(0.5, 50 %), widened by what the kit's requests
  straddling the window's edges may have waited (vLLM observes a queue time when its request finishes) — a gauge
  stuck at 0 while requests queue shows here (the histogram times a request's first wait only: after a preemption
  the gauge may exceed it);
- **preemptions**: the counter's increase between the window's boundary scrapes vs its increase over the sampled
  series, which lies inside that window: the sampled one can never be larger;
- **counts**: the server's request and token counters vs the kit's requests and their `usage` (`k3lib.io.crosscheck`:
  exact, widened by the requests cut at the deadline) — a metrics endpoint that does not count the kit's own
  requests is not the target's;
- **TTFT p50**: the client's vs the server's histogram, shown but not decisive (vLLM v1 starts its TTFT after the
  API server rendered and tokenized the request: the client's exceeds it by that front-end time).

A gauge figure from fewer than three samples is not observable. Pure: a window's stored numbers, its requests and
the sampled rows in, a plain dict out (kept as the window's `agreement`).
"""

from __future__ import annotations

from collections.abc import Sequence

from .analysis import window
from .run_shapes import CalibrationData
from .shapes import Agreement, AgreementItem, MetricRow, RequestRow, Window

MIN_SAMPLES = 3
IN_FLIGHT_ABS, IN_FLIGHT_REL = 1.0, 0.25
QUEUE_ABS, QUEUE_REL = 0.5, 0.5


def _item(quantity: str, server: float | None, client: float | None, tolerance: float | None, agrees: bool | None,
          note: str) -> AgreementItem:
    r = (lambda v: None if v is None else round(float(v), 3))  # noqa: E731
    return {"quantity": quantity, "server": r(server), "client": r(client), "tolerance": r(tolerance),
            "agrees": agrees, "note": note}


def in_flight_at(requests: Sequence[RequestRow], t_wall: float) -> int:
    """The kit's requests in flight at one instant: sent at or before it, not finished by it."""
    ns = t_wall * 1e9
    return sum(1 for r in requests if (r.get("sent_wall_ns") or float("inf")) <= ns < (r.get("done_wall_ns") or ns + 1))


def in_flight_item(rows: Sequence[MetricRow], requests: Sequence[RequestRow]) -> AgreementItem:
    """One-sided: the engine cannot hold more of the kit's requests than the kit has in flight — more is another
    client's load, or another deployment's gauges. Fewer is normal: a request in flight at the client spends part
    of its life in the server's front end (rendering, tokenizing, detokenizing, the network), outside the engine's
    gauges — on real vLLM 0.32.0 on two busy CPU cores, 0.14 in the engine for 1.7 in flight (a gauge of an idle
    server shows here too, and its counters then miss the kit's requests: `counts`)."""
    pairs = [(float(running) + float(r.get("num_requests_waiting") or 0.0), in_flight_at(requests, float(r["t_wall"])))
             for r in rows if (running := r.get("num_requests_running")) is not None]
    note = ("server: running + waiting at each sample; client: the kit's requests in flight at that instant; the "
            f"server may not exceed the client by more than max({IN_FLIGHT_ABS:g}, {IN_FLIGHT_REL:.0%})")
    if len(pairs) < MIN_SAMPLES:
        return _item("in flight", None, None, None, None, f"{len(pairs)} sample(s): fewer than {MIN_SAMPLES}, not "
                                                        "observable — " + note)
    server = sum(p[0] for p in pairs) / len(pairs)
    client = sum(p[1] for p in pairs) / len(pairs)
    tol = max(IN_FLIGHT_ABS, IN_FLIGHT_REL * client)
    return _item("in flight", server, client, tol, server - client <= tol, note)


def queue_edges_s(requests: Sequence[RequestRow], start: float, end: float) -> tuple[float, float]:
    """How much queueing the window's histogram may miss or hold from outside it, in request-seconds. vLLM observes a
    request's queue time when the request finishes: a request still in flight at the window's end may have waited
    inside it unseen (at most its time in the window), and one that finished inside it after being sent before its
    start may bring a wait from before (at most that time). Negligible over a 120 s step, most of a 1 s one."""
    after = before = 0.0
    for r in requests:
        sent, done = r.get("sent_wall_ns"), r.get("done_wall_ns")
        if sent is None:
            continue
        sent_s, done_s = float(sent) / 1e9, None if done is None else float(done) / 1e9
        if sent_s < end and (done_s is None or done_s > end):
            after += end - max(sent_s, start)
        elif done_s is not None and start <= done_s <= end and sent_s < start:
            before += start - sent_s
    return after, before


def queue_item(rows: Sequence[MetricRow], w: Window, duration_s: float,
               edges_s: tuple[float, float] = (0.0, 0.0)) -> AgreementItem:
    waiting = [float(v) for r in rows if (v := r.get("num_requests_waiting")) is not None]
    mean_ms, count = w.get("queue_mean_ms"), w.get("queue_count")
    note = ("server: the waiting gauge's mean vs Little's law over the queue-time histogram (the window's queue "
            f"times ÷ its length); tolerance max({QUEUE_ABS:g}, {QUEUE_REL:.0%}), widened by the queueing of the "
            "kit's requests that straddle the window's edges (the histogram counts a request when it finishes)")
    if mean_ms is None or count is None or duration_s <= 0:
        return _item("queue", None, None, None, None, "no queue-time histogram in the window — " + note)
    if len(waiting) < MIN_SAMPLES:
        return _item("queue", None, None, None, None, f"{len(waiting)} sample(s): fewer than {MIN_SAMPLES}, not "
                                                    "observable — " + note)
    gauge = sum(waiting) / len(waiting)
    implied = float(mean_ms) * float(count) / 1000.0 / duration_s
    tol = max(QUEUE_ABS, QUEUE_REL * max(gauge, implied))
    unseen, earlier = (e / duration_s for e in edges_s)
    # the histogram times a request's first wait only: a preempted request waits again, counted by the gauge alone
    preempted = bool(w.get("preemptions") or w.get("preemptions_sampled"))
    ok = gauge >= implied - tol - earlier and (preempted or gauge <= implied + tol + unseen)
    return _item("queue", gauge, implied, tol + max(unseen, earlier), ok,
                 note + (f"; edges: up to {unseen:.3g} unseen, {earlier:.3g} from before" if unseen or earlier
                         else "") + ("; preempted requests wait again, seen by the gauge only: it may exceed the "
                                     "histogram" if preempted else ""))


def preemption_item(w: Window) -> AgreementItem:
    boundary, sampled = w.get("preemptions"), w.get("preemptions_sampled")
    note = "boundary scrapes vs the sampled series inside them: the sampled increase can never be larger"
    if boundary is None or sampled is None:
        return _item("preemptions", boundary, sampled, 0.0, None, note)
    return _item("preemptions", boundary, sampled, 0.0, float(sampled) <= float(boundary), note)


def counts_item(w: Window) -> AgreementItem:
    check = w.get("cross_check") or {}
    by = {i.get("quantity"): i for i in check.get("items") or []}
    sent = by.get("requests sent") or by.get("requests finished")
    bad = [q for q in check.get("disagreements") or [] if (item := by.get(q)) is None or item.get("unit") != "ms"]
    said = "; ".join(f"{q}: client {by[q].get('client')}, server {by[q].get('server')}" for q in bad if q in by)
    note = ("server: request and token counters; client: the kit's requests and their usage (exact, widened by the "
            "requests cut at the deadline)" + (f" — {said}" if said else ""))
    return _item("counts", sent.get("server") if sent else None, sent.get("client") if sent else None, 0.0,
                 check.get("counts_agree"), note)


def ttft_item(w: Window, calibration_error_ms: float | None) -> AgreementItem:
    """Shown, never decisive: vLLM v1 starts its TTFT once the API server has rendered and tokenized the request, so
    the client's TTFT exceeds it by that front-end time — 80 ms on real vLLM 0.32.0 on two busy CPU cores, where the
    server said 15 ms — and no tolerance separates that from queueing the histogram missed. The queue itself is
    compared above (gauge vs histogram, in-flight vs running + waiting)."""
    check = w.get("cross_check") or {}
    item = next((i for i in check.get("items") or [] if i.get("quantity") == "TTFT p50"), None)
    note = ("client TTFT p50 vs the server's histogram, informational: the server's starts after its front end "
            "rendered and tokenized the request")
    if item is None or item.get("client") is None or item.get("server") is None:
        return _item("TTFT p50", None, None, None, None, note)
    tol = float(item.get("tolerance") or 0.0) + float(calibration_error_ms or 0.0)
    return _item("TTFT p50", item["server"], item["client"], tol, None, note)


def window_agreement(w: Window, requests: Sequence[RequestRow], metric_rows: Sequence[MetricRow], *,
                     settle_fraction: float, calibration_error_ms: float | None = None) -> Agreement:
    """Every pair of measurements of one window compared: {"agrees": True | False | None, "samples", "items",
    "disagreements", "text"}. None: nothing could be compared (no server series, too few samples)."""
    start, end = w.get("start_wall"), w.get("end_wall")
    if start is None or end is None:
        return {"agrees": None, "samples": 0, "items": [], "disagreements": [], "text": "no window recorded"}
    whole = window(metric_rows, float(start), float(end))
    settled = window(metric_rows, float(start) + (float(end) - float(start)) * settle_fraction, float(end))
    items = [counts_item(w), in_flight_item(settled, requests), queue_item(whole, w, float(end) - float(start),
                                                                   queue_edges_s(requests, float(start), float(end))),
             preemption_item(w), ttft_item(w, calibration_error_ms)]
    bad = [i for i in items if i["agrees"] is False]
    compared = [i for i in items if i["agrees"] is not None]
    samples = len(settled)
    text = "; ".join(f"{i['quantity']}: server {i['server']}, client {i['client']} (tolerance {i['tolerance']})"
                     for i in bad)
    if samples < MIN_SAMPLES:
        text = (text + "; " if text else "") + (f"{samples} /metrics sample(s) in the settled window: fewer than "
                                                f"{MIN_SAMPLES}, its gauges are not observable")
    agrees = False if bad else (None if not compared or samples < MIN_SAMPLES else True)
    return {"agrees": agrees, "samples": samples, "items": items, "disagreements": [i["quantity"] for i in bad],
            "text": text}


# Why a window did not hold that the client saw for itself: these stand whatever the server's series say.
CLIENT_REASONS = ("did not complete", "no request completed", "the engine died", "worker")


def settle_held(held: bool, why: Sequence[str], agreement: Agreement) -> tuple[bool | None, list[str]]:
    """A window's held/why once its measurements are compared: a failure the client saw itself stands; otherwise a
    window whose measurements disagree, or whose gauges rest on fewer than three samples, is undecided (None) —
    never held — with the disagreement named."""
    why = list(why)
    if not held and any(k in w for w in why for k in CLIENT_REASONS):
        return False, why
    if agreement.get("agrees") is False or (agreement.get("samples") or 0) < MIN_SAMPLES:
        return None, why + [f"inconclusive: {agreement.get('text') or 'the measurements do not agree'}"]
    return held, why


def calibration_error_at(calibration: CalibrationData | None, concurrency: int) -> float | None:
    """The client's TTFT error p99 the self-calibration measured nearest above `concurrency` (None: not
    calibrated)."""
    rows = [r for r in (calibration or {}).get("summary") or [] if r.get("ttft_error_ms_p99") is not None]
    above = sorted((r for r in rows if r["concurrency"] >= concurrency), key=lambda r: r["concurrency"])
    pick = above[0] if above else (max(rows, key=lambda r: r["concurrency"]) if rows else None)
    return None if pick is None else float(pick["ttft_error_ms_p99"] or 0.0)  # picked among those that have one
