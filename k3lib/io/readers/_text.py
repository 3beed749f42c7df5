"""Undo the ways people paste tool output: line ends, ANSI colours, Markdown, shell prompts, line prefixes.

Pure functions over strings; every artifact reader starts from `clean_lines`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

# CSI sequences (colours, cursor moves) and OSC sequences (terminal titles, hyperlinks).
_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]{0,512}(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
# When a paste loses the ESC byte, "[32mINFO[0m" or "^[[32m" is left behind; a digit is required so that
# ordinary bracketed text such as "[m]" survives.
_ORPHAN_SGR_RE = re.compile(r"(?:\^\[)?\[[0-9]{1,3}(?:;[0-9]{1,3})*m")
# Invisible or exotic whitespace that web pages and chat tools put into copied text.
_ODD_SPACE = str.maketrans({"\u00a0": " ", "\u2007": " ", "\u202f": " ", "\ufeff": "", "\u200b": "",
                            "\u200c": "", "\u200d": "", "\x00": ""})

_FENCE_RE = re.compile(r"^\s*(?:`{3,}|~{3,})[\w+.-]*\s*$")
# GitHub issue templates wrap reports in <details><summary>…</summary> … </details>.
_HTML_WRAPPER_RE = re.compile(r"^\s*</?(?:details|summary|pre|code|br|p)\b[^\n]*$", re.IGNORECASE)

_PROMPT_RE = re.compile(
    r"""^\s*(?:
        (?:\([\w .@-]{1,40}\)\s*)?                       # (venv) or (base)
        (?:\[?[\w.-]{1,64}@[\w.-]{1,64}[: ][^\s$#%>]{0,200}\]?\s?)?  # user@host:~/dir or [user@host dir]
        [$%❯➜]\s+\S                                      # $ cmd
      | [\w.-]{1,64}@[\w.-]{1,64}:[^\s#]{0,200}\#\s*\S   # root@host:/dir# cmd
      | PS\s+[A-Za-z]:\\[^>]{0,200}>\s*\S                # PowerShell
      | >>>\s                                            # Python REPL
    )""",
    re.VERBOSE,
)

# Prefixes that a log collector or a terminal multiplexer puts before every line. Each one consumes exactly
# one following space so that the indentation of the payload (nvidia-smi -q nests by indentation) survives.
KUBECTL_TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})? ?")
ISO_TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?(?:\s*\|)? ?")
KUBECTL_POD_PREFIX = re.compile(r"^\[pod/[^\]\s]{1,200}\] ?")
RAY_TASK_PREFIX = re.compile(r"^\((?:[\w.:-]{1,80},? ?)?pid=\d+(?:, ?ip=[\w.:-]{1,64})?\) ?")
COMPOSE_PREFIX = re.compile(r"^[A-Za-z0-9][\w.-]{0,80} {0,20}\| ?")
JOURNALD_PREFIX = re.compile(r"^[A-Z][a-z]{2} [ 0-9]\d \d{2}:\d{2}:\d{2} [\w.-]{1,80} [\w.@/-]{1,80}(?:\[\d+\])?: ?")
BLOCKQUOTE_PREFIX = re.compile(r"^> ?")

DEFAULT_PREFIXES: tuple[re.Pattern[str], ...] = (
    KUBECTL_TIMESTAMP, ISO_TIMESTAMP, KUBECTL_POD_PREFIX, RAY_TASK_PREFIX, COMPOSE_PREFIX, JOURNALD_PREFIX,
    BLOCKQUOTE_PREFIX,
)


def numbered_lines(text: str | bytes) -> list[tuple[int, str]]:
    """(number, line) pairs numbered as `grep -n` and a text editor number them; every reader uses this.

    Only LF ends a line, so a progress bar's lone CR does not start a new one: the text after the last CR of a
    line is what the terminal showed, and that is the line's text. A text with no LF at all but CRs is an old-Mac
    file, whose CRs end lines. A final line end does not open an empty last line.
    """
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", errors="replace")
    if "\n" not in text and "\r" in text.rstrip("\r"):
        text = text.replace("\r", "\n")
    raw = text.split("\n")
    if raw and raw[-1] == "":
        raw.pop()
    return [(number, terminal_view(line)) for number, line in enumerate(raw, start=1)]


def terminal_view(line: str) -> str:
    """What a terminal shows of one line: a CRLF's CR dropped, and after a progress bar's redraws (CR) the last
    non-blank segment."""
    line = line.rstrip("\r")
    if "\r" not in line:
        return line
    parts = [p for p in line.split("\r") if p.strip()]
    return parts[-1] if parts else ""


def strip_ansi(text: str) -> str:
    """Remove terminal escape sequences, including those whose ESC byte was lost in copying."""
    return _ORPHAN_SGR_RE.sub("", _ANSI_RE.sub("", text))


def is_fence(line: str) -> bool:
    """A Markdown code fence or an HTML wrapper (<details>, <summary>…) from an issue template."""
    return bool(_FENCE_RE.match(line) or _HTML_WRAPPER_RE.match(line))


def is_shell_prompt(line: str) -> bool:
    """A command line as typed at a shell prompt (`$ nvidia-smi`, `root@pod:/# vllm collect-env`)."""
    return bool(_PROMPT_RE.match(line))


def strip_line_prefixes(lines: Sequence[str], patterns: Iterable[re.Pattern[str]] = DEFAULT_PREFIXES,
                        *, majority: float = 0.5) -> list[str]:
    """Remove a per-line prefix carried by most non-blank lines; prefixes may be stacked (timestamp, then pod).

    A pattern only applies when it matches at least `majority` of the non-blank lines, so a lone line that
    happens to look like a prefix in an otherwise clean paste is left alone.
    """
    out = list(lines)
    pats = tuple(patterns)
    for _ in range(4):  # at most a few stacked layers; each pass removes one
        nonblank = [ln for ln in out if ln.strip()]
        if not nonblank:
            return out
        for pat in pats:
            hits = sum(1 for ln in nonblank if pat.match(ln))
            if hits and hits >= majority * len(nonblank):
                out = [pat.sub("", ln, count=1) for ln in out]
                break
        else:
            return out
    return out


def dedent_lines(lines: Sequence[str]) -> list[str]:
    """Remove the leading whitespace that every non-blank line shares (Markdown's 4-space code block)."""
    indents = [ln[: len(ln) - len(ln.lstrip())] for ln in lines if ln.strip()]
    if not indents:
        return list(lines)
    common = indents[0]
    for ind in indents[1:]:
        while not ind.startswith(common):
            common = common[:-1]
        if not common:
            return list(lines)
    n = len(common)
    return [ln[n:] if ln.strip() else "" for ln in lines]


def clean_lines(text: str | bytes, *, prefixes: Iterable[re.Pattern[str]] = DEFAULT_PREFIXES,
                drop_fences: bool = True, drop_prompts: bool = False) -> list[str]:
    """The text as lines with paste artefacts removed; trailing whitespace is dropped, inner indentation kept."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    lines = [strip_ansi(ln).translate(_ODD_SPACE).rstrip() for _, ln in numbered_lines(text)]
    lines = strip_line_prefixes(lines, prefixes)
    if drop_fences:
        lines = [ln for ln in lines if not is_fence(ln)]
    if drop_prompts:
        lines = [ln for ln in lines if not is_shell_prompt(ln)]
    return [ln.rstrip() for ln in dedent_lines(lines)]
