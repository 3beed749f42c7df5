"""The chain's sources read back from a run folder: the texts the environment axis kept (`evidence/environment/`)
and what its record says of each (where it came from, its HTTP status, why it is missing), parsed again with the
same readers — so `k3 verify` re-judges the chain from its raw data, not from the findings stored beside it."""

from __future__ import annotations

import json
from typing import Any

from ...core.evidence import EvidenceRecord
from ...core.params import Params
from ...io.gpu import GpuSourceInfo
from .judge import EnvironmentResult, evaluate
from .sources import SourceText, cache_config_of, read_sources, server_answers


def _text(store: Any, rel: str | None) -> str | None:
    if not rel or not store.path(rel).is_file():
        return None
    return store.path(rel).read_bytes().decode("utf-8", errors="replace")


def reread_sources(store: Any, record: EvidenceRecord, params: Params) -> Any:
    """The EnvironmentSources the axis judged, rebuilt from the kept copies."""
    texts: dict[str, SourceText] = {}
    for name, info in (record.data.get("sources") or {}).items():
        text = _text(store, info.get("attachment"))
        texts[name] = SourceText(name, info.get("location"), text, info.get("error"), info.get("status"),
                                 info.get("attachment"))
    nvml = None
    if texts.get("nvml") and texts["nvml"].text:
        try:
            nvml = GpuSourceInfo(**json.loads(texts["nvml"].text))
        except (TypeError, ValueError):
            nvml = None
    cache = texts.get("cache_config_info")
    labels = cache_config_of(cache.text) if cache is not None and cache.ok else {}
    recipe = params.recipe
    return read_sources(texts, cache_config=labels, cache_config_endpoint=cache.location if labels and cache else None,
                        nvml=nvml, declared_image=recipe.image, declared_digest=recipe.image_digest,
                        build=recipe.build, **server_answers(texts))


def rejudge_environment(store: Any, record: EvidenceRecord, params: Params) -> EnvironmentResult:
    """Every rule of the chain applied again to the sources as kept."""
    return evaluate(reread_sources(store, record, params), params.recipe, params.axes.environment)
