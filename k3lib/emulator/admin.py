"""The emulator-only `/_emulator/*` admin paths: faults, restart, state, the emulated log, collect_env, image
inspect, nvidia-smi, DCGM metrics and the operator attestation."""

from __future__ import annotations

import dataclasses
import time

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from . import envreport
from .config import EmulatorConfig
from .faults import FAULTS, FaultSet
from .gate import read_json
from .metrics import CONTENT_TYPE
from .state import EmulatorState

# Faults that only take effect when the engine starts; changing them at run time restarts it.
STARTUP_FAULTS = frozenset({"cuda12-image", "old-driver", "old-vllm", "no-tool-parser", "no-prefix-caching",
                            "kv-starved", "kv-pool", "oom-startup", "sparse-retention-miss", "dspark-low-accept",
                            "slow-load"})


async def admin_faults(request: Request) -> Response:
    emu: EmulatorState = request.app.state.emu
    rt = emu.runtime
    if request.method == "POST":
        body = await read_json(request, rt)
        if isinstance(body, Response):
            return body
        faults = body.get("faults")
        if not isinstance(faults, list) or not all(isinstance(f, str) for f in faults):
            return JSONResponse({"error": 'expected {"faults": ["name[=value]", ...]}'}, status_code=400)
        try:
            new = FaultSet.parse(faults, rt.cfg.seed)
        except Exception as exc:  # BadInputError: an unknown fault or a bad value
            return JSONResponse({"error": str(exc)}, status_code=400)
        changed_startup = {n for n in set(new.values) ^ set(rt.faults.values) if n in STARTUP_FAULTS}
        if new.scoped != rt.faults.scoped:
            changed_startup.add("a rank fault")  # each rank's pool and step model are built at start
        if emu.router is not None:
            await emu.router.broadcast("/_emulator/faults", await request.body())
        cfg = emu.base_cfg.replace(faults=new.canonical())
        if changed_startup:
            await emu.restart(cfg)
        else:
            emu.base_cfg = cfg
            rt.requested = cfg
            rt.faults = new
            slow = new.value("slow") if "slow" in new else 1.0
            rt.step_model = rt.step_model.__class__(**{**rt.step_model.__dict__, "decode_slowdown": slow or 1.0})
            for e in rt.engines:
                e.step_model = rt._rank_plan(e.index)[1]
        return JSONResponse({"faults": list(emu.runtime.faults.canonical()), "restarted": bool(changed_startup)})
    return JSONResponse({"faults": list(rt.faults.canonical()),
                         "known": {name: spec.summary for name, spec in FAULTS.items()}})


async def admin_log(request: Request) -> Response:
    return PlainTextResponse(request.app.state.emu.runtime.log.text())


async def admin_collect_env(request: Request) -> Response:
    return PlainTextResponse(request.app.state.emu.runtime.collect_env)


async def admin_inspect(request: Request) -> Response:
    rt = request.app.state.emu.runtime
    return JSONResponse(envreport.image_inspect(rt.cfg, rt.started_at))


async def admin_attestation(request: Request) -> Response:
    rt = request.app.state.emu.runtime
    raw = request.query_params.get("concurrency_limit")
    if raw is not None and not (raw.isdigit() and int(raw) > 0):
        return JSONResponse({"error": "concurrency_limit must be a positive integer"}, status_code=400)
    return JSONResponse(envreport.operator_attestation(rt.cfg, rt.started_at, int(raw) if raw else None))


async def admin_nvidia_smi(request: Request) -> Response:
    rt = request.app.state.emu.runtime
    when = time.strftime("%a %b %d %H:%M:%S %Y")
    return PlainTextResponse(envreport.nvidia_smi_report(rt.cfg, rt.gpu.used_mib(), when))


async def admin_dcgm(request: Request) -> Response:
    return Response(request.app.state.emu.runtime.gpu.exposition(), headers={"content-type": CONTENT_TYPE})


async def admin_state(request: Request) -> Response:
    emu = request.app.state.emu
    return JSONResponse({**emu.runtime.state(), **({"router": emu.router.state()} if emu.router else {})})


async def admin_restart(request: Request) -> Response:
    emu: EmulatorState = request.app.state.emu
    body = await read_json(request, emu.runtime)
    if isinstance(body, Response):
        return body
    base = emu.base_cfg
    # a restarted vLLM keeps its command line: the same profile restarts with every setting it was started with
    # (the served model name, the context length...); another profile starts from that profile's own values
    kept = ({f.name: getattr(base, f.name) for f in dataclasses.fields(base) if f.name != "profile"}
            if body.get("profile", base.profile) == base.profile else {})
    try:
        cfg = EmulatorConfig.from_profile(body.get("profile", base.profile), **{
            **kept, **emu.layout(), "faults": tuple(body.get("faults", base.faults)),
            "vllm_version": body.get("vllm_version", base.vllm_version),
            "time_scale": float(body.get("time_scale", base.time_scale)), "seed": base.seed,
            "api_key": base.api_key, "log_dir": base.log_dir})
    except Exception as exc:  # BadInputError: unknown profile or fault
        return JSONResponse({"error": str(exc)}, status_code=400)
    nodes = await emu.router.broadcast("/_emulator/restart", await request.body()) if emu.router else []
    await emu.restart(cfg)
    return JSONResponse({**emu.runtime.state(), **({"nodes": nodes} if nodes else {})})
