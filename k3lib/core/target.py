"""The deployment under test, resolved: URLs, model, auth header by env-var name, and the handle of the embedded
emulator when the kit started one. Starting it (and restarting a target between stages) is `k3lib.io.target`: the
foundation names a target, it never starts a server."""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

from .guards import api_key, require_key_env
from .params import Params, TargetParams


class WithTarget(Protocol):
    """What resolving a target reads: the `target` section of the acceptance or the review parameters."""

    @property
    def target(self) -> TargetParams: ...


@dataclasses.dataclass
class Target:
    base_url: str
    metrics_urls: tuple[str, ...]
    params: TargetParams
    emulator: Any = None  # the EmulatorHandle when the kit started one itself (k3lib.io.target)

    @property
    def api_key_env(self) -> str | None:
        return self.params.api_key_env

    def headers(self) -> dict[str, str]:
        """Auth header, read from the environment at call time; the value is never stored on this object."""
        value = api_key(self.params.api_key_env, source="target.api_key_env")
        return {"Authorization": f"Bearer {value}"} if value else {}

    def stop(self) -> None:
        if self.emulator is not None:
            self.emulator.stop()
            self.emulator = None

    def __repr__(self) -> str:  # never shows a header value
        return f"Target(base_url={self.base_url!r}, metrics_urls={self.metrics_urls!r})"


def require_api_key(params: WithTarget) -> None:
    """Fail before anything starts when the key's variable is named but empty."""
    require_key_env(params.target.api_key_env, source="target.api_key_env")


def pin_target(params: Params, target: Target) -> Params:
    """Parameters with the running target's URLs written in, so every notebook of a batch hits the same server."""
    data = params.public_dict()
    data["target"]["base_url"] = target.base_url
    data["target"]["metrics_urls"] = list(target.metrics_urls)
    if target.emulator is not None and params.target.gpu_metrics.source == "none":
        data["target"]["gpu_metrics"] = {"source": "dcgm", "url": target.emulator.dcgm_url, "selector": "",
                                         "urls": list(getattr(target.emulator, "dcgm_urls", ()))}
    return Params.model_validate(data)
