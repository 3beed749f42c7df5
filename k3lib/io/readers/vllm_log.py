"""vLLM server log reader: version, flags, KV capacity, readiness, OOM (startup vs serving), engine death,
context-length rejections and periodic stats, from any prefix format vLLM 0.6 → 0.33 printed, with the
collector prefixes (kubectl timestamps, pod tags, ANSI colour, CRLF) people paste along."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

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

    def as_dict(self) -> dict[str, Any]:
        """The `k3 inspect log --json` shape (schemas/inspect/log.schema.json)."""
        oom = None
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


def parse_vllm_log(text: str | bytes) -> VllmLogReport:
    """Read a vLLM server log (startup, runtime or an excerpt of either)."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", errors="replace")
    if not isinstance(text, str):
        raise ArtifactError(f"a vLLM log must be text, not {type(text).__name__}")
    if not text.strip():
        raise ArtifactError("the log is empty: paste the server's stdout/stderr (`kubectl logs`, `docker logs`)")
    text = text.replace("\x00", "")
    truncated = not text.endswith(("\n", "\r"))
    lines = tuple(split_line(number, raw) for number, raw in numbered_lines(text))

    version = version_engine = model = None
    non_default: dict[str, Any] | str | None = None
    namespace: dict[str, Any] | None = None
    kv_tokens: int | None = None
    max_conc: float | None = None
    ready_line: int | None = None
    serving = False                       # state of the current run (a restart in the same log resets it)
    oom: OomEvent | None = None
    death: EngineDeath | None = None
    errors: list[LogErrorRecord] = []
    stats: list[StatsRecord] = []
    preempt: list[int] = []
    server_rej: list[tuple[str, tuple[int, ...], list[int], str, str | None]] = []
    client_rej: list[tuple[str, tuple[int, ...], int, str]] = []
    last_access_line = 0
    exception_tail: tuple[Any, ...] | None = None
    recognised = 0
    startups = 1
    cursor = Cursor()

    start_from = start_ready = None
    for ln in lines:
        cursor.update(ln)
        msg = ln.message
        starts_before = startups
        if ln.level or ln.process:
            recognised += 1

        # --- a (re)start of the server: when a paste holds several, the figures (version, args, KV capacity) are
        # the last one's; what happened (ready, OOM, death, rejections) is kept over the whole paste.
        started = bool(SERVER_VERSION.search(msg) or (LOGO_CHARS.search(msg) and LOGO_VERSION.search(msg))
                       or ENGINE_VERSION.search(msg))
        if started and (ready_line is not None or kv_tokens is not None or oom is not None or death is not None
                        or max_conc is not None):
            startups += 1
            version = version_engine = model = non_default = namespace = kv_tokens = max_conc = None

        # --- version and model; a version line also marks a (re)start of the server
        m = SERVER_VERSION.search(msg)
        if m:
            if version is None:
                version = m.group("v").rstrip(".,")
                model = model or m.group("model")
            serving = False
            recognised += 1
        else:
            if LOGO_CHARS.search(msg):
                m = LOGO_VERSION.search(msg)
                if m:
                    if version is None:
                        version = m.group("v")
                    serving = False
                m = LOGO_MODEL.search(msg)
                if m and model is None:
                    model = m.group("model")
            m = ENGINE_VERSION.search(msg)
            if m and version_engine is None:
                version_engine = m.group("v")
                recognised += 1

        if model is None:
            m = ENGINE_MODEL.search(msg)
            if m:
                model = m.group("model")
        if non_default is None:
            m = NON_DEFAULT.search(msg)
            if m:
                non_default = parse_non_default(m.group("args"))
        if namespace is None:
            m = NAMESPACE.search(msg)
            if m:
                namespace = parse_namespace(m.group("ns"))
        if kv_tokens is None:
            m = KV_TOKENS.search(msg)
            if m:
                kv_tokens = to_int(m.group("n"))
        if max_conc is None:
            m = MAX_CONC.search(msg)
            if m:
                max_conc = to_float(m.group("x"))

        # --- readiness
        access = ACCESS.search(msg)
        if access:
            recognised += 1
            last_access_line = ln.number
        # Any answered request (a 400 for a too-long prompt too) proves the API server was up; a 5xx may come
        # from a server whose engine is already gone.
        if READY.search(msg) or (access and int(access.group("status")) < 500) or SERVING_HINT.search(msg):
            serving = True
            if ready_line is None:
                ready_line = ln.number
        is_stats = bool(STATS.search(msg))
        if is_stats:
            rec = parse_stats(ln, msg, cursor)
            stats.append(rec)
            # A stats line with work in flight proves serving in an excerpt that starts after startup.
            if (rec.running or 0) > 0 or (rec.generation_throughput_tps or 0) > 0:
                serving = True
                if ready_line is None:
                    ready_line = ln.number
        if V0_PREEMPTION.search(msg):
            preempt.append(ln.number)

        # --- memory failures: the first one decides the phase
        informational = ln.level in ("INFO", "DEBUG")
        if oom is None and not informational and not is_stats and OOM.search(msg):
            start = max(0, ln.number - 1 - OOM_CONTEXT_LINES)
            oom = OomEvent(phase="serving" if serving else "startup", line=ln.number, text=ln.text,
                           lines_before=tuple(x.text for x in lines[start:ln.number - 1]),
                           logged_at=cursor.logged_at, collected_at=cursor.collected_at)

        if OUTPUT_HANDLER_FAILED.search(msg):
            serving = True
            if ready_line is None:
                ready_line = ln.number
            if oom is not None and oom.phase == "startup":
                oom = dataclasses.replace(oom, phase="serving")

        # --- engine death: only once serving; a failed startup is a startup failure
        if death is None and serving and not informational and ENGINE_DEAD.search(msg):
            death = EngineDeath(line=ln.number, text=ln.text, logged_at=cursor.logged_at,
                                collected_at=cursor.collected_at)

        # the window C05 reads: from the last server start line (a failed start before it is not this start's)
        if started and (start_from is None or startups != starts_before or SERVER_VERSION.search(msg)
                        or (LOGO_CHARS.search(msg) and LOGO_VERSION.search(msg))):
            start_from, start_ready = ln.number, None
        if serving and start_ready is None:
            start_ready = ln.number

        # --- context-length rejections
        # The request logger echoes prompts ("Received request …: prompt: …"); a prompt quoting an error is
        # not a rejection.
        m = None if REQUEST_ECHO.match(msg) else REJECTION.search(msg)
        if m:
            # A request rejected for its length was received by a serving server.
            serving = True
            if ready_line is None:
                ready_line = ln.number
            kind = m.lastgroup or "context_length"
            key = rejection_key(kind, msg, m.start())
            if CLIENT_SIDE.search(msg):
                client_rej.append((key[0], key[1], ln.number, ln.text))
            else:
                prev = server_rej[-1] if server_rej else None
                # A chained traceback repeats the same message inside one log record (same timestamp); with no
                # request finished in between it is the same request, not a retry.
                if (prev and prev[0] == key[0] and prev[1] == key[1] and prev[2][-1] > last_access_line
                        and prev[4] == cursor.logged_at and ln.number - prev[2][-1] <= 60):
                    prev[2].append(ln.number)
                else:
                    server_rej.append((key[0], key[1], [ln.number], ln.text, cursor.logged_at))

        # --- errors
        stripped = msg.strip()
        record_key = (ln.process, ln.level, ln.logged_at, ln.source)
        em = EXCEPTION_LINE.match(stripped)
        if em and not msg.startswith((" ", "\t")):
            if len(errors) < _MAX_ERRORS:
                errors.append(LogErrorRecord(line=ln.number, text=stripped, exception=em.group("exc")))
            exception_tail = record_key
        elif exception_tail is not None and record_key == exception_tail and stripped:
            # The remaining lines of a multi-line exception message (CUDA's "might be asynchronously
            # reported…" hints) belong to the exception already recorded.
            pass
        else:
            exception_tail = None
            if (len(errors) < _MAX_ERRORS and ln.level in ("ERROR", "CRITICAL", "FATAL") and stripped
                    and not msg.startswith((" ", "\t"))
                    and not stripped.startswith(("Traceback", "File ", "The above exception", "During handling"))):
                errors.append(LogErrorRecord(line=ln.number, text=stripped, exception=None))

    rejections = merge_rejections(server_rej, client_rej)
    errors = dedupe_errors(errors)
    version = version or version_engine

    findings = (version, non_default, namespace, kv_tokens, max_conc, ready_line, oom, death, rejections,
                stats, preempt)
    if recognised == 0 and not any(findings):
        raise ArtifactError("this is not a vLLM server log: no vLLM, uvicorn or engine line in it "
                            "(expected lines like `INFO 05-23 15:53:18 [api_server.py:1] …`)")
    notes = []
    if truncated:
        notes.append("the log ends mid-line")
    return VllmLogReport(
        lines=lines, vllm_version=version, model=model, non_default_args=non_default, namespace_args=namespace,
        kv_cache_tokens=kv_tokens, max_concurrency=max_conc, ready=ready_line is not None, ready_line=ready_line,
        oom=oom, engine_death=death, context_rejections=rejections, errors=tuple(errors), stats=tuple(stats),
        preemption_warnings=tuple(preempt), truncated=truncated, notes=tuple(notes), startups=startups,
        startup_from_line=start_from, startup_ready_line=start_ready if start_from is not None else ready_line)


def inspect_log(text: str | bytes) -> dict[str, Any]:
    """`k3 inspect log FILE --json`."""
    return parse_vllm_log(text).as_dict()
