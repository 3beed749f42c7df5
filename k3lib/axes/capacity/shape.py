"""The shape of a capacity run, fixed before any request: context lengths, concurrency steps, request sizes and
the time each phase may take at most. Pure: parameters in, a frozen plan out."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import cast

from ...core.params import Params
from .config import CALIBRATION_BOUND_S, PHASE_OVERHEAD_S, SESSION_MIN_TURNS
from .run_shapes import PlanRow, SessionPlan
from .trust import calibration_concurrencies

PHASES = ("cold-load", "long-context", "concurrency", "soak", "sessions")


@dataclass(frozen=True)
class CapacityPlan:
    planned_concurrency: int
    context_limit_tokens: int  # the contract's
    context_lengths_tokens: tuple[int, ...]
    long_context_output_tokens: int
    long_context_repeats: int
    out_of_contract_tokens: int  # the probe that must be refused
    steps: tuple[int, ...]  # concurrency per step, the last one beyond the contract
    beyond_contract: int  # the concurrency of the out-of-contract step
    prompt_tokens: int
    output_tokens: int
    shared_prefix_tokens: int  # soak prompts share this much, so prefix hits have something to fall from
    step_duration_s: float
    step_max_requests: int
    soak_duration_s: float
    soak_max_requests: int
    ready_timeout_s: float
    request_timeout_s: float
    calibration_concurrencies: tuple[int, ...] = ()  # empty: the client's timing error is not calibrated
    calibration_max_error_ms: float = 10.0
    calibration_server: str = "process"
    # agent sessions (sessions.py): levels of concurrent sessions up to the planned sessions, each held this long
    planned_sessions: int = 1
    session_levels: tuple[int, ...] = ()
    session_duration_s: float = 0.0
    session_think_s: float = 0.0  # the mean think time; a drawn one is at most five times it, and 60 s

    def phase_budget_s(self, phase: str) -> float:
        """The most a phase may last, whatever the target does (the tests hold the axis to the sum)."""
        if phase == "cold-load":
            return self.ready_timeout_s + PHASE_OVERHEAD_S
        if phase == "long-context":
            # one request at a time, each bounded by the request timeout; +1 for the out-of-contract probe
            n = len(self.context_lengths_tokens) * self.long_context_repeats + 1
            return n * self.request_timeout_s + PHASE_OVERHEAD_S
        if phase == "concurrency":
            calibration = CALIBRATION_BOUND_S + PHASE_OVERHEAD_S if self.calibration_concurrencies else 0.0
            # each step sends for step_duration_s, then lets what is in flight finish for as long again (the drain)
            return len(self.steps) * (2 * self.step_duration_s + PHASE_OVERHEAD_S) + calibration
        if phase == "soak":
            return self.soak_duration_s + self.soak_drain_s + PHASE_OVERHEAD_S
        if phase == "sessions":
            return len(self.session_levels) * (self.session_level_bound_s + PHASE_OVERHEAD_S)
        raise KeyError(f"unknown phase {phase!r}; phases: {', '.join(PHASES)}")

    @property
    def soak_drain_s(self) -> float:
        """How long the soak's last requests may finish after it stops sending: as long as the soak, at most one
        request's timeout (a request cut by the clock alone would count as load that did not complete)."""
        return min(self.soak_duration_s, self.request_timeout_s)

    @property
    def session_level_bound_s(self) -> float:
        """The most one level of sessions may last: its duration, then a session short of its first turns plays
        them (each a think time and a request), then what is in flight finishes."""
        think = min(5 * self.session_think_s, 60.0)
        return self.session_duration_s + (SESSION_MIN_TURNS + 1) * (self.request_timeout_s + think)

    @property
    def budget_s(self) -> float:
        return sum(self.phase_budget_s(p) for p in PHASES)

    def to_dict(self) -> PlanRow:
        d = asdict(self)
        d["budget_s"] = {p: round(self.phase_budget_s(p), 3) for p in PHASES}
        return cast(PlanRow, d)  # the fields as declared, then the budget of each phase


def default_steps(planned: int) -> tuple[int, ...]:
    """1, 2, 4, … below the planned concurrency, the planned concurrency, then one step beyond it (+25 %, ≥ +1)."""
    steps = []
    c = 1
    while c < planned:
        steps.append(c)
        c *= 2
    steps.append(planned)
    return tuple(steps) + (planned + max(1, planned // 4),)


def default_lengths(context_limit: int, output_tokens: int) -> tuple[int, ...]:
    """25, 50, 75 and 100 % of what the contract lets a prompt take once its answer is reserved."""
    room = max(context_limit - output_tokens, 16)
    return tuple(sorted({max(16, int(room * f)) for f in (0.25, 0.5, 0.75, 1.0)}))


def plan_capacity(params: Params) -> CapacityPlan:
    cap = params.axes.capacity
    contract = params.contract
    planned = contract.planned_concurrency
    output = cap.output_tokens or contract.typical_output_tokens or contract.max_output_tokens
    prompt = cap.prompt_tokens or contract.typical_prompt_tokens or max(16, contract.max_context_tokens // 2)
    prompt = min(prompt, max(16, contract.max_context_tokens - output))
    lengths = tuple(sorted(set(cap.context_lengths_tokens))) or default_lengths(contract.max_context_tokens,
                                                                                cap.long_context_output_tokens)
    if cap.concurrency_steps:
        inside = tuple(sorted({s for s in cap.concurrency_steps if s <= planned} | {planned}))
        outside = sorted(s for s in cap.concurrency_steps if s > planned)
        beyond = outside[0] if outside else planned + max(1, planned // 4)
        steps = inside + (beyond,)
    else:
        steps = default_steps(planned)
        beyond = steps[-1]
    return CapacityPlan(
        planned_concurrency=planned, context_limit_tokens=contract.max_context_tokens,
        context_lengths_tokens=lengths, long_context_output_tokens=cap.long_context_output_tokens,
        long_context_repeats=cap.long_context_repeats,
        out_of_contract_tokens=contract.max_context_tokens + cap.out_of_contract_extra_tokens,
        steps=steps, beyond_contract=beyond, prompt_tokens=prompt, output_tokens=output,
        shared_prefix_tokens=prompt // 2, step_duration_s=cap.step_duration_s,
        step_max_requests=cap.step_max_requests, soak_duration_s=cap.soak_duration_s,
        soak_max_requests=cap.soak_max_requests, ready_timeout_s=cap.ready_timeout_s,
        request_timeout_s=cap.request_timeout_s,
        calibration_concurrencies=calibration_concurrencies(planned, steps) if cap.calibrate else (),
        calibration_max_error_ms=cap.calibration_max_error_ms, calibration_server=cap.calibration_server,
        **session_plan(params))


def planned_sessions(params: Params) -> int:
    """The sessions the contract plans to hold at once; unset, the planned concurrency (its floor)."""
    contract = params.contract
    return int(contract.planned_sessions or contract.planned_concurrency)


def session_levels(planned: int) -> tuple[int, ...]:
    """1, 2, 4, … below the planned sessions, then the planned sessions."""
    return tuple(s for s in default_steps(planned)[:-1])


def session_plan(params: Params) -> SessionPlan:
    """The session phase's part of the plan (k3lib.axes.capacity.sessions)."""
    planned = planned_sessions(params)
    return {"planned_sessions": planned, "session_levels": session_levels(planned),
            "session_duration_s": params.axes.capacity.session_duration_s,
            "session_think_s": params.axes.capacity.session_think_s}
