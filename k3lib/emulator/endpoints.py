"""The plain endpoints of vLLM's API: health, version, the model list, /metrics, tokenize and detokenize."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from . import protocol
from .gate import admit, encode_prompt, error_reply, gate
from .metrics import CONTENT_TYPE


async def health(request: Request) -> Response:
    rt = request.app.state.emu.runtime
    if not rt.ready or rt.dead:
        return Response(status_code=500 if not rt.cfg.at_least("0.11") and rt.dead else 503)
    return Response(status_code=200)


#: what the emulator's /version declares itself as (beside vLLM's own `version`)
EMULATOR_NAME = "k3kit-emulator"


async def version(request: Request) -> Response:
    rt = request.app.state.emu.runtime
    # the emulator says what it is, as a product does: a run against it is a demo (k3lib.axes.probe.target_kind)
    return gate(request, rt, None, api=False) or JSONResponse({"version": rt.cfg.vllm_version,
                                                               "emulator": EMULATOR_NAME})


async def models(request: Request) -> Response:
    emu = request.app.state.emu
    rt = emu.runtime
    return gate(request, rt, None, api=False) or JSONResponse(
        {"object": "list", "data": [protocol.model_card(rt.cfg, emu.created)]})


async def metrics(request: Request) -> Response:
    rt = request.app.state.emu.runtime
    if not rt.ready:
        refused = gate(request, rt, None, api=False)
        assert refused is not None  # gate refuses whatever is asked before the engine is ready
        return refused
    return Response(rt.metrics.exposition(), media_type=None, headers={"content-type": CONTENT_TYPE})


async def tokenize(request: Request) -> Response:
    admitted = await admit(request, api=False)
    if isinstance(admitted, Response):
        return admitted
    rt, body = admitted
    ids = encode_prompt(rt, body)
    strs = [rt.tokenizer.piece_of(i) for i in ids] if body.get("return_token_strs") else None
    return JSONResponse({"count": len(ids), "max_model_len": rt.cfg.max_model_len, "tokens": ids, "token_strs": strs})


async def detokenize(request: Request) -> Response:
    admitted = await admit(request, api=False)
    if isinstance(admitted, Response):
        return admitted
    rt, body = admitted
    tokens = body.get("tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
        return error_reply(rt, 400, "tokens: Input should be a valid list of integers", param="tokens")
    return JSONResponse({"prompt": rt.tokenizer.decode(tokens)})
