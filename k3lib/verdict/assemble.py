"""The acceptance run's decision, assembled from its evidence records alone: every finding resting on a source not
tied to the target opened, the sheet's items of the planned axes, the loosened thresholds each with the attestation
entry that accepted it; then written to `decision.json` (`decide_run`, the summary notebook's call, and the batch's
when the summary notebook failed).

What the summary notebook shows of it (the tables) is `k3lib.report.summary`; its HTML is `k3lib.report.views`."""

from __future__ import annotations

import datetime as dt
import json

from ..core.evidence import EvidenceRecord
from ..core.params import Params, default_tree
from ..core.plan import ACCEPTANCE_AXES
from ..core.recipes import recipe_loosened
from ..core.store import RunStore
from ..core.roles import Loosened
from ..core.thresholds import loosened
from .decision import AcceptanceDecision, decide, is_demo
from .identity import identify, tie_records
from .served import served_facts, served_models
from .sheet import ITEMS, sheet_rows

__all__ = ["compute_decision", "decide_run", "loosened_thresholds", "served_models"]


def loosened_thresholds(params: Params, records: dict[str, EvidenceRecord]) -> list[Loosened]:
    """The settings `params` sets looser than their floors — the kit's defaults, the contract, the served model's
    recipe and what the target showed of itself (`k3lib.verdict.served`) — each with the entry of the attestation
    the operations axis read (its evidence, not the file as it is now) that accepted it."""
    ops = records.get("operations")
    att = ops.typed().attestation if ops is not None and ops.axis == "operations" else None
    accepted = att.items.thresholds_accepted if att is not None else ()
    who, when = (att.who, att.when.isoformat()) if att else (None, None)
    return loosened(params.public_dict(), default_tree(), accepted=accepted, who=who, when=when,
                    served=served_facts(records, params.recipe.name)) + \
        recipe_loosened(params.recipe.model_dump(), served_models(records), accepted, who, when)


def compute_decision(params: Params, records: dict[str, EvidenceRecord], *,
                     today: dt.date | None = None) -> AcceptanceDecision:
    """Decide from the records alone (the sheet's items of the planned axes, the loosened thresholds), once every
    finding resting on a source not tied to the target is opened (`k3lib.verdict.identity`)."""

    identity = identify(records)
    tied = tie_records(records, identity)
    planned = set(ACCEPTANCE_AXES)
    rows = [r for r in sheet_rows(tied, params.public_dict(), params.run.reviewer)
            if next(i for i in ITEMS if i.id == r["id"]).axis in planned]
    decision = decide(tied, ACCEPTANCE_AXES, build=params.recipe.build, checklist=rows or None, today=today,
                      loosened=loosened_thresholds(params, records))
    kind = target_kind(records)
    if is_demo(kind):
        reasons = (*decision.reasons, f"demo: the target is the kit's emulator ({kind}: {_kind_basis(records)}) — "
                   "a demonstration of the kit, not an acceptance of a deployment; `k3 sign` refuses it")
        decision = decision.model_copy(update={"reasons": reasons})
    return decision.model_copy(update={"identity": identity.model_dump(mode="json"), "target_kind": kind})


def target_kind(records: dict[str, EvidenceRecord]) -> str | None:
    """What the probe found the target to be (`k3lib.axes.probe.target_kind`); a probe record written before the
    kit recorded it: its kept `/version` body, declaring the kit's emulator or not."""
    probe = records.get("probe")
    if probe is None or probe.axis != "probe":
        return None
    data = probe.data if isinstance(probe.data, dict) else {}
    if data.get("target_kind"):
        return str(data["target_kind"])

    try:
        version = json.loads(((data.get("endpoints") or {}).get("version") or {}).get("body") or "null")
    except ValueError:
        version = None
    return "external-emulator" if isinstance(version, dict) and version.get("emulator") else None


def _kind_basis(records: dict[str, EvidenceRecord]) -> str:
    probe = records.get("probe")
    data = probe.data if probe is not None and isinstance(probe.data, dict) else {}
    return str(data.get("target_kind_basis") or "its /version declares the kit's emulator")


def decide_run(params: Params, store: RunStore, records: dict[str, EvidenceRecord]) -> AcceptanceDecision:
    """Decide from the records alone and write `decision.json`."""
    decision = compute_decision(params, records)
    store.write_json("decision.json", decision.model_dump())
    return decision
