"""Every source tied to the target, or it proves nothing.

The deployment's identity comes from the target itself — `/version`, the `/v1/models` cards (id, root,
max_model_len), its `/metrics` (served model names, DP engines, KV pool, start time) — as the probe and the
environment axis read them. Every other source (the container's `collect_env`, the host's `nvidia-smi`, the server
log, the image inspect, NVML, the GPU metrics, each metrics endpoint) is compared with it on what they share: vLLM
version, model, context limit, KV pool, GPU names, UUIDs and count, driver, host, parallel sizes, start time, and —
for the GPU metrics and the metrics endpoints — whether they moved with the kit's own load. A source is *tied*
when it agrees with the target, or with a source already tied, on at least one of them and disagrees with none.

A source that disagrees with another on a shared field is *disputed* (both, unless the other is the target); one
that shares nothing checkable is *untied*. The findings resting on either are opened (`not-observable`), their
message opening with the mismatch, so their sheet items stay open and the decision is not production.

Pure over evidence records (`data.claims` of the probe, environment and capacity records, `k3lib.io.claims`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import Field

from ..core.evidence import EvidenceRecord, Finding
from ..core.record import Record
from ..io.claims import Claims
from ..core.versions import same_release

TARGET = "target"
KV_TOLERANCE = 0.10  # the log's "GPU KV cache size" vs cache_config_info's blocks × block size (hybrid rounding)
START_BEFORE_S = 600.0  # a container starts at most this long before its server process does
# a load-tied flag (True: moved with the kit's load, False: did not) compared with the target itself
LOAD_TIES = {"busy_under_load": "GPU utilisation moved while the kit loaded the target",
             "kit_requests_counted": "the counters counted the kit's own requests"}


def _norm_model(name: str) -> set[str]:
    n = str(name).strip().rstrip("/")
    return {n.lower(), n.rsplit("/", 1)[-1].lower()}


def _models(a: Any, b: Any) -> tuple[bool, str]:
    na = set().union(*(_norm_model(x) for x in a))
    nb = set().union(*(_norm_model(x) for x in b))
    return bool(na & nb), f"model {sorted(a)} vs {sorted(b)}"


def _gpu_name(name: str) -> str:
    n = " ".join(str(name).lower().replace("nvidia", "").split()).rstrip(".")
    return n.removesuffix("...").strip()


def _gpu_names(a: Any, b: Any) -> tuple[bool, str]:
    na, nb = {_gpu_name(x) for x in a}, {_gpu_name(x) for x in b}
    ok = all(any(x.startswith(y) or y.startswith(x) for y in nb) for x in na) and \
        all(any(y.startswith(x) or x.startswith(y) for x in na) for y in nb)
    return ok, f"GPU names {sorted(set(a))} vs {sorted(set(b))}"


def _version(a: Any, b: Any) -> tuple[bool, str]:
    same = same_release(a, b)
    return (str(a).strip() == str(b).strip()) if same is None else same, f"vLLM {a} vs {b}"


def _equal(label: str) -> Callable[[Any, Any], tuple[bool, str]]:
    return lambda a, b: (str(a).strip() == str(b).strip(), f"{label} {a} vs {b}")


def _overlap(label: str) -> Callable[[Any, Any], tuple[bool, str]]:
    return lambda a, b: (bool(set(a) & set(b)), f"{label} {sorted(a)[:4]} vs {sorted(b)[:4]}")


def _kv(a: Any, b: Any) -> tuple[bool, str]:
    return abs(float(a) - float(b)) <= KV_TOLERANCE * max(float(a), float(b)), \
        f"KV pool {a} vs {b} tokens (tolerance {KV_TOLERANCE:.0%})"


# field → how two sources' values of it are compared: (agree, the words naming both values)
SAME: dict[str, Callable[[Any, Any], tuple[bool, str]]] = {
    "vllm_version": _version, "models": _models, "max_model_len": _equal("max_model_len"), "kv_cache_tokens": _kv,
    "driver": _equal("driver"), "gpu_names": _gpu_names, "gpu_uuids": _overlap("GPU UUIDs"),
    "host_gpu_count": _equal("GPUs on the host"), "hosts": _overlap("host"),
}


def _epoch(value: Any) -> float | None:
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _cross(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[tuple[bool, str]]:
    """Comparisons between two sources' different fields that speak of one thing."""
    out = []
    for x, y in ((a, b), (b, a)):
        if x.get("container_gpu_count") is not None and y.get("host_gpu_count") is not None:
            out.append((int(x["container_gpu_count"]) <= int(y["host_gpu_count"]),
                        f"{x['container_gpu_count']} GPU(s) in the container vs {y['host_gpu_count']} on the host"))
        if x.get("data_parallel_size") is not None and y.get("engines") is not None:
            out.append((int(x["data_parallel_size"]) == int(y["engines"]),
                        f"data parallel size {x['data_parallel_size']} vs {y['engines']} engine(s) in /metrics"))
        start, started = _epoch(x.get("start_time")), _epoch(y.get("started"))
        if start is not None and started is not None:
            out.append((started - 5 <= start <= started + START_BEFORE_S,
                        f"server started {dt.datetime.fromtimestamp(start, dt.timezone.utc):%Y-%m-%d %H:%M:%S}Z vs "
                        f"container started {y['started']}"))
    return out


def compare(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[tuple[bool, str]]:
    """Every comparison two sources' claims allow: (agree, what was compared)."""
    out = [SAME[k](a[k], b[k]) for k in SAME if a.get(k) not in (None, [], "") and b.get(k) not in (None, [], "")]
    return out + _cross(a, b)


class SourceTie(Record):
    """How one source stands to the target: "target", "tied", "disputed" or "untied", with what proved it.
    `model_dump(mode="json")` is its entry in `decision.json`'s identity (the source names the entry)."""

    source: str = Field(exclude=True)
    status: str
    via: tuple[str, ...] = ()
    mismatches: tuple[str, ...] = ()

    @property
    def trusted(self) -> bool:
        return self.status in ("target", "tied")

    def why(self) -> str:
        if self.mismatches:
            return f"{self.source} disagrees: " + "; ".join(self.mismatches[:3])
        return f"{self.source} shares nothing the kit can check with the target (no version, model, GPU, driver or " \
               f"counter in common)"



def _pair_results(claims: Mapping[str, Mapping[str, Any]]) -> dict[tuple[str, str], list[tuple[bool, str]]]:
    names = sorted(claims)
    out = {}
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            if a.startswith(TARGET) and b.startswith(TARGET):
                continue  # the target's own answers at two moments: compared apart (see `target_changed`)
            got = compare(claims[a], claims[b])
            if got:
                out[(a, b)] = got
    return out


def tie_sources(claims: Mapping[str, Mapping[str, Any]]) -> dict[str, SourceTie]:
    """Each source of `claims` ({source: fields}) tied to the target, disputed or untied."""
    pairs = _pair_results(claims)
    mismatches: dict[str, list[str]] = {s: [] for s in claims}
    for (a, b), results in pairs.items():
        for said in (said for ok, said in results if not ok):
            for s, other in ((a, b), (b, a)):
                mismatches[s] += [] if s.startswith(TARGET) else [f"{said} ({other})"]
    for s, fields in claims.items():
        for key, what in LOAD_TIES.items():
            if fields.get(key) is False:
                mismatches[s].append(f"not: {what}")
    tied: dict[str, list[str]] = {s: [] for s in claims if s.startswith(TARGET)}
    for s, fields in claims.items():
        if not mismatches[s] and any(fields.get(k) is True for k in LOAD_TIES):
            tied[s] = [what for k, what in LOAD_TIES.items() if fields.get(k) is True]
    grew = True
    while grew:
        grew = False
        for (a, b), results in pairs.items():
            for s, other in ((a, b), (b, a)):
                if s in tied or other not in tied or mismatches[s] or not any(ok for ok, _ in results):
                    continue
                tied[s] = [f"{said} ({other})" for ok, said in results if ok]
                grew = True
    out = {}
    for s in claims:
        status = "target" if s.startswith(TARGET) else "disputed" if mismatches[s] else \
            "tied" if s in tied else "untied"
        out[s] = SourceTie(source=s, status=status, via=tuple(tied.get(s, ())),
                            mismatches=tuple(dict.fromkeys(mismatches[s])))
    return out


def target_changed(claims: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The target's own answers at two moments that disagree (a restart onto another release between axes)."""
    own = sorted(s for s in claims if s.startswith(TARGET))
    out = []
    for i, a in enumerate(own):
        for b in own[i + 1:]:
            out += [f"{said} ({a} vs {b})" for ok, said in compare(claims[a], claims[b]) if not ok]
    return out


# -- from records, and back onto their findings --------------------------------------------------------------------

# The sources an environment proof may name ("nvidia_smi (host)", "collect_env: torch wheel tag",
# "image (image_inspect)", "server_log: non-default args"), and the target's own answers it may cite.
NAMED = ("collect_env", "nvidia_smi", "server_log", "image_inspect", "nvml")
OWN = ("/version", "/v1/models", "system_fingerprint", "vllm:cache_config_info", "cache_config_info", "chat")
# Findings of other axes resting on one source: the GPU metrics carry the memory curves and the GPU name.
RESTS_ON = {"capacity.gpu_memory": ("gpu_metrics",), "capacity.memory_growth": ("gpu_metrics",),
            "capacity.roofline": ("gpu_metrics",)}
# Findings read from the server's /metrics: every metrics endpoint must be the target's (its counters counted the
# kit's own requests), or they rest on another server's numbers.
METRICS_RULES = ("capacity.saturation", "capacity.queue_time", "capacity.soak_saturation", "capacity.kv_accumulation",
                 "capacity.prefix_eviction", "capacity.fragmentation", "capacity.server_metrics", "capacity.rank_",
                 "capacity.cross_check", "capacity.admission", "prefix_cache.")


def claims_of(records: Mapping[str, EvidenceRecord]) -> dict[str, Claims]:
    """Every source's claims the records keep (`data.claims` of probe, environment and capacity)."""
    out: dict[str, Claims] = {}
    for axis in ("probe", "environment", "capacity"):
        rec = records.get(axis)
        data = rec.data if rec is not None and isinstance(rec.data, dict) else {}
        for source, fields in (data.get("claims") or {}).items():
            if isinstance(fields, dict) and fields:
                out[source] = dict(fields)
    return out


def _source_name(text: str) -> str | None:
    t = text.strip()
    for name in NAMED:
        if t.startswith(name) or f"({name})" in t:
            return name
    return "target (environment)" if t.startswith(OWN) else None


def sources_of(finding: Finding) -> set[str]:
    """The sources a finding rests on: its proofs' and its `source` (environment rules), or the table above."""
    names = set(RESTS_ON.get(finding.rule, ()))
    ev = finding.evidence if isinstance(finding.evidence, dict) else {}
    texts = [str(p["source"]) for p in ev.get("proofs") or () if isinstance(p, dict) and p.get("source")]
    if isinstance(ev.get("source"), str):
        texts.append(ev["source"])
    names |= {n for n in map(_source_name, texts) if n}
    if finding.rule.startswith(METRICS_RULES):
        names.add("metrics")
    return names


class SourceTies(Record):
    """The target's identity, how each source stands to it (by source name), and any change of the target between
    axes. `model_dump(mode="json")` is `decision.json`'s identity (`k3lib.verdict.shapes.IdentityDoc`)."""

    target: Claims
    sources: dict[str, SourceTie]
    target_changed: tuple[str, ...] = ()

    def untrusted(self) -> dict[str, SourceTie]:
        return {s: t for s, t in self.sources.items() if not t.trusted}



def identify(records: Mapping[str, EvidenceRecord]) -> SourceTies:
    claims = claims_of(records)
    target = {k: v for s in sorted(claims) if s.startswith(TARGET) for k, v in claims[s].items()}
    return SourceTies(target=target, sources=dict(sorted(tie_sources(claims).items())),
                      target_changed=tuple(target_changed(claims)))


def _opened(f: Finding, why: str) -> Finding:
    return f.model_copy(update={"status": "not-observable", "message": f"open: {why} — was {f.status}: {f.message}",
                                "evidence": {**(f.evidence or {}), "untied": why}})


def tie_records(records: Mapping[str, EvidenceRecord], report: SourceTies | None = None
                ) -> dict[str, EvidenceRecord]:
    """The records with every finding that rests on a source not tied to the target opened, naming the mismatch
    (or that it shares nothing checkable); the environment axis' findings are opened too when the target it reached
    is not the one the probe identified."""
    report = report or identify(records)
    bad = report.untrusted()
    out = dict(records)
    for axis, rec in records.items():
        changed = []
        for f in rec.findings:
            if f.status == "not-observable":
                changed.append(f)
                continue
            rests = sources_of(f)
            if "metrics" in rests:
                rests |= {s for s in bad if s.startswith("metrics ")}
            absent = {s: SourceTie(source=s, status="untied") for s in rests if s in NAMED and s not in report.sources}
            hit = sorted(s for s in rests if s in bad or s in absent)
            moved = [s for s in rests if s == "target (environment)"] if report.target_changed else []
            why = [{**bad, **absent}[s].why() for s in hit]
            if moved:
                why.insert(0, "the target changed between the probe and this axis: " + "; ".join(report.target_changed[:2]))
            changed.append(_opened(f, "; ".join(why)) if why else f)
        if changed != list(rec.findings):
            out[axis] = rec.model_copy(update={"findings": changed})
    return out
