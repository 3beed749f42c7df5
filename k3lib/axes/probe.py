"""Axis 0, the target probe: is there an OpenAI-compatible server, which model, which limits, which metrics.

`/health`, `/version`, `/v1/models` and `/metrics`, each with status, latency and body kept as evidence.
A 404 on a vLLM-only endpoint is "not observable" (another engine), never a pass and never a crash.
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

import httpx
from pydantic import ValidationError

from ..core.evidence import EvidenceRecord, Finding, ServedModel, axis_status
from ..core.errors import EvidenceError
from ..core.record import Record
from ..core.session import AxisContext, JudgeContext
from ..core.store import utc_now
from ..io.claims import target_claims
from .operations import kit_started, started_by_batch
from .shapes import JsonObject

BODY_KEEP_BYTES = 64 * 1024


class EndpointProbe(Record):
    """One endpoint's answer; the probe's record keeps it as `kept(keep).model_dump()` (the body's start, and whether
    it was cut: the whole body is attached beside the record) and `read_probe` reads it back with `model_validate`."""

    name: str
    url: str
    status: int | None
    latency_ms: float | None
    body: str
    content_type: str | None
    error: str | None
    at: str
    #: the body is the start of what the endpoint answered, cut to the record's `keep` characters
    body_truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    def json(self) -> Any:  # type: ignore[override]  # the body's JSON (pydantic's own `json` is deprecated)
        try:
            return json.loads(self.body)
        except ValueError:
            return None

    def kept(self, keep: int = BODY_KEEP_BYTES) -> EndpointProbe:
        """The probe as its record keeps it: the body cut to `keep` characters, and whether it was."""
        return self.model_copy(update={"body": self.body[:keep],
                                       "body_truncated": self.body_truncated or len(self.body) > keep})


def probe_endpoint(client: httpx.Client, name: str, url: str) -> EndpointProbe:
    at = utc_now()
    t0 = time.perf_counter_ns()
    try:
        resp = client.get(url)
    except httpx.HTTPError as exc:
        return EndpointProbe(name=name, url=url, status=None, latency_ms=None, body="", content_type=None,
                             error=f"{type(exc).__name__}: {exc}", at=at)
    latency_ms = (time.perf_counter_ns() - t0) / 1e6
    return EndpointProbe(name=name, url=url, status=resp.status_code, latency_ms=round(latency_ms, 3), body=resp.text,
                         content_type=resp.headers.get("content-type"), error=None, at=at)


@dataclasses.dataclass(frozen=True)
class ProbeResult:
    endpoints: dict[str, EndpointProbe]
    served_models: list[JsonObject]  # the /v1/models cards
    model: str | None
    vllm_version: str | None

    def table(self) -> "Any":
        import pandas as pd

        return pd.DataFrame([{"endpoint": p.name, "url": p.url, "status": p.status, "latency_ms": p.latency_ms,
                              "bytes": len(p.body), "error": p.error} for p in self.endpoints.values()])

    def figure(self) -> "Any":
        """Latency per endpoint, coloured by outcome."""
        import plotly.graph_objects as go

        names = list(self.endpoints)
        probes = list(self.endpoints.values())
        colours = ["#1a7f37" if p.ok else "#cf222e" for p in probes]
        fig = go.Figure(go.Bar(x=names, y=[p.latency_ms or 0 for p in probes], marker_color=colours,
                               text=[str(p.status or p.error or "") for p in probes], textposition="outside"))
        fig.update_layout(title="Probe latency per endpoint (label: HTTP status)", yaxis_title="latency (ms)",
                          height=320, margin=dict(t=50, b=40, l=60, r=20))
        return fig


def run_probe(ctx: AxisContext) -> ProbeResult:
    """Call the four endpoints once, with the axis timeout. Never raises for what the target answers."""
    base = ctx.target.base_url
    timeout = ctx.params.axes.probe.timeout_s
    urls = {"health": f"{base}/health", "version": f"{base}/version", "models": f"{base}/v1/models"}
    with httpx.Client(timeout=timeout, headers=ctx.target.headers()) as client:
        found = {name: probe_endpoint(client, name, url) for name, url in urls.items()}
        for i, murl in enumerate(ctx.target.metrics_urls):
            found[f"metrics[{i}]" if i else "metrics"] = probe_endpoint(client, "metrics", murl)
    return probe_result(found, ctx.params.target.model)


def probe_result(found: dict[str, EndpointProbe], wanted: str | None) -> ProbeResult:
    """Pure: the endpoints' answers → what the probe reads from them (also from a run folder, `read_probe`)."""
    models_body = found["models"].json() if found["models"].ok else None
    cards = [c for c in (models_body or {}).get("data", []) if isinstance(c, dict)] if isinstance(models_body, dict) else []
    version_body = found["version"].json() if found["version"].ok else None
    version = version_body.get("version") if isinstance(version_body, dict) else None
    model = wanted if wanted else (cards[0].get("id") if cards else None)
    return ProbeResult(found, cards, model, str(version) if version is not None else None)


def read_probe(store: Any, record: EvidenceRecord, wanted: str | None) -> ProbeResult:
    """The probe's answers read back from its record (`EndpointProbe.model_validate`) with the whole bodies attached
    beside it (`evidence/probe/*.txt`); a row that is not an endpoint's answer is refused in one line."""
    found = {}
    for key, d in (record.data.get("endpoints") or {}).items():
        rel = f"evidence/probe/{key.replace('[', '_').replace(']', '')}.txt"
        whole = store.path(rel).read_bytes().decode("utf-8", errors="replace") if store.path(rel).is_file() else None
        row = {**d, "name": d.get("name") or key} if whole is None else {
            **d, "name": d.get("name") or key, "body": whole, "body_truncated": False}
        try:
            found[key] = EndpointProbe.model_validate(row)
        except ValidationError as exc:
            raise EvidenceError(f"the probe's record: endpoint {key!r} cannot be read back "
                                f"({exc.errors()[0]['loc']}: {exc.errors()[0]['msg']})") from None
    return probe_result(found, wanted)


def iter_findings(result: ProbeResult, ctx: JudgeContext) -> list[Finding]:
    out: list[Finding] = []
    h = result.endpoints["health"]
    if h.ok:
        out.append(Finding(rule="probe.health", status="pass", message=f"/health answered {h.status}",
                           observed=h.status, expected=200))
    elif h.status == 404 and result.endpoints["models"].ok:
        # Not every OpenAI-compatible engine has vLLM's /health (llama.cpp's Python server has not): readiness
        # is then only what /v1/models shows, and engine death cannot be told apart from a missing route.
        out.append(Finding(rule="probe.health", status="not-observable",
                           message="no /health endpoint (404): readiness read from /v1/models (200) instead; an "
                                   "engine death will not show as a 503", observed=h.status, expected=200))
    else:
        why = h.error or f"status {h.status}" + (" (engine dead or not ready)" if h.status in (500, 503) else "")
        out.append(Finding(rule="probe.health", status="fail", message=f"/health is not healthy: {why}",
                           observed=h.status, expected=200))

    v = result.endpoints["version"]
    if result.vllm_version:
        out.append(Finding(rule="probe.version", status="pass", message=f"/version reports {result.vllm_version}",
                           observed=result.vllm_version))
    elif v.status == 404:
        out.append(Finding(rule="probe.version", status="not-observable",
                           message="/version is not served (404): not a vLLM server, version unknown"))
    else:
        out.append(Finding(rule="probe.version", status="fail",
                           message=f"/version gave no version: {v.error or f'status {v.status}'}"))

    m = result.endpoints["models"]
    ids = [c.get("id") for c in result.served_models]
    if not result.served_models:
        out.append(Finding(rule="probe.models", status="fail",
                           message=f"/v1/models lists no model: {m.error or f'status {m.status}'}"))
    elif ctx.params.target.model and ctx.params.target.model not in ids:
        out.append(Finding(rule="probe.models", status="fail",
                           message=f"model {ctx.params.target.model!r} is not served; served: {ids}",
                           observed=ids, expected=ctx.params.target.model))
    else:
        card = next(c for c in result.served_models if c.get("id") == result.model)
        out.append(Finding(rule="probe.models", status="pass",
                           message=f"serves {result.model!r} (root {card.get('root')!r})",
                           observed={"id": card.get("id"), "root": card.get("root"),
                                     "max_model_len": card.get("max_model_len"), "owned_by": card.get("owned_by")}))
        limit = card.get("max_model_len")
        promised = ctx.params.contract.max_context_tokens
        if isinstance(limit, int):
            ok = promised <= limit
            out.append(Finding(
                rule="probe.context_limit", status="pass" if ok else "fail",
                message=(f"contract context {promised} tokens fits the server's max_model_len {limit}" if ok else
                         f"the contract promises {promised} tokens of context but the server's max_model_len is "
                         f"{limit}: the contract itself must change or the server be reconfigured"),
                observed=limit, expected=f">= {promised}"))
        else:
            out.append(Finding(rule="probe.context_limit", status="not-observable",
                               message="/v1/models does not report max_model_len"))

    for key, p in result.endpoints.items():
        if not key.startswith("metrics"):
            continue
        if p.ok and ("vllm:" in p.body or "sglang:" in p.body):
            out.append(Finding(rule="probe.metrics", status="pass",
                               message=f"{p.url} exposes engine metrics ({len(p.body)} bytes)", observed=p.status))
        elif p.status == 404 or (p.ok and p.body.strip() == ""):
            out.append(Finding(rule="probe.metrics", status="not-observable",
                               message=f"{p.url} serves no metrics (status {p.status}): server-side checks will be "
                                       "not observable"))
        elif p.ok:
            out.append(Finding(rule="probe.metrics", status="warn",
                               message=f"{p.url} answers but carries no vllm: or sglang: series"))
        else:
            out.append(Finding(rule="probe.metrics", status="fail",
                               message=f"{p.url} unreachable: {p.error or f'status {p.status}'}"))
    return out


def target_kind(result: ProbeResult, ctx: AxisContext | JudgeContext) -> tuple[str, str]:
    """What the target is, and how the kit knows: `embedded-emulator` when the kit started it itself (this process,
    or the batch whose request names no target URL), `external-emulator` when its `/version` declares the kit's
    emulator (as a product names itself), `engine` otherwise. Either emulator makes the run a demo."""

    declared = None
    body = result.endpoints["version"].json() if "version" in result.endpoints else None
    if isinstance(body, dict) and body.get("emulator"):
        declared = str(body["emulator"])
    try:
        # a judge's context (k3 verify) carries no target: only the batch's request.json can say who started it
        started = kit_started(ctx) if isinstance(ctx, AxisContext) else started_by_batch(ctx.store)
    except (AttributeError, OSError, ValueError):
        started = False
    if started:
        return "embedded-emulator", "the kit started its embedded emulator itself"
    if declared:
        return "external-emulator", f"/version declares the kit's emulator ({declared!r})"
    return "engine", "the target declares no emulator in /version and the kit did not start it"


def probe_record(result: ProbeResult, ctx: AxisContext) -> EvidenceRecord:
    """Findings plus the raw bodies, written as attachments next to the record."""
    findings = iter_findings(result, ctx)
    kind, kind_basis = target_kind(result, ctx)
    attachments = []
    for key, p in result.endpoints.items():
        rel = f"evidence/probe/{key.replace('[', '_').replace(']', '')}.txt"
        ctx.store.write_text(rel, p.body)
        attachments.append(rel)
    status = axis_status(findings)
    failed = [f.rule for f in findings if f.status == "fail"]
    summary = ("target answers: " + (result.model or "no model") +
               (f", vLLM {result.vllm_version}" if result.vllm_version else "") +
               (f"; failing: {', '.join(failed)}" if failed else ""))
    return EvidenceRecord(
        axis="probe", title="Target probe", status=status, summary=summary, findings=findings,
        data={"model": result.model, "vllm_version": result.vllm_version,
              # the card fields the kit reads (ServedModel); the whole /v1/models body is in `endpoints`, attached
              "served_models": [{k: c.get(k) for k in ServedModel.model_fields} for c in result.served_models],
              "endpoints": {k: p.kept(4096).model_dump() for k, p in result.endpoints.items()},
              # the deployment's identity from the target itself: /version, the /v1/models cards, its /metrics
              "claims": {"target": target_claims(result.vllm_version, result.served_models,
                                                 [p.body for k, p in result.endpoints.items()
                                                  if k.startswith("metrics") and p.ok])},
              "target_kind": kind, "target_kind_basis": kind_basis},
        attachments=attachments)
