"""What a server sends back, read without I/O: an error body in any of its shapes, JSON (msgspec where it can),
a streamed chat completion's SSE events assembled with their perf marks (`StreamAssembler`, on the kit's one SSE
decoder and tool-call assembler in `k3lib.io.chatstream`), a non-streamed completion's fields."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import msgspec

from k3lib.io.chatstream import SSEDecoder, ToolCall, ToolCallAssembler
from k3lib.core.errors import APIError, ProtocolError

from .records import BODY_TEXT_LIMIT_CHARS, RecordFields

# ---------------------------------------------------------------------------------------------------------
# Pure parsing
# ---------------------------------------------------------------------------------------------------------


def parse_error_body(status: int, text: str, *, url: str | None = None) -> APIError:
    """Fold every error-body shape a vLLM-compatible server sends into one `APIError`.

    ≤0.10.0: flat `{"object":"error","message","type","param","code"}`; 0.10.1+: nested `{"error":{...}}`;
    auth middleware: `{"error":"Unauthorized"}`; FastAPI defaults: `{"detail": ...}`; proxies: HTML or text.
    """
    try:
        body = json.loads(text) if text.strip() else None
    except ValueError:
        body = None
    message: str | None = None
    etype = param = None
    if isinstance(body, dict):
        inner = body.get("error")
        if isinstance(inner, dict):
            message, etype, param = inner.get("message"), inner.get("type"), inner.get("param")
        elif isinstance(inner, str):
            message = inner
        elif "message" in body:
            message, etype, param = body.get("message"), body.get("type"), body.get("param")
        elif "detail" in body:
            detail = body["detail"]
            message = detail if isinstance(detail, str) else json.dumps(detail)[:BODY_TEXT_LIMIT_CHARS]
    if message is None:
        snippet = " ".join(text.split())[:500]
        message = f"non-JSON error body: {snippet}" if snippet else "empty error body"
    return APIError(status, str(message), type=None if etype is None else str(etype),
                    param=None if param is None else str(param), url=url)


_decode_json = msgspec.json.Decoder().decode


def loads_json(text: str) -> Any:
    """`json.loads`, with msgspec (about 2× faster on a chunk) where it can.

    msgspec refuses what the standard library alone reads (NaN, Infinity, 1e400, lone surrogate escapes);
    those go to `json.loads`, so every reply decodes to exactly what it did before. (orjson was not used: it
    turns integers past 64 bits into floats without a word.)
    """
    try:
        return _decode_json(text)
    except msgspec.MsgspecError:
        return json.loads(text)


def _usage_fields(usage: Any) -> RecordFields:
    if not isinstance(usage, dict):
        return {}
    out: RecordFields = {"usage_present": True, "prompt_tokens": usage.get("prompt_tokens"),
                           "completion_tokens": usage.get("completion_tokens"),
                           "total_tokens": usage.get("total_tokens")}
    details = usage.get("prompt_tokens_details")
    # null details (vLLM ≤0.22 on a cache miss) and a 0 are different facts: keep None for the former
    out["cached_tokens"] = details.get("cached_tokens") if isinstance(details, dict) else None
    if out["cached_tokens"] is None and isinstance(usage.get("cached_tokens"), int):
        out["cached_tokens"] = usage["cached_tokens"]  # Moonshot's (Kimi API) usage puts its cache hits on top
    cdetails = usage.get("completion_tokens_details")
    out["reasoning_tokens"] = cdetails.get("reasoning_tokens") if isinstance(cdetails, dict) else None
    return out


def _reasoning_of(obj: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """(text, field name): vLLM ≤0.11 sends `reasoning_content`, 0.12–0.14 both, 0.16+ only `reasoning`."""
    r, rc = obj.get("reasoning"), obj.get("reasoning_content")
    if r and rc:
        return r, "both"
    if r:
        return r, "reasoning"
    if rc:
        return rc, "reasoning_content"
    return None, None


class StreamAssembler:
    """Accumulates the SSE `data:` payloads of one streamed chat completion (choice 0) with their perf marks.

    The read loop only calls `arrived` (keep the bytes and the mark of their arrival); framing, JSON decoding,
    tool-call assembly and token accounting wait for `drain`, so a burst of events costs the timing path a
    clock read each. An event is stamped with the arrival of the read that completed its first `data:` line,
    whenever it is decoded, so deferral changes no mark.
    """

    #: undecoded reads kept before `arrived` asks for a drain (bounds memory on a very long stream)
    MAX_PENDING_READS = 4096

    def __init__(self) -> None:
        self.raw_lines: list[str] = []
        self.chunk_count = 0
        self.output_chunk_ns: list[int] = []
        self.first_content_ns: int | None = None
        self.first_reasoning_ns: int | None = None
        self.first_tool_call_ns: int | None = None
        self.done = False
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.reasoning_field: str | None = None
        self.tools = ToolCallAssembler()
        self.fields: RecordFields = {}
        self.stream_error: APIError | None = None
        #: (bytes of one read, its arrival mark), not yet framed
        self.pending: list[tuple[bytes, int]] = []
        self._buf = bytearray()
        self._scan = 0
        self._sse = SSEDecoder()
        self._t_event: int | None = None
        self._eager = False
        self._edge = b""

    # -- the hot path and the deferred framing ----------------------------------------------------------

    def arrived(self, piece: bytes, t_ns: int) -> bool:
        """Keep one read and its arrival mark. True when it should be decoded now: the backlog is long, or the
        stream may carry an error event (vLLM's failure after the 200 header ends the request as it arrives).
        From the first read that may, even cut across two reads, every read is decoded on arrival."""
        pending = self.pending
        pending.append((piece, t_ns))
        if not self._eager:
            seam = self._edge + piece[:4]
            self._eager = b"error" in piece or b"error" in seam
            self._edge = piece[-4:] if len(piece) >= 4 else seam[-4:]
        return self._eager or len(pending) >= self.MAX_PENDING_READS

    def drain(self, *, url: str | None = None, status: int = 200, limit: int | None = None) -> None:
        """Frame and decode every pending read (the first `limit` of them when given). Raises ProtocolError on a
        payload that is not JSON, and the stream's APIError on an error event (what follows it is dropped, as the
        reader stops there)."""
        if limit is None:
            pending, self.pending = self.pending, []
        else:
            pending, self.pending = self.pending[:limit], self.pending[limit:]
        try:
            self._frame(pending, url, status)
        except (ProtocolError, APIError):
            self.pending = []  # what follows the failure is dropped, in whatever slices the reads were decoded
            raise

    def _frame(self, pending: list[tuple[bytes, int]], url: str | None, status: int) -> None:
        buf = self._buf
        for piece, t_read in pending:
            if not buf:
                lines = piece.split(b"\n")
                tail = lines.pop()
                for raw in lines:
                    self._line(raw, t_read, url, status)
                if tail:
                    buf += tail
                    self._scan = len(buf)
                continue
            # an event spread over many reads (a multi-MB tool argument): scan only the new bytes (vllm#39963)
            buf += piece
            start = 0
            while (nl := buf.find(b"\n", self._scan)) >= 0:
                self._line(bytes(buf[start:nl]), t_read, url, status)
                start = self._scan = nl + 1
            if start:
                del buf[:start]
            self._scan = len(buf)

    def finish(self, end_ns: int, *, url: str | None = None, status: int = 200) -> None:
        """The body ended: decode what is left, including a last line without its newline."""
        self.drain(url=url, status=status)
        if self._buf:
            raw, self._buf = bytes(self._buf), bytearray()
            self._scan = 0
            self._line(raw, end_ns, url, status)
        self._dispatch(end_ns, url, status)

    def _line(self, raw: bytes, t_read: int, url: str | None, status: int) -> None:
        line = raw.decode("utf-8", "replace")
        if self._t_event is None and line.startswith("data:"):
            self._t_event = t_read
        payload = self._sse.line(line)
        if payload is not None:
            self._emit(payload, t_read, url, status)

    def _dispatch(self, t_now: int, url: str | None, status: int) -> None:
        payload = self._sse.flush()
        if payload is not None:
            self._emit(payload, t_now, url, status)

    def _emit(self, payload: str, t_now: int, url: str | None, status: int) -> None:
        t_event = self._t_event if self._t_event is not None else t_now
        self._t_event = None
        self.feed(payload, t_event, url=url, status=status)
        if self.stream_error is not None:
            self.pending = []
            raise self.stream_error

    # -- one event ----------------------------------------------------------------------------------------

    def feed(self, payload: str, t_ns: int, *, url: str | None = None, status: int = 200) -> None:
        """One `data:` payload. Raises ProtocolError on a payload that is not JSON."""
        self.raw_lines.append(payload)
        if payload.strip() == "[DONE]":
            self.done = True
            return
        try:
            chunk = loads_json(payload)
        except ValueError as exc:
            raise ProtocolError(f"invalid JSON in SSE event #{self.chunk_count + 1} from {url}: "
                                f"{payload[:200]!r}") from exc
        self.chunk_count += 1
        if not isinstance(chunk, dict):
            raise ProtocolError(f"SSE event #{self.chunk_count} from {url} is not a JSON object: {payload[:200]!r}")
        if "error" in chunk or chunk.get("object") == "error":
            # vLLM reports a failure after the 200 header as an error event followed by [DONE]
            err = parse_error_body(status, payload, url=url)
            code = (chunk.get("error") or {}).get("code") if isinstance(chunk.get("error"), dict) \
                else chunk.get("code")
            self.stream_error = APIError(code if isinstance(code, int) else status, err.message,
                                         type=err.type, param=err.param, url=url)
            return
        if chunk.get("model") is not None:
            self.fields["model"] = chunk["model"]
        if chunk.get("id") is not None:
            self.fields["response_id"] = chunk["id"]
        if chunk.get("system_fingerprint") is not None:
            self.fields["system_fingerprint"] = chunk["system_fingerprint"]
        if chunk.get("usage"):
            # vLLM's continuous_usage_stats repeats usage on every chunk: the last one wins
            self.fields.update(_usage_fields(chunk["usage"]))
        carried = False
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if isinstance(delta, dict):
                if delta.get("content"):
                    self.content.append(delta["content"])
                    carried = True
                    if self.first_content_ns is None:
                        self.first_content_ns = t_ns
                text, fname = _reasoning_of(delta)
                if text:
                    self.reasoning.append(text)
                    self.reasoning_field = fname if self.reasoning_field in (None, fname) else "both"
                    carried = True
                    if self.first_reasoning_ns is None:
                        self.first_reasoning_ns = t_ns
                if delta.get("tool_calls"):
                    self.tools.feed(delta["tool_calls"])
                    carried = True
                    if self.first_tool_call_ns is None:
                        self.first_tool_call_ns = t_ns
            if choice.get("finish_reason"):
                self.fields["finish_reason"] = choice["finish_reason"]
        if carried:
            self.output_chunk_ns.append(t_ns)

    def record_fields(self) -> RecordFields:
        return {
            **self.fields,
            "raw_lines": tuple(self.raw_lines),
            "chunk_count": self.chunk_count,
            "output_chunk_ns": tuple(self.output_chunk_ns),
            "first_content_ns": self.first_content_ns,
            "first_reasoning_ns": self.first_reasoning_ns,
            "first_tool_call_ns": self.first_tool_call_ns,
            "last_token_ns": self.output_chunk_ns[-1] if self.output_chunk_ns else None,
            "content": "".join(self.content) if self.content else None,
            "reasoning": "".join(self.reasoning) if self.reasoning else None,
            "reasoning_field": self.reasoning_field,
            "tool_calls": self.tools.result(),
        }


def completion_fields(body: Any) -> RecordFields:
    """Record fields from a non-streamed chat completion (choice 0)."""
    if not isinstance(body, dict) or not isinstance(body.get("choices"), list):
        raise ProtocolError("reply is not a chat completion: no `choices` list")
    out: RecordFields = {"model": body.get("model"), "response_id": body.get("id"),
                           "system_fingerprint": body.get("system_fingerprint"), **_usage_fields(body.get("usage"))}
    choice = next((c for c in body["choices"] if isinstance(c, dict) and c.get("index", 0) == 0), None)
    if choice is not None:
        message = choice.get("message") or {}
        out["finish_reason"] = choice.get("finish_reason")
        out["content"] = message.get("content")
        out["reasoning"], out["reasoning_field"] = _reasoning_of(message)
        calls = []
        for i, tc in enumerate(message.get("tool_calls") or ()):
            if isinstance(tc, dict):
                fn = tc.get("function") or {}
                args = fn.get("arguments")
                # arguments must be a JSON string; an object here is itself a finding, kept re-serialized
                args = args if isinstance(args, str) else ("" if args is None else json.dumps(args))
                at = tc.get("index", i)  # a call's position is a number: another value (null) is not one
                calls.append(ToolCall(index=at if isinstance(at, int) and not isinstance(at, bool) else i,
                                      id=tc.get("id"), type=tc.get("type"),
                                      name=fn.get("name"), arguments=args))
        out["tool_calls"] = tuple(calls)
    return out


# ---------------------------------------------------------------------------------------------------------
# A reply body kept as JSON when it is JSON
# ---------------------------------------------------------------------------------------------------------

def _try_json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text[:BODY_TEXT_LIMIT_CHARS]
