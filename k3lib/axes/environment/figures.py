"""The compatibility chain's evidence sheet as a person reads it: the seed's table (image, vLLM, CUDA build, driver,
GPUs, build method, plus flags, fabric manager and startup; its rows are `judge.table_rows`), each row with the value
observed, the proof kept and the decision on mismatch, and the table of every finding.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .judge import COLUMNS, EnvironmentResult, proof_cell, table_rows
from .rules import RULES

if TYPE_CHECKING:
    import pandas as pd


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
             "sources": proof_cell(f), "decision on mismatch": RULES[f.rule].decision} for f in result.findings]
    return pd.DataFrame(rows, columns=["rule", "level", "status", "message", "sources", "decision on mismatch"])
