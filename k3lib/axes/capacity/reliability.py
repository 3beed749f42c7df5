"""Findings on whether the run's figures can be believed: the client's own timing error (its self-calibration)
and the agreement of the client's counts and quantiles with the server's in every load window."""

from __future__ import annotations


from ...core.evidence import Finding
from ...core.numbers import figure
from ...core.params import Params
from .analysis import incomplete_load
from .finding import finding as _f, load_windows, ms_text
from .result import CapacityResult
from .run_shapes import CalibrationSummary
from .shapes import CrossCheckData


def calibration_finding(result: CapacityResult) -> Finding | None:
    cal = result.run.get("calibration") or {}
    if not cal.get("enabled"):
        return _f("client_calibration", "info", "the client's own timing error was not calibrated "
                                                "(axes.capacity.calibrate is false): its latency figures carry an "
                                                "unknown error")
    if not cal.get("ran"):
        return None  # the steps did not run: nothing to vouch for
    summary = cal.get("summary") or []
    failed = sorted((r for r in summary if not r.get("valid")), key=lambda r: r["concurrency"])
    invalid = [s["concurrency"] for s in result.steps if s.get("latency_valid") is False]
    common = dict(observed=summary, expected=f"p99 error <= {cal.get('max_error_ms')} ms",
                  known_ttft_ms=cal.get("known_ttft_ms"), known_itl_ms=cal.get("known_itl_ms"),
                  basis=cal.get("basis"), invalid_steps=invalid)
    if failed:
        n = failed[0]["concurrency"]
        return _f("client_calibration", "warn",
                  f"the client's own timing error at concurrency {n} exceeds its bound ({failed[0]['reason']}): "
                  f"the latency figures of the steps at or above {n} are marked invalid, not trusted; the "
                  "saturation point rests on the server's counters and is unaffected",
                  **common)
    worst: CalibrationSummary | dict[str, None] = max(summary, key=lambda r: r["concurrency"], default={})
    return _f("client_calibration", "pass",
              f"the client's own timing error stays within {figure(cal.get('max_error_ms'), ' ms')} up to "
              f"concurrency {worst.get('concurrency')} (TTFT error p99 {ms_text(worst.get('ttft_error_ms_p99'))}, ITL "
              f"error p99 {ms_text(worst.get('itl_error_ms_p99'))}, event-loop lag p99 "
              f"{ms_text(worst.get('loop_lag_ms_p99'))})",
              **common)


def cross_check_finding(result: CapacityResult, params: Params) -> Finding | None:
    windows = [(name, w, w.get("cross_check") or {}) for name, w in load_windows(result)]
    if not windows:
        return None
    table = {name: {"counts_agree": c.get("counts_agree"), "agrees": c.get("agrees"),
                    "disagreements": c.get("disagreements") or [], "incomplete": c.get("incomplete") or {},
                    "error_statuses": c.get("error_statuses") or {}} for name, _, c in windows}
    compared = [(name, c) for name, _, c in windows if c.get("agrees") is not None]
    if not compared:
        return _f("cross_check", "info", "client and server were not compared: no server counters around the load "
                                         "windows (see capacity.server_metrics)", observed=table)
    counts = [(name, c) for name, c in compared if c.get("counts_agree") is False]
    if counts:
        def detail(c: CrossCheckData) -> str:
            by = {i["quantity"]: i for i in c.get("items") or []}
            return ", ".join(f"{q}: client {by[q]['client']:g}, server {by[q]['server']:g}"
                             for q in c.get("disagreements") or [] if q in by and by[q].get("diff") is not None
                             and by[q]["unit"] != "ms")
        where = "; ".join(f"{name} ({detail(c)})" for name, c in counts)
        return _f("cross_check", "warn", f"client and server counts disagree in {len(counts)} of {len(compared)} "
                                         f"load window(s): {where}"[:600] + " — another client was loading the "
                                         "target, or one side counts wrong: those windows did not measure the load "
                                         "the kit sent", observed=table)
    # the counts agree on what reached the engine; a window whose load did not complete (counted by the client,
    # kind by kind) measured less than the kit sent, which the agreement must not hide
    short = [(name, w) for name, w, c in windows if c.get("agrees") is not None and not w.get("out_of_contract")
             and incomplete_load(w, params.contract.max_error_share)[0]]
    if short:
        where = "; ".join(f"{name} ({incomplete_load(w, params.contract.max_error_share)[1]})" for name, w in short)
        return _f("cross_check", "warn", f"client and server agree only on the requests that reached the engine: the "
                                         f"client's load did not complete in {len(short)} of {len(compared)} compared "
                                         f"window(s): {where}"[:900] + " — those windows did not measure the load "
                                         "the kit sent", observed=table)
    latency = [(name, c) for name, c in compared if c.get("agrees") is False]
    if latency:
        return _f("cross_check", "info", "client and server counts agree in every window; latency quantiles differ "
                                         "beyond a histogram bucket and the network allowance in "
                                         + ", ".join(f"{name} ({', '.join(c['disagreements'])})"
                                                     for name, c in latency), observed=table)
    return _f("cross_check", "pass", f"client and server agree on requests, tokens and TTFT/e2e quantiles in every "
                                     f"load window ({len(compared)} compared)", observed=table)
