"""The live run of the same tasks on both paths (a `k3 paths` record) as the decision reads it: whether the API path
meets the quality rule there, and the task categories a dual circuit sends to each path.

A run is read only when it ran the review's task set against the reviewed model (`match_live`). A task that failed
on transport or authentication (a refused connection, a timeout, HTTP 401/403) says nothing about quality: it is set
aside on both paths and counted; what remains must hold `rules.min_sample_tasks` tasks, or the run is inconclusive.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from ..axes.paths.record import paired
from ..core.stats import wilson_interval
from .findings import RenewalFinding
from .rules import RenewalRules
from .shapes import TaskLogComparison

if TYPE_CHECKING:
    from ..axes.paths.record import PairedDifference, PathsResult, TaskOutcome

SELF_HOSTED, API = "self_hosted", "api"  # the endpoint names `k3 paths` gives the two sides the review compares
# the client's own error kinds for a request that never reached a model (k3lib.io.client): no quality evidence
TRANSPORT_KINDS = ("TargetUnreachable", "Timeout", "ConnectError", "ConnectTimeout", "ReadTimeout", "ReadError",
                   "WriteError", "RemoteProtocolError")
AUTH_STATUSES = (401, 403, 407)


def _error_kind(error: str) -> str | None:
    """`TargetUnreachable : …`, `APIError 401: …` (as `k3 paths` records a final error) → its infrastructure kind,
    or None when the error came from the model's side."""
    head = error.split(":", 1)[0].split()
    kind = head[0] if head else ""
    status = int(head[1]) if len(head) > 1 and head[1].isdigit() else None
    if status in AUTH_STATUSES:
        return f"authentication (HTTP {status})"
    return f"transport ({kind})" if kind in TRANSPORT_KINDS else None


def infra_failure(task: TaskOutcome) -> str | None:
    """Why a failed task never reached the model (transport, authentication), or None."""
    if task.status != "failed" or not task.errors:
        return None
    kinds = [_error_kind(e) for e in task.errors]
    return None if None in kinds else kinds[-1]


def set_aside(live: PathsResult) -> dict[str, dict[str, int]]:
    """Per path, the tasks set aside by infrastructure kind."""
    out: dict[str, Counter[str]] = {}
    for t in live.tasks:
        kind = infra_failure(t) if t.path in (SELF_HOSTED, API) else None
        if kind is not None:
            out.setdefault(t.path, Counter())[kind] += 1
    return {p: dict(c) for p, c in sorted(out.items())}


def _live_pair(live: PathsResult) -> PairedDifference | None:
    """The self-hosted/API pair over the tasks both paths ran, those failed on transport or authentication on
    either path left out (the pair recomputed without them)."""
    bad = {t.task for t in live.tasks if t.path in (SELF_HOSTED, API) and infra_failure(t) is not None}
    if not bad:
        return next((p for p in live.pairs if {p.a, p.b} == {SELF_HOSTED, API} and p.pairs), None)
    pair = paired(SELF_HOSTED, API, [t for t in live.tasks if t.task not in bad])
    return pair if pair.pairs else None


def match_live(live: PathsResult, *, model: str | None, task_set_sha256: str | None) -> str | None:
    """Why the live run is not the review's (None when it is): it must have sent the task set the review fixed
    (`review.fixed.task_set.live_sha256`) to the reviewed model (`review.deployment.model_name`) on its
    self_hosted path."""
    ran = next((f.sha256 for f in live.fixed if f.name == "task_set"), None)
    if task_set_sha256 is None:
        return (f"the review ties no task set to a live run (review.fixed.task_set.live_sha256 unset; this run's is "
                f"{(ran or 'unknown')[:12]}…)")
    if ran != task_set_sha256:
        return f"it ran the task set {(ran or 'unknown')[:12]}…, not the review's {task_set_sha256[:12]}…"
    endpoint = next((e for e in live.endpoints if e.name == SELF_HOSTED), None)
    if endpoint is None:
        return "it has no self_hosted path"
    if model is not None and endpoint.model != model:
        return (f"its self_hosted path served {endpoint.model or 'an unnamed model (the first card of /v1/models)'}, "
                f"not the reviewed {model}")
    return None


def _only(pair: PairedDifference, path: str) -> tuple[int, tuple[str, ...]]:
    """The tasks accepted on `path` only (they fail on the other path only)."""
    return (pair.a_only, pair.only_a_tasks) if pair.a == path else (pair.b_only, pair.only_b_tasks)


def live_quality(live: PathsResult | None, source: str | None, rules: RenewalRules, *,
                 refused: str | None = None) -> RenewalFinding:
    """Does the API path meet the quality rule on the same tasks run live: the 95 % Wilson lower bound of its
    acceptance rate at or above `rules.live_api_acceptance_low_min`, or (null) the self-hosted path's own lower
    bound on those tasks. None: no live run, one that is not the review's (`refused`), none with both paths on the
    same tasks, or fewer than `rules.min_sample_tasks` of them once transport and authentication failures are set
    aside — inconclusive, never a quality miss (an open item)."""
    if refused is not None:
        return RenewalFinding("comparison.live", None, {"source": source, "refused": refused})
    if live is None:
        return RenewalFinding("comparison.live", None, {"source": None})
    pair, aside = _live_pair(live), set_aside(live)
    if pair is None or pair.pairs < rules.min_sample_tasks:
        return RenewalFinding("comparison.live", None, {
            "source": source, "paths": [s.path for s in live.paths], "paired": 0 if pair is None else pair.pairs,
            "set_aside": aside, "min_sample_tasks": rules.min_sample_tasks})
    n = pair.pairs
    sh_k, api_k = pair.both + _only(pair, SELF_HOSTED)[0], pair.both + _only(pair, API)[0]
    sh_ci, api_ci = wilson_interval(sh_k, n), wilson_interval(api_k, n)
    assert sh_ci is not None and api_ci is not None  # n > 0
    fixed = rules.live_api_acceptance_low_min
    bar = round(sh_ci[0] if fixed is None else fixed, 4)
    api_low = round(api_ci[0], 4)
    return RenewalFinding("comparison.live", api_low >= bar, {
        "source": source, "tasks": n, "task_set": live.task_set,
        "api_accepted": api_k, "api_acceptance_rate": round(api_k / n, 4), "api_acceptance_low": api_low,
        "api_acceptance_high": round(api_ci[1], 4),
        "self_hosted_accepted": sh_k, "self_hosted_acceptance_rate": round(sh_k / n, 4),
        "self_hosted_acceptance_low": round(sh_ci[0], 4), "self_hosted_acceptance_high": round(sh_ci[1], 4),
        "bar": bar, "bar_from": "the self-hosted path's lower bound" if fixed is None
        else "rules.live_api_acceptance_low_min", "set_aside": aside,
        "fail_on_api_only": _only(pair, SELF_HOSTED)[0], "fail_on_self_hosted_only": _only(pair, API)[0]})


def category_routing(live: PathsResult | None, source: str | None) -> RenewalFinding:
    """The dual circuit's routing by task category, from the live run's per-task differences: a category whose
    tasks fail on the API only stays self-hosted, one whose tasks fail on the self-hosted path only goes to the API,
    one with both is split task by task. None: no live run to name categories from (an open item)."""
    pair = None if live is None else _live_pair(live)
    if live is None or pair is None:
        return RenewalFinding("routing.categories", None, {"source": source})
    category = {(t.path, t.task): t.category for t in live.tasks}
    rows: dict[str, dict[str, list[str]]] = {}
    for path, side in ((SELF_HOSTED, "fail_on_api_only"), (API, "fail_on_self_hosted_only")):
        for task in _only(pair, path)[1]:
            row = rows.setdefault(category.get((path, task), "default"),
                                  {"fail_on_api_only": [], "fail_on_self_hosted_only": []})
            row[side].append(task)
    by_category = [{"category": c, **r} for c, r in sorted(rows.items())]
    return RenewalFinding("routing.categories", True, {
        "source": source, "tasks": pair.pairs, "by_category": by_category,
        "self_hosted": [r["category"] for r in by_category if not r["fail_on_self_hosted_only"]],
        "api": [r["category"] for r in by_category if not r["fail_on_api_only"]],
        "split": [r["category"] for r in by_category if r["fail_on_api_only"] and r["fail_on_self_hosted_only"]]})


def live_equivalence(live: PathsResult | None, source: str | None, rules: RenewalRules,
                     task_log: TaskLogComparison | None) -> RenewalFinding | None:
    """Does the API reach equivalent quality on the same tasks run live (`comparison.api_equivalent` judged on the
    live run): the Newcombe 95 % interval of the paired difference self-hosted − API acceptance wholly at or below
    `rules.api_equivalent_gap_max` (equivalent), wholly above it (not), else inconclusive (None, never favourable);
    and the API's share of paired tasks with malformed tool calls at most the gap above the self-hosted one. Each
    path's acceptance keeps its Wilson interval; the run's quality rule is named by its hash. `task_log` (the task
    log's figures) is kept as context only. None: no live run with both paths on the same tasks — the task log
    decides, as before."""
    pair = None if live is None else _live_pair(live)
    if live is None or pair is None:
        return None
    if pair.pairs < rules.min_sample_tasks:  # a live run on too few tasks judges nothing; the task log decides
        return None
    n, gap = pair.pairs, rules.api_equivalent_gap_max
    flip = pair.a != SELF_HOSTED  # the difference is a − b: oriented self-hosted − API
    d, lo, hi = pair.difference, pair.low, pair.high
    if flip and d is not None and lo is not None and hi is not None:
        d, lo, hi = -d, -hi, -lo
    sh_k, api_k = pair.both + _only(pair, SELF_HOSTED)[0], pair.both + _only(pair, API)[0]
    sh_ci, api_ci = wilson_interval(sh_k, n), wilson_interval(api_k, n)
    assert sh_ci is not None and api_ci is not None  # n > 0
    bad = {t.task for t in live.tasks if t.path in (SELF_HOSTED, API) and infra_failure(t) is not None}
    ran = {p: {t.task: t for t in live.tasks if t.path == p and t.status != "not-run" and t.task not in bad}
           for p in (SELF_HOSTED, API)}
    common = [t for t in ran[SELF_HOSTED] if t in ran[API]]  # the pair's tasks (as `_live_pair` takes them)
    tes = {p: round(sum(1 for t in common if ran[p][t].tool_call_errors > 0) / len(common), 4) if common else None
           for p in (SELF_HOSTED, API)}
    acceptance = None if lo is None or hi is None else True if hi <= gap else False if lo > gap else None
    tools = None if None in tes.values() else tes[API] <= tes[SELF_HOSTED] + gap  # type: ignore[operator]
    outcome = False if acceptance is False or tools is False else None if acceptance is None or tools is None \
        else True
    rule = next((f for f in live.fixed if f.name == "quality_rule"), None)
    return RenewalFinding("comparison.api_equivalent", outcome, {
        "source": "live", "run": source, "tasks": n, "api_equivalent_gap_max": gap,
        "difference": d, "difference_low": lo, "difference_high": hi,
        "self_hosted_accepted": sh_k, "self_hosted_acceptance_rate": round(sh_k / n, 4),
        "self_hosted_acceptance_low": round(sh_ci[0], 4), "self_hosted_acceptance_high": round(sh_ci[1], 4),
        "api_accepted": api_k, "api_acceptance_rate": round(api_k / n, 4),
        "api_acceptance_low": round(api_ci[0], 4), "api_acceptance_high": round(api_ci[1], 4),
        "self_hosted_tool_error_share": tes[SELF_HOSTED], "api_tool_error_share": tes[API],
        "quality_rule_sha256": None if rule is None else rule.sha256,
        "task_log": task_log})
