"""The deployment under test, resolved: URLs, model, auth header by env-var name, or an embedded emulator."""

from __future__ import annotations

import atexit
import dataclasses
import os
from typing import Any

from .errors import BadInputError
from .params import Params, TargetParams


@dataclasses.dataclass
class Target:
    base_url: str
    metrics_urls: tuple[str, ...]
    params: TargetParams
    emulator: Any = None  # the EmulatorHandle when the kit started one itself

    @property
    def api_key_env(self) -> str | None:
        return self.params.api_key_env

    def headers(self) -> dict[str, str]:
        """Auth header, read from the environment at call time; the value is never stored on this object."""
        name = self.params.api_key_env
        if not name:
            return {}
        value = os.environ.get(name)
        if not value:
            raise BadInputError(f"environment variable {name} is not set; it must hold the API key",
                                source="target.api_key_env")
        return {"Authorization": f"Bearer {value}"}

    def stop(self) -> None:
        if self.emulator is not None:
            self.emulator.stop()
            self.emulator = None

    def __repr__(self) -> str:  # never shows a header value
        return f"Target(base_url={self.base_url!r}, metrics_urls={self.metrics_urls!r})"


def require_api_key(params: Params) -> None:
    """Fail before anything starts when the key's variable is named but empty."""
    name = params.target.api_key_env
    if name and not os.environ.get(name):
        raise BadInputError(f"environment variable {name} is not set; it must hold the API key",
                            source="target.api_key_env")


def emulator_config(params: Params) -> Any:
    """The EmulatorConfig the parameters describe (contract and recipe shape the emulator like the target)."""
    from .emulator import EmulatorConfig

    em = params.target.emulator
    kwargs: dict[str, Any] = {"faults": tuple(em.faults), "time_scale": em.time_scale}
    if em.vllm_version:
        kwargs["vllm_version"] = em.vllm_version
    if params.target.api_key_env:  # the emulator then guards /v1 with the same key, as `vllm serve --api-key`
        kwargs["api_key"] = os.environ.get(params.target.api_key_env)
    try:
        return EmulatorConfig.from_profile(em.profile, **kwargs)
    except (KeyError, ValueError) as exc:
        raise BadInputError(f"{exc}", source="target.emulator") from None


def start_embedded(params: Params) -> Any:
    from .emulator import start_emulator

    return start_emulator(emulator_config(params), host="127.0.0.1", port=0)


def resolve_target(params: Params, *, start: bool = True) -> Target:
    """Point at `target.base_url`, or start the embedded emulator when none is given."""
    tp = params.target
    require_api_key(params)
    handle = None
    base = tp.base_url
    if base is None:
        if not start:
            raise BadInputError("no target.base_url and starting the emulator was not allowed", source="target")
        handle = start_embedded(params)
        atexit.register(handle.stop)
        base = handle.url
    metrics = tp.metrics_urls or (f"{base}/metrics",)
    return Target(base_url=base, metrics_urls=tuple(metrics), params=tp, emulator=handle)


def pin_target(params: Params, target: Target) -> Params:
    """Parameters with the running target's URLs written in, so every notebook of a batch hits the same server."""
    data = params.public_dict()
    data["target"]["base_url"] = target.base_url
    data["target"]["metrics_urls"] = list(target.metrics_urls)
    if target.emulator is not None and params.target.gpu_metrics.source == "none":
        data["target"]["gpu_metrics"] = {"source": "dcgm", "url": target.emulator.dcgm_url, "selector": ""}
    return Params.model_validate(data)
