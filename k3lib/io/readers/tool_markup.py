"""Tool-call markup by family, and which family a text leaks: what a model emits when the server's tool parser
did not (or could not) turn it into `tool_calls`. Used on pasted replies and on live ones alike."""

from __future__ import annotations

import re

__all__ = ["MARKUP_FAMILIES", "detect_markup"]

# Tool-call markup by family: what a model emits when the server's tool parser did not (or could not) turn it
# into `tool_calls`. Names follow vLLM's `--tool-call-parser` names where one exists.
MARKUP_FAMILIES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("kimi_k2", re.compile(
        r"<\|tool_calls_section_(?:begin|end)\|>|<\|tool_call_(?:begin|end|argument_begin)\|>"
        # With skip_special_tokens the markers vanish and the call header is what is left.
        r"|(?<![\w.])functions\.[A-Za-z_][\w.-]*:\d+\s*\{")),
    ("kimi_k3", re.compile(r"<\|open\|>\s*(?:tools|call\b)|<\|close\|>\s*(?:tools|call)\b")),
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
