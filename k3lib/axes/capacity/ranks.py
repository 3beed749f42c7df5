"""The capacity axis per data-parallel rank: each rank's window numbers (preemptions, KV pool and usage, waiting,
decode rate, prefix reuse) from the `engine` label of every node's /metrics, and the findings that name the rank
that saturates first or differs from its peers. The aggregate hides both: usage is a max, counters are sums.
Pure over snapshots, sampled rows and the run read back."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ...core.evidence import Finding, FindingStatus
from ...core.numbers import figure
from ...io.metrics import Snapshot, delta, window_histogram
from .config import DECODE_SHARE_MIN, HIT_RATE_FLOOR, HIT_SHARE_MIN, POOL_SHARE_MIN
from .shapes import MetricRow, RankFigure, RankRow, SeriesName, SoakRow, StepRow

if TYPE_CHECKING:
    from ...core.params import Params
    from .result import CapacityResult


def rank_name(rank_id: str) -> str:
    """`http://10.0.0.2:8000/metrics#3` → `rank 3 (10.0.0.2:8000)`."""
    url, _, engine = rank_id.rpartition("#")
    return f"rank {engine} ({urlsplit(url).netloc or url})"


def _counter(before: Snapshot, after: Snapshot, canonical: str) -> float | None:
    got = delta(before, after, canonical).value
    return None if got is None else round(got, 3)


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def _column(rows: Sequence[dict[str, float | None]], name: SeriesName) -> list[float]:
    return [v for r in rows if isinstance(v := r.get(name), (int, float))]


def rank_window(before: Snapshot | None, after: Snapshot | None, rows: Sequence[MetricRow], t0: float,
                t1: float) -> list[RankRow] | None:
    """One row per DP rank over a load window: counter deltas between the boundary scrapes, the sampled gauges
    between t0 and t1, and the pool its `cache_config_info` states. None with fewer than two ranks."""
    if before is None or after is None:
        return None
    ranks = after.ranks()
    if len(ranks) < 2:
        return None
    inside = [r for r in rows if t0 <= (r.get("t_wall") or 0.0) <= t1 and isinstance(r.get("ranks"), dict)]
    elapsed = max(t1 - t0, 1e-9)
    out: list[RankRow] = []
    for url, engine in ranks:
        rid = f"{url}#{engine}"
        a = after.rank_view(url, engine)
        try:
            b = before.rank_view(url, engine)
        except KeyError:
            continue
        sampled = [r["ranks"][rid] for r in inside if rid in r["ranks"]]

        kv, running, waiting = (_column(sampled, name) for name in ("kv_cache_usage_perc", "num_requests_running",
                                                                     "num_requests_waiting"))
        gen = _counter(b, a, "generation_tokens_total")
        queries = _counter(b, a, "prefix_cache_queries_total")
        hits = _counter(b, a, "prefix_cache_hits_total")
        itl = window_histogram(b, a, "inter_token_latency_seconds")
        itl_mean = itl.mean if itl is not None and itl.count else None
        info = after.cache_config_info(engine=engine, endpoint=url)
        blocks = info.get("num_gpu_blocks")
        running_mean = _mean(running)
        out.append({
            "rank": rid, "name": rank_name(rid), "endpoint": url, "engine": engine,
            "preemptions": _counter(b, a, "num_preemptions_total"), "generation_tokens": gen,
            "prefix_queries": queries, "prefix_hits": hits,
            "hit_rate": round(hits / queries, 4) if queries and hits is not None else None,
            "num_gpu_blocks": int(blocks) if isinstance(blocks, str) and blocks.isdigit() else None,
            "enable_prefix_caching": info.get("enable_prefix_caching"),
            "samples": len(sampled), "kv_usage_max": max(kv) if kv else None, "kv_usage_mean": _mean(kv),
            "running_mean": running_mean, "waiting_mean": _mean(waiting), "waiting_max": max(waiting) if waiting else None,
            "decode_tokens_per_s": round(gen / elapsed, 2) if gen is not None else None,
            "itl_mean_ms": round(itl_mean * 1000, 3) if itl_mean else None,
            # one sequence's decode rate on this rank: 1 / its mean inter-token latency (the engine's own histogram),
            # else its tokens over the sequences it held; a slow rank shows whatever share of the load it got
            "decode_tokens_per_s_per_seq": (round(1 / itl_mean, 2) if itl_mean else
                                            round(gen / (running_mean * elapsed), 2)
                                            if gen is not None and running_mean and running_mean >= 0.2 else None),
        })
    return out


def _f(rule: str, status: FindingStatus, message: str, **evidence: Any) -> Finding:
    return Finding(rule=f"capacity.{rule}", status=status, message=message, observed=evidence.pop("observed", None),
                   expected=evidence.pop("expected", None), evidence=evidence)


def _saturation(step: StepRow, ranks: list[RankRow], tolerance: float) -> Finding:
    c = step["concurrency"]

    def full(r: RankRow) -> bool:
        return bool(r.get("preemptions")) or (r.get("waiting_mean") or 0.0) > tolerance

    worst = max(ranks, key=lambda r: (r.get("preemptions") or 0, r.get("waiting_mean") or 0, r.get("kv_usage_max") or 0))
    table = {r["name"]: {k: r.get(k) for k in ("preemptions", "waiting_mean", "kv_usage_max", "running_mean")}
             for r in ranks}
    saturated = [r for r in ranks if full(r)]
    others = [r for r in ranks if r is not worst]
    peer_kv = max((r.get("kv_usage_max") or 0.0 for r in others), default=0.0)
    if saturated:
        return _f("rank_saturation", "fail",
                  f"at the planned concurrency {c}, {worst['name']} saturated first: {worst.get('preemptions') or 0:g} "
                  f"preemption(s), {figure(worst.get('waiting_mean') or 0)} waiting on average, KV usage up to "
                  f"{(worst.get('kv_usage_max') or 0):.0%} (the other ranks: KV up to {peer_kv:.0%}, "
                  f"{sum(1 for r in saturated if r is not worst)} more saturated)",
                  observed=table, worst=worst["rank"], saturated=[r["rank"] for r in saturated])
    return _f("rank_saturation", "pass",
              f"at the planned concurrency {c} no rank of {len(ranks)} preempted or queued; the fullest, "
              f"{worst['name']}, reached KV usage {(worst.get('kv_usage_max') or 0):.0%}", observed=table,
              worst=worst["rank"])


def _outliers(ranks: list[RankRow], key: RankFigure, share_min: float, floor: float = 0.0
              ) -> list[tuple[RankRow, float, float]]:
    """Ranks whose `key` is below `share_min` of the median of the other ranks (each judged against its peers)."""
    out = []
    for r in ranks:
        mine = r.get(key)
        peers = [v for p in ranks if p is not r and isinstance(v := p.get(key), (int, float))]
        if not isinstance(mine, (int, float)) or not peers:
            continue
        median = statistics.median(peers)
        if median > floor and mine < share_min * median:
            out.append((r, mine, median))
    return out


def _balance(step: StepRow | None, soak: SoakRow | None) -> Finding | None:
    """Ranks of one deployment are alike: the same KV pool, decode rate per sequence and prefix reuse."""
    at_step = (step or {}).get("ranks") or []
    in_soak = (soak or {}).get("ranks") or []
    if not at_step and not in_soak:
        return None
    pool_ranks = at_step or in_soak
    problems: list[tuple[float, str, str]] = []  # (share, rank, sentence): the smallest share is the worst
    for r, mine, median in _outliers(pool_ranks, "num_gpu_blocks", POOL_SHARE_MIN):
        problems.append((mine / median, r["rank"], f"has a KV pool of {mine:.0f} blocks, its peers "
                                                   f"{median:.0f} ({mine / median:.0%}; vllm:cache_config_info "
                                                   "num_gpu_blocks): its GPU had less free memory when it started"))
    for r, mine, median in _outliers(at_step, "decode_tokens_per_s_per_seq", DECODE_SHARE_MIN):
        assert step is not None  # at_step holds its ranks
        problems.append((mine / median, r["rank"],
                         f"decodes {figure(mine)} tokens/s per sequence at concurrency {step['concurrency']}, "
                         f"its peers {figure(median)} ({mine / median:.0%}; 1 / the mean inter-token latency of its "
                         "engine): "
                         "a slow GPU or link on that rank"))
    for r, mine, median in _outliers(in_soak, "hit_rate", HIT_SHARE_MIN, HIT_RATE_FLOOR):
        problems.append((mine / median if median else 0.0, r["rank"],
                         f"reused {mine:.0%} of its prefix tokens during the soak, its peers {median:.0%} "
                         "(vllm:prefix_cache_hits over queries): its cache does not reuse like theirs"))
    table = {r["name"]: {k: r.get(k) for k in ("num_gpu_blocks", "decode_tokens_per_s_per_seq", "hit_rate")}
             for r in pool_ranks}
    if in_soak:
        for r in in_soak:
            table.setdefault(r["name"], {})["hit_rate"] = r.get("hit_rate")
    if problems:
        problems.sort()
        worst = problems[0][1]
        return _f("rank_balance", "fail", "; ".join(f"{rank_name(p[1])} {p[2]}" for p in problems)
                                          + " — the ranks are not one deployment: repair that rank's GPU or node",
                  observed=table, worst=worst, outliers=sorted({p[1] for p in problems}))

    def spread(key: RankFigure, rows: list[RankRow], fmt: str | None) -> str | None:
        """The range of `key` over the ranks, each end in `fmt` (None: as a figure in prose)."""
        vals = [v for r in rows if isinstance(v := r.get(key), (int, float))]
        show = figure if fmt is None else (lambda v: format(v, fmt))
        return f"{show(min(vals))}–{show(max(vals))}" if vals else None

    parts = [f"KV pools {s} blocks" for s in [spread("num_gpu_blocks", pool_ranks, ".0f")] if s]
    parts += [f"decode {s} tokens/s per sequence" for s in [spread("decode_tokens_per_s_per_seq", at_step, None)] if s]
    parts += [f"prefix hit rate {s} in the soak" for s in [spread("hit_rate", in_soak, ".2f")] if s]
    return _f("rank_balance", "pass", f"{len(pool_ranks)} ranks alike: " + ", ".join(parts or ["no figure to compare"]),
              observed=table)


def rank_findings(result: "CapacityResult", params: "Params") -> list[Finding]:
    """Per-rank findings of a run that saw two ranks or more; none otherwise (one rank is the aggregate)."""
    step = result.step(params.contract.planned_concurrency)
    soak = result.run.get("soak")
    out: list[Finding] = []
    if step is not None and (ranks := step.get("ranks")):
        out.append(_saturation(step, ranks, params.axes.capacity.waiting_tolerance))
    balance = _balance(step, soak)
    if balance is not None:
        out.append(balance)
    return out
