"""The acceptance decision: evidence records in, one of four decisions out, with the reasons that produced it.

Pure functions over records, strongest rule first: a compatibility-chain mismatch → environment-rebuild;
saturation at nominal load → capacity-extension; a controlled non-critical defect or missing evidence →
limited-observation (never a pass); everything passing → production.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any, Iterable

from .evidence import EvidenceRecord

DECISIONS = ("production", "limited-observation", "capacity-extension", "environment-rebuild")
STRENGTH = {"production": 0, "limited-observation": 1, "capacity-extension": 2, "environment-rebuild": 3}
EXIT_CODES = {"production": 0, "limited-observation": 3, "capacity-extension": 4, "environment-rebuild": 5}

# What a failing axis means for the decision. An axis not listed here is treated as non-critical.
AXIS_ON_FAIL = {
    "probe": "environment-rebuild",  # no healthy server, or a contract beyond the server's own limits
}
AXIS_TITLES = {"probe": "Target probe"}
REEXAMINE_AFTER_DAYS = 14


@dataclasses.dataclass(frozen=True)
class Decision:
    decision: str
    reasons: tuple[str, ...]
    checklist: tuple[dict[str, Any], ...]
    traffic_cap: dict[str, Any] | None = None
    reexamine_on: str | None = None
    build: str = "official"

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.decision]

    def _repr_html_(self) -> str:
        from .summary import decision_html

        return decision_html(self)

    def to_dict(self) -> dict[str, Any]:
        return {"decision": self.decision, "reasons": list(self.reasons), "checklist": list(self.checklist),
                "traffic_cap": self.traffic_cap, "reexamine_on": self.reexamine_on, "build": self.build}


def checklist(records: dict[str, EvidenceRecord], planned: Iterable[str]) -> list[dict[str, Any]]:
    items = []
    for axis in planned:
        rec = records.get(axis)
        items.append({
            "id": axis,
            "title": rec.title if rec else AXIS_TITLES.get(axis, axis),
            "status": rec.status if rec else "not-run",
            "observed": rec.summary if rec else "no evidence record",
            "evidence": f"evidence/{axis}.json" if rec else None,
        })
    return items


def decide(records: dict[str, EvidenceRecord], planned: Iterable[str], *, build: str = "official",
           today: dt.date | None = None) -> Decision:
    planned = list(planned)
    verdict = "production"
    reasons: list[str] = []

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
        if rec.status == "fail":
            level = AXIS_ON_FAIL.get(axis, "limited-observation")
            for f in rec.failed() or []:
                raise_to(level, f"{axis}: {f.message}")
            if not rec.failed():
                raise_to(level, f"{axis}: {rec.summary or 'failed'}")
        elif rec.status == "warn":
            for f in rec.findings:
                if f.status in ("warn", "not-observable"):
                    raise_to("limited-observation", f"{axis}: {f.message}")
    today = today or dt.date.today()
    reexamine = None
    cap = None
    if verdict == "limited-observation":
        reexamine = (today + dt.timedelta(days=REEXAMINE_AFTER_DAYS)).isoformat()
        cap = {"max_concurrency": None, "basis": "no load step was accepted yet"}
    if verdict == "production":
        reasons.append("every planned axis passed")
    return Decision(verdict, tuple(reasons), tuple(checklist(records, planned)), cap, reexamine, build)
