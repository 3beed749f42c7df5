"""One deployment: which label sets of the load series belong to the deployment under review, and which are left
out (counted by reason), the same way for a history file and for a Prometheus server.

vLLM series are the deployment's when their `model_name` is its served model (and, when instances are named, their
`instance` one of them); dcgm-exporter series when their host is one of its nodes and, when GPU UUIDs are named,
their `UUID` one of them. A label the selector names but a series lacks leaves that series out: it cannot be
attributed. The GPUs kept are counted and must be the GPUs the capacity reserves. The selector is
`review.deployment` itself (`DeploymentLabels`), as the parameters state it or its acceptance run completed it.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from typing import Iterable, Mapping

from .params import DeploymentLabels
from .shapes import LeftOutData, SelectorData

HOST_LABELS = ("Hostname", "hostname", "kubernetes_node", "node")  # dcgm-exporter writes Hostname
UUID_LABELS = ("UUID", "uuid")
DCGM_PREFIX = "DCGM_FI_"

LabelKey = tuple[tuple[str, str], ...]


def selector_data(deployment: DeploymentLabels) -> SelectorData:
    """The labels that select the deployment, as the load axis reports them."""
    return {"model_name": deployment.model_name, "instances": list(deployment.instances),
            "hostnames": list(deployment.hostnames), "gpu_uuids": list(deployment.gpu_uuids), "gpus": deployment.gpus}


def _label(labels: Mapping[str, str], names: Iterable[str]) -> str | None:
    return next((labels[n] for n in names if n in labels), None)


def why_not(name: str, key: LabelKey, deployment: DeploymentLabels) -> str | None:
    """Why the series `name{key}` is not the deployment's, or None when it is."""
    labels = dict(key)
    if name.startswith(DCGM_PREFIX):
        host = _label(labels, HOST_LABELS)
        if deployment.hostnames:
            if host is None:
                return "no Hostname label"
            if host not in deployment.hostnames:
                return f"another host ({host})"
        if deployment.gpu_uuids:
            uuid = _label(labels, UUID_LABELS)
            if uuid is None:
                return "no UUID label"
            if uuid not in deployment.gpu_uuids:
                return f"another GPU ({uuid})"
        return None
    model = labels.get("model_name")
    if deployment.model_name is not None:
        if model is None:
            return "no model_name label"
        if model != deployment.model_name:
            return f"another model ({model})"
    if deployment.instances:
        instance = labels.get("instance")
        if instance is None:
            return "no instance label"
        if instance not in deployment.instances:
            return f"another instance ({instance})"
    return None


@dataclasses.dataclass(frozen=True)
class LeftOut:
    """Series of one name left out of the review, by reason."""

    name: str
    reason: str
    series: int

    def describe(self) -> LeftOutData:
        return {"name": self.name, "reason": self.reason, "series": self.series}


def select(name: str, keys: Iterable[LabelKey], deployment: DeploymentLabels) -> tuple[list[LabelKey], list[LeftOut]]:
    """The label sets of `name` that are the deployment's, and the others counted by reason."""
    kept: list[LabelKey] = []
    reasons: Counter[str] = Counter()
    for key in keys:
        why = why_not(name, key, deployment)
        if why is None:
            kept.append(key)
        else:
            reasons[why] += 1
    return kept, [LeftOut(name, r, n) for r, n in sorted(reasons.items())]


def gpu_key(key: LabelKey) -> str:
    """One GPU across its series (a pod restart or a relabel gives the same GPU a new label set): its UUID, else its
    host and index."""
    labels = dict(key)
    uuid = _label(labels, UUID_LABELS)
    if uuid:
        return uuid
    return f"{_label(labels, HOST_LABELS) or '?'}/gpu{labels.get('gpu', '?')}"


def gpu_hosts(keys: Iterable[LabelKey]) -> list[str]:
    return sorted({_label(dict(k), HOST_LABELS) or "no Hostname" for k in keys})


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _one_of(label: str, values: tuple[str, ...]) -> str:
    if len(values) == 1:
        return f'{label}="{_quote(values[0])}"'
    return f'{label}=~"{"|".join(_quote(re.escape(v)) for v in values)}"'


def matchers(name: str, deployment: DeploymentLabels) -> str:
    """The PromQL label matchers that select the deployment's series of `name` on the server (the same rule as
    `why_not`, which still checks every series the server returns)."""
    parts = []
    if name.startswith(DCGM_PREFIX):
        if deployment.hostnames:
            parts.append(_one_of("Hostname", deployment.hostnames))
        if deployment.gpu_uuids:
            parts.append(_one_of("UUID", deployment.gpu_uuids))
    else:
        if deployment.model_name is not None:
            parts.append(_one_of("model_name", (deployment.model_name,)))
        if deployment.instances:
            parts.append(_one_of("instance", deployment.instances))
    return ",".join(parts)
