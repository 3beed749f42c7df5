"""vLLM server log reader: version, flags, KV capacity, readiness, OOM (startup vs serving), engine death,
context-length rejections and periodic stats, from any prefix format vLLM 0.6 → 0.33 printed, with the
collector prefixes (kubectl timestamps, pod tags, ANSI colour, CRLF) people paste along."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypedDict

from k3lib.core.errors import ArtifactError
from k3lib.io.readers._text import numbered_lines
from k3lib.io.readers.log_events import (
    ACCESS,
    CLIENT_SIDE,
    ENGINE_DEAD,
    ENGINE_MODEL,
    ENGINE_VERSION,
    EXCEPTION_LINE,
    KV_TOKENS,
    LOGO_CHARS,
    LOGO_MODEL,
    LOGO_VERSION,
    MAX_CONC,
    NAMESPACE,
    NON_DEFAULT,
    OOM,
    OUTPUT_HANDLER_FAILED,
    READY,
    REJECTION,
    REQUEST_ECHO,
    SERVER_VERSION,
    SERVING_HINT,
    STATS,
    V0_PREEMPTION,
    ContextRejection,
    EngineDeath,
    LogErrorRecord,
    OomEvent,
    StatsRecord,
    dedupe_errors,
    merge_rejections,
    parse_namespace,
    parse_non_default,
    parse_stats,
    rejection_key,
    to_float,
    to_int,
)
from k3lib.io.readers.log_lines import Cursor, LogLine, split_line

__all__ = ["OOM_CONTEXT_LINES", "VllmLogReport", "inspect_log", "parse_vllm_log"]

# How many lines before an OOM the capacity axis keeps as context.
OOM_CONTEXT_LINES = 20
_MAX_ERRORS = 200


class OomJson(TypedDict):
    phase: str
    line: int
    text: str
    lines_before: list[str]


class LogErrorJson(TypedDict):
    line: int
    text: str
    exception: str | None


class LogJson(TypedDict):
    """`k3 inspect log --json` (schemas/inspect/log.schema.json)."""

    vllm_version: str | None
    non_default_args: dict[str, Any] | str | None
    kv_cache_tokens: int | None
    max_concurrency: float | None
    ready: bool
    ready_line: int | None
    engine_dead: bool
    oom: OomJson | None
    context_rejections: int
    errors: list[LogErrorJson]
    startups: int
    truncated: bool


@dataclass(frozen=True)
class VllmLogReport:
    lines: tuple[LogLine, ...]
    vllm_version: str | None
    model: str | None
    non_default_args: dict[str, Any] | str | None
    namespace_args: dict[str, Any] | None   # V0's `args: Namespace(...)`: every arg, not only non-default ones
    kv_cache_tokens: int | None
    max_concurrency: float | None
    ready: bool
    ready_line: int | None
    oom: OomEvent | None
    engine_death: EngineDeath | None
    context_rejections: tuple[ContextRejection, ...]
    errors: tuple[LogErrorRecord, ...]
    stats: tuple[StatsRecord, ...]
    preemption_warnings: tuple[int, ...]   # V0 prints one WARNING per preempted sequence group
    truncated: bool = False                # the text ends mid-line (a cut paste or a live tail)
    startups: int = 1                      # server starts in the paste; the figures are the last one's
    startup_from_line: int | None = None   # the last start's first version line (None: the paste shows none)
    startup_ready_line: int | None = None  # where that start was first seen serving (None: not seen)
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def engine_dead(self) -> bool:
        return self.engine_death is not None

    def as_dict(self) -> LogJson:
        """The `k3 inspect log --json` shape (schemas/inspect/log.schema.json)."""
        oom: OomJson | None = None
        if self.oom is not None:
            oom = {"phase": self.oom.phase, "line": self.oom.line, "text": self.oom.text,
                   "lines_before": list(self.oom.lines_before)}
        return {
            "vllm_version": self.vllm_version,
            "non_default_args": self.non_default_args,
            "kv_cache_tokens": self.kv_cache_tokens,
            "max_concurrency": self.max_concurrency,
            "ready": self.ready,
            "ready_line": self.ready_line,
            "engine_dead": self.engine_dead,
            "oom": oom,
            "context_rejections": len(self.context_rejections),
            "errors": [{"line": e.line, "text": e.text, "exception": e.exception} for e in self.errors],
            "startups": self.startups,
            "truncated": self.truncated,
        }


@dataclass
class _StartFigures:
    """What one server start printed about itself; a restart in the same paste begins a new one."""

    version: str | None = None
    version_engine: str | None = None    # the engine core's own version line (V1), used when the banner is missing
    model: str | None = None
    non_default: dict[str, Any] | str | None = None
    namespace: dict[str, Any] | None = None
    kv_tokens: int | None = None
    max_conc: float | None = None


@dataclass
class _Scan:
    """The reader's state after the lines read so far: the current start's figures, and what happened over the
    whole paste (readiness, OOM, death, rejections, errors, stats)."""

    lines: tuple[LogLine, ...]
    cursor: Cursor = field(default_factory=Cursor)
    figures: _StartFigures = field(default_factory=_StartFigures)
    startups: int = 1
    restarted: bool = False               # this line began a new start (set by the first rule, for the window)
    serving: bool = False                 # state of the current run (a restart in the same log resets it)
    ready_line: int | None = None
    start_from: int | None = None         # the window C05 reads: the last start's first line…
    start_ready: int | None = None        # …and where that start was first seen serving
    oom: OomEvent | None = None
    death: EngineDeath | None = None
    errors: list[LogErrorRecord] = field(default_factory=list)
    exception_tail: tuple[Any, ...] | None = None  # the log record whose exception line was the last error
    stats: list[StatsRecord] = field(default_factory=list)
    preempt: list[int] = field(default_factory=list)
    server_rej: list[tuple[str, tuple[int, ...], list[int], str, str | None]] = field(default_factory=list)
    client_rej: list[tuple[str, tuple[int, ...], int, str]] = field(default_factory=list)
    last_access_line: int = 0
    recognised: int = 0                   # lines in a vLLM, uvicorn or engine format

    def now_serving(self, number: int) -> None:
        self.serving = True
        if self.ready_line is None:
            self.ready_line = number


@dataclass(frozen=True)
class _Line:
    """One line with the facts several rules read, each matched once."""

    ln: LogLine
    msg: str
    banner: bool                          # the API server's version line or the logo's version
    started: bool                         # a (re)start line: the banner or the engine core's version
    access: re.Match[str] | None          # a uvicorn access line
    is_stats: bool                        # a periodic stats line
    informational: bool                   # INFO or DEBUG: never an OOM or a death, whatever it quotes

    @classmethod
    def read(cls, ln: LogLine) -> _Line:
        msg = ln.message
        banner = bool(SERVER_VERSION.search(msg) or (LOGO_CHARS.search(msg) and LOGO_VERSION.search(msg)))
        return cls(ln=ln, msg=msg, banner=banner, started=banner or bool(ENGINE_VERSION.search(msg)),
                   access=ACCESS.search(msg), is_stats=bool(STATS.search(msg)),
                   informational=ln.level in ("INFO", "DEBUG"))


def _restart(scan: _Scan, line: _Line) -> None:
    # A (re)start of the server: when a paste holds several, the figures (version, args, KV capacity) are the
    # last one's; what happened (ready, OOM, death, rejections) is kept over the whole paste.
    if line.ln.level or line.ln.process:
        scan.recognised += 1
    f = scan.figures
    scan.restarted = line.started and (scan.ready_line is not None or f.kv_tokens is not None
                                       or scan.oom is not None or scan.death is not None or f.max_conc is not None)
    if scan.restarted:
        scan.startups += 1
        scan.figures = _StartFigures()


def _version(scan: _Scan, line: _Line) -> None:
    # The version and model; a version line also marks a (re)start of the server.
    f, msg = scan.figures, line.msg
    m = SERVER_VERSION.search(msg)
    if m:
        if f.version is None:
            f.version = m.group("v").rstrip(".,")
            f.model = f.model or m.group("model")
        scan.serving = False
        scan.recognised += 1
        return
    if LOGO_CHARS.search(msg):
        m = LOGO_VERSION.search(msg)
        if m:
            f.version = f.version if f.version is not None else m.group("v")
            scan.serving = False
        m = LOGO_MODEL.search(msg)
        if m and f.model is None:
            f.model = m.group("model")
    m = ENGINE_VERSION.search(msg)
    if m and f.version_engine is None:
        f.version_engine = m.group("v")
        scan.recognised += 1


# The start's figures: the first line matching each pattern gives its value.
_FIRST_SEEN: tuple[tuple[str, re.Pattern[str], Callable[[re.Match[str]], Any]], ...] = (
    ("model", ENGINE_MODEL, lambda m: m.group("model")),
    ("non_default", NON_DEFAULT, lambda m: parse_non_default(m.group("args"))),
    ("namespace", NAMESPACE, lambda m: parse_namespace(m.group("ns"))),
    ("kv_tokens", KV_TOKENS, lambda m: to_int(m.group("n"))),
    ("max_conc", MAX_CONC, lambda m: to_float(m.group("x"))),
)


def _figures(scan: _Scan, line: _Line) -> None:
    for name, pattern, value in _FIRST_SEEN:
        if getattr(scan.figures, name) is None:
            m = pattern.search(line.msg)
            if m:
                setattr(scan.figures, name, value(m))


def _readiness(scan: _Scan, line: _Line) -> None:
    ln, msg, access = line.ln, line.msg, line.access
    if access:
        scan.recognised += 1
        scan.last_access_line = ln.number
    # Any answered request (a 400 for a too-long prompt too) proves the API server was up; a 5xx may come from a
    # server whose engine is already gone.
    if READY.search(msg) or (access and int(access.group("status")) < 500) or SERVING_HINT.search(msg):
        scan.now_serving(ln.number)
    if line.is_stats:
        rec = parse_stats(ln, msg, scan.cursor)
        scan.stats.append(rec)
        # A stats line with work in flight proves serving in an excerpt that starts after startup.
        if (rec.running or 0) > 0 or (rec.generation_throughput_tps or 0) > 0:
            scan.now_serving(ln.number)
    if V0_PREEMPTION.search(msg):
        scan.preempt.append(ln.number)


def _oom(scan: _Scan, line: _Line) -> None:
    # Memory failures: the first one decides the phase.
    ln = line.ln
    if scan.oom is None and not line.informational and not line.is_stats and OOM.search(line.msg):
        start = max(0, ln.number - 1 - OOM_CONTEXT_LINES)
        scan.oom = OomEvent(phase="serving" if scan.serving else "startup", line=ln.number, text=ln.text,
                            lines_before=tuple(x.text for x in scan.lines[start:ln.number - 1]),
                            logged_at=scan.cursor.logged_at, collected_at=scan.cursor.collected_at)
    if OUTPUT_HANDLER_FAILED.search(line.msg):
        scan.now_serving(ln.number)
        if scan.oom is not None and scan.oom.phase == "startup":
            scan.oom = dataclasses.replace(scan.oom, phase="serving")


def _engine_death(scan: _Scan, line: _Line) -> None:
    # Only once serving: a failed startup is a startup failure.
    if scan.death is None and scan.serving and not line.informational and ENGINE_DEAD.search(line.msg):
        scan.death = EngineDeath(line=line.ln.number, text=line.ln.text, logged_at=scan.cursor.logged_at,
                                 collected_at=scan.cursor.collected_at)


def _startup_window(scan: _Scan, line: _Line) -> None:
    # The window C05 reads: from the last server start line (a failed start before it is not this start's).
    if line.started and (scan.start_from is None or scan.restarted or line.banner):
        scan.start_from, scan.start_ready = line.ln.number, None
    if scan.serving and scan.start_ready is None:
        scan.start_ready = line.ln.number


def _rejection(scan: _Scan, line: _Line) -> None:
    # The request logger echoes prompts ("Received request …: prompt: …"); a prompt quoting an error is not a
    # rejection.
    ln, msg = line.ln, line.msg
    m = None if REQUEST_ECHO.match(msg) else REJECTION.search(msg)
    if not m:
        return
    scan.now_serving(ln.number)  # a request rejected for its length was received by a serving server
    key = rejection_key(m.lastgroup or "context_length", msg, m.start())
    if CLIENT_SIDE.search(msg):
        scan.client_rej.append((key[0], key[1], ln.number, ln.text))
        return
    prev = scan.server_rej[-1] if scan.server_rej else None
    # A chained traceback repeats the same message inside one log record (same timestamp); with no request
    # finished in between it is the same request, not a retry.
    if (prev and prev[0] == key[0] and prev[1] == key[1] and prev[2][-1] > scan.last_access_line
            and prev[4] == scan.cursor.logged_at and ln.number - prev[2][-1] <= 60):
        prev[2].append(ln.number)
    else:
        scan.server_rej.append((key[0], key[1], [ln.number], ln.text, scan.cursor.logged_at))


def _error(scan: _Scan, line: _Line) -> None:
    ln, msg = line.ln, line.msg
    stripped = msg.strip()
    record_key = (ln.process, ln.level, ln.logged_at, ln.source)
    em = EXCEPTION_LINE.match(stripped)
    if em and not msg.startswith((" ", "\t")):
        if len(scan.errors) < _MAX_ERRORS:
            scan.errors.append(LogErrorRecord(line=ln.number, text=stripped, exception=em.group("exc")))
        scan.exception_tail = record_key
        return
    if scan.exception_tail is not None and record_key == scan.exception_tail and stripped:
        # The remaining lines of a multi-line exception message (CUDA's "might be asynchronously reported…"
        # hints) belong to the exception already recorded.
        return
    scan.exception_tail = None
    if (len(scan.errors) < _MAX_ERRORS and ln.level in ("ERROR", "CRITICAL", "FATAL") and stripped
            and not msg.startswith((" ", "\t"))
            and not stripped.startswith(("Traceback", "File ", "The above exception", "During handling"))):
        scan.errors.append(LogErrorRecord(line=ln.number, text=stripped, exception=None))


# Every line goes through every rule, in this order: a rule reads what the rules before it set on this line
# (a restart resets the figures before the version is read; readiness before an OOM's phase; serving before
# the engine's death, the startup window and the rejections).
_LINE_RULES: tuple[Callable[[_Scan, _Line], None], ...] = (
    _restart, _version, _figures, _readiness, _oom, _engine_death, _startup_window, _rejection, _error)


def _decoded(text: str | bytes) -> str:
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", errors="replace")
    if not isinstance(text, str):
        raise ArtifactError(f"a vLLM log must be text, not {type(text).__name__}")
    if not text.strip():
        raise ArtifactError("the log is empty: paste the server's stdout/stderr (`kubectl logs`, `docker logs`)")
    return text.replace("\x00", "")


def parse_vllm_log(text: str | bytes) -> VllmLogReport:
    """Read a vLLM server log (startup, runtime or an excerpt of either)."""
    text = _decoded(text)
    truncated = not text.endswith(("\n", "\r"))
    scan = _Scan(lines=tuple(split_line(number, raw) for number, raw in numbered_lines(text)))
    for ln in scan.lines:
        scan.cursor.update(ln)
        line = _Line.read(ln)
        for rule in _LINE_RULES:
            rule(scan, line)
    return _report(scan, truncated)


def _report(scan: _Scan, truncated: bool) -> VllmLogReport:
    f = scan.figures
    rejections = merge_rejections(scan.server_rej, scan.client_rej)
    version = f.version or f.version_engine
    findings = (version, f.non_default, f.namespace, f.kv_tokens, f.max_conc, scan.ready_line, scan.oom,
                scan.death, rejections, scan.stats, scan.preempt)
    if scan.recognised == 0 and not any(findings):
        raise ArtifactError("this is not a vLLM server log: no vLLM, uvicorn or engine line in it "
                            "(expected lines like `INFO 05-23 15:53:18 [api_server.py:1] …`)")
    return VllmLogReport(
        lines=scan.lines, vllm_version=version, model=f.model, non_default_args=f.non_default,
        namespace_args=f.namespace, kv_cache_tokens=f.kv_tokens, max_concurrency=f.max_conc,
        ready=scan.ready_line is not None, ready_line=scan.ready_line, oom=scan.oom, engine_death=scan.death,
        context_rejections=rejections, errors=tuple(dedupe_errors(scan.errors)), stats=tuple(scan.stats),
        preemption_warnings=tuple(scan.preempt), truncated=truncated,
        notes=("the log ends mid-line",) if truncated else (), startups=scan.startups,
        startup_from_line=scan.start_from,
        startup_ready_line=scan.start_ready if scan.start_from is not None else scan.ready_line)


def inspect_log(text: str | bytes) -> LogJson:
    """`k3 inspect log FILE --json`."""
    return parse_vllm_log(text).as_dict()
