"""C05: what the startup log says between the server's last start and its readiness.

The checklist item reads "startup logs hold no unhandled loading or compatibility error". A server that answers
proves it started, not that it started clean: an ImportError that made vLLM fall back to a slower kernel, an
ERROR line from a worker that was retried, a warning that the driver is older than the build expects, all come
before `Application startup complete` and leave the server answering. This module finds them; the rule in
`k3lib.axes.compat.judge.check_startup` judges them (an error fails the item, a compatibility warning warns).
"""

from __future__ import annotations

import dataclasses
import re

from ...io.readers.vllm_log import VllmLogReport

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
_SHOWN = 3  # lines quoted in a finding; the rest are counted


@dataclasses.dataclass(frozen=True)
class StartupLines:
    """The last start's window of the log and what it holds."""

    first: int  # the first line read (1 when the paste shows no start line)
    last: int | None  # the line where the server was first seen serving; None: not seen
    errors: tuple[tuple[int, str], ...]  # (line, text) of ERROR records and exception lines
    warnings: tuple[tuple[int, str], ...]  # (line, text) of compatibility warnings

    def quote(self, which: tuple[tuple[int, str], ...]) -> str:
        shown = "; ".join(f"line {n}: {text[:140]}" for n, text in which[:_SHOWN])
        more = len(which) - _SHOWN
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
