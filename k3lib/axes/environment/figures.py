"""The compatibility chain's evidence sheet: the seed's table (image, vLLM, CUDA build, driver, GPUs, build method,
plus flags, fabric manager and startup), each row with the value observed, the proof kept and the decision on
mismatch, and the table of every finding.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...core.evidence import Finding
from .rules import ROW_ORDER, RULES

if TYPE_CHECKING:
    import pandas as pd

    from .judge import EnvironmentResult

# worst first: a row shows its worst finding
_SEVERITY = {"fail": 0, "warn": 1, "not-observable": 2, "pass": 3, "info": 4}
COLUMNS = ("item", "level", "observed", "proof kept", "expected", "status", "decision on mismatch")


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, dict):
        return "; ".join(f"{k}: {_cell(v)}" for k, v in value.items() if v is not None) or "—"
    if isinstance(value, (list, tuple)):
        return ", ".join(_cell(v) for v in value) or "—"
    return str(value)


def _proof_cell(finding: Finding) -> str:
    proofs = finding.evidence.get("proofs") or []
    parts = []
    for p in proofs:
        where = p.get("attachment") or ""
        line = p.get("where")
        line = line.split(":", 1)[0] if isinstance(line, str) and line.startswith("line ") else None
        parts.append(p["source"] + (f" [{where}{', ' + line if line else ''}]" if where else ""))
    return "; ".join(dict.fromkeys(parts)) or "—"


def table_rows(result: EnvironmentResult) -> list[dict[str, Any]]:
    """One row per item of the seed's table; a row with several rules shows the worst and joins the rest."""
    by_item: dict[str, list[Finding]] = {}
    for f in result.findings:
        by_item.setdefault(RULES[f.rule].item, []).append(f)
    rows = []
    for item in ROW_ORDER:
        found = sorted(by_item.get(item, []), key=lambda f: _SEVERITY[f.status])
        if not found:
            continue
        head = found[0]
        spec = RULES[head.rule]
        rows.append({
            "item": item,
            "level": spec.level,
            "observed": " | ".join(dict.fromkeys(_cell(f.observed) for f in found if f.observed is not None)) or "—",
            "proof kept": " | ".join(dict.fromkeys(_proof_cell(f) for f in found)),
            "expected": _cell(head.expected),
            "status": head.status,
            "decision on mismatch": f"{spec.on_mismatch} ({spec.decision})",
            "finding": " / ".join(f.message for f in found if f.status == head.status),
            "rules": [f.rule for f in found],
        })
    return rows


def environment_table(result: EnvironmentResult) -> "pd.DataFrame":
    """The seed's evidence table as a DataFrame (item as index)."""
    import pandas as pd

    rows = table_rows(result)
    frame = pd.DataFrame(rows, columns=[*COLUMNS, "finding"])
    return frame.set_index("item")


def findings_table(result: EnvironmentResult) -> "pd.DataFrame":
    """Every finding with its level, the sources it used and the decision on mismatch."""
    import pandas as pd

    rows = [{"rule": f.rule, "level": RULES[f.rule].level, "status": f.status, "message": f.message,
             "sources": _proof_cell(f), "decision on mismatch": RULES[f.rule].decision} for f in result.findings]
    return pd.DataFrame(rows, columns=["rule", "level", "status", "message", "sources", "decision on mismatch"])
