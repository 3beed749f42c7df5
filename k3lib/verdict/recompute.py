"""The decision of a run, decided again from its evidence, and each axis judged again from its raw data: what
`k3 verify` and `k3 sign` check before trusting `decision.json` and `evidence/*.json`.

The manifest proves that no file changed since it was written, not that `decision.json` says what the evidence
says: a decision edited by hand, with the manifest rewritten around it, verifies. So both commands read the run's
resolved `params.json` and `evidence/*.json`, run the same pure decision the batch ran (acceptance:
`recomputed` here, through `k3lib.verdict.assemble.compute_decision`; renewal: `k3lib.renewal.records.decided_again`,
passed in by the caller, since the renewal review stands above this floor) and name every field of `decision.json`
that differs from it. And a finding flipped in an axis record, with the decision and the manifest
rewritten around it, decides the same from the edited findings: so each acceptance axis is also judged again from the
raw data it kept (`k3lib.verdict.rejudge`), and every finding it does not give is named.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import Any, Callable

from ..core.errors import BadInputError, EvidenceError
from ..core.evidence import read_records
from ..core.outcomes import REEXAMINE_AFTER_DAYS
from ..core.params import load_params_json
from ..core.store import RunStore
from .assemble import compute_decision
from .rejudge import rejudge_problems
from .shapes import DecisionDoc

# The fields both decide and store; the re-examination date is compared apart (it counts from the day decided).
ACCEPTANCE_FIELDS = ("decision", "reasons", "checklist", "traffic_cap", "build", "agents_blocked",
                     "cache_gain_counted", "loosened_thresholds", "identity", "target_kind")
RENEWAL_FIELDS = ("decision", "rule", "reasons", "findings", "checklist", "condition", "routing", "target_kind")

# (the run, its stored decision) -> the decision its evidence gives, as decision.json would hold it
DecideAgain = Callable[[RunStore, DecisionDoc], DecisionDoc]


def _decided_on(stored: DecisionDoc, days: int) -> dt.date | None:
    """The day the stored decision was taken, from its re-examination date (None when it has none)."""
    try:
        return dt.date.fromisoformat(str(stored["reexamine_on"])) - dt.timedelta(days=days)
    except (KeyError, TypeError, ValueError):
        return None


def recomputed(store: RunStore, stored: DecisionDoc) -> DecisionDoc:
    """The acceptance decision the run's evidence gives, as `decision.json` would hold it."""

    params = load_params_json(store.path("params.json"))
    return compute_decision(params, read_records(store),
                            today=_decided_on(stored, REEXAMINE_AFTER_DAYS)).doc()


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 160 else text[:157] + "…"


def decision_problems(store: RunStore, decide_again: DecideAgain = recomputed) -> list[str]:
    """One line per field of `decision.json` that the evidence does not give (decided again by `decide_again`: a
    review run passes the renewal's); [] when they agree or when the run holds no decision yet. A run whose evidence
    cannot be decided again says so in one line."""
    if not store.path("decision.json").is_file():
        return []
    stored: DecisionDoc = store.read_json("decision.json")
    if not isinstance(stored, dict):
        return ["decision.json: not a decision (expected a JSON object)"]
    try:
        fresh = decide_again(store, stored)
    except (BadInputError, EvidenceError, OSError, ValueError, KeyError, TypeError) as exc:
        return [f"decision.json: cannot be decided again from params.json and evidence/ "
                f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else exc})"]
    fields = RENEWAL_FIELDS if "rule" in fresh else ACCEPTANCE_FIELDS
    out = []
    for key in fields:
        a, b = _canonical(stored.get(key), key), _canonical(fresh.get(key), key)
        if a != b:
            out.append(f"decision.json: {key} is {_short(stored.get(key))} but the evidence gives {_short(fresh.get(key))}"
                       if key in ("decision", "rule", "build", "condition") else
                       f"decision.json: {key} differs from what the evidence gives ({_first_difference(a, b)})")
    if bool(stored.get("reexamine_on")) != bool(fresh.get("reexamine_on")):
        out.append(f"decision.json: reexamine_on is {_short(stored.get('reexamine_on'))} but the evidence's decision "
                   + ("carries a re-examination date" if fresh.get("reexamine_on") else "carries none"))
    if fields is ACCEPTANCE_FIELDS:
        out += raw_data_problems(store, stored)
    return out


def raw_data_problems(store: RunStore, stored: DecisionDoc) -> list[str]:
    """Each acceptance axis judged again from its raw data (`k3lib.verdict.rejudge`): one line per finding that
    differs."""

    params = load_params_json(store.path("params.json"))
    today = _decided_on(stored, REEXAMINE_AFTER_DAYS) or _run_day(store) or dt.date.today()
    return rejudge_problems(store, params, read_records(store), today)


def _run_day(store: RunStore) -> dt.date | None:
    """The day the run's operations axis finished (a decision without a re-examination date names none)."""
    rec = store.read_json("evidence/operations.json") if store.path("evidence/operations.json").is_file() else None
    if not isinstance(rec, dict):
        return None
    try:
        return dt.datetime.fromisoformat(str(rec["finished_at"]).replace("Z", "+00:00")).date()
    except (KeyError, ValueError):
        return None


# The loosened settings are a set, written in the order the kit walks its settings table (the parameters model's
# fields), not one the evidence gives: a decision written in another order still verifies. Where that order shows —
# the list itself, the reasons they raise (one per setting nobody accepted, one per attestation naming those it
# accepted) and each checklist item's configuration ("loosened: a, b") — it is compared sorted.
_ACCEPTED = "loosened threshold(s), accepted by "
_LOOSENED = "loosened: "
_ONE_SETTING = re.compile(r", (?=(?:axes|contract|recipe|load|target|run)\.[\w.]+ = )")


def _canonical(value: Any, key: str = "") -> Any:
    out = json.loads(json.dumps(value, sort_keys=True, default=str))
    if not isinstance(out, list):
        return out
    if key == "loosened_thresholds":
        return sorted(out, key=lambda v: json.dumps(v, sort_keys=True))
    if key == "reasons":
        return sorted((_settings_sorted(r, _ACCEPTED, "): ", "; ") for r in out), key=str)
    if key == "checklist":
        return [{**item, "configuration": _settings_sorted(item["configuration"], "", _LOOSENED, _ONE_SETTING)}
                if isinstance(item, dict) and isinstance(item.get("configuration"), str) else item for item in out]
    return out


def _settings_sorted(text: Any, starts: str, mark: str, sep: str | re.Pattern[str]) -> Any:
    """`text` with the settings listed after `mark` in path order (`k3lib.verdict.decision.decide`'s attestation
    reason, `k3lib.verdict.sheet`'s configuration)."""
    if not (isinstance(text, str) and text.startswith(starts) and mark in text):
        return text
    head, _, listed = text.partition(mark)
    items = sep.split(listed) if isinstance(sep, re.Pattern) else listed.split(sep)
    return head + mark + "; ".join(sorted(items))


def _first_difference(a: Any, b: Any) -> str:
    if isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return f"item {i + 1}: stored {_short(x)}, evidence {_short(y)}"
        return f"stored {len(a)} item(s), evidence {len(b)}"
    return f"stored {_short(a)}, evidence {_short(b)}"
