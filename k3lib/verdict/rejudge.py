"""Each axis judged again from its raw data: what `k3 verify` and `k3 sign` hold a run's stored findings to.

A finding flipped in `evidence/<axis>.json` and written back through the kit's own store (its hash, the decision
and the manifest recomputed around it) verifies by its hashes, and decides the same from the edited findings; it no
longer follows from the raw data beside it. So each axis' pure judge runs again over what the axis kept — the probe's
bodies, the chain's source texts, the capacity run's requests and sampled series, the agent's steps, the prefix
protocol's samples, the attestation and drill as recorded — and every rule whose status differs is named.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections import Counter
from collections.abc import Callable
from typing import cast

from ..axes.agent import agent_record, load_agent_result
from ..axes.attestation import RULE_LIMITS, RULE_ROLLBACK, DrillResult, RollForward, Served, attestation_findings
from ..axes.capacity.judge import capacity_record
from ..axes.capacity.rejudge import rejudge_capacity
from ..axes.environment.reread import rejudge_environment
from ..axes.prefix_cache.judge import prefix_cache_record
from ..axes.prefix_cache.result import PrefixCacheResult
from ..axes.probe import iter_findings, read_probe, target_kind
from ..core.evidence import DrillData, EvidenceRecord, Finding, ServedData
from ..core.params import Params
from ..core.store import RunStore

Rejudge = Callable[[RunStore, EvidenceRecord, Params, dt.date], "tuple[list[Finding], set[str] | None]"]


@dataclasses.dataclass(frozen=True)
class RejudgeContext:
    """What an axis' judge reads of its context (`k3lib.core.session.JudgeContext`) when a stored run is judged
    again: the run's parameters and its folder, and no target (nothing is sent)."""

    params: Params
    store: RunStore


def _served(s: ServedData | None) -> Served | None:
    return None if s is None else Served(**s.model_dump())


def drill_of(d: DrillData) -> DrillResult:
    """The rollback drill as the axis ran it (`DrillResult`), rebuilt by name from its stored record (`DrillData`,
    the same fields): what was served before, after and on the roll-forward as `Served` again."""
    fields = d.model_dump(exclude={"before", "after", "forward"})
    forward = None if d.forward is None else cast(RollForward, {**d.forward.model_dump(),
                                                                "served": _served(d.forward.served)})
    return DrillResult(**fields, before=_served(d.before), after=_served(d.after), forward=forward)


def _probe(store: RunStore, rec: EvidenceRecord, params: Params, today: dt.date) -> tuple[list[Finding], None]:
    return iter_findings(read_probe(store, rec, params.target.model), RejudgeContext(params, store)), None


def _environment(store: RunStore, rec: EvidenceRecord, params: Params, today: dt.date) -> tuple[list[Finding], None]:
    return list(rejudge_environment(store, rec, params).findings), None


def _capacity(store: RunStore, rec: EvidenceRecord, params: Params, today: dt.date) -> tuple[list[Finding], None]:
    return capacity_record(rejudge_capacity(store, params), RejudgeContext(params, store)).findings, None


def _agent(store: RunStore, rec: EvidenceRecord, params: Params, today: dt.date) -> tuple[list[Finding], None]:
    return agent_record(load_agent_result(store), RejudgeContext(params, store)).findings, None


def _prefix_cache(store: RunStore, rec: EvidenceRecord, params: Params, today: dt.date) -> tuple[list[Finding], None]:
    return prefix_cache_record(PrefixCacheResult.load(store)).findings, None


def _operations(store: RunStore, rec: EvidenceRecord, params: Params, today: dt.date) -> tuple[list[Finding], set[str]]:
    data = rec.typed()
    drill = None if data.drill is None else drill_of(data.drill)
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


def rejudge_problems(store: RunStore, params: Params, records: dict[str, EvidenceRecord],
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


def target_kind_problems(store: RunStore, params: Params, records: dict[str, EvidenceRecord]) -> list[str]:
    """The target kind the probe recorded against the one its kept `/version` body and the run's `request.json` give
    (`k3lib.axes.probe.target_kind`): a demo relabelled `engine` to be signed is named."""

    rec = records.get("probe")
    if rec is None or rec.error or rec.status == "not-run" or not isinstance(rec.data, dict):
        return []
    stored = rec.data.get("target_kind")
    try:
        again, _ = target_kind(read_probe(store, rec, params.target.model), RejudgeContext(params, store))
    except Exception as exc:  # any reader's failure means the raw data does not back the record
        return [f"evidence/probe.json: target_kind cannot be judged again ({type(exc).__name__})"]
    if stored is not None and stored != again:
        return [f"evidence/probe.json: target_kind is {stored} but its raw data gives {again}"]
    return []
