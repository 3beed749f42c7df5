"""Designed vs observed reuse, and the axis findings: a pass needs hits on an identical prefix AND a latency gain.

Counters showing no hit on an identical prefix fail the axis (the expected gain is not counted); hits without a
latency gain, a latency drop without hit evidence, or a prefix that changed before the last turn are
"inconclusive" (warn), never a pass. Every gap between designed and observed hits gets a named cause.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, computed_field

from ..served import PREFIX, open_findings
from ...core.evidence import EvidenceRecord, Finding, axis_status
from ...core.numbers import figure
from ...core.stats import MIN_SAMPLES, Interval, median_interval
from .blocks import hits_for, units_reproducing
from .shapes import ReuseObserved
from .result import AXIS, COUNTERS_JSON, RESULT_JSON, SAMPLES_JSONL, TOKEN_IDS_JSONL, PrefixCacheResult, \
    RequestSample

if TYPE_CHECKING:
    from ...core.session import AxisContext

NO_REUSE = ("no reuse on an identical prefix → the expected gain is not counted; fix configuration and protocol")


class PairReconciliation(BaseModel):
    """One session × prefix length: what the ids say the warm request should hit, what the server said, why; dumped
    (`model_dump`) with its gain, match and identical-prefix figures as the record's `pairs` (core.evidence.PrefixPair).
    """

    model_config = ConfigDict(frozen=True)

    session: int
    prefix_target: int
    warm_prompt_tokens: int | None
    cold_ttft_ms: float | None
    warm_ttft_ms: float | None
    intended_hits: int | None
    designed_hits: int | None
    observed_hits: int | None
    cached_tokens: int | None
    cold_designed_hits: int | None
    cold_observed_hits: int | None
    divergence_at: int | None
    clean: bool  # both requests succeeded, counters observed, no foreign traffic in their windows
    cause: str  # match | prefix-changed | cache-disabled | routed-elsewhere | not-isolated | block-size |
    #             retention | evicted | failed | contaminated | not-observable
    explanation: str
    sighting: int = 2  # which sighting of the prefix the judged request was (3: hybrid retention, k3lib.axes.prefix_cache.run)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ttft_gain_pct(self) -> float | None:
        if not self.cold_ttft_ms or self.warm_ttft_ms is None:
            return None
        return 100.0 * (self.cold_ttft_ms - self.warm_ttft_ms) / self.cold_ttft_ms

    @computed_field  # type: ignore[prop-decorator]
    @property
    def matches(self) -> bool | None:
        if self.observed_hits is None or self.designed_hits is None:
            return None
        return self.observed_hits == self.designed_hits

    @computed_field  # type: ignore[prop-decorator]
    @property
    def identical_prefix(self) -> bool:
        """The warm prompt changed only in its last user turn, as the protocol intends."""
        return self.intended_hits is None or self.designed_hits is None or self.designed_hits >= self.intended_hits


def _int(x: float | None) -> int | None:
    return None if x is None else int(round(x))


def reconcile_pair(cold: RequestSample, warm: RequestSample, result: PrefixCacheResult,
                   sighting: int = 2) -> PairReconciliation:
    """Compare the warm request's (or the judged sighting's) designed hits with its counter delta and name the cause
    of any gap."""
    observed = _int(warm.hits_delta) if warm.hits_delta is not None else warm.cached_tokens

    def out(cause: str, text: str, clean: bool = True) -> PairReconciliation:
        return PairReconciliation(
            sighting=sighting, session=warm.session, prefix_target=warm.prefix_target,
            warm_prompt_tokens=warm.prompt_tokens, cold_ttft_ms=cold.ttft_ms, warm_ttft_ms=warm.ttft_ms,
            intended_hits=warm.intended_hits, designed_hits=warm.designed_hits, observed_hits=observed,
            cached_tokens=warm.cached_tokens, cold_designed_hits=cold.designed_hits,
            cold_observed_hits=_int(cold.hits_delta), divergence_at=warm.divergence_at, clean=clean, cause=cause,
            explanation=text)

    for s in (cold, warm):
        if not s.ok:
            return out("failed", f"the {s.kind} request failed: {s.error}", clean=False)
    for s in (cold, warm):
        if s.contaminated:
            return out("contaminated", f"{s.kind} window: {s.contaminated}; excluded from the verdict", clean=False)
    if observed is None:
        return out("not-observable", "no prefix_cache_hits counter and no usage cached_tokens: hits cannot be "
                                     "observed at " + (", ".join(result.metrics_urls) or "any metrics URL"),
                   clean=False)
    designed = warm.designed_hits
    if designed is None:
        return out("not-observable", f"{observed} tokens hit, but the designed hits cannot be computed "
                                     f"(no token ids from /tokenize, or no block size: {result.unit_source})")
    flag = result.cache_config.get("enable_prefix_caching")
    intended = warm.intended_hits
    changed = intended is not None and designed < intended
    where = (f"the warm prompt differs from the cold one at token {warm.divergence_at} of "
             f"{warm.tokenized_tokens}, before its last user turn: {intended - designed} tokens of "
             f"intended reuse ({intended}) are lost by the protocol, not by the cache") \
        if intended is not None and changed else ""
    if observed == designed:
        if changed:
            return out("prefix-changed", f"observed {observed} = designed {designed} tokens, but {where}; keep the "
                                         "system prompt, tools and history byte for byte")
        return out("match", f"observed {observed} = designed {designed} tokens (full {result.unit}-token blocks "
                            f"of the shared prefix, capped at L − 1)")
    if observed == 0 and str(flag) == "False":
        return out("cache-disabled", f"0 of {designed} designed tokens hit: the server runs with "
                                     "enable_prefix_caching=False (--no-enable-prefix-caching), no lookup can hit")
    if observed == 0 and cold.replica and warm.replica and cold.replica != warm.replica:
        return out("routed-elsewhere", f"0 of {designed} designed tokens hit: the cold request was counted on "
                                       f"{cold.replica} and the warm one on {warm.replica}; replicas do not share "
                                       "a prefix cache — pin a session to one replica (sticky routing)")
    if not warm.settled:
        return out("routed-elsewhere", f"{observed} of {designed} designed tokens hit, and the counters at "
                                       f"{', '.join(result.metrics_urls)} took only {figure(warm.queries_delta)} "
                                       f"of its {warm.prompt_tokens} prompt tokens: another replica, whose /metrics "
                                       "is not in target.metrics_urls, served it")
    # another hit unit reproducing the observation exactly comes first: a wrong unit makes observed > designed too
    units = _other_units(cold, warm, observed, designed, result.unit)
    if units:
        return out("block-size", f"{observed} of {designed} designed tokens hit: that is what a {units[0]}-token "
                                 f"hit unit gives, not {result.unit} ({result.unit_source}); set "
                                 "axes.prefix_cache.block_size_tokens or check the effective block size "
                                 "(hybrid models inflate it, vllm#42966)")
    if observed > designed:
        return out("not-isolated", f"{observed} tokens hit, {observed - designed} more than this run's own prompts "
                                   "explain: the prefix was cached before the cold request (use a unique "
                                   "cache_salt or a fresh prefix per session)")
    if observed == 0 and warm.sparse_misses_delta:
        return out("retention", f"0 of {designed} designed tokens hit on sighting {sighting}: the server matched "
                                f"{figure(warm.sparse_misses_delta)} tokens and threw them away for want of a "
                                "recurrent-state checkpoint inside the shared prefix "
                                "(vllm:prefix_cache_sparse_retention_misses; hybrid retention, vllm#45238)")
    if observed == 0:
        return out("evicted", f"0 of {designed} designed tokens hit although the prefix is identical up to token "
                              f"{warm.common_prefix_tokens}: the cold blocks were evicted before the warm request "
                              "(KV pool too small, other traffic), or the lookup was skipped (prompt_logprobs)")
    return out("evicted", f"only {observed} of {designed} designed tokens hit: the cold prompt's tail blocks were "
                          "evicted before the warm request (LRU frees a request's last blocks first)")


def _other_units(cold: RequestSample, warm: RequestSample, observed: int, designed: int,
                 unit: int | None) -> tuple[int, ...]:
    """The hit units other than `unit` that would give exactly `observed` hits on this pair's prompts.

    Only where `unit` itself gives the designed hits from the pair's lengths alone (the design is the cold/warm pair,
    so those lengths are the whole story).
    """
    common, cold_len, warm_len = warm.common_prefix_tokens, cold.tokenized_tokens, warm.tokenized_tokens
    if observed > 0 and unit and common is not None and cold_len is not None and warm_len is not None \
            and hits_for(common, cold_len, warm_len, unit) == designed:
        return tuple(u for u in units_reproducing(observed, common, cold_len, warm_len) if u != unit)
    return ()


def reconcile(result: PrefixCacheResult) -> list[PairReconciliation]:
    return [reconcile_pair(cold, judged, result, result.sighting_of(judged)) for cold, judged in result.pairs()]


def sighting_text(result: PrefixCacheResult, pairs: list[PairReconciliation]) -> str:
    """On which sighting of its prefix reuse showed, and what the retention settings and counters say of it."""
    shown = [p for p in pairs if p.clean and p.observed_hits]
    if not shown:
        return ""
    third = [p for p in shown if p.sighting == 3]
    ret = result.retention or {}
    setting = (f"retention interval {ret['interval']} ({ret['interval_source']})" if ret.get("interval") is not None
               else "no retention interval stated by /metrics or the log")
    if not third:
        return f"reuse showed on the second sighting of the prefix (the warm request); {setting}"
    warm = [s for s in result.samples if s.kind == "warm" and (s.session, s.prefix_target)
            in {(p.session, p.prefix_target) for p in third}]
    dropped = sum(s.sparse_misses_delta or 0 for s in warm)
    counter = (f", {figure(dropped)} matched tokens dropped as sparse-retention misses" if any(
        s.sparse_misses_delta is not None for s in warm) else ", no sparse-retention counter exported")
    return (f"reuse showed on the third sighting of the prefix on {len(third)} of {len(shown)} pair(s): the second "
            f"reused nothing{counter} — a hybrid model keeping a prefix's state on its second hit; {setting}")


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def iter_findings(result: PrefixCacheResult, pairs: list[PairReconciliation] | None = None) -> list[Finding]:
    """The axis findings, in the protocol's order: prerequisite, isolation, counters, reuse, reconciliation."""
    pairs = reconcile(result) if pairs is None else pairs
    rule = f"{AXIS}."
    clean = [p for p in pairs if p.clean]
    out: list[Finding] = [_flag_finding(result), _isolation_finding(result, clean), _counters_finding(result)]
    cold = {s.prefix_target: s.prompt_tokens for s in result.samples if s.kind == "cold" and s.prompt_tokens}
    out.append(Finding(rule=rule + "sizing", status="info", observed=cold, expected=list(cold),
                       message=f"cold prompts sized by {result.sized_by}: "
                               + ", ".join(f"{t} → {n} tokens" for t, n in cold.items())
                               + ("" if all(n == t for t, n in cold.items()) else
                                  " (a target below the tools + history size, or no exact fit, gives a larger "
                                  "prompt)")))
    out.append(_reuse_finding(result, pairs))
    out.append(_reconcile_finding(pairs))
    out.append(_cached_tokens_finding(result, clean))
    out.extend(f for f in (_ranks_finding(result),) if f is not None)
    failed = [s for s in result.samples if not s.ok]
    if failed:
        # the verdict rests on the requests that completed; the target's failures (a third sighting's too) are said
        out.append(Finding(rule=rule + "requests", status="warn", observed=len(failed), expected=0,
                           evidence={"failed": [{"session": s.session, "prefix_target": s.prefix_target,
                                                 "kind": s.kind, "error": s.error} for s in failed]},
                           message=f"{len(failed)} of {len(result.samples)} prefix request(s) failed on the target "
                                   f"(the {failed[0].kind} request: {failed[0].error or 'no reply'}); the reuse verdict rests on "
                                   "the others"))
    if result.stopped or len(pairs) < result.planned_pairs:
        out.append(Finding(rule=rule + "coverage", status="warn", observed=len(pairs), expected=result.planned_pairs,
                           message=f"{len(pairs)} of {result.planned_pairs} planned cold/warm pairs ran"
                                   + (f" ({result.stopped})" if result.stopped else "")))
    served = _served_finding(result)
    return [*open_findings(out, {"status": "deviates", "reason": served.message}
                           if served.message.startswith(PREFIX) else {}), served]


def _served_finding(result: PrefixCacheResult) -> Finding:
    """`prefix_cache.served_as_asked`: every answered request moved the engine's request counter by one (a request
    answered in front of the engine, by a cache or a gateway, moves none)."""
    counted = [s for s in result.samples if s.ok and s.success_delta is not None]
    unseen = [s for s in counted if (s.success_delta or 0.0) < 1]
    rule = f"{AXIS}.served_as_asked"
    if not counted:
        return Finding(rule=rule, status="not-observable", message="no vllm:request_success_total in the request "
                       "windows: the answered requests cannot be tied to the engine")
    if unseen:
        return Finding(rule=rule, status="not-observable", evidence={"requests": [s.request_id for s in unseen]},
                       message=f"{PREFIX}: server counters ({len(unseen)} of {len(counted)} answered requests never "
                               "reached the engine's request counter — a cache or gateway answered in front of the "
                               "engine)")
    return Finding(rule=rule, status="pass", message=f"served as asked: each of the {len(counted)} answered requests "
                                                     "moved the engine's request counter")


def _flag_finding(result: PrefixCacheResult) -> Finding:
    """The server's enable_prefix_caching flag: a prerequisite, never a proof of reuse."""
    rule = f"{AXIS}.flag"
    flag = result.cache_config.get("enable_prefix_caching")
    if flag is None:
        return Finding(rule=rule, status="not-observable",
                       message="no vllm:cache_config_info: whether prefix caching is enabled is unknown "
                               "(the measured reuse below still decides)")
    if str(flag) == "False":
        return Finding(rule=rule, status="fail", observed=flag, expected="True",
                       message="the server runs with enable_prefix_caching=False (--no-enable-prefix-caching): "
                               "no prompt can reuse cached blocks; restart it with prefix caching on")
    return Finding(rule=rule, status="info", observed=flag,
                   message=f"enable_prefix_caching={flag}: a prerequisite, not a proof; hit unit "
                           f"{result.unit} tokens ({result.unit_source})",
                   evidence={"cache_config_info": result.cache_config})


def _isolation_finding(result: PrefixCacheResult, clean: list[PairReconciliation]) -> Finding:
    """Whether the cold requests were cold: a cold hit beyond what this run explains means the prefix was cached."""
    rule = f"{AXIS}.isolation"
    not_cold = [p for p in clean if p.cold_observed_hits is not None and p.cold_designed_hits is not None
                and p.cold_observed_hits > p.cold_designed_hits]
    iso = {"isolation": result.isolation, "salts": sorted({s.salt for s in result.samples if s.salt}),
           "nonces": sorted({s.nonce for s in result.samples})}
    if not_cold:
        return Finding(rule=rule, status="warn", evidence=iso,
                       message=f"{len(not_cold)} cold request(s) hit more than this run explains: the prefix was "
                               "cached before, so they were not cold (use isolation salt+fresh-prefix)")
    return Finding(rule=rule, status="info", evidence=iso,
                   message=f"isolated by {result.isolation}: "
                           f"{len(iso['salts'])} cache_salt(s), {len(iso['nonces'])} prefix nonce(s)")


def _counters_finding(result: PrefixCacheResult) -> Finding:
    """Whether the prefix-cache counters can be tied to each request: concurrent load, partial counts, resets."""
    rule = f"{AXIS}.counters"
    counted = [s for s in result.samples if s.ok]
    if not counted or all(s.queries_delta is None and s.hits_delta is None for s in counted):
        return Finding(rule=rule, status="not-observable",
                       message="no vllm:prefix_cache_queries/hits at " + (", ".join(result.metrics_urls) or
                                                                           "any metrics URL"))
    dirty = [s for s in counted if s.contaminated]
    unsettled = [s for s in counted if not s.settled and not s.contaminated]
    resets = [s for s in counted if s.counter_reset]
    if dirty:
        return Finding(rule=rule, status="warn", observed=len(dirty),
                       message=f"concurrent load detected in {len(dirty)} of {len(counted)} request windows "
                               f"({dirty[0].contaminated}); those pairs are excluded — isolate the instance",
                       evidence={"requests": [s.request_id for s in dirty]})
    if unsettled or resets:
        return Finding(rule=rule, status="warn",
                       message=f"{len(unsettled)} request(s) not counted in full by the scraped endpoints, "
                               f"{len(resets)} counter reset(s): counters cannot be tied to every request",
                       evidence={"unsettled": [s.request_id for s in unsettled],
                                 "reset": [s.request_id for s in resets]})
    return Finding(rule=rule, status="pass",
                   message=f"prefix-cache queries rose by exactly each request's prompt tokens in all "
                           f"{len(counted)} windows: the deltas are tied to the content sent")


def _ranks_finding(result: PrefixCacheResult) -> Finding | None:
    """Reuse per DP rank (endpoint engine=N), when the counters show more than one: which ranks served the
    protocol's warm requests and what share of their prompt they hit. The protocol sends one request at a time, so
    a least-loaded balancer sends it to one rank; the others' reuse is judged under load (capacity.rank_balance)."""
    ranks = sorted({k for s in result.samples for k in s.replica_queries})
    if len(ranks) < 2:
        return None
    per: dict[str, dict[str, float]] = {r: {"requests": 0, "warm_queries": 0.0, "warm_hits": 0.0} for r in ranks}
    for s in result.samples:
        if s.replica is None:
            continue
        row = per[s.replica]
        row["requests"] += 1
        if s.kind == "warm":
            row["warm_queries"] += s.replica_queries.get(s.replica, 0.0)
            row["warm_hits"] += s.replica_hits.get(s.replica, 0.0)
    served = {r: v for r, v in per.items() if v["requests"]}
    share = {r: v["warm_hits"] / v["warm_queries"] for r, v in served.items() if v["warm_queries"]}
    idle = [r for r in ranks if r not in served]
    text = ", ".join(f"{r}: {int(v['requests'])} request(s)"
                     + (f", warm hits {share[r]:.0%} of the warm prompts" if r in share else "")
                     for r, v in served.items())
    worst = min(share, key=share.__getitem__) if share else None
    message = (f"reuse per rank — {text or 'no request tied to one rank'}"
               + (f"; lowest: {worst}" if worst and len(share) > 1 else "")
               + (f"; {len(idle)} rank(s) served none of the protocol's one-at-a-time requests ("
                  + ", ".join(idle) + "): their reuse under load is judged by capacity.rank_balance" if idle else ""))
    return Finding(rule=f"{AXIS}.ranks", status="info", message=message, observed=per,
                   evidence={"warm_hit_share": share, "worst": worst, "idle": idle})


def ttft_gain_pct(pairs: list[PairReconciliation]) -> float | None:
    """Median warm-vs-cold TTFT gain over the pairs that have both timings."""
    return _median([p.ttft_gain_pct for p in pairs if p.ttft_gain_pct is not None])


def ttft_gain_interval(pairs: list[PairReconciliation]) -> Interval | None:
    """The median gain with its bootstrap interval over the pairs (each pair one repeated measurement)."""
    return median_interval([p.ttft_gain_pct for p in pairs if p.ttft_gain_pct is not None])


def _reuse_finding(result: PrefixCacheResult, pairs: list[PairReconciliation]) -> Finding:
    rule = f"{AXIS}.reuse"
    clean = [p for p in pairs if p.clean]
    min_gain = result.min_ttft_gain_pct
    if not clean:
        gain = ttft_gain_pct([p for p in pairs if p.cause in ("not-observable",)])
        why = pairs[0].explanation if pairs else "no cold/warm pair completed"
        if gain is not None and gain >= min_gain:
            return Finding(rule=rule, status="warn", observed={"ttft_gain_pct": round(gain, 1)},
                           message=f"inconclusive: warm TTFT {gain:.0f}% lower but no cached-token evidence "
                                   f"({why}); a latency drop alone proves no reuse")
        return Finding(rule=rule, status="not-observable" if all(p.cause == "not-observable" for p in pairs)
                       and pairs else "warn", message=f"inconclusive: {why}")
    identical = [p for p in clean if p.identical_prefix and (p.designed_hits is None or p.designed_hits > 0)]
    changed = [p for p in clean if not p.identical_prefix]
    if not identical:
        p = changed[0] if changed else clean[0]
        return Finding(rule=rule, status="warn", observed={"divergence_at": p.divergence_at},
                       message="inconclusive: the warm prompts were not identical to the cold ones before the last "
                               f"user turn ({p.explanation}); no verdict on the cache — fix the protocol")
    hit = [p for p in identical if p.observed_hits]
    designed = sum(p.designed_hits or 0 for p in identical)
    observed = sum(p.observed_hits or 0 for p in identical)
    gain = ttft_gain_pct(identical)
    obs: ReuseObserved = {"pairs": len(identical), "pairs_with_hits": len(hit), "designed_hit_tokens": designed,
                           "observed_hit_tokens": observed, "ttft_gain_pct": None if gain is None else round(gain, 1)}
    if not hit:
        causes = sorted({p.cause for p in identical})
        lat = (f"; warm TTFT was {gain:.0f}% lower anyway, which is not reuse" if gain and gain >= min_gain else "")
        return Finding(rule=rule, status="fail", observed=obs, expected={"observed_hit_tokens": designed},
                       message=f"{NO_REUSE}: 0 hit tokens on {len(identical)} warm request(s) designed to hit "
                               f"{designed} ({', '.join(causes)}: {identical[0].explanation}){lat}")
    if len(hit) < len(identical):
        return Finding(rule=rule, status="warn", observed=obs,
                       message=f"inconclusive: reuse on {len(hit)} of {len(identical)} identical-prefix pairs only "
                               f"({next(p for p in identical if not p.observed_hits).explanation})")
    # The gain grows with the cached length: the longest prefix is the decisive measurement; on short prefixes a
    # few milliseconds of saved prefill drown in the client machine's jitter.
    longest = max(p.prefix_target for p in identical)
    decisive = [p for p in identical if p.prefix_target == longest]
    interval = ttft_gain_interval(decisive)
    side = interval.versus(min_gain) if interval is not None else "inconclusive"
    obs["gain_judged_at_prefix_tokens"] = longest
    obs["ttft_gain_pct_by_prefix"] = {str(t): None if (g := ttft_gain_pct([p for p in identical
                                                                            if p.prefix_target == t])) is None
                                      else round(g, 1) for t in sorted({p.prefix_target for p in identical})}
    expected = {"ttft_gain_pct": f">= {min_gain:g}", "confidence": interval.confidence if interval else None}
    obs["ttft_gain_interval"] = interval.model_dump() if interval else None
    shown = (interval.text("%") if interval else f"unmeasured on fewer than {MIN_SAMPLES} pairs") + \
        f" at the longest prefix ({longest} tokens)"
    if side == "below":
        return Finding(rule=rule, status="warn", observed=obs, expected=expected,
                       message=f"counters show {observed} hit tokens but the warm TTFT gain is {shown}, below "
                               f"{figure(min_gain, '%')} over the whole interval: counter growth without latency "
                               "gain is not proof")
    if side == "inconclusive":
        return Finding(rule=rule, status="not-observable", observed=obs, expected=expected,
                       message=f"inconclusive: counters show {observed} hit tokens; the warm TTFT gain {shown} "
                               f"straddles {figure(min_gain, '%')} — more cold/warm pairs "
                               "(axes.prefix_cache.sessions) or a quieter client machine decide it")
    obs["sightings"] = {str(k): sum(1 for p in identical if p.sighting == k) for k in (2, 3)}
    return Finding(rule=rule, status="pass", observed=obs, expected=expected,
                   message=f"reuse proven on {len(identical)} pair(s): {observed} of {designed} designed tokens hit, "
                           f"warm TTFT gain {shown}, above {figure(min_gain, '%')} over the whole interval; "
                           + sighting_text(result, pairs))


def _reconcile_finding(pairs: list[PairReconciliation]) -> Finding:
    rule = f"{AXIS}.designed_vs_observed"
    judged = [p for p in pairs if p.clean and p.matches is not None]
    if not judged:
        return Finding(rule=rule, status="not-observable",
                       message="designed hits could not be compared with observed ones "
                               f"({pairs[0].explanation if pairs else 'no pair ran'})")
    table = [{"session": p.session, "prefix_target": p.prefix_target, "designed": p.designed_hits,
              "observed": p.observed_hits, "cause": p.cause} for p in judged]
    gaps = [p for p in judged if p.cause != "match"]
    if not gaps:
        return Finding(rule=rule, status="pass", evidence={"pairs": table},
                       observed=sum(p.observed_hits or 0 for p in judged),
                       expected=sum(p.designed_hits or 0 for p in judged),
                       message=f"observed hits equal the designed ones on all {len(judged)} pair(s)")
    causes = sorted({p.cause for p in gaps})
    return Finding(rule=rule, status="warn", evidence={"pairs": table},
                   observed=sum(p.observed_hits or 0 for p in judged),
                   expected=sum(p.designed_hits or 0 for p in judged),
                   message=f"{len(gaps)} of {len(judged)} pair(s) differ from the design ({', '.join(causes)}): "
                           f"{gaps[0].explanation}")


def _cached_tokens_finding(result: PrefixCacheResult, clean: list[PairReconciliation]) -> Finding:
    rule = f"{AXIS}.cached_tokens"
    judged = {(s.session, s.prefix_target, s.kind): s for s in result.samples}
    rows = [(p, judged[key]) for p in clean
            if (key := (p.session, p.prefix_target, "third" if p.sighting == 3 else "warm")) in judged]
    with_usage = [(p, s) for p, s in rows if s.cached_tokens is not None]
    if with_usage:
        bad = [(p, s) for p, s in with_usage if s.hits_delta is not None and s.cached_tokens != _int(s.hits_delta)]
        if bad:
            p, s = bad[0]
            return Finding(rule=rule, status="warn", observed=s.cached_tokens, expected=_int(s.hits_delta),
                           message=f"usage cached_tokens {s.cached_tokens} ≠ counter hits {_int(s.hits_delta)} "
                                   f"(session {p.session}, prefix {p.prefix_target}): external connector hits, or "
                                   "counters of another request in the window")
        return Finding(rule=rule, status="pass", observed=[s.cached_tokens for _, s in with_usage],
                       message="usage.prompt_tokens_details.cached_tokens equals the counter hits on every warm "
                               "request")
    counter = [(p, s) for p, s in rows if s.cached_counter_delta is not None]
    if counter:
        return Finding(rule=rule, status="info", observed=[s.cached_counter_delta for _, s in counter],
                       message="usage carries no cached_tokens (start the server with --enable-prompt-tokens-details); "
                               "vllm:prompt_tokens_cached_total stands in")
    return Finding(rule=rule, status="not-observable",
                   message="no cached_tokens in usage and no vllm:prompt_tokens_cached_total: start the server with "
                           "--enable-prompt-tokens-details to see per-request cached tokens")


def prefix_cache_record(result: PrefixCacheResult, ctx: AxisContext | None = None) -> EvidenceRecord:
    """The axis record. `data.gain_counted` tells the decision whether the cache gain may be counted."""
    pairs = reconcile(result)
    findings = iter_findings(result, pairs)
    reuse = next(f for f in findings if f.rule == f"{AXIS}.reuse")
    status = axis_status(findings)
    gain = ttft_gain_pct([p for p in pairs if p.clean and p.identical_prefix])
    designed = sum(p.designed_hits or 0 for p in pairs if p.clean)
    observed = sum(p.observed_hits or 0 for p in pairs if p.clean)
    prompts = sum(p.warm_prompt_tokens or 0 for p in pairs if p.clean)
    summary = (reuse.message if reuse.status != "pass" else
               f"{reuse.message}; hit ratio {observed / prompts:.1%} of warm prompt tokens" if prompts else
               reuse.message)
    attachments = [rel for rel in (RESULT_JSON, COUNTERS_JSON, SAMPLES_JSONL, TOKEN_IDS_JSONL,
                                   f"evidence/{AXIS}/requests.jsonl")
                   if ctx is None or ctx.store.path(rel).exists()]
    return EvidenceRecord(
        axis=AXIS, title="Prefix caching: measured reuse", status=status, summary=summary, findings=findings,
        data={"gain_counted": reuse.status == "pass", "ttft_gain_pct": None if gain is None else round(gain, 1),
              "retention": result.retention,
              "reuse_sighting": min((p.sighting for p in pairs if p.clean and p.observed_hits), default=None),
              "ttft_gain_interval": (reuse.observed or {}).get("ttft_gain_interval")
              if isinstance(reuse.observed, dict) else None,
              "designed_hit_tokens": designed, "observed_hit_tokens": observed, "warm_prompt_tokens": prompts,
              "hit_unit_tokens": result.unit, "hit_unit_source": result.unit_source,
              "cache_config": result.cache_config, "isolation": result.isolation,
              "warm_change": result.warm_change, "sized_by": result.sized_by,
              "pairs": [p.model_dump() for p in pairs]},
        attachments=attachments)
