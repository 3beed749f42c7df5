"""What the capacity axis' finding modules share: the finding constructor (rule ids under `capacity.`), a latency
figure in prose, and the load windows of a run (each concurrency step that ran, then the soak)."""

from __future__ import annotations

from typing import Any

from ...core.evidence import Finding, FindingStatus
from .result import CapacityResult
from .shapes import Window


def finding(rule: str, status: FindingStatus, message: str, *, observed: Any = None, expected: Any = None,
            **evidence: Any) -> Finding:
    """A capacity finding: `rule` is named under `capacity.`, the keyword arguments left over are its evidence. The
    finding modules import it as `_f`, the name tests/test_decision.py reads the emitted rule ids from."""
    return Finding(rule=f"capacity.{rule}", status=status, message=message, observed=observed, expected=expected,
                   evidence=evidence)


def ms_text(value: Any) -> str:
    """A latency in ms as a sentence writes it ("n/a" when unknown)."""
    return "n/a" if value is None else f"{value:.0f} ms"


def load_windows(result: CapacityResult) -> list[tuple[str, Window]]:
    """(name, window) of every load window that ran: the concurrency steps, then the soak."""
    out: list[tuple[str, Window]] = [(f"concurrency {s['concurrency']}", s) for s in result.steps
                                     if s.get("status") != "skipped"]
    if soak := result.run.get("soak"):
        out.append(("the soak", soak))
    return out
