"""The HTTP routes: vLLM's OpenAI-compatible API plus the emulator-only `/_emulator/*` admin paths."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import time
from http import HTTPStatus
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from . import envreport, protocol
from .config import EmulatorConfig
from .faults import FAULTS, FaultSet
from .metrics import CONTENT_TYPE
from .replies import OutToken, ReplyPlan, assemble, filler_text, plan_chat, plan_completion
from .runtime import Runtime
from .scheduler import EngineRequest
from .tokenizer import render_chat

# Faults that only take effect when the engine starts; changing them at run time restarts it.
STARTUP_FAULTS = frozenset({"cuda12-image", "old-driver", "old-vllm", "no-tool-parser", "no-prefix-caching",
                            "kv-starved", "oom-startup"})


class EmulatorState:
    """What the routes share: the current Runtime (swapped on restart) and the public URL."""

    def __init__(self, cfg: EmulatorConfig) -> None:
        self.base_cfg = cfg
        self.runtime = Runtime(cfg)
        self.url = ""
        self.created = int(time.time())
        # node 0 of a multi-node layout routes a share of the requests to the other nodes (k3lib.emulator.cluster)
        self.router = None
        if cfg.peers:
            from .router import Router

            self.router = Router(cfg.peers, cfg.local_ranks, cfg.local_ranks)

    def layout(self) -> dict[str, Any]:
        """The fields a restart keeps: which ranks this process serves and which nodes it routes to."""
        c = self.base_cfg
        return {"data_parallel_start_rank": c.data_parallel_start_rank,
                "data_parallel_size_local": c.data_parallel_size_local, "peers": c.peers}

    async def restart(self, cfg: EmulatorConfig) -> None:
        old = self.runtime
        await old.stop()
        self.base_cfg = cfg
        self.runtime = Runtime(cfg)
        await self.runtime.start(self.url)


class _AccessLog:
    """Pure ASGI wrapper that writes uvicorn's access line into the emulated log (cheap on streams)."""

    def __init__(self, app, state: EmulatorState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"].startswith("/_emulator"):
            return await self.app(scope, receive, send)
        status = {}

        async def capture(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, capture)
        finally:
            code = status.get("code", 500)
            client = scope.get("client") or ("127.0.0.1", 0)
            try:
                phrase = HTTPStatus(code).phrase
            except ValueError:
                phrase = ""
            self.state.runtime.log.access(f"{client[0]}:{client[1]}", scope["method"], scope["path"], code, phrase)


def _routed(handler):
    """Node 0 of a multi-node layout sends a new request to the least-loaded rank, here or on another node."""

    @functools.wraps(handler)
    async def route(request: Request) -> Response:
        emu: EmulatorState = request.app.state.emu
        router = emu.router
        if router is not None and emu.runtime.ready and not emu.runtime.dead:
            peer = router.pick()
            if peer is not None:
                return await router.forward(request, peer)
            return await router.serve_locally(handler, request)
        return await handler(request)

    return route


def _err(rt: Runtime, status: int, message: str, **kw: Any) -> JSONResponse:
    return JSONResponse(protocol.error_body(rt.cfg, status, message, **kw), status_code=status)


async def _json_body(request: Request, rt: Runtime) -> dict | JSONResponse:
    raw = await request.body()
    # from here to the handler's next await is front-end work: one request's worth per loop iteration
    await rt.front_end.turn()
    try:
        body = json.loads(raw or b"{}")
    except json.JSONDecodeError as exc:
        return _err(rt, 400, f"JSON decode error: {exc.msg}")
    if not isinstance(body, dict):
        return _err(rt, 400, "Input should be a valid dictionary")
    return body


def _gate(request: Request, rt: Runtime, body: dict | None, *, api: bool) -> JSONResponse | None:
    """Auth, readiness, dead engine, unknown model and flaky-5xx, in the order a real server meets them."""
    key = rt.cfg.api_key
    if key and request.url.path.startswith("/v1") and request.headers.get("authorization") != f"Bearer {key}":
        return JSONResponse({"error": "Unauthorized"}, status_code=401)
    if not rt.ready:
        return _err(rt, 503, "Engine core initialization failed. See root cause above. "
                              "Failed core proc(s): {'EngineCore_DP0': 1}")
    if body is not None:
        model = body.get("model")
        if model is not None and model not in (rt.cfg.served_model_name,):
            message = f"The model `{model}` does not exist."
            # vLLM logs the refusal as an ERROR line of its own (seen on 0.32.0), which the log reader counts
            rt.log.log(f"Error with model error=ErrorInfo(message={message!r}, type='NotFoundError', param='model', "
                       "code=404)", level="ERROR", where="serving.py:274")
            return _err(rt, 404, message, param="model")
    if api and rt.dead:
        return _err(rt, 500, protocol.DEAD_ENGINE_MESSAGE)
    if api:
        rt.api_requests += 1
        if rt.faults.share_hit("flaky-5xx", rt.api_requests):
            if rt.faults.draw("flaky-5xx-kind", rt.api_requests) < 0.5:
                return _err(rt, 500, protocol.DEAD_ENGINE_MESSAGE)
            return _err(rt, 503, "Service Unavailable")
    return None


# -- plain endpoints -----------------------------------------------------------------------------------
async def health(request: Request) -> Response:
    rt = request.app.state.emu.runtime
    if not rt.ready or rt.dead:
        return Response(status_code=500 if not rt.cfg.at_least("0.11") and rt.dead else 503)
    return Response(status_code=200)


async def version(request: Request) -> Response:
    rt = request.app.state.emu.runtime
    return _gate(request, rt, None, api=False) or JSONResponse({"version": rt.cfg.vllm_version})


async def models(request: Request) -> Response:
    emu = request.app.state.emu
    rt = emu.runtime
    return _gate(request, rt, None, api=False) or JSONResponse(
        {"object": "list", "data": [protocol.model_card(rt.cfg, emu.created)]})


async def metrics(request: Request) -> Response:
    rt = request.app.state.emu.runtime
    if not rt.ready:
        refused = _gate(request, rt, None, api=False)
        assert refused is not None  # _gate refuses whatever is asked before the engine is ready
        return refused
    return Response(rt.metrics.exposition(), media_type=None, headers={"content-type": CONTENT_TYPE})


def _prompt_ids(rt: Runtime, body: dict) -> list[int]:
    if "messages" in body:
        text = render_chat(body.get("messages") or [], body.get("tools"),
                           add_generation_prompt=body.get("add_generation_prompt", True) is not False,
                           image_tokens=rt.cfg.image_tokens)
        return rt.tokenizer.encode(text)
    prompt = body.get("prompt", "")
    if isinstance(prompt, list):
        if prompt and all(isinstance(t, int) for t in prompt):
            return list(prompt)
        prompt = prompt[0] if prompt else ""
    return rt.tokenizer.encode(str(prompt))


async def _admit(request: Request, *, api: bool) -> tuple[Runtime, dict[str, Any]] | Response:
    """The runtime and the JSON body of a request the server accepts, or the error reply that refuses it."""
    rt: Runtime = request.app.state.emu.runtime
    body = await _json_body(request, rt)
    if isinstance(body, Response):
        return body
    return _gate(request, rt, body, api=api) or (rt, body)


async def tokenize(request: Request) -> Response:
    admitted = await _admit(request, api=False)
    if isinstance(admitted, Response):
        return admitted
    rt, body = admitted
    ids = _prompt_ids(rt, body)
    strs = [rt.tokenizer.piece_of(i) for i in ids] if body.get("return_token_strs") else None
    return JSONResponse({"count": len(ids), "max_model_len": rt.cfg.max_model_len, "tokens": ids, "token_strs": strs})


async def detokenize(request: Request) -> Response:
    admitted = await _admit(request, api=False)
    if isinstance(admitted, Response):
        return admitted
    rt, body = admitted
    tokens = body.get("tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
        return _err(rt, 400, "tokens: Input should be a valid list of integers", param="tokens")
    return JSONResponse({"prompt": rt.tokenizer.decode(tokens)})


# -- generation ----------------------------------------------------------------------------------------
def _max_tokens(rt: Runtime, body: dict, n_prompt: int) -> tuple[int, JSONResponse | None]:
    raw = body.get("max_completion_tokens", body.get("max_tokens"))
    if raw is not None and (not isinstance(raw, int) or raw < 1):
        return 0, _err(rt, 400, "max_tokens must be at least 1, got {}.".format(raw), param="max_tokens")
    message = protocol.context_error(rt.cfg, n_prompt, raw)
    if message:
        return 0, _err(rt, 400, message, param="input_tokens" if rt.cfg.at_least("0.18") else None)
    room = rt.cfg.max_model_len - n_prompt
    # 0.33 clamps an over-long max_tokens to what is left of the context instead of rejecting it.
    return (room if raw is None else min(raw, room)), None


@functools.lru_cache(maxsize=1024)
def _pad_tokens(tokenizer: Any, seed: int, k: int) -> tuple[OutToken, ...]:
    # the same filler for every ignore_eos request: encoding it each time cost ~2 ms of the server's loop per
    # request, all of it engine-step lag when 256 requests arrive together
    text = " " + filler_text(seed, f"pad{k}", 64)
    return tuple(OutToken(t, tokenizer.piece_of(t), "content") for t in tokenizer.encode(text))


def _extend_for_ignore_eos(rt: Runtime, plan: ReplyPlan, body: dict, max_tokens: int) -> ReplyPlan:
    want = max_tokens if body.get("ignore_eos") else min(int(body.get("min_tokens") or 0), max_tokens)
    if len(plan.tokens) >= want:
        return plan
    extra: list[OutToken] = []
    k = 0
    while len(plan.tokens) + len(extra) < want:
        extra += _pad_tokens(rt.tokenizer, rt.cfg.seed, k)
        k += 1
    return ReplyPlan(plan.tokens + tuple(extra[: want - len(plan.tokens)]), plan.calls, plan.named_choice)


def _tool_choice_error(rt: Runtime, body: dict) -> JSONResponse | None:
    if not body.get("tools"):
        return None
    choice = body.get("tool_choice")
    cfg = rt.cfg
    if choice == "auto" and not (cfg.enable_auto_tool_choice and cfg.tool_call_parser):
        return _err(rt, 400, protocol.AUTO_TOOL_MESSAGE)
    if cfg.tool_call_parser is None and cfg.at_least("0.14"):
        if choice == "required":
            return _err(rt, 400, 'tool_choice="required" requires --tool-call-parser to be set')
        if isinstance(choice, dict) and cfg.at_least("0.33"):
            name = (choice.get("function") or {}).get("name")
            return _err(rt, 400, f'tool_choice=function "{name}" requires --tool-call-parser to be set')
    return None


async def _run(rt: Runtime, req: EngineRequest):
    """Submit and yield engine events until the request finishes (aborting it if the caller goes away)."""
    engine = rt.submit(req)
    assert req.events is not None  # the engine's `add` gave the request its queue
    done = False
    try:
        while True:
            kind, value = await req.events.get()
            # one stream's output work per loop iteration, as its front-end work: a step that finishes hundreds
            # of requests wakes them all at once, and their closing work (final events, usage, the response's end)
            # in one iteration ran tens of ms past the next step's deadline (vLLM's engine core runs apart)
            await rt.front_end.turn()
            batch = [(kind, value)]
            while not req.events.empty():
                batch.append(req.events.get_nowait())
            for item in batch:
                if item[0] == "finish":
                    done = True
            yield batch
            if done:
                return
    finally:
        if not done:
            engine.abort(req)


async def chat_completions(request: Request) -> Response:
    admitted = await _admit(request, api=True)
    if isinstance(admitted, Response):
        return admitted
    rt, body = admitted
    refused = _tool_choice_error(rt, body)
    if refused:
        return refused
    if not isinstance(body.get("messages"), list) or not body["messages"]:
        return _err(rt, 400, "messages: Field required", param="messages")
    prompt_ids = _prompt_ids(rt, body)
    max_tokens, err = _max_tokens(rt, body, len(prompt_ids))
    if err:
        return err
    rt.replies += 1
    auto = rt.cfg.enable_auto_tool_choice and rt.cfg.tool_call_parser is not None
    plan = plan_chat(body, cfg=rt.cfg, tok=rt.tokenizer, faults=rt.faults, reply_no=rt.replies, auto_tools=auto)
    plan = _extend_for_ignore_eos(rt, plan, body, max_tokens)
    req = EngineRequest(protocol.request_id("chatcmpl", rt.cfg.seed, rt.replies), prompt_ids, plan.ids, max_tokens,
                        cache_salt=body.get("cache_salt"),
                        params_max_tokens=body.get("max_completion_tokens", body.get("max_tokens")))
    req.events = asyncio.Queue()
    created = int(time.time())
    fp = protocol.system_fingerprint(rt.cfg)
    model = rt.cfg.served_model_name
    if body.get("stream"):
        opts = body.get("stream_options") or {}
        return StreamingResponse(_chat_stream(rt, req, plan, created, fp, model, bool(opts.get("include_usage"))),
                                 media_type="text/event-stream")
    async for _ in _run(rt, req):
        pass
    if req.finish_reason == "error":
        return _err(rt, 500, protocol.DEAD_ENGINE_MESSAGE)
    assert req.finish_reason is not None  # `_run` ends on the engine's "finish" event, which sets it
    msg = assemble(plan, req.num_output)
    reasoning_tokens = sum(1 for t in plan.tokens[:req.num_output] if t.kind == "reasoning")
    message = protocol.chat_message(rt.cfg, msg)
    if (plan.named_choice or body.get("tool_choice") == "required") and message.get("tool_calls"):
        message["content"] = message.get("content") or ""  # vLLM's named/required path: `content or ""`
    return JSONResponse({
        "id": req.request_id, "object": "chat.completion", "created": created, "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": protocol.finish_reason(req.finish_reason, bool(msg.calls), plan.named_choice),
                     "stop_reason": None, "token_ids": None, **protocol.reply_extras(rt.cfg, choice=True)}],
        "service_tier": None, "system_fingerprint": fp,
        "usage": protocol.usage(rt.cfg, len(req.prompt_ids), req.num_output, req.num_cached_tokens, reasoning_tokens),
        "prompt_logprobs": None, "prompt_token_ids": None, "kv_transfer_params": None,
        **protocol.reply_extras(rt.cfg, choice=False)})


def _sse(obj: dict) -> str:
    return "data: " + json.dumps(obj, ensure_ascii=False) + "\n\n"


async def _chat_stream(rt: Runtime, req: EngineRequest, plan: ReplyPlan, created: int, fp: str | None, model: str,
                       include_usage: bool):
    v032 = rt.cfg.at_least("0.32")

    def chunk(delta: dict | None, finish: str | None = None, first: bool = False) -> str:
        choice = {"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish}
        if finish is not None:
            choice["stop_reason"] = None
        if v032 and not first:
            choice["token_ids"] = None
        head = {"prompt_token_ids": None, "prompt_text": None} if v032 and first else {}
        return _sse({"id": req.request_id, "object": "chat.completion.chunk", "created": created, "model": model,
                     **protocol.stream_fingerprint(rt.cfg, fp), "choices": [choice], **head})

    # Hot path (one chunk per token per stream): a pre-serialised frame with only the piece escaped per token.
    head, _, tail = chunk({"\u0000": 0}).partition('{"\\u0000": 0}')

    def fast(key: str, piece: str) -> str:
        return head + "{" + json.dumps(key) + ": " + json.dumps(piece, ensure_ascii=False) + "}" + tail

    yield chunk({"role": "assistant", "content": ""}, first=True)
    reasoning_key = "reasoning" if rt.cfg.at_least("0.12") else "reasoning_content"
    started: set[int] = set()
    call_by_index = list(plan.calls)
    # vLLM 0.32's kimi_k3 parser holds a call back until its block closes, then sends it whole in one delta
    whole_calls = rt.cfg.tool_call_parser == "kimi_k3"
    call_at_end = {c.end: i for i, c in enumerate(call_by_index)} if whole_calls else {}
    async for batch in _run(rt, req):
        out = []
        for kind, value in batch:
            if kind == "token":
                tok = plan.tokens[value - 1]
                delta = None
                if tok.kind == "reasoning":
                    delta = {reasoning_key: tok.piece}
                    if rt.cfg.at_least("0.12") and not rt.cfg.at_least("0.16"):
                        delta["reasoning_content"] = tok.piece
                    else:
                        out.append(fast(reasoning_key, tok.piece))
                        continue
                elif tok.kind == "content":
                    out.append(fast("content", tok.piece))
                    continue
                elif whole_calls:
                    if value in call_at_end:
                        c = call_by_index[call_at_end[value]]
                        delta = {"tool_calls": [{"index": call_at_end[value], "id": c.id, "type": "function",
                                                 "function": {"name": c.name, "arguments": c.arguments}}]}
                elif tok.kind == "call" and tok.call not in started and tok.call < len(call_by_index):
                    started.add(tok.call)
                    c = call_by_index[tok.call]
                    delta = {"tool_calls": [{"index": tok.call, "id": c.id, "type": "function",
                                             "function": {"name": c.name, "arguments": ""}}]}
                elif tok.kind == "args" and tok.call in started:
                    delta = {"tool_calls": [{"index": tok.call, "function": {"arguments": tok.piece}}]}
                if delta:
                    out.append(chunk(delta))
            elif kind == "finish":
                if value == "error":
                    out.append(_sse(protocol.error_body(rt.cfg, 500, protocol.DEAD_ENGINE_MESSAGE)))
                else:
                    done = assemble(plan, req.num_output)
                    out.append(chunk({}, protocol.finish_reason(value, bool(done.calls), plan.named_choice)))
                    if include_usage:
                        rtoks = sum(1 for t in plan.tokens[:req.num_output] if t.kind == "reasoning")
                        out.append(_sse({"id": req.request_id, "object": "chat.completion.chunk", "created": created,
                                         "model": model, "system_fingerprint": fp, "choices": [],
                                         "usage": protocol.usage(rt.cfg, len(req.prompt_ids), req.num_output,
                                                                 req.num_cached_tokens, rtoks, stream=True)}))
                out.append("data: [DONE]\n\n")
        if out:
            yield "".join(out)


async def completions(request: Request) -> Response:
    admitted = await _admit(request, api=True)
    if isinstance(admitted, Response):
        return admitted
    rt, body = admitted
    prompt_ids = _prompt_ids(rt, body)
    if "max_tokens" not in body:
        body = {**body, "max_tokens": 16}   # the OpenAI completions default vLLM keeps
    max_tokens, err = _max_tokens(rt, body, len(prompt_ids))
    if err:
        return err
    rt.replies += 1
    plan = _extend_for_ignore_eos(rt, plan_completion(str(prompt_ids[-64:]), cfg=rt.cfg, tok=rt.tokenizer), body,
                                  max_tokens)
    req = EngineRequest(protocol.request_id("cmpl", rt.cfg.seed, rt.replies), prompt_ids, plan.ids, max_tokens,
                        cache_salt=body.get("cache_salt"), params_max_tokens=body.get("max_tokens"))
    req.events = asyncio.Queue()
    created = int(time.time())
    fp = protocol.system_fingerprint(rt.cfg)
    model = rt.cfg.served_model_name
    if body.get("stream"):
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return StreamingResponse(_completion_stream(rt, req, plan, created, fp, model, include_usage),
                                 media_type="text/event-stream")
    async for _ in _run(rt, req):
        pass
    if req.finish_reason == "error":
        return _err(rt, 500, protocol.DEAD_ENGINE_MESSAGE)
    text = "".join(t.piece for t in plan.tokens[:req.num_output])
    return JSONResponse({
        "id": req.request_id, "object": "text_completion", "created": created, "model": model,
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": req.finish_reason,
                     "stop_reason": None, "prompt_logprobs": None,
                     **({"prompt_token_ids": None} if rt.cfg.at_least("0.32") else {}),
                     **protocol.reply_extras(rt.cfg, choice=True)}],
        "service_tier": None, "system_fingerprint": fp,
        "usage": protocol.usage(rt.cfg, len(req.prompt_ids), req.num_output, req.num_cached_tokens, 0, chat=False),
        "kv_transfer_params": None, **{k: v for k, v in protocol.reply_extras(rt.cfg, choice=False).items()
                                       if k != "prompt_text"}})


async def _completion_stream(rt: Runtime, req: EngineRequest, plan: ReplyPlan, created: int, fp: str | None,
                             model: str, include_usage: bool):
    def chunk(text: str, finish: str | None = None) -> str:
        extras = {"prompt_token_ids": None, "token_ids": None} if rt.cfg.at_least("0.32") else {}
        return _sse({"id": req.request_id, "object": "text_completion", "created": created, "model": model,
                     **protocol.stream_fingerprint(rt.cfg, fp),
                     "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish,
                                  "stop_reason": None, **extras}]})

    head, _, tail = chunk("\u0000").partition('"\\u0000"')
    async for batch in _run(rt, req):
        out = []
        for kind, value in batch:
            if kind == "token":
                out.append(head + json.dumps(plan.tokens[value - 1].piece, ensure_ascii=False) + tail)
            elif value == "error":
                out.append(_sse(protocol.error_body(rt.cfg, 500, protocol.DEAD_ENGINE_MESSAGE)))
                out.append("data: [DONE]\n\n")
            else:
                out.append(chunk("", value))
                if include_usage:
                    out.append(_sse({"id": req.request_id, "object": "text_completion", "created": created,
                                     "model": model, "system_fingerprint": fp, "choices": [],
                                     "usage": protocol.usage(rt.cfg, len(req.prompt_ids), req.num_output,
                                                             req.num_cached_tokens, 0, stream=True, chat=False)}))
                out.append("data: [DONE]\n\n")
        if out:
            yield "".join(out)


# -- emulator-only admin paths -------------------------------------------------------------------------
async def admin_faults(request: Request) -> Response:
    emu: EmulatorState = request.app.state.emu
    rt = emu.runtime
    if request.method == "POST":
        body = await _json_body(request, rt)
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
    body = await _json_body(request, emu.runtime)
    if isinstance(body, Response):
        return body
    base = emu.base_cfg
    try:
        cfg = EmulatorConfig.from_profile(
            body.get("profile", base.profile), faults=tuple(body.get("faults", base.faults)),
            vllm_version=body.get("vllm_version", base.vllm_version),
            time_scale=float(body.get("time_scale", base.time_scale)), seed=base.seed,
            api_key=base.api_key, log_dir=base.log_dir, **emu.layout())
    except Exception as exc:  # BadInputError: unknown profile or fault
        return JSONResponse({"error": str(exc)}, status_code=400)
    nodes = await emu.router.broadcast("/_emulator/restart", await request.body()) if emu.router else []
    await emu.restart(cfg)
    return JSONResponse({**emu.runtime.state(), **({"nodes": nodes} if nodes else {})})


def build_app(cfg: EmulatorConfig) -> tuple[Any, EmulatorState]:
    """The ASGI app for `cfg` and its shared state; the engine starts with the app's lifespan."""
    emu = EmulatorState(cfg)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        await emu.runtime.start(emu.url)
        try:
            yield
        finally:
            await emu.runtime.stop()
            if emu.router is not None:
                await emu.router.aclose()

    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/version", version, methods=["GET"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/tokenize", tokenize, methods=["POST"]),
        Route("/detokenize", detokenize, methods=["POST"]),
        Route("/v1/chat/completions", _routed(chat_completions), methods=["POST"]),
        Route("/v1/completions", _routed(completions), methods=["POST"]),
        Route("/_emulator/faults", admin_faults, methods=["GET", "POST"]),
        Route("/_emulator/log", admin_log, methods=["GET"]),
        Route("/_emulator/collect_env", admin_collect_env, methods=["GET"]),
        Route("/_emulator/dcgm/metrics", admin_dcgm, methods=["GET"]),
        Route("/_emulator/inspect", admin_inspect, methods=["GET"]),
        Route("/_emulator/nvidia-smi", admin_nvidia_smi, methods=["GET"]),
        Route("/_emulator/attestation", admin_attestation, methods=["GET"]),
        Route("/_emulator/state", admin_state, methods=["GET"]),
        Route("/_emulator/restart", admin_restart, methods=["POST"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.emu = emu
    return _AccessLog(app, emu), emu
