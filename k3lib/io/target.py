"""Reaching the deployment under test: the URLs the parameters name, or the embedded emulator started in this
process (a thread, or one process per node for a profile spanning nodes); and, between batch stages, a target
brought back by its restart command. The `Target` these return is `k3lib.core.target`."""

from __future__ import annotations

import atexit
import os
import time
from typing import Any, Required, TypedDict

import httpx

from ..core.errors import BadInputError
from ..core.operator import run_operator_command
from ..core.target import Target, WithTarget, require_api_key

__all__ = ["RecoveryEvent", "emulator_config", "recover", "resolve_target", "start_embedded"]


class _Overrides(TypedDict, total=False):
    """The emulator settings the parameters give on top of the profile's."""

    faults: tuple[str, ...]
    time_scale: float
    vllm_version: str
    api_key: str | None


class RecoveryEvent(TypedDict, total=False):
    """What `recover` did between batch stages (a line of the run's events.json)."""

    after: Required[str]
    health_before: Required[int | None]
    restarted: Required[bool]
    detail: str
    command: str
    health_after: int | None
    duration_s: float


def emulator_config(params: WithTarget) -> Any:
    """The EmulatorConfig the parameters describe (contract and recipe shape the emulator like the target)."""
    from ..emulator import EmulatorConfig

    em = params.target.emulator
    kwargs: _Overrides = {"faults": tuple(em.faults), "time_scale": em.time_scale}
    if em.vllm_version:
        kwargs["vllm_version"] = em.vllm_version
    if params.target.api_key_env:  # the emulator then guards /v1 with the same key, as `vllm serve --api-key`
        kwargs["api_key"] = os.environ.get(params.target.api_key_env)
    try:
        return EmulatorConfig.from_profile(em.profile, **kwargs)
    except (KeyError, ValueError) as exc:
        raise BadInputError(f"{exc}", source="target.emulator") from None


def start_embedded(params: WithTarget) -> Any:
    """The emulator in a thread of this process, or, for a profile spanning nodes, one process per node."""
    from ..emulator import start_emulator

    cfg = emulator_config(params)
    nodes = params.target.emulator.nodes or cfg.nodes
    if nodes > 1:
        from ..emulator.cluster import start_cluster

        return start_cluster(cfg, nodes, host="127.0.0.1")
    return start_emulator(cfg, host="127.0.0.1", port=0)


def resolve_target(params: WithTarget, *, start: bool = True) -> Target:
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
    # every node's /metrics when the kit started several (a real deployment names its own in target.metrics_urls)
    metrics = tp.metrics_urls or tuple(getattr(handle, "metrics_urls", None) or (f"{base}/metrics",))
    return Target(base_url=base, metrics_urls=tuple(metrics), params=tp, emulator=handle)


def recover(target: Target, *, after: str) -> RecoveryEvent | None:
    """Between batch stages: when /health is not 200 and `target.restart` is set, restart and wait for 200.
    Returns what happened (for the run's events), or None when the target was healthy."""

    def health() -> int | None:
        try:
            return httpx.get(f"{target.base_url}/health", timeout=5.0).status_code
        except httpx.HTTPError:
            return None

    before = health()
    if before == 200:
        return None
    event: RecoveryEvent = {"after": after, "health_before": before, "restarted": False}
    command = target.params.restart
    if not command:
        event["detail"] = "no target.restart command: the next axes meet the target as it is"
        return event

    event["command"] = command if isinstance(command, str) else " ".join(command)
    t0 = time.monotonic()
    ok, detail = run_operator_command(command, target.base_url, target.params.restart_timeout_s, target.headers())
    status = health()
    while ok and status != 200 and time.monotonic() - t0 < target.params.restart_timeout_s:
        time.sleep(0.25)
        status = health()
    event["restarted"] = ok and status == 200
    event["detail"] = detail
    event["health_after"] = status
    event["duration_s"] = round(time.monotonic() - t0, 2)
    return event
