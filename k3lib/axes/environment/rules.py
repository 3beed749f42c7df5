"""The chain's rule table and the shape of its findings: each rule's row in the seed's evidence table and what a
mismatch decides, one proof (which source said what, where), one finding, and the observations several rules share
(the vLLM version's sources, the engine's arguments)."""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Iterable

from ...core.evidence import Finding, FindingStatus
from ...core.record import Record
from ...core.outcomes import rule_for
from ...io.readers._text import numbered_lines
from .sources import EnvironmentSources


@dataclasses.dataclass(frozen=True)
class RuleSpec:
    """A rule's place in the seed's evidence table and what a mismatch decides."""

    rule: str
    item: str
    level: str  # host | container | engine
    on_mismatch: str

    @property
    def decision(self) -> str:
        """What a failing finding of this rule decides: read from the one table (k3lib.core.outcomes.RULES)."""
        return rule_for(self.rule).level.value


RULES = {r.rule: r for r in (
    RuleSpec("environment.image", "Image and tag", "container",
             "do not mix this result with another image's: validate the image the sheet names"),
    RuleSpec("environment.vllm_version", "vLLM version", "engine",
             "go back to the official recipe if the version is out of range"),
    RuleSpec("environment.vllm_sources", "vLLM version", "engine",
             "the proofs come from different builds: collect them again from the running container"),
    RuleSpec("environment.cuda_build", "CUDA build", "container",
             "rebuild the image for the recipe's CUDA, or document an independent (experimental) build"),
    RuleSpec("environment.driver_branch", "Host driver", "host", "upgrade the host driver before any functional test"),
    RuleSpec("environment.host_container", "Host vs container", "host",
             "collect the host's nvidia-smi and the container's collect_env from the same node, same moment"),
    RuleSpec("environment.gpus_visible", "GPU visibility", "host",
             "fix the container runtime (devices, NVIDIA_VISIBLE_DEVICES) before measuring performance"),
    RuleSpec("environment.fabric_manager", "Fabric manager", "host",
             "start nvidia-fabricmanager (same branch as the driver) before any test"),
    RuleSpec("environment.build_method", "Build method", "container",
             "keep this result apart from the official image's acceptance (its own sheet and rollback)"),
    RuleSpec("environment.flags", "Server flags", "engine", "restart the server with the recipe's flags"),
    RuleSpec("environment.prefix_caching", "Server flags", "engine",
             "restart the server without --no-enable-prefix-caching"),
    RuleSpec("environment.startup", "Startup", "engine",
             "the engine never became ready: fix the topology or the image"),
    RuleSpec("environment.source", "Sources", "—",
             "provide the artifact again: the file given is not what it claims to be"),
)}
ROW_ORDER = ("Image and tag", "vLLM version", "CUDA build", "Host driver", "GPU visibility", "Build method",
             "Host vs container", "Server flags", "Fabric manager", "Startup", "Sources")


class Proof(Record):
    """One observation: which source said what, where in it, and the kept copy."""

    source: str
    value: Any
    where: str | None = None
    attachment: str | None = None

    def __init__(self, source: str, value: Any, where: str | None = None, attachment: str | None = None) -> None:
        super().__init__(source=source, value=value, where=where, attachment=attachment)

    def __str__(self) -> str:
        return f"{self.source}: {self.value}"


def line_of(text: str | None, pattern: str) -> str | None:
    """`line N: <the line>` of the first line matching the regex, for a reviewer to find the proof."""
    if not text:
        return None
    rx = re.compile(pattern, re.IGNORECASE)
    for number, line in numbered_lines(text):
        if m := rx.search(line):
            if len(line) > 240:  # a long config line: keep the part around the match
                start = max(m.start() - 100, 0)
                line = ("…" if start else "") + line[start:m.end() + 100] + ("…" if m.end() + 100 < len(line) else "")
            return f"line {number}: {line.strip()}"
    return None


def finding(rule: str, status: FindingStatus, message: str, proofs: Iterable[Proof] = (), *, observed: Any = None,
            expected: Any = None, **extra: Any) -> Finding:
    spec = RULES[rule]
    evidence = {"item": spec.item, "level": spec.level, "on_mismatch": spec.on_mismatch,
                "proofs": [p.model_dump(exclude_none=True) for p in proofs], **extra}
    return Finding(rule=rule, status=status, message=message, observed=observed, expected=expected,
                   evidence=evidence)


def missing(s: EnvironmentSources, *names: str) -> str:
    """Why each named source is not there, for a not-observable message."""
    out = []
    for name in names:
        src = s.texts.get(name)
        if name in s.read_errors:
            out.append(f"{name}: unreadable ({s.read_errors[name]})")
        elif src is None or src.location is None:
            out.append(f"{name}: not configured")
        elif src.error:
            out.append(f"{name}: {src.error}")
    return "; ".join(out) or "no source"


# ---------------------------------------------------------------------------------------------------------------
# Observations shared by several rules


def version_proofs(s: EnvironmentSources) -> list[Proof]:
    """Every source naming the vLLM version, the running server's own answer first."""
    out = []
    if s.api_version:
        out.append(Proof("/version", s.api_version, f'{{"version": "{s.api_version}"}}', s.attachment("version")))
    if s.fingerprint_version:
        out.append(Proof("system_fingerprint", s.fingerprint_version, s.fingerprint, s.attachment("chat")))
    if s.log is not None and s.log.vllm_version:
        where = line_of(s.texts["server_log"].text, r"version\s+" + re.escape(s.log.vllm_version))
        out.append(Proof("server_log", s.log.vllm_version, where, s.attachment("server_log")))
    if s.collect_env is not None and s.collect_env.vllm_version:
        where = line_of(s.texts["collect_env"].text, r"vLLM Version\s*:")
        out.append(Proof("collect_env", s.collect_env.vllm_version, where, s.attachment("collect_env")))
    return out


def engine_args(s: EnvironmentSources) -> dict[str, Any] | None:
    """The server's arguments as the log printed them: `non-default args` (V1), else V0's full Namespace."""
    if s.log is None:
        return None
    if isinstance(s.log.non_default_args, dict):
        return s.log.non_default_args
    return s.log.namespace_args


def args_where(s: EnvironmentSources) -> str | None:
    return line_of(s.texts["server_log"].text, r"non-default args|args: Namespace\(") if s.log else None
