"""What the kit cannot observe, made evidence: the operator's attestation and a rollback drill the kit runs.

The operator knowing the context limit, the concurrency limit and the rollback signal, and a rehearsed restore
to the previous image, are checklist items C15 and C16. They come from an attestation file (who, when, how, a
link) or, for the rollback, from a drill run with the command in parameters; without either they stay open.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import httpx

from ..core import progress
from ..core.evidence import DrillData, EvidenceRecord, Finding, OperationsData, axis_status
from ..core.session import AxisContext, find_path
from ..core.store import RunStore
from .attestation import (
    AttestationRecord,
    DrillResult,
    accepted_release,
    attestation_findings,
    parse_attestation_text,
    read_attestation,
    rollback_drill,
    served_by_target,
)
from .environment.run import fetch_text
from .environment.sources import substitute


@dataclasses.dataclass(frozen=True)
class OperationsResult:
    attestation: AttestationRecord | None
    attestation_file: str | None
    drill: DrillResult | None
    findings: tuple[Finding, ...]

    def table(self) -> Any:
        import pandas as pd

        return pd.DataFrame([{"item": f.rule, "status": f.status, "finding": f.message} for f in self.findings])


def _attestation(ctx: AxisContext, value: str) -> tuple[AttestationRecord | None, str, str]:
    """(the attestation, where it was read, its text — or why it could not be fetched), given as a file path or an
    http(s) URL (`{base_url}` allowed: a wiki page's raw text, the operator's record service). A file that is not
    there or an invalid attestation is one bad-input line; a URL that does not answer leaves the items open."""

    if not substitute(value, ctx.target.base_url).startswith(("http://", "https://")):
        path = find_path(value)
        att = read_attestation(path)
        return att, str(path), path.read_text(encoding="utf-8")
    with httpx.Client(timeout=ctx.params.axes.environment.timeout_s, headers=ctx.target.headers()) as http:
        src = fetch_text("attestation", value, ctx.target.base_url, http)
    if not src.ok:
        return None, str(src.location), f"the attestation at {src.location} could not be read ({src.error})"
    return parse_attestation_text(src.text or "", str(src.location)), str(src.location), src.text or ""


def kit_started(ctx: "AxisContext | Any") -> bool:
    """Whether the target is the kit's own emulator (started by this process, or by the batch: its `request.json`,
    hashed in the manifest, names no target URL) — the only target whose self-served attestation is the demo's
    stand-in."""
    from ..emulator import started_here

    if ctx.target.emulator is not None or started_here(ctx.target.base_url):
        return True
    return started_by_batch(ctx.store)


def started_by_batch(store: RunStore) -> bool:
    """Whether the batch started the kit's own emulator: its `request.json`, hashed in the manifest, names no target
    URL."""
    if not store.path("request.json").is_file():
        return False
    request = store.read_json("request.json")
    target = request.get("target") if isinstance(request, dict) else None
    return isinstance(target, dict) and target.get("base_url") is None


def run_operations(ctx: AxisContext) -> OperationsResult:
    """Read the attestation (if any), run the drill (if any) against the target, and judge both. An attestation, or
    a drill's image, served by the target under test is not evidence — except from the kit's own emulator, whose
    demo stand-in says it is one."""

    ops = ctx.params.axes.operations
    att = where = unread = None
    own = kit_started(ctx)
    if ops.attestation and not own and served_by_target(ops.attestation, ctx.target.base_url):
        unread = (f"the attestation at {ops.attestation} is served by the target under test "
                  f"({ctx.target.base_url}): a deployment's word about itself is not evidence — attest from outside it")
    elif ops.attestation:
        att, where, text = _attestation(ctx, ops.attestation)
        if att is not None:
            ctx.store.write_text("evidence/operations/attestation.yaml", text)
        else:
            unread = text
    drill = None
    inspect = ctx.params.axes.environment.image_inspect
    key = ctx.target.headers().get("Authorization", "").removeprefix("Bearer ") or None
    if ops.rollback_drill:
        progress.phase("rollback drill", duration_s=ops.drill_timeout_s)
        drill = rollback_drill(ops.rollback_drill, ctx.target.base_url, ops.drill_timeout_s,
                               model=ctx.params.target.model, api_key=key, inspect=inspect,
                               rollback_to=ops.rollback_to, roll_forward=ops.roll_forward, trust_target=own)
        accepted = drill.before
    elif att is not None and att.items.rollback_rehearsed is not None:
        accepted = accepted_release(ctx.target.base_url, inspect, key, ctx.params.axes.environment.timeout_s,
                                    trust_target=own)
    else:
        accepted = None
    findings = attestation_findings(att, drill=drill, contract_context_tokens=ctx.params.contract.max_context_tokens,
                                    planned_concurrency=ctx.params.contract.planned_concurrency, accepted=accepted,
                                    unread=unread)
    return OperationsResult(att, where if att is not None else None, drill, tuple(findings))


def operations_record(result: OperationsResult, ctx: AxisContext) -> EvidenceRecord:
    """The axis record; its `data` is an OperationsData (typed, checked here and when read back)."""
    status = axis_status(list(result.findings))
    open_items = [f.rule for f in result.findings if f.status == "not-observable"]
    summary = ("attested and rehearsed" if status == "pass" else
               f"open: {', '.join(open_items)}" if open_items else "a prerequisite failed")
    return EvidenceRecord(
        axis="operations", title="Operator readiness and rollback", status=status, summary=summary,
        findings=list(result.findings),
        data=OperationsData(attestation_file=result.attestation_file, attestation=result.attestation,
                            drill=DrillData.model_validate(dataclasses.asdict(result.drill)) if result.drill else None
                            ).model_dump(mode="json"),
        attachments=["evidence/operations/attestation.yaml"] if result.attestation else [])
