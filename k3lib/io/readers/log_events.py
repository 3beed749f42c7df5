"""What the lines of a vLLM server log say: the wordings of each vLLM version for a start, the launch arguments,
KV capacity, readiness, an OOM, engine death, a context-length rejection, an error and a periodic stats line, and
the records (OOM, death, rejection, error, stats) the report is assembled from."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from k3lib.io.readers.log_lines import Cursor, LogLine

__all__ = [
    "ContextRejection",
    "EngineDeath",
    "LogErrorRecord",
    "OomEvent",
    "StatsRecord",
]

# A Python repr longer than this is not handed to ast (a pathological paste must not stall the reader).
_MAX_LITERAL_CHARS = 200_000


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


# "vLLM API server version X" (≤0.14) and "vLLM server version X, serving model Y" (0.16+).
SERVER_VERSION = re.compile(
    r"vLLM (?:API )?server version\s+v?(?P<v>[0-9][\w.+-]*)(?:,?\s*serving model\s+(?P<model>\S+))?")
# The ASCII logo (0.16+) prints "version X" and "model Y" beside block characters.
LOGO_CHARS = re.compile(r"[\u2580-\u259f]")
LOGO_VERSION = re.compile(r"(?:^|\s)version\s+v?(?P<v>\d+\.\d+[\w.+-]*)\s*$")
LOGO_MODEL = re.compile(r"(?:^|\s)model\s+(?P<model>\S+)\s*$")
ENGINE_VERSION = re.compile(r"Initializing an? (?:V1 )?LLM engine \(v(?P<v>[^)\s]+)\)")
ENGINE_MODEL = re.compile(r"LLM engine \(v[^)]*\) with config: model='(?P<model>[^']+)'")
NON_DEFAULT = re.compile(r"non-default args:\s*(?P<args>\{.*)$")
NAMESPACE = re.compile(r"\bargs:\s*(?P<ns>Namespace\(.*)$")
KV_TOKENS = re.compile(r"(?:^|\s)(?:[A-Z]{2,6}(?: \+ host)?) KV cache size:\s*(?P<n>[\d,_]+)\s*tokens")
MAX_CONC = re.compile(r"Maximum concurrency for\s+[\d,_]+\s+tokens per request:\s*(?P<x>[\d.]+)\s*x")

READY = re.compile(r"Application startup complete|Uvicorn running on")
ACCESS = re.compile(r'"(?:GET|POST|PUT|DELETE|HEAD|OPTIONS|PATCH) \S+ HTTP/[\d.]+"\s+(?P<status>\d{3})\b')
# Lines that prove requests were being served even when the startup part of the log was not pasted: a request
# accepted or finished, an offline run's progress bar at 100 %, a V0 preemption warning.
SERVING_HINT = re.compile(r"\bAdded request\b|\bReceived request\b|\bFinished request\b"
                          r"|Processed prompts:\s*100%|is preempted by PreemptionMode")
# V1's AsyncLLM starts its output handler with the first request: its failure proves the engine was serving.
OUTPUT_HANDLER_FAILED = re.compile(r"\boutput_handler failed\b")

OOM = re.compile(
    r"(?i:\bout of memory\b)|OutOfMemoryError|CUDA_ERROR_OUT_OF_MEMORY|cudaErrorMemoryAllocation"
    r"|No available memory for the cache blocks"
    r"|KV cache is needed, which is larger than the available KV cache memory"
    r"|larger than the maximum number of tokens that can be stored in KV cache"
    r"|not enough GPU memory"
    r"|is less than desired GPU memory utilization"
    r"|insufficient (?:GPU|device) memory")
ENGINE_DEAD = re.compile(r"\b(?:MQ|Async)?EngineDeadError\b|EngineCore encountered a fatal error")

REJECTION = re.compile(
    r"(?P<context_length>This (?:model's )?maximum context length is)"
    r"|(?P<max_tokens>'max_tokens'[^\n]{0,80}?is too large|Please request fewer output tokens)"
    r"|(?P<prompt_too_long>Input prompt \(\d+ tokens\) is too long)"
    r"|(?P<decoder_prompt>The decoder prompt \(length \d+\)[^\n]{0,80}?longer than the maximum model length)")
REQUEST_ECHO = re.compile(r"\s*(?:Received request|Added request|Request \S+ details)\b")
CLIENT_SIDE = re.compile(r"BadRequestError|Error code: 400|[\"']code[\"']:\s*400|\bstatus(?:_code)?[=:]\s*400")
_NUMBER = re.compile(r"\d[\d,]*")

EXCEPTION_LINE = re.compile(r"^(?P<exc>(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt))(?::\s|$)")
STATS = re.compile(r"Avg prompt throughput|Running: \d+ reqs")
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
V0_PREEMPTION = re.compile(r"is preempted by PreemptionMode")


def _literal(text: str) -> Any:
    """ast.literal_eval bounded in size and exceptions: a cut or hostile repr yields None, never a raise."""
    if len(text) > _MAX_LITERAL_CHARS:
        return None
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None


def parse_non_default(raw: str) -> dict[str, Any] | str:
    """The `non-default args: {...}` dict, or its text as printed when it does not read as a Python literal."""
    raw = raw.strip()
    value = _literal(raw)
    return value if isinstance(value, dict) else raw


def parse_namespace(raw: str) -> dict[str, Any] | None:
    """V0's `args: Namespace(...)` as a dict of every argument, or None when it does not read."""
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


def to_int(text: str) -> int | None:
    try:
        return int(text.replace(",", "").replace("_", ""))
    except ValueError:
        return None


def to_float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def rejection_key(kind: str, message: str, start: int) -> tuple[str, tuple[int, ...]]:
    # The numbers right after the wording identify the request (limit, prompt length, max_tokens); a client
    # line may be cut short, so matching later compares by prefix.
    nums = tuple(int(n.replace(",", "")) for n in _NUMBER.findall(message[start:start + 400])[:3])
    return kind, nums


def _compatible(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    n = min(len(a), len(b))
    return a[:n] == b[:n]


def parse_stats(ln: LogLine, msg: str, cursor: Cursor) -> StatsRecord:
    """One periodic stats line read field by field; a field its vLLM version does not print is None."""
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


def merge_rejections(server: list[tuple[str, tuple[int, ...], list[int], str, str | None]],
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


def dedupe_errors(errors: list[LogErrorRecord]) -> list[LogErrorRecord]:
    # Each TP worker and each chained traceback repeats the same exception; keep the first of each text.
    seen: set[str] = set()
    out = []
    for e in errors:
        if e.text in seen:
            continue
        seen.add(e.text)
        out.append(e)
    return out
