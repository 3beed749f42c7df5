"""A deterministic stand-in tokenizer and the Kimi-style chat template.

Text splits into word/punctuation/space pieces; each piece's id is a blake2b hash into the vocabulary, so
the same text gives the same ids on every run and platform, and the pieces concatenate back to the text
exactly. Special tokens (`<|im_user|>` …) have fixed ids at the top of the vocabulary. The chat template
renders tools and messages in a fixed order with canonical JSON, so an unchanged system prompt + tools +
history gives the same leading ids byte for byte — which is what makes prefix caching measurable.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Iterable, Sequence

VOCAB_SIZE = 163_840   # Kimi's vocabulary size
_FIRST_HASHED_ID = 1_024

SPECIAL_TOKENS: tuple[str, ...] = (
    "[BOS]", "[EOS]", "<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>", "<|im_middle|>",
    "<|im_tool|>", "<|media_start|>", "<|media_content|>", "<|media_end|>", "<|media_pad|>",
    "<|open|>", "<|close|>", "<|sep|>", "<think>", "</think>",
)
SPECIAL_IDS = {tok: 163_584 + i for i, tok in enumerate(SPECIAL_TOKENS)}
_SPECIAL_BY_ID = {v: k for k, v in SPECIAL_IDS.items()}

_SPECIAL_RE = re.compile("(" + "|".join(re.escape(t) for t in SPECIAL_TOKENS) + ")")
# A piece is one optional leading space + a word (≤ 8 chars), one punctuation char, or one whitespace char.
_PIECE_RE = re.compile(r"[ ]?\w{1,8}|[ ]?[^\w\s]|\s")


def _piece_id(piece: str) -> int:
    digest = hashlib.blake2b(piece.encode("utf-8"), digest_size=8).digest()
    return _FIRST_HASHED_ID + int.from_bytes(digest, "big") % (SPECIAL_IDS["[BOS]"] - _FIRST_HASHED_ID)


class Tokenizer:
    """Stateless ids; a reverse table of pieces seen so far lets /detokenize invert them."""

    def __init__(self) -> None:
        self._pieces: dict[int, str] = {}

    def pieces(self, text: str) -> list[str]:
        out: list[str] = []
        for part in _SPECIAL_RE.split(text):
            if not part:
                continue
            if part in SPECIAL_IDS:
                out.append(part)
            else:
                out.extend(_PIECE_RE.findall(part))
        return out

    def encode(self, text: str) -> list[int]:
        ids = []
        for piece in self.pieces(text):
            tid = SPECIAL_IDS.get(piece)
            if tid is None:
                tid = _piece_id(piece)
                self._pieces.setdefault(tid, piece)
            ids.append(tid)
        return ids

    def decode(self, ids: Iterable[int]) -> str:
        return "".join(self.piece_of(i) for i in ids)

    def piece_of(self, tid: int) -> str:
        special = _SPECIAL_BY_ID.get(tid)
        if special is not None:
            return special
        # An id never produced by encode() (a client-made list) has no text; vLLM would give some bytes.
        return self._pieces.get(tid, "")

    def count(self, text: str) -> int:
        return len(self.pieces(text))


def canonical_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def _content_text(content: Any, image_tokens: int) -> str:
    """Message content (a string or a list of parts) as template text; an image is a fixed run of pads."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    out = []
    for part in content if isinstance(content, list) else [content]:
        if not isinstance(part, dict):
            out.append(str(part))
            continue
        kind = part.get("type")
        if kind == "text":
            out.append(str(part.get("text", "")))
        elif kind in ("image_url", "input_image", "image"):
            ref = part.get("image_url") or part.get("image") or {}
            url = ref.get("url", "") if isinstance(ref, dict) else str(ref)
            # The media hash keeps two different images from sharing cached blocks (vLLM mixes mm hashes
            # into the block keys); markers + pads + tag make the image cost exactly `image_tokens`.
            tag = hashlib.blake2b(url.encode(), digest_size=4).hexdigest()
            out.append("<|media_start|>image<|media_content|>" + "<|media_pad|>" * max(image_tokens - 5, 0)
                       + tag + "<|media_end|>")
        else:
            out.append(str(part.get("text", "")))
    return "".join(out)


def render_chat(messages: Sequence[dict], tools: Sequence[dict] | None = None, *, add_generation_prompt: bool = True,
                image_tokens: int = 64) -> str:
    """Tools first, then each message in order, then the assistant header: stable prefixes by design."""
    parts = []
    if tools:
        parts.append("<|im_system|>tool_declare<|im_middle|>" + canonical_json(list(tools)) + "<|im_end|>")
    for msg in messages:
        role = str(msg.get("role", "user"))
        tag = {"system": "<|im_system|>", "user": "<|im_user|>", "assistant": "<|im_assistant|>",
               "tool": "<|im_tool|>", "developer": "<|im_system|>"}.get(role, "<|im_user|>")
        name = role if role != "tool" else f"tool:{msg.get('tool_call_id', '')}"
        body = _content_text(msg.get("content"), image_tokens)
        reasoning = msg.get("reasoning") or msg.get("reasoning_content")
        if role == "assistant" and reasoning:
            body = f"<think>{reasoning}</think>" + body
        if role == "assistant" and msg.get("tool_calls"):
            body += "".join(
                f"<|open|>call id=\"{c.get('id', '')}\" tool=\"{(c.get('function') or {}).get('name', '')}\"<|sep|>"
                f"{(c.get('function') or {}).get('arguments', '')}<|close|>call<|sep|>"
                for c in msg["tool_calls"] if isinstance(c, dict))
        parts.append(f"{tag}{name}<|im_middle|>{body}<|im_end|>")
    if add_generation_prompt:
        parts.append("<|im_assistant|>assistant<|im_middle|>")
    return "".join(parts)
