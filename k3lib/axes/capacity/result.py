"""A capacity run read back from its run folder: the phases, steps and series as written, plus the OOM event
assembled from the client's first failure, the health polls and the server log. Pure once the files are read,
so a run can be re-rendered (figures, findings) without sending a request."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import cast

from ...core.errors import ArtifactError
from ...core.jsonvalue import JsonObject
from ...io.readers.vllm_log import VllmLogReport, parse_vllm_log
from ...core.store import RunStore
from .analysis import memory_around, saturation_point
from .classify import REMEDIES, LogVerdict, OomClassification, classify_log, classify_oom
from .config import OOM_AFTER_S, OOM_BEFORE_S
from .run_shapes import OomEventRow, PhaseRow, RunJson, SessionTurnRow
from .shapes import GpuRow, MetricRow, RequestRow, StepRow

# What the capacity axis writes to the run folder (capacity.run writes, this module reads back).
DIR = "evidence/capacity"
REQUESTS = f"{DIR}/requests.jsonl"
RUN_JSON = f"{DIR}/run.json"
METRICS_JSON = f"{DIR}/metrics.json"
GPU_JSON = f"{DIR}/gpu.json"
LOG_TXT = f"{DIR}/server_log.txt"
SESSIONS_JSONL = f"{DIR}/sessions.jsonl"  # one record per session turn, as it ended (sessions.py)


@dataclasses.dataclass(frozen=True)
class CapacityResult:
    run: RunJson
    metrics: list[MetricRow]
    gpu: list[GpuRow]
    requests: list[RequestRow]
    log: VllmLogReport | None
    oom: OomEventRow | None  # the assembled event (see `oom_event`), None when nothing failed
    sessions: list[SessionTurnRow] = dataclasses.field(default_factory=list)  # the session phase's turns

    @property
    def plan(self) -> JsonObject:
        """The plan the run followed (`shape.CapacityPlan`, dumped)."""
        return self.run["plan"]

    @property
    def steps(self) -> list[StepRow]:
        return self.run.get("steps") or []

    @property
    def saturation_point(self) -> int | None:
        done = [s for s in self.steps if s.get("status") != "skipped"]
        return saturation_point(done) if done else None

    def phase(self, name: str) -> PhaseRow | None:
        return next((p for p in self.run.get("phases") or [] if p["phase"] == name), None)

    def step(self, concurrency: int) -> StepRow | None:
        return next((s for s in self.steps if s["concurrency"] == concurrency), None)


def read_capacity(store: RunStore) -> CapacityResult:
    """Everything the capacity axis wrote to a run folder, with the OOM event assembled."""
    run = store.read_json(RUN_JSON)
    if not isinstance(run, dict) or "plan" not in run:
        raise ArtifactError(f"{store.path(RUN_JSON)}: no capacity run here (run the capacity axis first)")
    metrics = store.read_json(METRICS_JSON) or []
    gpu = store.read_json(GPU_JSON) or []
    requests = store.read_jsonl(REQUESTS)
    log = None
    log_path = store.path(LOG_TXT)
    if log_path.exists():
        try:
            # bytes, not text mode: universal newlines would make every progress-bar CR a line of its own and
            # number the lines differently from the environment axis, which reads the same log as bytes
            log = parse_vllm_log(log_path.read_bytes())
        except ArtifactError:
            log = None
    sessions = store.read_jsonl(SESSIONS_JSONL) if store.path(SESSIONS_JSONL).exists() else []
    # the files as the run wrote them (run.CapacityRunner.describe, the samplers, the sinks): typed, not re-validated
    run_json = cast(RunJson, run)
    gpu_rows = cast(list[GpuRow], gpu)
    return CapacityResult(run_json, cast(list[MetricRow], metrics), gpu_rows, cast(list[RequestRow], requests), log,
                          oom_event(run_json, log, gpu_rows), cast(list[SessionTurnRow], sessions))


def log_time_wall(logged_at: str | None, near_wall: float) -> float | None:
    """vLLM prints "MM-DD HH:MM:SS" in the server's local time and no year: read it in this machine's zone, in
    the year of the run (the previous one if that lands far in the future). Best effort, labelled as such."""
    if not logged_at:
        return None
    year = dt.datetime.fromtimestamp(near_wall).year
    try:
        stamp = dt.datetime.strptime(f"{year}-{logged_at}", "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return None
    t = stamp.timestamp()
    if t > near_wall + 86400:
        t = stamp.replace(year=year - 1).timestamp()
    return t


def _lines_before(log: VllmLogReport, line: int, n: int = 20) -> list[str]:
    start = max(0, line - 1 - n)
    return [x.text for x in log.lines[start:line - 1]]


def oom_event(run: RunJson, log: VllmLogReport | None, gpu_rows: list[GpuRow]) -> OomEventRow | None:
    """The memory failure of a run, if any: what it was (`kind`), when (client-observed and log time), where
    (phase, step, requests in flight), its class and decision, the log lines before it and the memory curve
    around it. `kind`: "oom" (the log shows it), "not-ready", "engine-death" (the log shows a fatal error that
    is not a memory error), "unexplained" (the server failed, no log to say why), "server-errors" (5xx while the
    engine stayed up)."""
    ready = run.get("ready") or {}
    failure = run.get("failure")
    verdict: LogVerdict | None = classify_log(log) if log is not None else None
    near = (run.get("phases") or [{}])[0].get("start_wall") or 0.0
    event: OomEventRow = {}
    cls: OomClassification | None = None

    if ready and not ready.get("ready"):
        if log is not None and log.oom is not None and log.oom.phase == "startup":
            kind = "oom"
        else:
            kind = "not-ready"
        cls = classify_oom("cold-load", ready=False)
        event.update({"phase": "cold-load", "step": None, "in_flight": 0,
                     "at_wall": (failure.get("t_wall") if failure else None) or ready.get("ready_at_wall")})
    elif failure is not None or (verdict is not None and verdict.kind in ("serving-oom", "engine-death")):
        if log is not None and log.oom is not None:
            kind = "oom"
        elif log is not None and log.engine_death is not None:
            kind = "engine-death"
        elif run.get("dead"):
            kind = "unexplained"
        else:
            kind = "server-errors"
        if failure is not None:
            event.update({"phase": failure.get("phase"), "step": failure.get("step"),
                          "in_flight": failure.get("in_flight"), "at_wall": failure.get("t_wall"),
                          "via": failure.get("via"), "first_error": failure.get("error")})
            if kind in ("oom", "unexplained"):
                cls = classify_oom(failure.get("phase") or "", in_flight=failure.get("in_flight"))
        else:
            event.update({"phase": None, "step": None, "in_flight": verdict.running_before if verdict else None,
                          "at_wall": None})
            if kind == "oom" and verdict is not None and verdict.oom_class is not None:
                cls = OomClassification(oom_class=verdict.oom_class, remedy=REMEDIES[verdict.oom_class],
                                        decision=verdict.decision or "", basis=verdict.basis)
    else:
        return None

    event["kind"] = kind
    event["classification"] = cls.model_dump() if cls else None
    event["log_verdict"] = verdict.model_dump() if verdict else None
    marker = None
    if log is not None and log.oom is not None and kind in ("oom",):
        marker = log.oom
        event.update({"log_line": marker.line, "log_text": marker.text, "lines_before": list(marker.lines_before),
                     "log_time": marker.logged_at,
                     "log_collected_at": marker.collected_at.isoformat() if marker.collected_at else None})
    elif log is not None and log.engine_death is not None:
        death = log.engine_death
        event.update({"log_line": death.line, "log_text": death.text, "lines_before": _lines_before(log, death.line),
                     "log_time": death.logged_at,
                     "log_collected_at": death.collected_at.isoformat() if death.collected_at else None})
    else:
        event.update({"log_line": None, "log_text": None, "lines_before": [], "log_time": None,
                      "log_collected_at": None})
    event["log_time_wall"] = log_time_wall(event.get("log_time"), near or event.get("at_wall") or 0.0)
    if event.get("at_wall") is None:
        event["at_wall"] = event["log_time_wall"]
    at = event.get("at_wall")
    event["memory_around"] = memory_around(gpu_rows, at, OOM_BEFORE_S, OOM_AFTER_S) if at else []
    return event
