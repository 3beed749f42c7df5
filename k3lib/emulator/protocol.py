"""vLLM's OpenAI-compatible reply shapes for the reported version: error bodies, messages, usage, ids.

Pure functions from plain values to JSON-ready dicts; the routes in `app.py` only wire them up.
"""

from __future__ import annotations

import hashlib

from .replies import Assembled

DEAD_ENGINE_MESSAGE = "The server had an error while processing your request."
AUTO_TOOL_MESSAGE = '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
_TYPES = {400: "BadRequestError", 401: "UnauthorizedError", 404: "NotFoundError", 500: "InternalServerError",
          503: "ServiceUnavailableError"}


def error_body(cfg, status: int, message: str, *, type_: str | None = None, param: str | None = None) -> dict:
    """Flat `{"object": "error", …}` up to 0.10.0, nested `{"error": {…}}` from 0.10.1 (notes §3)."""
    info = {"message": message, "type": type_ or _TYPES.get(status, "InternalServerError"), "param": param,
            "code": status}
    if not cfg.at_least("0.10.1"):
        return {"object": "error", **info}
    return {"error": info}


def context_error(cfg, n_prompt: int, max_tokens: int | None) -> str | None:
    """The over-length message of the reported version, or None when the request fits (notes §6.2)."""
    m = cfg.max_model_len
    if cfg.at_least("0.33"):
        if n_prompt > m:
            return (f"This model's maximum context length is {m} tokens. However, your prompt contains {n_prompt} "
                    "input tokens, which exceeds this limit even without any output tokens. Please reduce the "
                    "length of the input prompt.")
        if n_prompt == m:
            return (f"The decoder prompt (length {n_prompt}) plus the number of requested output tokens (at least 1) "
                    f"is longer than the maximum model length of {m}.")
        return None
    if cfg.at_least("0.18"):
        out = max_tokens if max_tokens is not None else 1
        if n_prompt + out > m:
            return (f"This model's maximum context length is {m} tokens. However, you requested {out} output tokens "
                    f"and your prompt contains {n_prompt} input tokens, for a total of {n_prompt + out} tokens. "
                    "Please reduce the length of the input prompt or the number of requested output tokens.")
        return None
    if cfg.at_least("0.10.1"):
        if n_prompt >= m:
            return (f"This model's maximum context length is {m} tokens. However, your request has {n_prompt} input "
                    "tokens. Please reduce the length of the input messages.")
        if max_tokens is not None and n_prompt + max_tokens > m:
            return (f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's maximum "
                    f"context length is {m} tokens and your request has {n_prompt} input tokens "
                    f"({max_tokens} > {m} - {n_prompt}).")
        return None
    if max_tokens is None:
        if n_prompt >= m:
            return (f"This model's maximum context length is {m} tokens. However, you requested {n_prompt} tokens "
                    "in the messages, Please reduce the length of the messages.")
        return None
    if n_prompt + max_tokens > m:
        return (f"This model's maximum context length is {m} tokens. However, you requested {n_prompt + max_tokens} "
                f"tokens ({n_prompt} in the messages, {max_tokens} in the completion). Please reduce the length of "
                "the messages or completion.")
    return None


def system_fingerprint(cfg) -> str | None:
    """`vllm-<version>[-tpN]-<hash8>` from 0.24 (notes §3); None before."""
    if not cfg.at_least("0.24"):
        return None
    h = hashlib.blake2b(f"{cfg.model}|{cfg.vllm_version}|{cfg.tensor_parallel_size}|{cfg.data_parallel_size}|"
                        f"{cfg.max_model_len}|{cfg.block_size}".encode(), digest_size=4).hexdigest()
    par = f"-tp{cfg.tensor_parallel_size}" if cfg.tensor_parallel_size > 1 else ""
    return f"vllm-{cfg.vllm_version}{par}-{h}"


def reasoning_fields(cfg, reasoning: str | None) -> dict:
    """`reasoning_content` ≤0.11, both 0.12–0.14, `reasoning` only from 0.16 (notes §4.3)."""
    if not cfg.at_least("0.12"):
        return {"reasoning_content": reasoning}
    if not cfg.at_least("0.16"):
        return {"reasoning": reasoning, "reasoning_content": reasoning}
    return {"reasoning": reasoning}


def usage(cfg, prompt: int, completion: int, cached: int | None, reasoning_tokens: int, *,
          stream: bool = False, chat: bool = True) -> dict:
    out: dict = {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion,
                 "prompt_tokens_details": None}
    if cfg.enable_prompt_tokens_details:
        # Up to 0.22 the details are only set when something hit; from 0.24 a zero is reported (notes §5.5).
        if cfg.at_least("0.32"):  # seen on a real 0.32.0 server (completions leave created_cache_tokens null)
            out["prompt_tokens_details"] = {"cached_tokens": cached or 0, "created_cache_tokens": 0 if chat else None,
                                            "multimodal_tokens": None}
        elif cfg.at_least("0.24"):
            out["prompt_tokens_details"] = {"cached_tokens": cached or 0}
        elif cached:
            out["prompt_tokens_details"] = {"cached_tokens": cached}
    if cfg.at_least("0.24"):
        out["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    if cfg.at_least("0.32") and not reasoning_tokens:
        out["completion_tokens_details"] = None  # null without reasoning, as a real 0.32.0 server says
    if cfg.at_least("0.32") and stream:
        # a real 0.32.0 server leaves the null fields out of a streamed usage chunk
        out = {k: ({dk: dv for dk, dv in v.items() if dv is not None} if isinstance(v, dict) else v)
               for k, v in out.items() if v is not None}
    return out


def stream_fingerprint(cfg, fp: str | None) -> dict:
    """Where a stream's chunks carry system_fingerprint: every chunk, or (0.32, seen) only the usage chunk."""
    return {} if cfg.at_least("0.32") else {"system_fingerprint": fp}


def reply_extras(cfg, *, choice: bool) -> dict:
    """The always-null fields a real 0.32.0 server adds to every whole reply (`choice`: inside each choice)."""
    if not cfg.at_least("0.32"):
        return {}
    if choice:
        return {"token_ids": None, "routed_experts": None}
    return {"prompt_text": None, "ec_transfer_params": None, "metrics": None}


def tool_call_json(call) -> dict:
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}


def chat_message(cfg, msg: Assembled) -> dict:
    out = {"role": "assistant", "content": msg.content, "refusal": None, "annotations": None, "audio": None,
           "function_call": None, "tool_calls": [tool_call_json(c) for c in msg.calls]}
    if not msg.calls and cfg.at_least("0.32"):
        del out["tool_calls"]  # a real 0.32.0 server leaves the key out of a reply without tool calls
    out.update(reasoning_fields(cfg, msg.reasoning))
    return out


def finish_reason(engine_reason: str, has_calls: bool, named_choice: bool) -> str:
    """0.33's rule: "tool_calls" only for a normal stop with calls and no forced named function."""
    if engine_reason == "stop" and has_calls and not named_choice:
        return "tool_calls"
    return engine_reason


def request_id(prefix: str, seed: int, n: int, salt: str = "") -> str:
    """A reply's id: unique per server process (`salt`, drawn when it starts: vLLM draws a random id per request,
    so two node processes of one deployment, started with one seed, never serve the same id)."""
    return f"{prefix}-" + hashlib.blake2b(f"{seed}:{salt}:{prefix}:{n}".encode(), digest_size=16).hexdigest()


def model_card(cfg, created: int) -> dict:
    return {"id": cfg.served_model_name, "object": "model", "created": created, "owned_by": "vllm",
            "root": cfg.model, "parent": None, "max_model_len": cfg.max_model_len,
            "permission": [{"id": "modelperm-" + hashlib.blake2b(cfg.model.encode(), digest_size=16).hexdigest(),
                            "object": "model_permission", "created": created, "allow_create_engine": False,
                            "allow_sampling": True, "allow_logprobs": True, "allow_search_indices": False,
                            "allow_view": True, "allow_fine_tuning": False, "organization": "*", "group": None,
                            "is_blocking": False}]}
