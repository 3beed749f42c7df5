"""C05: what the startup log says between the server's last start and its readiness.

The checklist item reads "startup logs hold no unhandled loading or compatibility error". A server that answers
proves it started, not that it started clean: an ImportError that made vLLM fall back to a slower kernel, an
ERROR line from a worker that was retried, a warning that the driver is older than the build expects, all come
before `Application startup complete` and leave the server answering. This module finds them and its rule,
`check_startup`, judges them (an error fails the item, a compatibility warning warns).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from ...core.evidence import Finding
from ...io.readers.vllm_log import VllmLogReport
from .config import STARTUP_LINES_QUOTED
from .rules import Proof, finding, missing
from .sources import EnvironmentSources

# A warning about the chain itself (driver, CUDA, build, kernels, versions), not about a request or a deprecated
# flag: those are common in healthy logs and say nothing of the environment.
_COMPAT_WARNING = re.compile("|".join((
    r"(?i)incompatib", r"not compatible", r"compatibility", r"version mismatch",
    r"mismatch(?:ed)? (?:between|with|version|driver|cuda)",
    r"driver(?: version)?(?: \S+)? (?:is )?(?:too old|older|insufficient)",
    r"older than (?:the )?(?:cuda|build|required)",
    r"unsupported (?:cuda|driver|gpu|device|compute capability|architecture|version|platform)",
    r"(?:cuda|driver|gpu|compute capability|architecture|platform) (?:\S+ )?(?:is )?not supported",
    r"(?:was|were) (?:built|compiled) (?:with|for|against)", r"compiled (?:with|for|against) .* but",
    r"failed to (?:load|import|initiali[sz]e)", r"could not (?:load|import|find)", r"cannot (?:load|import)",
    r"falling back", r"fall(?:s|ing)? back to")))


@dataclasses.dataclass(frozen=True)
class StartupLines:
    """The last start's window of the log and what it holds."""

    first: int  # the first line read (1 when the paste shows no start line)
    last: int | None  # the line where the server was first seen serving; None: not seen
    errors: tuple[tuple[int, str], ...]  # (line, text) of ERROR records and exception lines
    warnings: tuple[tuple[int, str], ...]  # (line, text) of compatibility warnings

    def quote(self, which: tuple[tuple[int, str], ...]) -> str:
        shown = "; ".join(f"line {n}: {text[:140]}" for n, text in which[:STARTUP_LINES_QUOTED])
        more = len(which) - STARTUP_LINES_QUOTED
        return shown + (f"; and {more} more" if more > 0 else "")


def _in(line: int, first: int, last: int | None) -> bool:
    return line >= first and (last is None or line < last)


def startup_lines(log: VllmLogReport) -> StartupLines:
    """Errors and compatibility warnings from the last start up to readiness (to the end when it never got
    ready). Errors are the reader's records: ERROR lines that head a record and exception lines (an exception
    counts once, its traceback does not repeat it)."""
    first = log.startup_from_line or 1
    last = log.startup_ready_line
    errors = tuple((e.line, e.text) for e in log.errors if _in(e.line, first, last))
    warnings = [(ln.number, ln.message.strip()) for ln in log.lines
                if _in(ln.number, first, last) and ln.level in ("WARNING", "WARN") and
                _COMPAT_WARNING.search(ln.message)]
    return StartupLines(first, last, errors, tuple(warnings))


def _models_server_error(s: EnvironmentSources, models: Any) -> Finding | None:
    """C05 failed by the server itself when /v1/models answered a server error; None when it did not."""
    if models is None or models.status is None or models.status < 500:
        return None
    return finding("environment.startup", "fail",
                   f"the engine is not ready: /v1/models answered HTTP {models.status} ({models.error})",
                   [Proof("/v1/models", models.status, models.error, s.attachment("models"))],
                   observed=f"HTTP {models.status}", expected="ready")


def check_startup(s: EnvironmentSources) -> Finding:
    log = s.log
    models = s.texts.get("models")
    answering = bool(s.models)
    att = s.attachment("server_log")
    if log is not None and log.oom is not None and log.oom.phase == "startup":
        proof = Proof("server_log", log.oom.text, f"line {log.oom.line}", att)
        return finding("environment.startup", "fail",
                       f"the engine never became ready: OOM at startup (line {log.oom.line}: {log.oom.text[:160]}) "
                       "→ topology or image", [proof], observed="oom at startup", expected="ready")
    if log is not None and log.engine_death is not None and not log.ready:
        d = log.engine_death
        return finding("environment.startup", "fail",
                       f"the engine never became ready: it died at startup (line {d.line}: {d.text[:160]}) "
                       "→ topology or image", [Proof("server_log", d.text, f"line {d.line}", att)],
                       observed="engine dead at startup", expected="ready")
    if log is None and (down := _models_server_error(s, models)):
        return down
    if log is None:
        answers = (f"; the server answers /v1/models ({len(s.models)} model(s)), which proves it started, not that "
                   "it started clean") if answering else ""
        return finding("environment.startup", "not-observable",
                       "the startup log was not read, so no one checked it for loading or compatibility errors: "
                       + missing(s, "server_log") + answers, expected="a startup log with no error before ready")
    window = startup_lines(log)
    span = f"lines {window.first}–{window.last}" if window.last else f"lines {window.first}–end (never ready)"
    if window.errors:
        proofs = [Proof("server_log", text, f"line {n}", att) for n, text in window.errors[:5]]
        return finding("environment.startup", "fail",
                       f"{len(window.errors)} error(s) in the startup log before ready ({span}): "
                       f"{window.quote(window.errors)} → image, dependencies or topology",
                       proofs, observed={"errors": len(window.errors), "window": span},
                       expected="no error before ready")
    if not log.ready:
        if answering:
            return finding("environment.startup", "not-observable",
                           "the log does not show the server's startup up to ready (an excerpt?), so its startup "
                           "was not read; the server answers /v1/models", expected="the log from the start")
        if down := _models_server_error(s, models):
            return down
        return finding("environment.startup", "not-observable", "readiness not observable: the log shows no ready "
                       "line and " + missing(s, "models"), expected="ready")
    if window.warnings:
        proofs = [Proof("server_log", text, f"line {n}", att) for n, text in window.warnings[:5]]
        return finding("environment.startup", "warn",
                       f"{len(window.warnings)} compatibility warning(s) before ready ({span}): "
                       f"{window.quote(window.warnings)} — handle or explain each before accepting",
                       proofs, observed={"compatibility_warnings": len(window.warnings), "window": span},
                       expected="no compatibility warning before ready")
    return finding("environment.startup", "pass",
                   f"the startup log holds no error and no compatibility warning before ready ({span}; ready at "
                   f"log line {window.last})", [Proof("server_log", "ready", f"line {window.last}", att)],
                   observed={"errors": 0, "compatibility_warnings": 0, "window": span},
                   expected="no error before ready")
