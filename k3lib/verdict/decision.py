"""The acceptance decision: evidence records in, one of four decisions out, with the reasons that produced it.

Pure functions over records, strongest rule first: a compatibility-chain mismatch → environment-rebuild;
saturation, OOM or queueing beyond the contract at nominal load → capacity-extension; a controlled non-critical
defect (no measured prefix reuse: the gain is not counted; unstable tool calls: the agents concerned are blocked)
or missing evidence → limited-observation, with a traffic cap and a re-examination date; all pass → production.
"""

from __future__ import annotations

import datetime as dt
from typing import Iterable, Sequence, cast

from ..core.evidence import EvidenceRecord
from ..core.record import Record
from ..core.roles import Loosened
from ..core.outcomes import (DECISIONS, EXIT_CODES, NOT_PROVEN, REEXAMINE_AFTER_DAYS, RULES, STRENGTH, AcceptanceOutcome, Rule,
                       level_for, rule_for, strongest)
from .shapes import ChecklistRow, DecisionCap, DecisionDoc, IdentityDoc, LoosenedDoc

# the outcome vocabulary and the finding → outcome table live in k3lib.core.outcomes (the axes read them too)
__all__ = ["AcceptanceDecision", "AcceptanceOutcome", "DECISIONS", "EXIT_CODES", "NOT_PROVEN", "REEXAMINE_AFTER_DAYS", "RULES",
           "Rule", "STRENGTH", "axis_checklist", "decide", "level_for", "rule_for", "strongest", "traffic_cap_from"]


class AcceptanceDecision(Record):
    """The acceptance's decision as `decision.json` holds it: `model_dump()` writes it, `model_validate` reads one
    back (a run older than a field gets the field's default)."""

    decision: str
    reasons: tuple[str, ...] = ()
    checklist: tuple[ChecklistRow, ...] = ()
    traffic_cap: DecisionCap | None = None
    reexamine_on: str | None = None
    build: str = "official"
    agents_blocked: bool = False
    cache_gain_counted: bool = True
    loosened_thresholds: tuple[LoosenedDoc, ...] = ()  # k3lib.core.thresholds.Loosened, accepted or not
    identity: IdentityDoc | None = None  # each source tied to the target or not (k3lib.verdict.identity)
    # what the target is (k3lib.axes.probe.target_kind): embedded-emulator, external-emulator or engine
    target_kind: str | None = None

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.decision]

    @property
    def demo(self) -> bool:
        """A run against the kit's emulator: a demonstration, never an acceptance (`k3 sign` refuses it)."""
        return is_demo(self.target_kind)

    def doc(self) -> DecisionDoc:
        """`decision.json`'s content, as the report reads it back."""
        return cast(DecisionDoc, self.model_dump())

    @property
    def line(self) -> str:
        """The decision as the CLI and the report state it: `production (demo)` against the kit's emulator."""
        return decision_line(self.decision, self.target_kind)


EMULATOR_KINDS = ("embedded-emulator", "external-emulator")


def is_demo(target_kind: object) -> bool:
    """Whether a target kind is the kit's emulator (a demo)."""
    return target_kind in EMULATOR_KINDS


def decision_line(decision: str, target_kind: object) -> str:
    """`production`, or `production (demo)` for a run against the kit's emulator."""
    return f"{decision} (demo)" if is_demo(target_kind) else decision


def axis_checklist(records: dict[str, EvidenceRecord], planned: Iterable[str]) -> list[ChecklistRow]:
    """One row per planned axis (used when no sheet is given)."""
    items: list[ChecklistRow] = []
    for axis in planned:
        rec = records.get(axis)
        items.append({"id": axis, "title": rec.title if rec else axis,
                      "status": rec.status if rec else "open",
                      "observed": rec.summary if rec else "no evidence record",
                      "evidence": f"evidence/{axis}.json" if rec else None})
    return items


def traffic_cap_from(records: dict[str, EvidenceRecord]) -> DecisionCap:
    """The traffic cap the capacity axis measured (`data.traffic_cap`: the saturation point, never above the
    planned concurrency), else one request at a time; the agents' own cap is the highest concurrency at which
    every tool-call check held (`agent` axis)."""
    rec = records.get("capacity")
    measured = rec.typed().traffic_cap if rec is not None else None  # CapacityData: typed, checked on read
    cap = measured.max_concurrency if measured is not None else None
    if measured is not None and cap is not None and cap >= 1:
        out: DecisionCap = {"max_concurrency": cap, "saturation_point": measured.saturation_point,
               "planned_concurrency": measured.planned_concurrency,
               "basis": f"measured by the capacity axis: {measured.basis}",
               "source": "evidence/capacity.json: data.traffic_cap"}
    else:
        why = ("the capacity axis did not run" if rec is None else
               f"the capacity axis accepted no load step ({measured.basis})" if measured is not None else
               "the capacity record holds no traffic_cap")
        out = {"max_concurrency": 1, "basis": f"{why}: one request at a time until re-examined", "source": None}
    agent = records.get("agent")
    if agent is not None and agent.typed().max_clean_concurrency is not None:
        out["agents_max_concurrency"] = agent.typed().max_clean_concurrency
    return out


def _doc(t: Loosened) -> LoosenedDoc:
    """A loosened setting as `decision.json` lists it: the record's JSON dump, whose keys `LoosenedDoc` names."""
    return cast(LoosenedDoc, t.model_dump(mode="json"))


def decide(records: dict[str, EvidenceRecord], planned: Iterable[str], *, build: str = "official",
           checklist: list[ChecklistRow] | None = None, today: dt.date | None = None,
           loosened: Sequence[Loosened] = ()) -> AcceptanceDecision:
    """Strongest rule first. `checklist` (the sheet's rows) adds: an item still open is never a pass.
    `loosened` (k3lib.core.thresholds) adds: a threshold looser than its default is listed, and one nobody attested
    having accepted forbids production."""
    planned = list(planned)
    verdict = "production"
    reasons: list[str] = []
    agents_blocked = False
    cache_gain = True

    def raise_to(level: str, reason: str) -> None:
        nonlocal verdict
        reasons.append(f"{level}: {reason}")
        if STRENGTH[level] > STRENGTH[verdict]:
            verdict = level

    for axis in planned:
        rec = records.get(axis)
        if rec is None or rec.status == "not-run":
            raise_to("limited-observation", f"{axis}: no evidence (the axis did not run) — never counted as a pass")
            continue
        if rec.error:
            raise_to("limited-observation", f"{axis}: the axis did not complete ({rec.error.splitlines()[0]})")
        for f in rec.findings:
            if f.status == "fail":
                level, why = level_for(f)
                raise_to(level, f"{f.rule}: {f.message} ({why})")
                agents_blocked |= f.rule.startswith("agent.") and level == "limited-observation"
                cache_gain &= not f.rule.startswith("prefix_cache.")
            elif f.status in ("warn", "not-observable"):
                raise_to("limited-observation", f"{f.rule}: {f.message}")
                cache_gain &= not (f.rule.startswith("prefix_cache.") and f.status == "warn")
    accepted: dict[tuple[str | None, str | None], list[Loosened]] = {}
    for t in loosened:
        if t.accepted:
            accepted.setdefault((t.accepted_by, t.accepted_on), []).append(t)
        else:
            raise_to("limited-observation", f"loosened threshold: {t.text()}; no attestation names who accepted it "
                                            "and why (items.thresholds_accepted) — the judgement is not the "
                                            "acceptance's")
    for (who, on), ts in accepted.items():
        reasons.append(f"loosened threshold(s), accepted by {who} on {on} (why: decision.json loosened_thresholds): "
                       + "; ".join(t.short() for t in ts))
    for item in checklist or []:
        if item["status"] == "open":
            why = f"nothing compared: {item['observed']}" if item.get("rules") else "no finding proves it"
            raise_to("limited-observation", f"{item['id']} {item['title']}: still open ({why})")
    today = today or dt.date.today()
    reexamine = cap = None
    if verdict == "limited-observation":
        reexamine = (today + dt.timedelta(days=REEXAMINE_AFTER_DAYS)).isoformat()
        cap = traffic_cap_from(records)
        if agents_blocked:
            cap["agents_blocked"] = True
        reasons.append(f"traffic cap: {cap['max_concurrency']} concurrent request(s) — {cap['basis']}")
    if verdict == "production":
        reasons.append("every planned axis and every checklist item passed")
    rows = checklist if checklist is not None else axis_checklist(records, planned)
    return AcceptanceDecision(decision=verdict, reasons=tuple(reasons), checklist=tuple(rows), traffic_cap=cap,
                              reexamine_on=reexamine, build=build, agents_blocked=agents_blocked,
                              cache_gain_counted=cache_gain,
                              loosened_thresholds=tuple(_doc(t) for t in loosened))
