"""Each axis judged again from its raw data: what `k3 verify` and `k3 sign` hold a run's stored findings to.

A finding flipped in `evidence/<axis>.json` and written back through the kit's own store (its hash, the decision
and the manifest recomputed around it) verifies by its hashes, and decides the same from the edited findings; it no
longer follows from the raw data beside it. So each axis' pure judge runs again over what the axis kept — the probe's
bodies, the chain's source texts, the capacity run's requests and sampled series, the agent's steps, the prefix
protocol's samples, the attestation and drill as recorded — and every rule whose status differs is named.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from ..core.evidence import EvidenceRecord, Finding
from ..core.params import Params

Rejudge = Callable[[Any, EvidenceRecord, Params, dt.date], "tuple[list[Finding], set[str] | None]"]


def _ctx(**kw: Any) -> Any:
    """What an axis' judge reads of its context (its parameters, its run folder), without a target."""
    return SimpleNamespace(**kw)


def _probe(store: Any, rec: EvidenceRecord, params: Params, today: dt.date) -> tuple[list[Finding], None]:
    from ..axes.probe import iter_findings, read_probe

    return iter_findings(read_probe(store, rec, params.target.model), _ctx(params=params)), None


def _environment(store: Any, rec: EvidenceRecord, params: Params, today: dt.date) -> tuple[list[Finding], None]:
    from ..axes.environment.reread import rejudge_environment

    return list(rejudge_environment(store, rec, params).findings), None


def _capacity(store: Any, rec: EvidenceRecord, params: Params, today: dt.date) -> tuple[list[Finding], None]:
    from ..axes.capacity.judge import capacity_record
    from ..axes.capacity.rejudge import rejudge_capacity

    return capacity_record(rejudge_capacity(store, params), _ctx(params=params)).findings, None


def _agent(store: Any, rec: EvidenceRecord, params: Params, today: dt.date) -> tuple[list[Finding], None]:
    from ..axes.agent import agent_record, load_agent_result

    return agent_record(load_agent_result(store), _ctx(store=store, params=params)).findings, None


def _prefix_cache(store: Any, rec: EvidenceRecord, params: Params, today: dt.date) -> tuple[list[Finding], None]:
    from ..axes.prefix_cache.judge import prefix_cache_record
    from ..axes.prefix_cache.result import PrefixCacheResult

    return prefix_cache_record(PrefixCacheResult.load(store)).findings, None


def _operations(store: Any, rec: EvidenceRecord, params: Params, today: dt.date) -> tuple[list[Finding], set[str]]:
    from ..axes.attestation import RULE_LIMITS, RULE_ROLLBACK, DrillResult, Served, attestation_findings

    data = rec.typed()
    d = data.drill

    def served(s: Any) -> Served | None:
        return None if s is None else Served(**s.model_dump())

    drill = None if d is None else DrillResult(
        d.command, d.check_url, d.command_ok, d.command_detail, d.health_status, d.chat_ok, d.error, d.duration_s,
        served(d.before), served(d.after), d.rollback_to,
        None if d.forward is None else {**d.forward.model_dump(), "served": served(d.forward.served)})
    findings = attestation_findings(data.attestation, drill=drill,
                                    contract_context_tokens=params.contract.max_context_tokens,
                                    planned_concurrency=params.contract.planned_concurrency, today=today,
                                    accepted=drill.before if drill is not None else None)
    # an attested rehearsal is judged against the release served when the axis ran, which only a drill records
    rehearsal_only = drill is None and data.attestation is not None and \
        data.attestation.items.rollback_rehearsed is not None
    return findings, {RULE_LIMITS} if rehearsal_only else {RULE_LIMITS, RULE_ROLLBACK}


AXES: dict[str, Rejudge] = {"probe": _probe, "environment": _environment, "capacity": _capacity, "agent": _agent,
                            "prefix_cache": _prefix_cache, "operations": _operations}


def _statuses(findings: list[Finding], rules: set[str] | None) -> dict[str, Counter[str]]:
    out: dict[str, Counter[str]] = {}
    for f in findings:
        if rules is None or f.rule in rules:
            out.setdefault(f.rule, Counter())[f.status] += 1
    return out


def _said(c: Counter[str] | None) -> str:
    if not c:
        return "no such finding"
    return ", ".join(f"{s}" + (f" ×{n}" if n > 1 else "") for s, n in sorted(c.items()))


def rejudge_problems(store: Any, params: Params, records: dict[str, EvidenceRecord],
                     today: dt.date) -> list[str]:
    """One line per stored finding its axis' raw data does not give (`evidence/<axis>.json: <rule> is pass but its
    raw data gives fail`); an axis whose raw data cannot be judged again says so in one line."""
    out = []
    for axis, judge in AXES.items():
        rec = records.get(axis)
        if rec is None or rec.error or rec.status == "not-run":
            continue
        try:
            fresh, rules = judge(store, rec, params, today)
        except Exception as exc:  # any reader's failure means the raw data does not back the record
            out.append(f"evidence/{axis}.json: cannot be judged again from its raw data "
                       f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})")
            continue
        stored, again = _statuses(rec.findings, rules), _statuses(fresh, rules)
        for rule in sorted(set(stored) | set(again)):
            if stored.get(rule) != again.get(rule):
                out.append(f"evidence/{axis}.json: {rule} is {_said(stored.get(rule))} but its raw data gives "
                           f"{_said(again.get(rule))}")
    return out + target_kind_problems(store, params, records)


def target_kind_problems(store: Any, params: Params, records: dict[str, EvidenceRecord]) -> list[str]:
    """The target kind the probe recorded against the one its kept `/version` body and the run's `request.json` give
    (`k3lib.axes.probe.target_kind`): a demo relabelled `engine` to be signed is named."""
    from ..axes.probe import read_probe, target_kind

    rec = records.get("probe")
    if rec is None or rec.error or rec.status == "not-run" or not isinstance(rec.data, dict):
        return []
    stored = rec.data.get("target_kind")
    try:
        again, _ = target_kind(read_probe(store, rec, params.target.model), _ctx(params=params, store=store))
    except Exception as exc:  # any reader's failure means the raw data does not back the record
        return [f"evidence/probe.json: target_kind cannot be judged again ({type(exc).__name__})"]
    if stored is not None and stored != again:
        return [f"evidence/probe.json: target_kind is {stored} but its raw data gives {again}"]
    return []
