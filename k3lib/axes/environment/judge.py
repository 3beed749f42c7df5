"""The compatibility chain judged, purely: every rule over already gathered sources, host → container → engine (the
rules themselves live in `host`, `container`, `engine` and `startup`), the result they make, the rows of the seed's
evidence sheet and the `environment` evidence record. A custom build gets its own, experimental, sheet. Gathering
the sources is `run.py` (`check_environment`, the notebook's call); showing them `figures.py`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ...core.evidence import EvidenceRecord, Finding, axis_status
from ...core.outcomes import AcceptanceOutcome, level_for
from ...core.params import EnvironmentParams, RecipeParams
from .container import check_build_method, check_cuda_build, check_image
from .engine import check_flags, check_prefix_caching, check_version
from ...io.claims import Claims, collect_env_claims, image_claims, log_claims, nvidia_smi_claims, nvml_claims, target_claims
from .host import check_driver, check_fabric, check_gpus, check_host_container
from .rules import ROW_ORDER, RULES, Proof, engine_args, finding
from .shapes import TableRow, TopologyRow
from .sources import EnvironmentSources, attachments
from .startup import check_startup

if TYPE_CHECKING:
    from ...core.session import AxisContext


@dataclasses.dataclass(frozen=True)
class EnvironmentResult:
    sources: EnvironmentSources
    findings: tuple[Finding, ...]
    build: str = "official"

    @property
    def status(self) -> str:
        return axis_status(list(self.findings))

    @property
    def mismatch(self) -> bool:
        """A failing rule whose decision is an environment rebuild (the build method only separates the sheet)."""
        return any(level_for(f)[0] == AcceptanceOutcome.REBUILD.value for f in self.findings)

    @property
    def experimental(self) -> bool:
        return self.build == "custom"

    def failed(self) -> list[Finding]:
        return [f for f in self.findings if f.status == "fail"]

    def by_rule(self, rule: str) -> Finding | None:
        return next((f for f in self.findings if f.rule == rule), None)


def evaluate(sources: EnvironmentSources, recipe: RecipeParams, env: EnvironmentParams) -> EnvironmentResult:
    """Pure: the rules over already gathered sources."""
    return EnvironmentResult(sources, tuple(iter_findings(sources, recipe, env)), sources.build)


def check_source_reads(s: EnvironmentSources) -> list[Finding]:
    """A file given for a source that is not what it claims: its own finding, so the reviewer fixes the input."""
    out = []
    for name, why in sorted(s.read_errors.items()):
        out.append(finding("environment.source", "warn", f"{name} could not be read: {why}",
                           [Proof(name, "unreadable", s.texts[name].location, s.attachment(name))],
                           observed="unreadable", source=name))
    for name in ("collect_env", "nvidia_smi", "server_log", "image_inspect"):
        src = s.texts.get(name)
        if src is not None and src.location is not None and src.error:
            out.append(finding("environment.source", "not-observable",
                               f"{name} configured but not obtained: {src.error}",
                               [Proof(name, "missing", src.location)], observed="missing", source=name))
    return out


def iter_findings(s: EnvironmentSources, recipe: RecipeParams, env: EnvironmentParams) -> list[Finding]:
    """Every rule of the chain, host → container → engine."""
    return [
        check_driver(s, recipe), check_host_container(s), check_gpus(s, env, recipe), check_fabric(s, env),
        check_cuda_build(s, recipe), check_image(s, recipe), check_build_method(s),
        *check_version(s, recipe), check_flags(s, recipe), check_prefix_caching(s, recipe), check_startup(s),
        *check_source_reads(s),
    ]


def environment_record(result: EnvironmentResult, ctx: "AxisContext") -> EvidenceRecord:
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
    src_info = {name: {"location": s.location, "error": s.error, "attachment": s.attachment, "status": s.status,
                       "read_error": result.sources.read_errors.get(name)}
                for name, s in result.sources.texts.items()}
    title = "Compatibility chain" + (" (custom build, experimental)" if result.experimental else "")
    return EvidenceRecord(
        axis="environment", title=title, status=status, summary=summary, findings=findings,
        data={"rows": [{k: v for k, v in r.items()} for r in table_rows(result)], "mismatch": result.mismatch,
              "build": result.build, "experimental": result.experimental, "sheet": sheet, "observed": observed,
              "topology": topology(result.sources), "sources": src_info,
              "claims": source_claims(result.sources)},
        attachments=attachments(result.sources))


def source_claims(s: EnvironmentSources) -> dict[str, Claims]:
    """What each source says of the deployment it came from (`k3lib.io.claims`), the server's own answers as
    "target (environment)": `k3lib.verdict.identity` ties each to the target."""
    cache = s.texts.get("cache_config_info")
    got = {"target (environment)": target_claims(s.api_version, s.models, [cache.text or ""] if cache else []),
           "collect_env": collect_env_claims(s.collect_env), "nvidia_smi": nvidia_smi_claims(s.nvidia_smi),
           "server_log": log_claims(s.log, engine_args(s)), "image_inspect": image_claims(s.image),
           "nvml": nvml_claims(s.nvml)}
    return {name: fields for name, fields in got.items() if fields}


def topology(s: EnvironmentSources) -> TopologyRow:
    """GPU count and parallel sizes as the server was started: what a re-validation compares (a change of
    topology reopens the sheet). Sizes the log does not print are vLLM's default, 1; no log: all unknown."""
    args = engine_args(s)
    parallel = {key: _size(args, key) for key in ("tensor_parallel_size", "pipeline_parallel_size",
                                                    "data_parallel_size")}
    ce = s.collect_env
    return {"tensor_parallel_size": parallel["tensor_parallel_size"],
            "pipeline_parallel_size": parallel["pipeline_parallel_size"],
            "data_parallel_size": parallel["data_parallel_size"],
            "gpu_count": ce.gpu_count if ce else (s.nvidia_smi.gpu_count if s.nvidia_smi else None)}


def _size(args: Mapping[str, Any] | None, key: str) -> int | None:
    """A parallel size as the log printed it (vLLM's default, 1, where it printed none); None: no log args."""
    try:
        return None if args is None else max(int(args.get(key) or 1), 1)
    except (TypeError, ValueError):
        return None


def _summary_values(s: EnvironmentSources) -> dict[str, str | int | None]:
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


# -- the evidence sheet's rows (the record keeps them; `figures.environment_table` shows them) -----------------

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


def proof_cell(finding: Finding) -> str:
    proofs = finding.evidence.get("proofs") or []
    parts = []
    for p in proofs:
        where = p.get("attachment") or ""
        line = p.get("where")
        line = line.split(":", 1)[0] if isinstance(line, str) and line.startswith("line ") else None
        parts.append(p["source"] + (f" [{where}{', ' + line if line else ''}]" if where else ""))
    return "; ".join(dict.fromkeys(parts)) or "—"


def table_rows(result: EnvironmentResult) -> list[TableRow]:
    """One row per item of the seed's table; a row with several rules shows the worst and joins the rest."""
    by_item: dict[str, list[Finding]] = {}
    for f in result.findings:
        by_item.setdefault(RULES[f.rule].item, []).append(f)
    rows: list[TableRow] = []
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
            "proof kept": " | ".join(dict.fromkeys(proof_cell(f) for f in found)),
            "expected": _cell(head.expected),
            "status": head.status,
            "decision on mismatch": f"{spec.on_mismatch} ({spec.decision})",
            "finding": " / ".join(f.message for f in found if f.status == head.status),
            "rules": [f.rule for f in found],
        })
    return rows
