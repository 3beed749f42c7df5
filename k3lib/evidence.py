"""Evidence records: what one axis found, as data a summary notebook and a reviewer can read back.

One record per axis in `evidence/<axis>.json`: the axis status (pass, fail, warn, not-run), findings with rule
ids (jsonschema-style: findings are values, not exceptions), the raw data or a pointer to it. Records read back
from disk are untrusted, so they are validated with the same models that wrote them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import EvidenceError

AxisStatus = Literal["pass", "fail", "warn", "not-run"]
FindingStatus = Literal["pass", "fail", "warn", "info", "not-observable"]
SCHEMA_VERSION = 1


class Finding(BaseModel):
    """One rule applied to what was observed. `rule` is a stable id such as `probe.health`."""

    model_config = ConfigDict(extra="forbid")

    rule: str
    status: FindingStatus
    message: str
    observed: Any = None
    expected: Any = None
    evidence: dict[str, Any] = Field(default_factory=dict)


class EvidenceRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    axis: str
    title: str
    status: AxisStatus
    summary: str = ""
    started_at: str | None = None
    finished_at: str | None = None
    duration_s: float | None = None
    target: str | None = None
    findings: list[Finding] = Field(default_factory=list)
    data: dict[str, Any] = Field(default_factory=dict)
    attachments: list[str] = Field(default_factory=list)  # files in the run folder holding raw data
    error: str | None = None  # set when the axis could not complete (its notebook failed)

    def failed(self) -> list[Finding]:
        return [f for f in self.findings if f.status == "fail"]

    def by_rule(self, rule: str) -> Finding | None:
        return next((f for f in self.findings if f.rule == rule), None)

    def _repr_html_(self) -> str:
        from .summary import record_html

        return record_html(self)


def axis_status(findings: list[Finding]) -> AxisStatus:
    """fail if any finding fails; warn if any warns or cannot be observed; pass otherwise."""
    statuses = {f.status for f in findings}
    if "fail" in statuses:
        return "fail"
    if statuses & {"warn", "not-observable"}:
        return "warn"
    return "pass" if findings else "not-run"


def parse_record(data: Any, source: str) -> EvidenceRecord:
    try:
        return EvidenceRecord.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err.get("loc", ()))
        raise EvidenceError(f"{source}: not an evidence record ({field}: {err.get('msg')})") from None
