"""The JSON shapes the report writes or reads: a printed PDF's entry in `report.json`, a notebook's output as the
page cleaner reads it, what `k3 verify` counted, and a burst of the OOM explorer as `explore/burst-N/burst.json`
holds it. TypedDicts: they change nothing at run time."""

from __future__ import annotations

from typing import Any, TypedDict

__all__ = ["CellOutput", "PdfEntry", "RunFigures", "VerifyCounts"]


class PdfEntry(TypedDict):
    """One printed copy in `report.json`'s `pdf` list (k3lib.report.pdf.print_pdf)."""

    file: str
    in_run: bool
    sha256: str
    bytes: int
    printed_at: str
    printed_by: str
    of: list[str]
    decision: str | None
    manifest_sha256_before: str


class CellOutput(TypedDict, total=False):
    """A code cell's output in a notebook (nbformat 4): its type and its data by MIME type."""

    output_type: str
    data: dict[str, str | list[str]]  # MIME type: the text, whole or as lines
    metadata: dict[str, Any]  # the front end's own keys, whatever it wrote
    text: str | list[str]
    name: str


class VerifyCounts(TypedDict):
    """What `k3 verify` counted, beside its lines (k3lib.report.signing.VerifyResult's counts)."""

    files_checked: int
    manifest_path: str


class RunFigures(TypedDict, total=False):
    """An acceptance run's headline figures on the history page (k3lib.report.history.RunPoint's own fields)."""

    saturation_concurrency: float | None
    ttft_p95_at_planned_ms: float | None
    cache_gain_pct: float | None
    queue_p95_at_planned_s: float | None
    tool_call_validity: float | None
