"""The acceptance decision: evidence records in, one of four decisions out, with the reasons that produced it.

Pure functions over records, strongest rule first: a compatibility-chain mismatch → environment-rebuild;
saturation, OOM or queueing beyond the contract at nominal load → capacity-extension; a controlled non-critical
defect (no measured prefix reuse: the gain is not counted; unstable tool calls: the agents concerned are blocked)
or missing evidence → limited-observation, with a traffic cap and a re-examination date; all pass → production.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import fnmatch
from typing import Any, Iterable

from .evidence import EvidenceRecord, Finding

DECISIONS = ("production", "limited-observation", "capacity-extension", "environment-rebuild")
STRENGTH = {"production": 0, "limited-observation": 1, "capacity-extension": 2, "environment-rebuild": 3}
EXIT_CODES = {"production": 0, "limited-observation": 3, "capacity-extension": 4, "environment-rebuild": 5}
REEXAMINE_AFTER_DAYS = 14

# A failing finding → the decision it forces, first matching pattern wins. The seed's rules: CUDA/driver/image
# or a required recipe flag out of scope → rebuild; memory saturating on nominal traffic → extension; tool calls
# unstable → agents blocked; no cache reuse → gain not counted (both limited observation).
FAIL_RULES: tuple[tuple[str, str, str], ...] = (
    ("probe.health", "environment-rebuild", "the server is not healthy"),
    ("probe.context_limit", "capacity-extension", "the contract promises more than the server's limits"),
    ("compat.build_method", "limited-observation", "not the declared build: re-run as recipe.build custom, on "
                                                   "its own sheet"),
    ("compat.prefix_caching", "limited-observation", "prefix caching off: the expected cache gain is not counted"),
    ("compat.*", "environment-rebuild", "compatibility chain out of the recipe's scope"),
    ("agent.auto_tool_choice", "environment-rebuild", "a required recipe flag is missing"),
    ("agent.server_flags", "environment-rebuild", "a required recipe flag is missing"),
    ("agent.*", "limited-observation", "unstable tool calls: block the agents concerned, plain text may go live"),
    ("capacity.memory_growth", "limited-observation", "memory grows steadily: not stable, more GPUs won't fix it"),
    ("capacity.server_errors", "limited-observation", "5xx while the engine stayed up"),
    ("capacity.*", "capacity-extension", "memory or queue saturates at nominal load"),
    ("prefix_cache.*", "limited-observation", "no measured cache reuse: the expected gain is not counted"),
    ("attestation.*", "limited-observation", "an operational prerequisite is not proven"),
    ("*", "limited-observation", "a non-critical check failed"),
)


def level_for(finding: Finding) -> tuple[str, str]:
    """The decision a failing finding forces. An axis that knows better (an OOM at startup is the image's or
    the topology's, not capacity) says so in `evidence["decision"]`; otherwise the first matching rule."""
    hinted = finding.evidence.get("decision") if isinstance(finding.evidence, dict) else None
    if hinted in STRENGTH:
        why = next((w for p, lvl, w in FAIL_RULES if lvl == hinted and fnmatch.fnmatchcase(finding.rule, p)),
                   f"the {finding.rule.split('.')[0]} axis ties this failure to {hinted}")
        return hinted, why
    for pattern, level, why in FAIL_RULES:
        if fnmatch.fnmatchcase(finding.rule, pattern):
            return level, why
    return "limited-observation", "a check failed"


@dataclasses.dataclass(frozen=True)
class Decision:
    decision: str
    reasons: tuple[str, ...]
    checklist: tuple[dict[str, Any], ...]
    traffic_cap: dict[str, Any] | None = None
    reexamine_on: str | None = None
    build: str = "official"
    agents_blocked: bool = False
    cache_gain_counted: bool = True

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.decision]

    def _repr_html_(self) -> str:
        from .summary import decision_html

        return decision_html(self)

    def to_dict(self) -> dict[str, Any]:
        return {"decision": self.decision, "reasons": list(self.reasons), "checklist": list(self.checklist),
                "traffic_cap": self.traffic_cap, "reexamine_on": self.reexamine_on, "build": self.build,
                "agents_blocked": self.agents_blocked, "cache_gain_counted": self.cache_gain_counted}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Decision":
        return cls(d["decision"], tuple(d.get("reasons", ())), tuple(d.get("checklist", ())), d.get("traffic_cap"),
                   d.get("reexamine_on"), d.get("build", "official"), bool(d.get("agents_blocked", False)),
                   bool(d.get("cache_gain_counted", True)))


def axis_checklist(records: dict[str, EvidenceRecord], planned: Iterable[str]) -> list[dict[str, Any]]:
    """One row per planned axis (used when no sheet is given)."""
    items = []
    for axis in planned:
        rec = records.get(axis)
        items.append({"id": axis, "title": rec.title if rec else axis,
                      "status": rec.status if rec else "open",
                      "observed": rec.summary if rec else "no evidence record",
                      "evidence": f"evidence/{axis}.json" if rec else None})
    return items


def traffic_cap_from(records: dict[str, EvidenceRecord]) -> dict[str, Any]:
    """The traffic cap the capacity axis measured (`data.traffic_cap`: the saturation point, never above the
    planned concurrency), else one request at a time; the agents' own cap is the highest concurrency at which
    every tool-call check held (`agent` axis)."""
    rec = records.get("capacity")
    measured = rec.data.get("traffic_cap") if rec is not None else None
    cap = measured.get("max_concurrency") if isinstance(measured, dict) else None
    if isinstance(cap, int) and not isinstance(cap, bool) and cap >= 1:
        out = {"max_concurrency": cap, "saturation_point": measured.get("saturation_point"),
               "planned_concurrency": measured.get("planned_concurrency"),
               "basis": f"measured by the capacity axis: {measured.get('basis')}",
               "source": "evidence/capacity.json: data.traffic_cap"}
    else:
        why = ("the capacity axis did not run" if rec is None else
               f"the capacity axis accepted no load step ({measured.get('basis')})" if isinstance(measured, dict) else
               "the capacity record holds no traffic_cap")
        out = {"max_concurrency": 1, "basis": f"{why}: one request at a time until re-examined", "source": None}
    agent = records.get("agent")
    if agent is not None and agent.data.get("max_clean_concurrency") is not None:
        out["agents_max_concurrency"] = agent.data["max_clean_concurrency"]
    return out


def decide(records: dict[str, EvidenceRecord], planned: Iterable[str], *, build: str = "official",
           checklist: list[dict[str, Any]] | None = None, today: dt.date | None = None) -> Decision:
    """Strongest rule first. `checklist` (the sheet's rows) adds: an item still open is never a pass."""
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
    for item in checklist or []:
        if item["status"] == "open":
            raise_to("limited-observation", f"{item['id']} {item['title']}: still open (no finding proves it)")
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
    return Decision(verdict, tuple(reasons), tuple(rows), cap, reexamine, build, agents_blocked, cache_gain)
