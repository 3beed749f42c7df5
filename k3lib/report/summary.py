"""What the summary notebook shows: the records and their findings as tables. The decision itself is assembled and
written in the verdict layer (`k3lib.verdict.assemble.decide_run`); its HTML is `k3lib.report.views`, registered as
display formatters when a session opens."""

from __future__ import annotations

from typing import Any

import pandas as pd  # the summary notebook's tables: k3lib imports this module on first use

from ..core.evidence import EvidenceRecord

__all__ = ["findings_table", "records_table"]


def records_table(records: dict[str, EvidenceRecord]) -> Any:
    rows = [{"axis": r.axis, "title": r.title, "status": r.status, "findings": len(r.findings),
             "failed": ", ".join(f.rule for f in r.failed()), "summary": r.summary,
             "evidence": f"evidence/{r.axis}.json"} for r in records.values()]
    return pd.DataFrame(rows, columns=["axis", "title", "status", "findings", "failed", "summary", "evidence"])


def findings_table(records: dict[str, EvidenceRecord]) -> Any:
    rows = [{"axis": r.axis, "rule": f.rule, "status": f.status, "message": f.message}
            for r in records.values() for f in r.findings]
    return pd.DataFrame(rows, columns=["axis", "rule", "status", "message"])
