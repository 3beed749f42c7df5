"""The compatibility chain's evidence sheet: the seed's table (image, vLLM, CUDA build, driver, GPUs, build method,
plus flags, fabric manager and startup), each row with the value observed, the proof kept and the decision on
mismatch, and the `environment` evidence record. A custom build gets its own, experimental, sheet.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from ...core.outcomes import Outcome, level_for
from ...core.evidence import EvidenceRecord, Finding, axis_status
from .judge import ROW_ORDER, RULES, engine_args, iter_findings
from .run import CompatSources, attachments, gather_sources

if TYPE_CHECKING:
    import pandas as pd

    from ...core.params import EnvironmentParams, RecipeParams
    from ...core.session import AxisContext

# worst first: a row shows its worst finding
_SEVERITY = {"fail": 0, "warn": 1, "not-observable": 2, "pass": 3, "info": 4}
COLUMNS = ("item", "level", "observed", "proof kept", "expected", "status", "decision on mismatch")


@dataclasses.dataclass(frozen=True)
class CompatResult:
    sources: CompatSources
    findings: tuple[Finding, ...]
    build: str = "official"

    @property
    def status(self) -> str:
        return axis_status(list(self.findings))

    @property
    def mismatch(self) -> bool:
        """A failing rule whose decision is an environment rebuild (the build method only separates the sheet)."""
        return any(level_for(f)[0] == Outcome.REBUILD.value for f in self.findings)

    @property
    def experimental(self) -> bool:
        return self.build == "custom"

    def failed(self) -> list[Finding]:
        return [f for f in self.findings if f.status == "fail"]

    def by_rule(self, rule: str) -> Finding | None:
        return next((f for f in self.findings if f.rule == rule), None)

    def table(self) -> "pd.DataFrame":
        return environment_table(self)


def evaluate(sources: CompatSources, recipe: "RecipeParams", env: "EnvironmentParams") -> CompatResult:
    """Pure: the rules over already gathered sources."""
    return CompatResult(sources, tuple(iter_findings(sources, recipe, env)), sources.build)


def check_environment(ctx: "AxisContext") -> CompatResult:
    """Gather every source of the chain (attachments kept in the run folder), then apply the rules."""
    return evaluate(gather_sources(ctx), ctx.params.recipe, ctx.params.axes.environment)


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


def table_rows(result: CompatResult) -> list[dict[str, Any]]:
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


def environment_table(result: CompatResult) -> "pd.DataFrame":
    """The seed's evidence table as a DataFrame (item as index)."""
    import pandas as pd

    rows = table_rows(result)
    frame = pd.DataFrame(rows, columns=[*COLUMNS, "finding"])
    return frame.set_index("item")


def findings_table(result: CompatResult) -> "pd.DataFrame":
    """Every finding with its level, the sources it used and the decision on mismatch."""
    import pandas as pd

    rows = [{"rule": f.rule, "level": RULES[f.rule].level, "status": f.status, "message": f.message,
             "sources": _proof_cell(f), "decision on mismatch": RULES[f.rule].decision} for f in result.findings]
    return pd.DataFrame(rows, columns=["rule", "level", "status", "message", "sources", "decision on mismatch"])


def environment_record(result: CompatResult, ctx: "AxisContext") -> EvidenceRecord:
    """The `environment` evidence record: findings, the table rows, `mismatch`, `build`, raw sources attached."""
    findings = list(result.findings)
    status = axis_status(findings)
    failed = [f.rule for f in findings if f.status == "fail"]
    observed = _summary_values(result.sources)
    sheet = "custom build — experimental sheet, kept apart from the official one" if result.experimental else "official"
    summary = ", ".join(f"{k} {v}" for k, v in observed.items() if v is not None and k in
                        ("vllm", "cuda_build", "driver", "image")) or "nothing observed"
    if failed:
        summary += "; mismatch: " + ", ".join(dict.fromkeys(failed))
    if result.experimental:
        summary = "[experimental custom build] " + summary
    src_info = {name: {"location": s.location, "error": s.error, "attachment": s.attachment,
                       "read_error": result.sources.read_errors.get(name)}
                for name, s in result.sources.texts.items()}
    title = "Compatibility chain" + (" (custom build, experimental)" if result.experimental else "")
    return EvidenceRecord(
        axis="environment", title=title, status=status, summary=summary, findings=findings,
        data={"rows": [{k: v for k, v in r.items()} for r in table_rows(result)], "mismatch": result.mismatch,
              "build": result.build, "experimental": result.experimental, "sheet": sheet, "observed": observed,
              "topology": topology(result.sources), "sources": src_info},
        attachments=attachments(result.sources))


def topology(s: CompatSources) -> dict[str, Any]:
    """GPU count and parallel sizes as the server was started: what a re-validation compares (a change of
    topology reopens the sheet). Sizes the log does not print are vLLM's default, 1; no log: all unknown."""
    args = engine_args(s)
    sizes: dict[str, Any] = {}
    for key in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
        try:
            sizes[key] = None if args is None else max(int(args.get(key) or 1), 1)
        except (TypeError, ValueError):
            sizes[key] = None
    ce = s.collect_env
    sizes["gpu_count"] = ce.gpu_count if ce else (s.nvidia_smi.gpu_count if s.nvidia_smi else None)
    return sizes


def _summary_values(s: CompatSources) -> dict[str, Any]:
    ce = s.collect_env
    return {
        "vllm": s.api_version or (s.log.vllm_version if s.log else None) or (ce.vllm_version if ce else None),
        "cuda_build": ce.torch_cuda_build if ce else None,
        "driver": (s.nvidia_smi.driver_version if s.nvidia_smi else None) or (ce.driver_version if ce else None),
        "driver_can_run_cuda": s.nvidia_smi.cuda_version if s.nvidia_smi else None,
        "gpus_visible": ce.gpu_count if ce else (s.nvidia_smi.gpu_count if s.nvidia_smi else None),
        "image": s.image.reference if s.image else None,
        "image_digest": s.image.digest if s.image else None,
        "fingerprint": s.fingerprint,
        "tool_choice_auto": s.tool_probe.outcome,
    }
