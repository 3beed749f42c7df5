"""vLLM server log reader: version, flags, KV capacity, readiness, OOM (startup vs serving), engine death,
context-length rejections and periodic stats, from any prefix format vLLM 0.6 → 0.33 printed, with the
collector prefixes (kubectl timestamps, pod tags, ANSI colour, CRLF) people paste along."""

from __future__ import annotations

import ast
import dataclasses
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from k3lib.core.errors import ArtifactError
from k3lib.io.readers._text import numbered_lines, terminal_view

__all__ = [
    "ContextRejection",
    "EngineDeath",
    "LogErrorRecord",
    "LogLine",
    "OomEvent",
    "StatsRecord",
    "VllmLogReport",
    "inspect_log",
    "parse_vllm_log",
]

# How many lines before an OOM the capacity axis keeps as context.
OOM_CONTEXT_LINES = 20
# A Python repr longer than this is not handed to ast (a pathological paste must not stall the reader).
_MAX_LITERAL_CHARS = 200_000
_MAX_ERRORS = 200


# ---------------------------------------------------------------------------------------------------------------
# Values


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


@dataclass(frozen=True)
class OomEvent:
    phase: str                           # "startup" | "serving"
    line: int
    text: str
    lines_before: tuple[str, ...]
    logged_at: str | None                # nearest vLLM timestamp at or before the line
    collected_at: datetime | None        # nearest collector timestamp at or before the line


@dataclass(frozen=True)
class EngineDeath:
    line: int
    text: str
    logged_at: str | None
    collected_at: datetime | None


@dataclass(frozen=True)
class ContextRejection:
    """One rejected request; `lines` are every line that reported it (server traceback, client error)."""

    kind: str                            # "context_length" | "max_tokens" | "prompt_too_long" | "decoder_prompt"
    lines: tuple[int, ...]
    text: str


@dataclass(frozen=True)
class LogErrorRecord:
    line: int
    text: str
    exception: str | None                # "torch.OutOfMemoryError" when the line is an exception line


@dataclass(frozen=True)
class StatsRecord:
    """A periodic stats line (V0 `metrics.py` or V1 `loggers.py`); fields absent in that version are None."""

    line: int
    logged_at: str | None
    collected_at: datetime | None
    engine: str | None
    prompt_throughput_tps: float | None
    generation_throughput_tps: float | None
    running: int | None
    waiting: int | None                  # V1 "Waiting", V0 "Pending"
    swapped: int | None
    preemptions: int | None              # printed only when > 0 (0.12+); None when not printed
    kv_cache_usage_pct: float | None
    prefix_cache_hit_rate_pct: float | None


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


# ---------------------------------------------------------------------------------------------------------------
# Line normalisation: collector prefixes, ANSI, vLLM/uvicorn prefixes

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


def _split_line(number: int, raw: str) -> LogLine:
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


# ---------------------------------------------------------------------------------------------------------------
# What the lines say

# "vLLM API server version X" (≤0.14) and "vLLM server version X, serving model Y" (0.16+).
_SERVER_VERSION = re.compile(
    r"vLLM (?:API )?server version\s+v?(?P<v>[0-9][\w.+-]*)(?:,?\s*serving model\s+(?P<model>\S+))?")
# The ASCII logo (0.16+) prints "version X" and "model Y" beside block characters.
_LOGO_CHARS = re.compile(r"[\u2580-\u259f]")
_LOGO_VERSION = re.compile(r"(?:^|\s)version\s+v?(?P<v>\d+\.\d+[\w.+-]*)\s*$")
_LOGO_MODEL = re.compile(r"(?:^|\s)model\s+(?P<model>\S+)\s*$")
_ENGINE_VERSION = re.compile(r"Initializing an? (?:V1 )?LLM engine \(v(?P<v>[^)\s]+)\)")
_ENGINE_MODEL = re.compile(r"LLM engine \(v[^)]*\) with config: model='(?P<model>[^']+)'")
_NON_DEFAULT = re.compile(r"non-default args:\s*(?P<args>\{.*)$")
_NAMESPACE = re.compile(r"\bargs:\s*(?P<ns>Namespace\(.*)$")
_KV_TOKENS = re.compile(r"(?:^|\s)(?:[A-Z]{2,6}(?: \+ host)?) KV cache size:\s*(?P<n>[\d,_]+)\s*tokens")
_MAX_CONC = re.compile(r"Maximum concurrency for\s+[\d,_]+\s+tokens per request:\s*(?P<x>[\d.]+)\s*x")

_READY = re.compile(r"Application startup complete|Uvicorn running on")
_ACCESS = re.compile(r'"(?:GET|POST|PUT|DELETE|HEAD|OPTIONS|PATCH) \S+ HTTP/[\d.]+"\s+(?P<status>\d{3})\b')
# Lines that prove requests were being served even when the startup part of the log was not pasted: a request
# accepted or finished, an offline run's progress bar at 100 %, a V0 preemption warning.
_SERVING_HINT = re.compile(r"\bAdded request\b|\bReceived request\b|\bFinished request\b"
                           r"|Processed prompts:\s*100%|is preempted by PreemptionMode")
# V1's AsyncLLM starts its output handler with the first request: its failure proves the engine was serving.
_OUTPUT_HANDLER_FAILED = re.compile(r"\boutput_handler failed\b")

_OOM = re.compile(
    r"(?i:\bout of memory\b)|OutOfMemoryError|CUDA_ERROR_OUT_OF_MEMORY|cudaErrorMemoryAllocation"
    r"|No available memory for the cache blocks"
    r"|KV cache is needed, which is larger than the available KV cache memory"
    r"|larger than the maximum number of tokens that can be stored in KV cache"
    r"|not enough GPU memory"
    r"|is less than desired GPU memory utilization"
    r"|insufficient (?:GPU|device) memory")
_ENGINE_DEAD = re.compile(r"\b(?:MQ|Async)?EngineDeadError\b|EngineCore encountered a fatal error")

_REJECTION = re.compile(
    r"(?P<context_length>This (?:model's )?maximum context length is)"
    r"|(?P<max_tokens>'max_tokens'[^\n]{0,80}?is too large|Please request fewer output tokens)"
    r"|(?P<prompt_too_long>Input prompt \(\d+ tokens\) is too long)"
    r"|(?P<decoder_prompt>The decoder prompt \(length \d+\)[^\n]{0,80}?longer than the maximum model length)")
_REQUEST_ECHO = re.compile(r"\s*(?:Received request|Added request|Request \S+ details)\b")
_CLIENT_SIDE = re.compile(r"BadRequestError|Error code: 400|[\"']code[\"']:\s*400|\bstatus(?:_code)?[=:]\s*400")
_NUMBER = re.compile(r"\d[\d,]*")

_EXCEPTION_LINE = re.compile(r"^(?P<exc>(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt))(?::\s|$)")
_STATS = re.compile(r"Avg prompt throughput|Running: \d+ reqs")
_STATS_FIELDS = {
    "prompt_throughput_tps": (re.compile(r"Avg prompt throughput:\s*([\d.]+)"), float),
    "generation_throughput_tps": (re.compile(r"Avg generation throughput:\s*([\d.]+)"), float),
    "running": (re.compile(r"Running:\s*(\d+)"), int),
    "waiting": (re.compile(r"(?:Waiting|Pending):\s*(\d+)"), int),
    "swapped": (re.compile(r"Swapped:\s*(\d+)"), int),
    "preemptions": (re.compile(r"Preemptions:\s*(\d+)"), int),
    "kv_cache_usage_pct": (re.compile(r"(?:GPU )?KV cache usage:\s*([\d.]+)\s*%"), float),
    "prefix_cache_hit_rate_pct": (re.compile(r"Prefix cache hit rate:\s*(?:GPU:\s*)?([\d.]+)\s*%"), float),
}
_STATS_ENGINE = re.compile(r"(?P<e>Engine \d+|\d+ Engines Aggregated):")
_V0_PREEMPTION = re.compile(r"is preempted by PreemptionMode")


def _literal(text: str) -> Any:
    """ast.literal_eval bounded in size and exceptions: a cut or hostile repr yields None, never a raise."""
    if len(text) > _MAX_LITERAL_CHARS:
        return None
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None


def _parse_non_default(raw: str) -> dict[str, Any] | str:
    raw = raw.strip()
    value = _literal(raw)
    return value if isinstance(value, dict) else raw


def _parse_namespace(raw: str) -> dict[str, Any] | None:
    if len(raw) > _MAX_LITERAL_CHARS:
        return None
    try:
        node = ast.parse(raw.strip(), mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    if not isinstance(node, ast.Call):
        return None
    out: dict[str, Any] = {}
    for kw in node.keywords:
        if kw.arg is None:
            continue
        try:
            out[kw.arg] = ast.literal_eval(kw.value)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            # Callables and enums print as `<function …>` or `Foo.BAR`; keep their source text.
            out[kw.arg] = ast.unparse(kw.value) if hasattr(ast, "unparse") else None
    return out


def _to_int(text: str) -> int | None:
    try:
        return int(text.replace(",", "").replace("_", ""))
    except ValueError:
        return None


def _to_float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _rejection_key(kind: str, message: str, start: int) -> tuple[str, tuple[int, ...]]:
    # The numbers right after the wording identify the request (limit, prompt length, max_tokens); a client
    # line may be cut short, so matching later compares by prefix.
    nums = tuple(int(n.replace(",", "")) for n in _NUMBER.findall(message[start:start + 400])[:3])
    return kind, nums


def _compatible(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    n = min(len(a), len(b))
    return a[:n] == b[:n]


class _Cursor:
    """The nearest timestamps seen so far, so a traceback line inherits the time of the record it belongs to."""

    def __init__(self) -> None:
        self.logged_at: str | None = None
        self.collected_at: datetime | None = None

    def update(self, line: LogLine) -> None:
        if line.logged_at:
            self.logged_at = line.logged_at
        if line.collected_at:
            self.collected_at = line.collected_at


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
    lines = tuple(_split_line(number, raw) for number, raw in numbered_lines(text))

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
    cursor = _Cursor()

    start_from = start_ready = None
    for ln in lines:
        cursor.update(ln)
        msg = ln.message
        starts_before = startups
        if ln.level or ln.process:
            recognised += 1

        # --- a (re)start of the server: when a paste holds several, the figures (version, args, KV capacity) are
        # the last one's; what happened (ready, OOM, death, rejections) is kept over the whole paste.
        started = bool(_SERVER_VERSION.search(msg) or (_LOGO_CHARS.search(msg) and _LOGO_VERSION.search(msg))
                       or _ENGINE_VERSION.search(msg))
        if started and (ready_line is not None or kv_tokens is not None or oom is not None or death is not None
                        or max_conc is not None):
            startups += 1
            version = version_engine = model = non_default = namespace = kv_tokens = max_conc = None

        # --- version and model; a version line also marks a (re)start of the server
        m = _SERVER_VERSION.search(msg)
        if m:
            if version is None:
                version = m.group("v").rstrip(".,")
                model = model or m.group("model")
            serving = False
            recognised += 1
        else:
            if _LOGO_CHARS.search(msg):
                m = _LOGO_VERSION.search(msg)
                if m:
                    if version is None:
                        version = m.group("v")
                    serving = False
                m = _LOGO_MODEL.search(msg)
                if m and model is None:
                    model = m.group("model")
            m = _ENGINE_VERSION.search(msg)
            if m and version_engine is None:
                version_engine = m.group("v")
                recognised += 1

        if model is None:
            m = _ENGINE_MODEL.search(msg)
            if m:
                model = m.group("model")
        if non_default is None:
            m = _NON_DEFAULT.search(msg)
            if m:
                non_default = _parse_non_default(m.group("args"))
        if namespace is None:
            m = _NAMESPACE.search(msg)
            if m:
                namespace = _parse_namespace(m.group("ns"))
        if kv_tokens is None:
            m = _KV_TOKENS.search(msg)
            if m:
                kv_tokens = _to_int(m.group("n"))
        if max_conc is None:
            m = _MAX_CONC.search(msg)
            if m:
                max_conc = _to_float(m.group("x"))

        # --- readiness
        access = _ACCESS.search(msg)
        if access:
            recognised += 1
            last_access_line = ln.number
        # Any answered request (a 400 for a too-long prompt too) proves the API server was up; a 5xx may come
        # from a server whose engine is already gone.
        if _READY.search(msg) or (access and int(access.group("status")) < 500) or _SERVING_HINT.search(msg):
            serving = True
            if ready_line is None:
                ready_line = ln.number
        is_stats = bool(_STATS.search(msg))
        if is_stats:
            rec = _parse_stats(ln, msg, cursor)
            stats.append(rec)
            # A stats line with work in flight proves serving in an excerpt that starts after startup.
            if (rec.running or 0) > 0 or (rec.generation_throughput_tps or 0) > 0:
                serving = True
                if ready_line is None:
                    ready_line = ln.number
        if _V0_PREEMPTION.search(msg):
            preempt.append(ln.number)

        # --- memory failures: the first one decides the phase
        informational = ln.level in ("INFO", "DEBUG")
        if oom is None and not informational and not is_stats and _OOM.search(msg):
            start = max(0, ln.number - 1 - OOM_CONTEXT_LINES)
            oom = OomEvent(phase="serving" if serving else "startup", line=ln.number, text=ln.text,
                           lines_before=tuple(x.text for x in lines[start:ln.number - 1]),
                           logged_at=cursor.logged_at, collected_at=cursor.collected_at)

        if _OUTPUT_HANDLER_FAILED.search(msg):
            serving = True
            if ready_line is None:
                ready_line = ln.number
            if oom is not None and oom.phase == "startup":
                oom = dataclasses.replace(oom, phase="serving")

        # --- engine death: only once serving; a failed startup is a startup failure
        if death is None and serving and not informational and _ENGINE_DEAD.search(msg):
            death = EngineDeath(line=ln.number, text=ln.text, logged_at=cursor.logged_at,
                                collected_at=cursor.collected_at)

        # the window C05 reads: from the last server start line (a failed start before it is not this start's)
        if started and (start_from is None or startups != starts_before or _SERVER_VERSION.search(msg)
                        or (_LOGO_CHARS.search(msg) and _LOGO_VERSION.search(msg))):
            start_from, start_ready = ln.number, None
        if serving and start_ready is None:
            start_ready = ln.number

        # --- context-length rejections
        # The request logger echoes prompts ("Received request …: prompt: …"); a prompt quoting an error is
        # not a rejection.
        m = None if _REQUEST_ECHO.match(msg) else _REJECTION.search(msg)
        if m:
            # A request rejected for its length was received by a serving server.
            serving = True
            if ready_line is None:
                ready_line = ln.number
            kind = m.lastgroup or "context_length"
            key = _rejection_key(kind, msg, m.start())
            if _CLIENT_SIDE.search(msg):
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
        em = _EXCEPTION_LINE.match(stripped)
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

    rejections = _merge_rejections(server_rej, client_rej)
    errors = _dedupe_errors(errors)
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


def _parse_stats(ln: LogLine, msg: str, cursor: _Cursor) -> StatsRecord:
    values: dict[str, Any] = {}
    for name, (pat, conv) in _STATS_FIELDS.items():
        m = pat.search(msg)
        values[name] = conv(m.group(1)) if m and _is_number(m.group(1)) else None
    m = _STATS_ENGINE.search(msg)
    return StatsRecord(line=ln.number, logged_at=cursor.logged_at, collected_at=cursor.collected_at,
                       engine=m.group("e") if m else None, **values)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _merge_rejections(server: list[tuple[str, tuple[int, ...], list[int], str, str | None]],
                      client: list[tuple[str, tuple[int, ...], int, str]]) -> tuple[ContextRejection, ...]:
    """Count requests: a client `BadRequestError` line that repeats a server line is the same request."""
    out = [ContextRejection(kind=k, lines=tuple(nums), text=t) for k, _, nums, t, _ in server]
    unmatched = list(range(len(server)))
    for kind, key, number, text in client:
        hit = next((i for i in unmatched if server[i][0] == kind and _compatible(server[i][1], key)), None)
        if hit is None:
            out.append(ContextRejection(kind=kind, lines=(number,), text=text))
        else:
            unmatched.remove(hit)
            out[hit] = ContextRejection(kind=kind, lines=out[hit].lines + (number,), text=out[hit].text)
    return tuple(sorted(out, key=lambda r: r.lines[0]))


def _dedupe_errors(errors: list[LogErrorRecord]) -> list[LogErrorRecord]:
    # Each TP worker and each chained traceback repeats the same exception; keep the first of each text.
    seen: set[str] = set()
    out = []
    for e in errors:
        if e.text in seen:
            continue
        seen.add(e.text)
        out.append(e)
    return out


def inspect_log(text: str | bytes) -> dict[str, Any]:
    """`k3 inspect log FILE --json`."""
    return parse_vllm_log(text).as_dict()
