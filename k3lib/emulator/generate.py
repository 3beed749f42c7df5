"""Generation: `/v1/chat/completions` and `/v1/completions`, answered whole or streamed as SSE, from a reply plan
run through the engine."""

from __future__ import annotations

import asyncio
import functools
import json
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from . import protocol
from .gate import admit, encode_prompt, error_reply
from .replies import OutToken, ReplyPlan, assemble, filler_text, plan_chat, plan_completion
from .runtime import Runtime
from .scheduler import EngineRequest


def _max_tokens(rt: Runtime, body: dict, n_prompt: int) -> tuple[int, JSONResponse | None]:
    raw = body.get("max_completion_tokens", body.get("max_tokens"))
    if raw is not None and (not isinstance(raw, int) or raw < 1):
        return 0, error_reply(rt, 400, "max_tokens must be at least 1, got {}.".format(raw), param="max_tokens")
    message = protocol.context_error(rt.cfg, n_prompt, raw)
    if message:
        return 0, error_reply(rt, 400, message, param="input_tokens" if rt.cfg.at_least("0.18") else None)
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
    return ReplyPlan(plan.tokens + tuple(extra[: want - len(plan.tokens)]), plan.calls, plan.named_choice,
                     plan.marks)


_RF_TYPES = ("text", "json_object", "json_schema", "structural_tag")


def _validation(rt: Runtime, message: str, param: str) -> JSONResponse:
    """A VLLMValidationError reply: 0.32 names the parameter at the end of the message (seen on a real server)."""
    suffix = f" (parameter={param})" if rt.cfg.at_least("0.32") else ""
    return error_reply(rt, 400, message + suffix, param=param)


def _pydantic(rt: Runtime, loc: str, kind: str, msg: str, value: Any) -> JSONResponse:
    """A request-model validation failure, in the form of vLLM 0.32's message (its first error)."""
    return error_reply(rt, 400, f"1 validation error:\n  {{'type': {kind!r}, 'loc': {loc!r}, 'msg': {msg!r}, "
                                f"'input': {value!r}}}")


def _request_error(rt: Runtime, body: dict) -> JSONResponse | None:
    """vLLM's request validation of `tools`, `tool_choice` and `response_format` (0.32's protocol validators: the
    texts seen on a real server), before any work."""
    tools, choice = body.get("tools"), body.get("tool_choice")
    if tools == []:
        return _validation(rt, "`tools` must not be an empty array. Either provide at least one tool or omit the "
                               "field entirely.", "tools")
    if choice is not None and choice != "none":
        if tools is None:
            return _validation(rt, "When using `tool_choice`, `tools` must be set.", "tool_choice")
        if choice not in ("auto", "required") and not isinstance(choice, dict):
            return _validation(rt, f"Invalid value for `tool_choice`: {choice}! Only named tools, \"none\", \"auto\" "
                                   "or \"required\" are supported.", "tool_choice")
    rf = body.get("response_format")
    if isinstance(rf, dict):
        if rf.get("type") not in _RF_TYPES:
            return _pydantic(rt, "body.response_format.type", "literal_error",
                             "Input should be 'text', 'json_object' or 'json_schema'", rf.get("type"))
        if rf["type"] == "json_schema":
            js = rf.get("json_schema")
            if js is None:
                return _validation(rt, "When response_format type is 'json_schema', the 'json_schema' field must be "
                                       "provided.", "response_format")
            if not isinstance(js, dict) or not isinstance(js.get("schema", {}), dict):
                return _pydantic(rt, "body.response_format.json_schema.schema", "dict_type",
                                 "Input should be a valid dictionary", (js or {}).get("schema") if isinstance(js, dict)
                                 else js)
    return _tool_choice_error(rt, body)


def _tool_choice_error(rt: Runtime, body: dict) -> JSONResponse | None:
    if not body.get("tools"):
        return None
    choice = body.get("tool_choice")
    cfg = rt.cfg
    if choice == "auto" and not (cfg.enable_auto_tool_choice and cfg.tool_call_parser):
        return error_reply(rt, 400, protocol.AUTO_TOOL_MESSAGE)
    if cfg.tool_call_parser is None and cfg.at_least("0.14"):
        if choice == "required":
            return error_reply(rt, 400, 'tool_choice="required" requires --tool-call-parser to be set')
        if isinstance(choice, dict) and cfg.at_least("0.33"):
            name = (choice.get("function") or {}).get("name")
            return error_reply(rt, 400, f'tool_choice=function "{name}" requires --tool-call-parser to be set')
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
    admitted = await admit(request, api=True)
    if isinstance(admitted, Response):
        return admitted
    rt, body = admitted
    refused = _request_error(rt, body)
    if refused:
        return refused
    if not isinstance(body.get("messages"), list) or not body["messages"]:
        return error_reply(rt, 400, "messages: Field required", param="messages")
    prompt_ids = encode_prompt(rt, body)
    max_tokens, err = _max_tokens(rt, body, len(prompt_ids))
    if err:
        return err
    rt.replies += 1
    auto = rt.cfg.enable_auto_tool_choice and rt.cfg.tool_call_parser is not None
    plan = plan_chat(body, cfg=rt.cfg, tok=rt.tokenizer, faults=rt.faults, reply_no=rt.replies, auto_tools=auto)
    plan = _extend_for_ignore_eos(rt, plan, body, max_tokens)
    req = EngineRequest(protocol.request_id("chatcmpl", rt.cfg.seed, rt.replies, rt.id_salt), prompt_ids, plan.ids, max_tokens,
                        cache_salt=body.get("cache_salt"),
                        params_max_tokens=body.get("max_completion_tokens", body.get("max_tokens")))
    req.events = asyncio.Queue()
    created = int(time.time())
    fp = protocol.system_fingerprint(rt.cfg)
    model = rt.cfg.served_model_name
    if body.get("stream"):
        opts = body.get("stream_options") or {}
        return StreamingResponse(_chat_stream(rt, req, plan, created, fp, model, bool(opts.get("include_usage")),
                                              _stream_faults(rt, body)),
                                 media_type="text/event-stream")
    async for _ in _run(rt, req):
        pass
    if req.finish_reason == "error":
        return error_reply(rt, 500, protocol.DEAD_ENGINE_MESSAGE)
    assert req.finish_reason is not None  # `_run` ends on the engine's "finish" event, which sets it
    msg = assemble(plan, req.num_output)
    reasoning_tokens = sum(1 for t in plan.tokens[:req.num_output] if t.kind == "reasoning")
    if "reasoning-as-content" in plan.marks and req.finish_reason == "length" and msg.content is None:
        msg.content, msg.reasoning = msg.reasoning, None  # cut inside the think channel: all of it read as content
    if "strip-reasoning" in rt.faults:
        msg.reasoning = None
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


def _stream_faults(rt: Runtime, body: dict) -> frozenset[str]:
    """The stream-only faults that apply to this request."""
    out = {f for f in ("strip-reasoning", "args-stall") if f in rt.faults}
    history = any(m.get("role") == "assistant" and (m.get("reasoning") or m.get("reasoning_content"))
                  for m in body.get("messages") or () if isinstance(m, dict))
    if history and "stream-history-leak" in rt.faults:
        out.add("stream-history-leak")
    return frozenset(out)


def _fault_frames(tok: OutToken, faults: frozenset[str], think: dict, fast: Any) -> tuple[list[str], bool]:
    """What the stream faults make of one token: frames to send first, and whether they replace the token
    (stream-history-leak: the think channel as content; strip-reasoning: no reasoning delta)."""
    if tok.kind == "reasoning" and "stream-history-leak" in faults:
        frames = [fast("content", ("" if think["open"] else "<|open|>think<|sep|>") + tok.piece)]
        think["open"] = True
        return frames, True
    frames = []
    if think["open"]:
        frames.append(fast("content", "<|close|>think<|sep|>"))
        think["open"] = False
    think["content"] |= tok.kind == "content"
    return frames, tok.kind == "reasoning" and "strip-reasoning" in faults


def _usage_chunk(rt: Runtime, req: EngineRequest, plan: ReplyPlan, created: int, model: str, fp: str | None) -> str:
    """A stream's last chunk: no choices, the usage (include_usage)."""
    rtoks = sum(1 for t in plan.tokens[:req.num_output] if t.kind == "reasoning")
    return _sse({"id": req.request_id, "object": "chat.completion.chunk", "created": created, "model": model,
                 "system_fingerprint": fp, "choices": [],
                 "usage": protocol.usage(rt.cfg, len(req.prompt_ids), req.num_output, req.num_cached_tokens, rtoks,
                                         stream=True)})


class _ChatFrames:
    """The SSE frames of one streamed chat reply, in the chunk shapes of the configured vLLM version."""

    def __init__(self, rt: Runtime, req: EngineRequest, plan: ReplyPlan, created: int, fp: str | None,
                 model: str) -> None:
        self.rt, self.req, self.plan, self.created, self.fp, self.model = rt, req, plan, created, fp, model
        self.v032 = rt.cfg.at_least("0.32")
        # Hot path (one chunk per token per stream): a pre-serialised frame with only the piece escaped per token.
        self.head, _, self.tail = self.chunk({"\u0000": 0}).partition('{"\\u0000": 0}')
        self.reasoning_key = "reasoning" if rt.cfg.at_least("0.12") else "reasoning_content"
        self.both_reasoning_fields = rt.cfg.at_least("0.12") and not rt.cfg.at_least("0.16")
        self.started: set[int] = set()
        self.calls = list(plan.calls)
        # vLLM 0.32's kimi_k3 parser holds a call back until its block closes, then sends it whole in one delta
        self.whole_calls = rt.cfg.tool_call_parser == "kimi_k3"
        self.call_at_end = {c.end: i for i, c in enumerate(self.calls)} if self.whole_calls else {}
        self.think = {"open": False, "content": False}  # stream-history-leak: the think channel as content

    def chunk(self, delta: dict | None, finish: str | None = None, first: bool = False) -> str:
        choice = {"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish}
        if finish is not None:
            choice["stop_reason"] = None
        if self.v032 and not first:
            choice["token_ids"] = None
        head = {"prompt_token_ids": None, "prompt_text": None} if self.v032 and first else {}
        return _sse({"id": self.req.request_id, "object": "chat.completion.chunk", "created": self.created,
                     "model": self.model, **protocol.stream_fingerprint(self.rt.cfg, self.fp), "choices": [choice],
                     **head})

    def fast(self, key: str, piece: str) -> str:
        return self.head + "{" + json.dumps(key) + ": " + json.dumps(piece, ensure_ascii=False) + "}" + self.tail

    def holds_whole_call(self, value: int, tok: OutToken) -> bool:
        """Whether token `value` closes a call that the kimi_k3 parser sends whole."""
        return self.whole_calls and tok.kind not in ("reasoning", "content") and value in self.call_at_end

    def token(self, value: int, tok: OutToken) -> list[str]:
        """A token's frames: reasoning and content on the hot path, tool calls as the server's parser sends them."""
        if tok.kind == "reasoning":
            if self.both_reasoning_fields:
                return [self.chunk({self.reasoning_key: tok.piece, "reasoning_content": tok.piece})]
            return [self.fast(self.reasoning_key, tok.piece)]
        if tok.kind == "content":
            return [self.fast("content", tok.piece)]
        delta = self._call_delta(value, tok)
        return [self.chunk(delta)] if delta else []

    def _call_delta(self, value: int, tok: OutToken) -> dict | None:
        if self.whole_calls:
            i = self.call_at_end.get(value)
            if i is None:
                return None
            c = self.calls[i]
            return {"tool_calls": [{"index": i, "id": c.id, "type": "function",
                                    "function": {"name": c.name, "arguments": c.arguments}}]}
        if tok.kind == "call" and tok.call not in self.started and tok.call < len(self.calls):
            self.started.add(tok.call)
            c = self.calls[tok.call]
            return {"tool_calls": [{"index": tok.call, "id": c.id, "type": "function",
                                    "function": {"name": c.name, "arguments": ""}}]}
        if tok.kind == "args" and tok.call in self.started:
            return {"tool_calls": [{"index": tok.call, "function": {"arguments": tok.piece}}]}
        return None

    def finish(self, value: str, include_usage: bool) -> list[str]:
        """The stream's end: the finish chunk (after any channel left open) and the usage, or the engine's error."""
        if value == "error":
            return [_sse(protocol.error_body(self.rt.cfg, 500, protocol.DEAD_ENGINE_MESSAGE)), "data: [DONE]\n\n"]
        out = []
        if self.think["open"]:
            out.append(self.fast("content", "<|close|>think<|sep|>"))
        if self.think["content"] and "channel-leak" in self.plan.marks:
            out.append(self.fast("content", "<|close|>message<|sep|>"))  # a missed channel terminator
        done = assemble(self.plan, self.req.num_output)
        out.append(self.chunk({}, protocol.finish_reason(value, bool(done.calls), self.plan.named_choice)))
        if include_usage:
            out.append(_usage_chunk(self.rt, self.req, self.plan, self.created, self.model, self.fp))
        out.append("data: [DONE]\n\n")
        return out


async def _chat_stream(rt: Runtime, req: EngineRequest, plan: ReplyPlan, created: int, fp: str | None, model: str,
                       include_usage: bool, faults: frozenset[str] = frozenset()):
    frames = _ChatFrames(rt, req, plan, created, fp, model)
    yield frames.chunk({"role": "assistant", "content": ""}, first=True)
    async for batch in _run(rt, req):
        out: list[str] = []
        for kind, value in batch:
            if kind == "finish":
                out += frames.finish(value, include_usage)
            if kind != "token":
                continue
            tok = plan.tokens[value - 1]
            fault, consumed = _fault_frames(tok, faults, frames.think, frames.fast)
            out += fault
            if consumed:
                continue
            if "args-stall" in faults and frames.holds_whole_call(value, tok):
                # the arguments do not stream: the call comes whole after a long silence
                if out:
                    yield "".join(out)
                    out = []
                await asyncio.sleep((rt.faults.value("args-stall") or 0.0) * rt.cfg.time_scale)
            out += frames.token(value, tok)
        if out:
            yield "".join(out)


async def completions(request: Request) -> Response:
    admitted = await admit(request, api=True)
    if isinstance(admitted, Response):
        return admitted
    rt, body = admitted
    prompt_ids = encode_prompt(rt, body)
    if "max_tokens" not in body:
        body = {**body, "max_tokens": 16}   # the OpenAI completions default vLLM keeps
    max_tokens, err = _max_tokens(rt, body, len(prompt_ids))
    if err:
        return err
    rt.replies += 1
    plan = _extend_for_ignore_eos(rt, plan_completion(str(prompt_ids[-64:]), cfg=rt.cfg, tok=rt.tokenizer), body,
                                  max_tokens)
    req = EngineRequest(protocol.request_id("cmpl", rt.cfg.seed, rt.replies, rt.id_salt), prompt_ids, plan.ids, max_tokens,
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
        return error_reply(rt, 500, protocol.DEAD_ENGINE_MESSAGE)
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
