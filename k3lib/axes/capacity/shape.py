"""The shape of a capacity run, fixed before any request: context lengths, concurrency steps, request sizes and
the time each phase may take at most. Pure: parameters in, a frozen plan out.

The plan holds the axis' settings and the contract as the parameters declare them (`capacity`, `contract`) and
derives the rest from them; a phase reads a setting from the settings. Its `model_dump()` is the plan as
`evidence/capacity/run.json` keeps it: the derived fields, the settings a reader of the run needs beside them
(`SHOWN_AFTER`, each where the row has always shown it), then the bound of each phase (`budget_s`)."""

from __future__ import annotations

from pydantic import Field, SerializerFunctionWrapHandler, computed_field, model_serializer

from ...core.jsonvalue import JsonValue
from ...core.params import CapacityParams, ContractParams, Params
from ...core.record import Record
from .config import CALIBRATION_BOUND_S, PHASE_OVERHEAD_S, SESSION_MIN_TURNS
from .trust import calibration_concurrencies

PHASES = ("cold-load", "long-context", "concurrency", "soak", "sessions")

#: the settings the plan's row shows, each group after the derived field it follows there
SHOWN_AFTER: dict[str, tuple[str, ...]] = {
    "context_lengths_tokens": ("long_context_output_tokens", "long_context_repeats"),
    "shared_prefix_tokens": ("step_duration_s", "step_max_requests", "soak_duration_s", "soak_max_requests",
                             "ready_timeout_s", "request_timeout_s"),
    "calibration_concurrencies": ("calibration_max_error_ms", "calibration_server"),
    "session_levels": ("session_duration_s", "session_think_s"),
}


class CapacityPlan(Record):
    """The plan of one capacity run: the axis' settings and the contract as the parameters declare them, and what
    the run derives from them (each a field computed from those two)."""

    capacity: CapacityParams = Field(exclude=True)
    contract: ContractParams = Field(exclude=True)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def planned_concurrency(self) -> int:
        return self.contract.planned_concurrency

    @computed_field  # type: ignore[prop-decorator]
    @property
    def context_limit_tokens(self) -> int:
        return self.contract.max_context_tokens

    @computed_field  # type: ignore[prop-decorator]
    @property
    def context_lengths_tokens(self) -> tuple[int, ...]:
        """The settings' lengths; none: 25 to 100 % of the contract's context (`default_lengths`)."""
        cap = self.capacity
        return tuple(sorted(set(cap.context_lengths_tokens))) or default_lengths(self.context_limit_tokens,
                                                                                    cap.long_context_output_tokens)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def out_of_contract_tokens(self) -> int:
        """The probe that must be refused."""
        return self.context_limit_tokens + self.capacity.out_of_contract_extra_tokens

    @computed_field  # type: ignore[prop-decorator]
    @property
    def steps(self) -> tuple[int, ...]:
        """The concurrency of each step: the settings' up to the planned one, the planned one, then one beyond it
        (the settings' first above it, else +25 %, ≥ +1); none set: `default_steps`."""
        planned, asked = self.planned_concurrency, self.capacity.concurrency_steps
        if not asked:
            return default_steps(planned)
        outside = sorted(s for s in asked if s > planned)
        inside = tuple(sorted({s for s in asked if s <= planned} | {planned}))
        return inside + (outside[0] if outside else planned + max(1, planned // 4),)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def beyond_contract(self) -> int:
        """The concurrency of the out-of-contract step."""
        return self.steps[-1]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def prompt_tokens(self) -> int:
        """The settings' prompt, else the contract's typical one, else half its context; within the context once
        the answer is reserved."""
        contract = self.contract
        prompt = (self.capacity.prompt_tokens or contract.typical_prompt_tokens
                  or max(16, contract.max_context_tokens // 2))
        return min(prompt, max(16, contract.max_context_tokens - self.output_tokens))

    @computed_field  # type: ignore[prop-decorator]
    @property
    def output_tokens(self) -> int:
        contract = self.contract
        return self.capacity.output_tokens or contract.typical_output_tokens or contract.max_output_tokens

    @computed_field  # type: ignore[prop-decorator]
    @property
    def shared_prefix_tokens(self) -> int:
        """Soak prompts share this much, so prefix hits have something to fall from."""
        return self.prompt_tokens // 2

    @computed_field  # type: ignore[prop-decorator]
    @property
    def calibration_concurrencies(self) -> tuple[int, ...]:
        """Empty: the client's timing error is not calibrated."""
        return calibration_concurrencies(self.planned_concurrency, self.steps) if self.capacity.calibrate else ()

    @computed_field  # type: ignore[prop-decorator]
    @property
    def planned_sessions(self) -> int:
        """The sessions the contract plans to hold at once (sessions.py); unset, the planned concurrency (its
        floor)."""
        return int(self.contract.planned_sessions or self.planned_concurrency)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def session_levels(self) -> tuple[int, ...]:
        """Levels of concurrent sessions, each held `capacity.session_duration_s`: 1, 2, 4, … below the planned
        sessions, then the planned sessions."""
        return default_steps(self.planned_sessions)[:-1]

    def phase_budget_s(self, phase: str) -> float:
        """The most a phase may last, whatever the target does (the tests hold the axis to the sum)."""
        cap = self.capacity
        if phase == "cold-load":
            return cap.ready_timeout_s + PHASE_OVERHEAD_S
        if phase == "long-context":
            # one request at a time, each bounded by the request timeout; +1 for the out-of-contract probe
            n = len(self.context_lengths_tokens) * cap.long_context_repeats + 1
            return n * cap.request_timeout_s + PHASE_OVERHEAD_S
        if phase == "concurrency":
            calibration = CALIBRATION_BOUND_S + PHASE_OVERHEAD_S if self.calibration_concurrencies else 0.0
            # each step sends for step_duration_s, then lets what is in flight finish for as long again (the drain)
            return len(self.steps) * (2 * cap.step_duration_s + PHASE_OVERHEAD_S) + calibration
        if phase == "soak":
            return cap.soak_duration_s + self.soak_drain_s + PHASE_OVERHEAD_S
        if phase == "sessions":
            return len(self.session_levels) * (self.session_level_bound_s + PHASE_OVERHEAD_S)
        raise KeyError(f"unknown phase {phase!r}; phases: {', '.join(PHASES)}")

    @property
    def soak_drain_s(self) -> float:
        """How long the soak's last requests may finish after it stops sending: as long as the soak, at most one
        request's timeout (a request cut by the clock alone would count as load that did not complete)."""
        return min(self.capacity.soak_duration_s, self.capacity.request_timeout_s)

    @property
    def session_level_bound_s(self) -> float:
        """The most one level of sessions may last: its duration, then a session short of its first turns plays
        them (each a think time and a request), then what is in flight finishes."""
        cap = self.capacity
        think = min(5 * cap.session_think_s, 60.0)
        return cap.session_duration_s + (SESSION_MIN_TURNS + 1) * (cap.request_timeout_s + think)

    @property
    def budget_s(self) -> float:
        return sum(self.phase_budget_s(p) for p in PHASES)

    @model_serializer(mode="wrap")
    def _row(self, dump: SerializerFunctionWrapHandler) -> dict[str, JsonValue | tuple[int, ...]]:
        """The derived fields, each followed by the settings `SHOWN_AFTER` it, then each phase's bound (the
        lengths, steps and levels tuples as python dumps them, lists as JSON does)."""
        row: dict[str, JsonValue | tuple[int, ...]] = {}
        for name, value in dump(self).items():
            row[name] = value
            row.update({shown: getattr(self.capacity, shown) for shown in SHOWN_AFTER.get(name, ())})
        row["budget_s"] = {p: round(self.phase_budget_s(p), 3) for p in PHASES}
        return row


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
    """The plan of a run's parameters."""
    return CapacityPlan(capacity=params.axes.capacity, contract=params.contract)
