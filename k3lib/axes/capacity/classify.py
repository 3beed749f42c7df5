"""What an OOM means, by when it happened: at startup (topology or image), on long contexts alone (context
limit or load spread), or when requests overlap (cache capacity, concurrency, queue control). Pure.

The same classes serve a run of the capacity axis (the phase and the requests in flight are known) and a server
log read on its own (the last periodic stats line before the OOM says how many requests were running).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from ...core.outcomes import rule_for
from ...io.readers.vllm_log import VllmLogReport

OomClass = Literal["startup", "long-context", "concurrency", "serving"]
LogKind = Literal["startup-oom", "serving-oom", "engine-death", "context-rejection", "clean"]

#: What each class asks of the team, and the acceptance decision it implies.
REMEDIES: dict[str, str] = {
    "startup": "rework the topology or the image: the weights, activations and KV pool do not fit the cards as "
               "started (parallelism layout, gpu-memory-utilization, GPU count, image build)",
    "long-context": "lower the context limit (--max-model-len) or spread the load (more tensor/pipeline "
                    "parallelism, a smaller --max-num-batched-tokens for chunked prefill)",
    "concurrency": "add cache capacity, lower the concurrency (--max-num-seqs) or control the queue in front of "
                   "the server",
    "serving": "the OOM happened while serving but the load at that moment is unknown: rerun the capacity axis "
               "to tell long context from overlapping requests",
}
#: The capacity finding each class is reported under; its decision comes from the one table (k3lib.verdict.decision).
OOM_RULES: dict[str, str] = {"startup": "capacity.startup_oom", "long-context": "capacity.oom",
                             "concurrency": "capacity.oom", "serving": "capacity.oom"}
DECISIONS: dict[str, str] = {cls: rule_for(rule).level.value for cls, rule in OOM_RULES.items()}


class OomClassification(BaseModel):
    """The class of a memory failure, its remedy and the decision it implies; dumped into the OOM event."""

    model_config = ConfigDict(frozen=True)

    oom_class: OomClass
    remedy: str
    decision: str
    basis: str  # why this class: the phase, the requests in flight, the stats line read


def _made(cls: OomClass, basis: str) -> OomClassification:
    return OomClassification(oom_class=cls, remedy=REMEDIES[cls], decision=DECISIONS[cls], basis=basis)


def classify_oom(phase: str, *, in_flight: int | None = None, ready: bool = True) -> OomClassification:
    """Class of an OOM seen during the capacity axis. `phase` is the axis phase it happened in; `in_flight` the
    requests the client had outstanding at that moment (None: unknown)."""
    if not ready or phase == "cold-load":
        return _made("startup", "the server never became ready: the memory failure is at load or profiling")
    if phase == "long-context":
        return _made("long-context", "requests were sent one at a time (long-context phase): only the length "
                                     "of the prompt can have exhausted the memory")
    if in_flight is not None and in_flight <= 1:
        return _made("long-context", f"a single request was in flight in the {phase} phase")
    if phase in ("concurrency", "soak", "explore", "sessions"):
        basis = (f"{in_flight} requests overlapped" if in_flight is not None else "requests overlapped") + \
                f" in the {phase} phase"
        return _made("concurrency", basis)
    return _made("serving", f"OOM in phase {phase!r} with an unknown number of requests in flight")


# -----------------------------------------------------------------------------------------------------------
# A server log on its own


class LogVerdict(BaseModel):
    """What a vLLM log says about memory: the most severe event, its class and the decision it implies."""

    model_config = ConfigDict(frozen=True)

    kind: LogKind
    oom_class: OomClass | None
    decision: str | None
    line: int | None  # the line of the OOM, the engine death or the first rejection
    running_before: int | None  # requests running in the last stats line before a serving OOM
    context_rejections: int
    basis: str


def _verdict(kind: LogKind, oom_class: OomClass | None, decision: str | None, line: int | None,
             running_before: int | None, context_rejections: int, basis: str) -> LogVerdict:
    return LogVerdict(kind=kind, oom_class=oom_class, decision=decision, line=line, running_before=running_before,
                      context_rejections=context_rejections, basis=basis)


def classify_log(report: VllmLogReport) -> LogVerdict:
    """Startup OOM > serving OOM > engine death > context rejection (the acceptable refusal) > clean."""
    rejections = len(report.context_rejections)
    oom = report.oom
    if oom is not None and oom.phase == "startup":
        made = _made("startup", f"memory failure before the server was ready (line {oom.line})")
        return _verdict("startup-oom", made.oom_class, made.decision, oom.line, None, rejections, made.basis)
    if oom is not None:
        before = [s for s in report.stats if s.line < oom.line and s.running is not None]
        running = before[-1].running if before else None
        if running is None:
            made = _made("serving", f"OOM while serving (line {oom.line}); no stats line before it tells the load")
        elif running <= 1:
            made = _made("long-context", f"OOM while serving with {running} request running (stats line "
                                         f"{before[-1].line}): one prompt was enough")
        else:
            made = _made("concurrency", f"OOM while serving with {running} requests running (stats line "
                                        f"{before[-1].line}): requests overlapped")
        return _verdict("serving-oom", made.oom_class, made.decision, oom.line, running, rejections, made.basis)
    if report.engine_death is not None:
        return _verdict("engine-death", None, None, report.engine_death.line, None, rejections,
                          f"the engine died while serving (line {report.engine_death.line}) without a memory "
                          "error: not an OOM, look at the error above it")
    if rejections:
        first = report.context_rejections[0]
        return _verdict("context-rejection", None, None, first.lines[0], None, rejections,
                          f"{rejections} request(s) beyond the context limit refused before reaching the GPUs: "
                          "the acceptable case")
    return _verdict("clean", None, None, None, None, 0, "no memory failure, engine death or context rejection")
