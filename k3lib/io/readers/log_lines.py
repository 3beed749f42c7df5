"""The line grammar of a vLLM server log: one physical line split into the prefixes vLLM, uvicorn and log
collectors put in front of the message (kubectl timestamps, pod tags, ANSI colour, CRLF), and the nearest
timestamps a traceback line inherits."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from k3lib.io.readers._text import terminal_view

__all__ = ["Cursor", "LogLine", "split_line"]


@dataclass(frozen=True)
class LogLine:
    """One physical line, with the prefixes vLLM, uvicorn and log collectors put in front of the message."""

    number: int                          # 1-based, as an editor shows it
    text: str                            # the line without ANSI escapes and CR, prefixes kept
    message: str                         # what remains once every recognised prefix is stripped
    level: str | None = None             # INFO, WARNING, ERROR, DEBUG, CRITICAL
    process: str | None = None           # APIServer, EngineCore_DP0, Worker_TP3, VllmWorkerProcess…
    pid: int | None = None
    logged_at: str | None = None         # vLLM's own "MM-DD HH:MM:SS" (it prints no year)
    collected_at: datetime | None = None  # the collector's ISO timestamp (kubectl --timestamps, Loki…)
    source: str | None = None            # "file.py:LINE" or "v1/metrics/loggers.py:310"


# CSI sequences, plus the same sequences whose ESC byte a copy-paste dropped ("[1;36m(APIServer …").
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]|\^\[\[[0-9;]*m|(?<![\w\]])\[[0-9]{1,3}(?:;[0-9]{1,3})*m")
_ISO_TS = re.compile(
    r"(?P<ts>\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d{1,9})?(?:Z|[+-]\d{2}:?\d{2})?)(?:\s+|\s*\|\s*)")
_KUBECTL_PREFIX = re.compile(r"\[(?:pod|deployment|statefulset|job)/[^\]\s]+\]\s+")
_COMPOSE_PREFIX = re.compile(r"[\w][\w.-]*\s*\|\s")
_SYSLOG_PREFIX = re.compile(r"[A-Z][a-z]{2}\s+\d{1,2}\s\d{2}:\d{2}:\d{2}\s\S+\s[\w./-]+(?:\[\d+\])?:\s")
# vLLM's own "(APIServer pid=1)" and Ray's "(RayWorkerWrapper pid=123, ip=10.0.0.2)" / "(pid=123)".
_PROCESS = re.compile(r"\((?:(?P<proc>[A-Za-z][\w.-]*) )?pid=(?P<pid>\d+)(?:,\s*ip=[\w.:-]+)?\)\s?")
_BLOCKQUOTE = re.compile(r">\s?")
_LEVELS = "DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL"
# vLLM's formatter: "INFO 10-05 16:36:42 api_server.py:589] msg" (≤0.7) and "… [file.py:LINE] msg" (0.7+).
_VLLM_PREFIX = re.compile(
    rf"(?P<level>{_LEVELS})\s+(?P<ts>\d{{2}}-\d{{2}} \d{{2}}:\d{{2}}:\d{{2}})(?:[.,]\d+)?\s+"
    r"(?:\[(?P<src>[^\]]*)\]|(?P<src_old>[^\s\]]+:\d+)\])\s?")
_UVICORN_PREFIX = re.compile(rf"(?P<level>{_LEVELS}):\s+")
# Where a vLLM record starts inside a line whose collector prefix we do not know.
_ANYWHERE = re.compile(
    rf"\((?:[A-Za-z][\w.-]* )?pid=\d+(?:,\s*ip=[\w.:-]+)?\)|(?:{_LEVELS})\s+\d{{2}}-\d{{2}} \d{{2}}:\d{{2}}:\d{{2}}")


def _clean(raw: str) -> str:
    # A CR inside a line is a tqdm redraw or a Windows line end; the last segment is what the terminal showed.
    return _ANSI.sub("", terminal_view(raw))


def _parse_iso(ts: str) -> datetime | None:
    value = ts.replace(",", ".").replace(" ", "T", 1)
    if value.endswith("Z"):
        value = value[:-1] + "+00:00"
    # Python 3.11 accepts at most microseconds; kubectl prints nanoseconds.
    value = re.sub(r"(\.\d{6})\d+", r"\1", value)
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def split_line(number: int, raw: str) -> LogLine:
    """One physical line with its prefixes told apart: collector timestamp, process, level, vLLM time, source."""
    text = _clean(raw)
    rest = text
    collected_at: datetime | None = None
    # Collector prefixes stack (a kubectl timestamp before a pod tag before a compose bar), so peel repeatedly.
    for _ in range(4):
        m = _ISO_TS.match(rest)
        if m:
            collected_at = collected_at or _parse_iso(m.group("ts"))
            rest = rest[m.end():]
            continue
        m = _KUBECTL_PREFIX.match(rest) or _SYSLOG_PREFIX.match(rest) or _BLOCKQUOTE.match(rest)
        if m:
            rest = rest[m.end():]
            continue
        m = _COMPOSE_PREFIX.match(rest)
        if m and not _PROCESS.match(rest) and not rest.startswith(("File ", "Traceback")):
            rest = rest[m.end():]
            continue
        break
    if not _PROCESS.match(rest) and not _VLLM_PREFIX.match(rest) and not _UVICORN_PREFIX.match(rest):
        # An unknown collector prefix (stern, Loki export): cut at the first vLLM record marker near the start.
        m = _ANYWHERE.search(rest, 0, 200)
        if m and m.start() > 0:
            rest = rest[m.start():]
    process = pid = level = logged_at = source = None
    m = _PROCESS.match(rest)
    if m:
        process, pid = m.group("proc"), int(m.group("pid"))
        rest = rest[m.end():]
    m = _VLLM_PREFIX.match(rest)
    if m:
        level, logged_at = m.group("level"), m.group("ts")
        source = m.group("src") if m.group("src") is not None else m.group("src_old")
        rest = rest[m.end():]
    else:
        m = _UVICORN_PREFIX.match(rest)
        if m:
            level = m.group("level")
            rest = rest[m.end():]
    if level == "WARN":
        level = "WARNING"
    return LogLine(number=number, text=text, message=rest, level=level, process=process, pid=pid,
                   logged_at=logged_at, collected_at=collected_at, source=source)



class Cursor:
    """The nearest timestamps seen so far, so a traceback line inherits the time of the record it belongs to."""

    def __init__(self) -> None:
        self.logged_at: str | None = None
        self.collected_at: datetime | None = None

    def update(self, line: LogLine) -> None:
        if line.logged_at:
            self.logged_at = line.logged_at
        if line.collected_at:
            self.collected_at = line.collected_at
