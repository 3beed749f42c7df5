"""What each acceptance axis will do and about how long it will take, from the parameters and the target's speed.

Every load phase of the kit is bounded in requests and in seconds; which bound ends it depends on how fast the
target answers. The preflight measures that speed once (`k3lib.batch.preflight.Speed`: time to first token, time
per output token); a phase then lasts the smaller of its duration bound and its request bound at that speed.
Concurrency shares the engine: at `c` streams a request is taken to last `sqrt(c)` times longer than alone (a
batching engine sits between perfect sharing, 1, and none, `c`). A phase with no duration bound (the agent's
scenario, the prefix-cache pairs) is its requests at that speed. What the parameters cannot say (a model's answer
lengths, a rollback drill's restart) is an assumption, stated in the phase's words.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Protocol, cast

from pydantic import field_serializer

from ..core.params import Params
from ..core.record import Record
from ..core.session import find_path

__all__ = ["AxisEstimate", "PhaseEstimate", "SpeedLike", "estimate_axes", "DEFAULT_SPEED"]

# Seconds a notebook adds to its axis' own work on this kind of machine: the cells, the figures, writing the
# evidence (its kernel starts while the previous notebook runs).
NOTEBOOK_S = 1.5
# The summary notebook and the report's pages and index.
REPORT_S = 3.5
# The capacity axis' own work around its phases: the samplers' start and stop, the server log read, the series
# written, the judgement and its figures.
CAPACITY_FIXED_S = 2.0
# How long a model's answer in the agent scenario is assumed to be, in output tokens (never above the limit).
AGENT_ANSWER_TOKENS = 96
# The capacity axis' client self-calibration against a local known-timing server, per calibrated concurrency.
CALIBRATION_S = 0.6
# A rollback drill against a real deployment restarts its engine twice (back, then forward): a model load each.
DRILL_RESTART_S = 120.0


class SpeedLike(Protocol):
    @property
    def ttft_s(self) -> float: ...

    @property
    def per_token_s(self) -> float: ...

    @property
    def sharing(self) -> float | None: ...

    def request_s(self, output_tokens: int) -> float: ...


@dataclasses.dataclass(frozen=True)
class _Speed:
    ttft_s: float
    per_token_s: float
    sharing: float | None = None

    def request_s(self, output_tokens: int) -> float:
        return self.ttft_s + output_tokens * self.per_token_s


#: without a measured speed (the preflight's chat did not finish in time): a GPU-served large model's ballpark
DEFAULT_SPEED = _Speed(ttft_s=0.5, per_token_s=0.03)


@dataclasses.dataclass(frozen=True)
class PhaseEstimate:
    name: str
    requests: int  # planned requests (0: none or unknown)
    seconds: float
    bound: str  # what ends it: "requests", "duration", "both" or a few words
    at_most: int | None = None  # the most it can send (its request bound); None: `requests`, exactly
    warning: str | None = None  # a phase the plan already sees measuring nothing (a step shorter than a request)

    @property
    def most(self) -> int:
        return self.requests if self.at_most is None else max(self.at_most, self.requests)


class AxisEstimate(Record):
    """One notebook's estimate (`AxisEstimate.of` its phases): `seconds`, `requests` and `at_most` are their sums;
    `model_dump()` is the plan's entry (`plan.json`), seconds to 0.1 s there."""

    notebook: str
    axis: str
    seconds: float  # the phases' and the notebook's own
    requests: int
    #: The most requests the axis can send to the target: what the operator consents to with the plan, and what the
    #: run refuses to pass (`k3lib.core.progress.AxisProgress.admit`).
    at_most: int
    phases: tuple[PhaseEstimate, ...]

    @classmethod
    def of(cls, notebook: str, axis: str, phases: tuple[PhaseEstimate, ...]) -> AxisEstimate:
        return cls(notebook=notebook, axis=axis, seconds=NOTEBOOK_S + sum(p.seconds for p in phases),
                   requests=sum(p.requests for p in phases), at_most=sum(p.most for p in phases), phases=phases)

    @field_serializer("seconds")
    def _seconds(self, seconds: float) -> float:
        return round(seconds, 1)


# How a request's time grows with concurrency, at least: `c ** SHARING`. The preflight's two short requests at once
# underestimate it (a batch of two tiny requests is all overhead, a load step's long prompts are compute), so their
# measure only raises it. A GPU engine's load phases end by their duration, where this does not count.
SHARING = 0.5
# What the kit adds to each load request beyond the server's time: its record built, checked and appended (fsync).
CLIENT_S = 0.02


def _share(c: int, speed: SpeedLike) -> float:
    """How many times longer a request lasts at `c` streams than alone."""
    return max(1, c) ** max(SHARING, speed.sharing or 0.0)


def _bounded(name: str, *, requests: int, concurrency: int, request_s: float, duration_s: float | None,
             speed: SpeedLike) -> PhaseEstimate:
    """A closed-loop phase: `concurrency` streams until `requests` or `duration_s`, what is in flight then
    finishing (one request's time)."""
    each = request_s * _share(concurrency, speed)
    by_requests = math.ceil(requests / max(1, concurrency)) * each
    if duration_s is None or by_requests <= duration_s:
        return PhaseEstimate(name, requests, by_requests, "requests")
    warning = None
    if each > duration_s:
        warning = (f"{name}: a request takes about {each:.1f} s here, longer than the step's {duration_s:g} s: no "
                   "request would complete within it, so it would measure no sustained load (the step is then "
                   f"inconclusive, not held); set axes.capacity.step_duration_s above {math.ceil(2 * each)} s")
    return PhaseEstimate(name, min(requests, closed_loop_sent(concurrency, duration_s, each)), duration_s + each,
                         "duration", at_most=requests, warning=warning)


def closed_loop_sent(concurrency: int, duration_s: float, each_s: float) -> int:
    """The requests a closed loop sends in `duration_s` when each lasts `each_s`: every stream sends its first at
    once, then one after each it completes, until the duration ends."""
    return max(1, concurrency) * max(1, math.ceil(duration_s / max(each_s, 1e-6)))


def sessions_sent(sessions: int, duration_s: float, think_s: float, turn_s: float) -> int:
    """The turns a level of `sessions` concurrent agent sessions sends (k3lib.axes.capacity.sessions): each place
    plays a turn after each think time until the level's duration, and a session plays its first
    `SESSION_MIN_TURNS` whatever the time."""
    from .capacity.config import SESSION_MIN_TURNS

    per = math.ceil(duration_s / max(turn_s + think_s, 1e-6))
    return max(1, sessions) * max(SESSION_MIN_TURNS, per)


def agent_phases(params: Params, speed: SpeedLike) -> tuple[PhaseEstimate, ...]:
    """One phase per concurrency level: every repetition of the sample's cases (an ideal model's requests: one per
    turn, one more after each expected tool call), bounded by the level's requests and seconds."""
    from .agent.sample import load_sample

    a, contract = params.axes.agent, params.contract
    sample = load_sample(find_path(a.sample) if a.sample else None)
    played = [t for c in sample.cases if contract.images_served or not c.requires_images for t in c.turns]
    per_rep = sum(1 + (1 if t.expect_tool else 0) for t in played)
    most_per_rep = len(played) * (1 + a.max_tool_rounds)  # a model that calls tools on every round of every turn
    answer = min(AGENT_ANSWER_TOKENS, contract.max_output_tokens)
    out = []
    for level in sorted(set(a.concurrency_levels or (1, contract.planned_concurrency))):
        reps = max(a.repetitions, level)
        workers = min(level, reps)
        requests = min(a.max_requests, reps * per_rep)
        seconds = math.ceil(reps / workers) * per_rep * speed.request_s(answer) * _share(workers, speed)
        bound = "requests"
        if seconds > a.max_duration_s:
            seconds, bound = a.max_duration_s, "duration"
        out.append(PhaseEstimate(f"level {level} ({reps} x the scenario, {workers} at a time)", requests, seconds,
                                 bound, at_most=min(a.max_requests, reps * most_per_rep)))
    return (*out, *_agent_checks(params, speed, sample, answer))


def _agent_checks(params: Params, speed: SpeedLike, sample: Any, answer: int) -> tuple[PhaseEstimate, ...]:
    """The tool-turn series (at the highest level; a failed turn is sent once more: not counted, a healthy target
    fails few) and the vendor contract check (one request per item and stream mode), each counted from the code
    that sends them."""
    from .agent.contract import ContractCheck
    from .agent.scenario import RunSettings
    from .agent.series import opening_tool_turns

    settings = RunSettings.from_params(params, "the plan")
    a = params.axes.agent
    conc = max(settings.levels)
    turns = settings.tool_turns if opening_tool_turns(sample, settings.images_served) else 0
    each = speed.request_s(answer) * _share(min(conc, max(1, turns)), speed)
    seconds, bound = math.ceil(turns / conc) * each, "requests"
    if seconds > a.max_duration_s:
        seconds, bound = a.max_duration_s, "duration"
    out = [PhaseEstimate(f"tool-turn series ({turns} turns, {conc} at a time)", turns, seconds, bound,
                         at_most=2 * turns)]  # each failed turn sent once more
    if settings.contract_check:
        n = ContractCheck(cast(Any, None), sample, settings).planned_requests()
        out.append(PhaseEstimate(f"vendor contract check ({n} requests, one at a time)", n,
                                 min(a.max_duration_s, n * speed.request_s(answer)), "requests"))
    return tuple(out)


def capacity_phases(params: Params, speed: SpeedLike) -> tuple[PhaseEstimate, ...]:
    """Cold load (a running server: a poll), long context one request at a time, the calibration, each step, the
    soak, the session levels."""
    from .capacity.shape import CapacityPlan

    cap = params.axes.capacity
    plan = CapacityPlan(capacity=cap, contract=params.contract)
    lc = len(plan.context_lengths_tokens) * cap.long_context_repeats + 1
    out = [PhaseEstimate("samplers, server log, series and figures", 0, CAPACITY_FIXED_S, "fixed"),
           PhaseEstimate("cold load (the server already serving)", 0, 0.5, "a poll"),
           PhaseEstimate(f"long context ({lc} requests, one at a time)", lc,
                         lc * speed.request_s(cap.long_context_output_tokens), "requests")]
    if plan.calibration_concurrencies:
        out.append(PhaseEstimate("client self-calibration (local)", 0,
                                 CALIBRATION_S * (1 + len(plan.calibration_concurrencies)), "fixed"))
    request_s = speed.request_s(plan.output_tokens) + CLIENT_S
    for c in plan.steps:
        out.append(_bounded(f"step at concurrency {c}", requests=cap.step_max_requests, concurrency=c,
                            request_s=request_s, duration_s=cap.step_duration_s, speed=speed))
    out.append(_bounded(f"soak at concurrency {plan.planned_concurrency}", requests=cap.soak_max_requests,
                        concurrency=plan.planned_concurrency, request_s=request_s, duration_s=cap.soak_duration_s,
                        speed=speed))
    # each level holds its sessions for its duration, a turn every think time plus one request's time, then the
    # turns in flight finish (`sessions_sent`)
    for n in plan.session_levels:
        turn_s = speed.request_s(plan.output_tokens) * _share(n, speed) + CLIENT_S
        turns = sessions_sent(n, cap.session_duration_s, cap.session_think_s, turn_s)
        out.append(PhaseEstimate(f"sessions: {n} at once", turns, cap.session_duration_s + turn_s, "duration"))
    return tuple(out)


def prefix_cache_phases(params: Params, speed: SpeedLike) -> tuple[PhaseEstimate, ...]:
    """A cold, a warm and a third request per session and prefix length (`k3lib.axes.prefix_cache.run`: the third
    sighting follows the warm one), within the axis' duration bound; the extra sessions, taken only while the gain
    is undecided, count in its at-most."""
    from .prefix_cache.result import KINDS as PER_SESSION  # cold, warm, third: one request each
    from .prefix_cache.run import prefix_lengths

    p = params.axes.prefix_cache
    lengths = prefix_lengths(params)
    pairs = len(lengths) * p.sessions
    seconds = pairs * len(PER_SESSION) * (speed.request_s(p.max_tokens) + 0.05)  # + the scrapes around each
    bound = "requests"
    if seconds > p.max_duration_s:
        seconds, bound = p.max_duration_s, "duration"
    return (PhaseEstimate(f"{pairs} cold/warm pairs ({len(lengths)} lengths x {p.sessions} sessions; up to "
                          f"{p.max_extra_sessions} more at the longest while the gain is undecided)",
                          len(PER_SESSION) * pairs, seconds, bound,
                          at_most=len(PER_SESSION) * (pairs + p.max_extra_sessions)),)


def operations_phases(params: Params, *, embedded: bool) -> tuple[PhaseEstimate, ...]:
    o = params.axes.operations
    if not o.rollback_drill:
        return (PhaseEstimate("attestation read (no rollback drill configured)", 0, 0.2, "fixed"),)
    restart = 0.2 if embedded else min(o.drill_timeout_s, DRILL_RESTART_S)
    steps = 2 if o.roll_forward else 1
    return (PhaseEstimate(f"rollback drill ({steps} restart{'s' if steps > 1 else ''}"
                          + ("" if embedded else f", each assumed {restart:.0f} s") + ")", 0, steps * restart,
                          "assumed"),)


def estimate_axes(params: Params, speed: SpeedLike | None, *, embedded: bool) -> list[AxisEstimate]:
    """The acceptance notebooks in the batch's order, each with its phases. `embedded`: the kit starts the target
    itself (the emulator), so a drill's restart takes no model load."""
    sp = speed or DEFAULT_SPEED
    return [
        AxisEstimate.of("00_probe.ipynb", "probe", (PhaseEstimate("endpoints", 0, 0.3, "fixed"),)),
        AxisEstimate.of("01_environment.ipynb", "environment", (PhaseEstimate("sources read", 0, 0.5, "fixed"),)),
        AxisEstimate.of("02_agent_tools.ipynb", "agent", agent_phases(params, sp)),
        AxisEstimate.of("03_capacity.ipynb", "capacity", capacity_phases(params, sp)),
        AxisEstimate.of("04_prefix_cache.ipynb", "prefix_cache", prefix_cache_phases(params, sp)),
        AxisEstimate.of("05_operations.ipynb", "operations", operations_phases(params, embedded=embedded)),
    ]


def axis_estimate_s(params: Params, axis: str, speed: SpeedLike | None, *, embedded: bool) -> float | None:
    """One axis' estimated seconds (what its progress counts down from), None for an axis not estimated."""
    for est in estimate_axes(params, speed, embedded=embedded):
        if est.axis == axis:
            return est.seconds
    return None
