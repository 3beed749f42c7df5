"""The PromQL the kit's alerts and panels share: the metric names of the vLLM version the run observed, the
selectors the operator scoped, and the context (the run, its accepted levels) each file is written from."""

from __future__ import annotations

import dataclasses

from ..core.versions import release
from ..io.metrics.names import spec_for
from ..verdict import accepted as acc
from .options import GoliveOptions


CANONICALS = ("kv_cache_usage_perc", "num_requests_running", "num_requests_waiting", "num_preemptions_total",
              "prefix_cache_queries_total", "prefix_cache_hits_total", "request_success_total",
              "time_to_first_token_seconds", "e2e_request_latency_seconds", "request_queue_time_seconds")
HISTOGRAMS = ("time_to_first_token_seconds", "e2e_request_latency_seconds", "request_queue_time_seconds")


def metric_names(version: str | None, observed: frozenset[str] | None = None) -> dict[str, str]:
    """canonical → the vLLM name to query. The names the run's exposition held win; else the version decides.

    vLLM 0.10 exports both `kv_cache_usage_perc` and its deprecated alias `gpu_cache_usage_perc` (0.11 hides the
    alias, 0.12 removes it); likewise `gpu_prefix_cache_*_total`. The new names exist from 0.10 on, so they are
    the choice for every v1 server; only a pre-0.10 server is queried by the old gauge name, and has no token
    counters for the prefix cache at all.
    """
    out: dict[str, str] = {}
    vt = release(version)
    for canonical in CANONICALS:
        names = [n for n in spec_for(canonical).names if n.startswith("vllm:")]
        if observed:
            suffix = "_bucket" if canonical in HISTOGRAMS else ""
            seen = [n for n in names if n + suffix in observed]
            if seen:
                out[canonical] = seen[0]
                continue
        if vt is not None and vt < (0, 10):
            legacy = {"kv_cache_usage_perc": "vllm:gpu_cache_usage_perc"}
            if canonical in ("prefix_cache_queries_total", "prefix_cache_hits_total"):
                continue
            out[canonical] = legacy.get(canonical, names[0])
        else:
            out[canonical] = names[0]
    return out


def error_reasons(version: str | None) -> str | None:
    """The `finished_reason` that means a server-side failure: `error`, from 0.13. `abort` is left out: it counts
    client disconnects and cancellations too. 0.10–0.12 only have `abort`: no error ratio can be told from them."""
    vt = release(version)
    return None if vt is not None and vt < (0, 13) else "error"


# -- PromQL building ----------------------------------------------------------------------------------------------

def fmt(x: float) -> str:  # a threshold in PromQL: every digit the level has (prose goes through `figure`)
    return f"{x:.6g}"


class PromQuery:
    def __init__(self, opts: GoliveOptions, names: dict[str, str], version: str | None) -> None:
        self.opts, self.names, self.errors = opts, names, error_reasons(version)

    def sel(self, *extra: str) -> str:
        parts = [f'job="{self.opts.job}"'] + [m for m in (self.opts.matchers, *extra) if m]
        return "{" + ",".join(parts) + "}"

    def series(self, canonical: str, *extra: str) -> str:
        return self.names[canonical] + self.sel(*extra)

    def rate(self, canonical: str, *extra: str, window: str | None = None) -> str:
        return f"rate({self.series(canonical, *extra)}[{window or self.opts.rate_window}])"

    def quantile(self, q: float, canonical: str) -> str:
        bucket = f"{self.names[canonical]}_bucket{self.sel()}"
        return f"histogram_quantile({q}, sum by (le) (rate({bucket}[{self.opts.rate_window}])))"

    def error_ratio(self) -> str:
        err = f'finished_reason="{self.errors}"'
        return (f"sum({self.rate('request_success_total', err)})\n  /\nsum({self.rate('request_success_total')})")

    def hit_rate(self) -> str:
        w = self.opts.hit_rate_window
        return (f"sum({self.rate('prefix_cache_hits_total', window=w)})\n  /\n"
                f"sum({self.rate('prefix_cache_queries_total', window=w)})")

    def engine_down(self) -> str:
        up_sel = f'{{job="{self.opts.job}"}}'
        return f"up{up_sel} == 0\nor\nabsent({self.series('num_requests_running')})"


# -- the kit --------------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class KitContext:
    run: acc.RunEvidence
    version: str | None
    levels: dict[str, acc.Level]
    names: dict[str, str]
    query: PromQuery
    opts: GoliveOptions


def refuse_level(level: acc.Level, axis_hint: str) -> str | None:
    if not level.known:
        return f"no accepted level ({level.reason})"
    if not level.accepted:
        return f"the {axis_hint} axis did not pass (status {level.axis_status}): {level.source} is no accepted level"
    return None
