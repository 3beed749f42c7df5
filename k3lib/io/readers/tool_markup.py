"""Tool-call markup by family, and which family a text leaks: what a model emits when the server's tool parser
did not (or could not) turn it into `tool_calls`; and Kimi K3's control tokens, any of which in a reply's content or
reasoning is a parser defect. Used on pasted replies and on live ones alike."""

from __future__ import annotations

import re

__all__ = ["K3_CONTROL_TOKENS", "MARKUP_FAMILIES", "detect_k3_leak", "detect_markup"]

# Tool-call markup by family: what a model emits when the server's tool parser did not (or could not) turn it
# into `tool_calls`. Names follow vLLM's `--tool-call-parser` names where one exists.
MARKUP_FAMILIES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("kimi_k2", re.compile(
        r"<\|tool_calls_section_(?:begin|end)\|>|<\|tool_call_(?:begin|end|argument_begin)\|>"
        # With skip_special_tokens the markers vanish and the call header is what is left.
        r"|(?<![\w.])functions\.[A-Za-z_][\w.-]*:\d+\s*\{")),
    ("kimi_k3", re.compile(
        r"<\|open\|>\s*(?:tools|call\b)|<\|close\|>\s*(?:tools|call)\b"
        # With skip_special_tokens the XTML markers vanish and a call's header and its arguments' headers are left.
        r'|\bcall tool="[^"\n]*"\s+index="[^"\n]*"|\bargument key="[^"\n]*"\s+type="[^"\n]*"')),
    ("harmony", re.compile(
        r"<\|channel\|>|<\|call\|>|<\|constrain\|>|<\|message\|>"
        r"|\b(?:analysis|commentary)\s+to=functions\.[\w.-]+")),
    ("hermes", re.compile(r"</?tool_call>")),
    ("mistral", re.compile(r"\[TOOL_CALLS\]")),
    ("deepseek_v3", re.compile(r"<｜tool▁(?:calls?▁begin|call▁end|sep)｜>")),
    ("llama3_json", re.compile(r"<\|python_tag\|>")),
    # Llama 4 wraps a call (JSON or pythonic) in its own special tokens.
    ("llama4_json", re.compile(
        r"<\|python_start\|>|<\|python_end\|>|<\|header_start\|>\s*assistant\s*<\|header_end\|>")),
)


def detect_markup(text: str | None) -> str | None:
    """The family whose tool-call markup appears in `text` (the earliest one when several do), or None."""
    if not text or not isinstance(text, str):
        return None
    best: tuple[int, str] | None = None
    for family, pattern in MARKUP_FAMILIES:
        m = pattern.search(text)
        if m and (best is None or m.start() < best[0]):
            best = (m.start(), family)
    return best[1] if best else None


# Kimi K3's XTML control tokens (its chat template and vLLM's kimi_k3 parsers): every channel opens with
# `<|open|>NAME<|sep|>` and closes with `<|close|>NAME<|sep|>`, a message ends with `<|end_of_msg|>`. A parser that
# works hands none of them to the client; one that misses a channel terminator leaks it (vllm#54273 and #51399 leak
# `<|close|>message<|sep|>` into streamed content).
K3_CONTROL_TOKENS = ("<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>")
_K3_CHANNEL = re.compile(r"<\|(?:open|close)\|>[^<\n]{0,60}?<\|sep\|>")
_K3_TOKEN = re.compile(r"<\|(?:open|close|sep|end_of_msg)\|>")
_K3_STRIPPED = re.compile(r'\bcall tool="[^"\n]*"\s+index="[^"\n]*"|\bargument key="[^"\n]*"\s+type="[^"\n]*"')


def detect_k3_leak(text: str | None) -> str | None:
    """The first Kimi K3 control token (with its channel name, when it has one: `<|close|>message<|sep|>`) or
    stripped call/argument header (`call tool="f" index="1"`) in `text`, as it appears there; None when clean."""
    if not text or not isinstance(text, str):
        return None
    found = [m for m in (p.search(text) for p in (_K3_CHANNEL, _K3_TOKEN, _K3_STRIPPED)) if m]
    if not found:
        return None
    first = min(found, key=lambda m: (m.start(), -len(m.group())))
    return first.group()
