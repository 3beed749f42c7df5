"""The six renewal analyses' results as typed, frozen models — what an axis record holds and what the decision
reads. Each is validated when its record is written and when it is read back; a record written by another kit
version (no schema id, or another one) is refused with one line naming the file. Their JSON Schemas live in
`schemas/renewal/` (`k3 schemas` rewrites them; a test keeps them in step).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..core.errors import ArtifactError

Num = float | None  # a figure; None: not computable from the data (shown blank, never 0)
Answer = Literal["yes", "no", "not shown"]


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


# --- 1. load ------------------------------------------------------------------------------------------------------

class CategoryUse(_M):
    category: str
    hours: Num
    used_gpu_h: Num
    share_of_reserved: Num


class PeriodUse(_M):
    period: str
    hours: Num
    mean_util: Num
    busy_share: Num
    idle_demand_share: Num
    idle_scheduling_share: Num
    mean_waiting: Num


class SlotCounts(_M):
    busy: int
    idle_demand: int
    idle_scheduling: int
    not_shown: int  # no measure from every reserved GPU: neither idle nor busy


class LoadCoverage(_M):
    gpu_util: Num  # share of the window's slots with a measure from every reserved GPU
    vllm: Num  # share with vLLM's running gauge
    min_share: float
    by_period: dict[str, Num] = {}  # business, night, weekend: each period type's share of its slots shown


class WaitingCauses(_M):
    """Idle slots where one source alone shows something waiting (not read as idle while tasks wait)."""

    gauge_only_idle_slots: int  # the queue gauge > 0, no task of the log waiting: a stuck gauge is named here
    log_only_idle_slots: int
    long_waiting_tasks: tuple[str, ...]  # rows waiting longer than a large idle stretch: named, not demand waiting
    long_waiting_count: int


class WorstCase(_M):
    """The load's shares with every slot not shown read the least favourable way (idle, utilisation 0)."""

    utilisation: Num
    idle_demand_share: Num
    large_idle_share: Num
    business_busy_share: Num


class LeftOutSeries(_M):
    name: str
    reason: str  # e.g. "another host (node-b)", "another model (llama)"
    series: int


class DeploymentUse(_M):
    """The deployment the load counts: its identity, the GPUs found for it and the series left out."""

    model_name: str | None
    instances: tuple[str, ...]
    hostnames: tuple[str, ...]
    gpu_uuids: tuple[str, ...]
    gpus: int | None  # stated (or read from the acceptance run)
    gpus_in_series: int
    acceptance_run: str | None
    left_out: tuple[LeftOutSeries, ...]


class WindowUse(_M):
    start: str
    end: str
    days: float
    step_s: float  # each slot is the mean over this step


class Clipping(_M):
    """What clipping one input to the window kept and left out."""

    inside: int
    outside: int
    outside_examples: tuple[str, ...]


class LoadResult(_M):
    gpus: int
    window_h: Num
    step_s: float
    reserved_gpu_h: Num
    used_gpu_h: Num
    utilisation: Num
    by_category: tuple[CategoryUse, ...]
    by_period: tuple[PeriodUse, ...]
    idle_share: Num
    idle_demand_share: Num
    idle_scheduling_share: Num
    large_idle_share: Num
    business_busy_share: Num
    weekday_gpu_h_cv: Num
    arrivals_per_h_mean: Num
    arrivals_per_h_p99: Num
    peak_to_mean: Num
    slots: SlotCounts
    coverage: LoadCoverage
    worst_case: WorstCase | None = None
    waiting_causes: WaitingCauses | None = None
    shown: bool  # False: a source covers too little of the window; the load figures the decision reads are None
    not_shown_because: tuple[str, ...]
    deployment: DeploymentUse
    window: WindowUse


# --- 2. useful production -----------------------------------------------------------------------------------------

class Losses(_M):
    retries: int
    retries_per_task: Num
    tasks_with_malformed_tool_calls: int
    tool_error_share: Num
    timeouts: int
    manual_corrections: int
    routed_to_api: int
    wait_h: Num
    saturation_wait_h: Num


class ProductionResult(_M):
    tasks: int  # self-hosted tasks of the fixed task set in the window
    finished: int
    accepted: int  # under the fixed quality rule and retry policy
    acceptance_rate: Num
    acceptance_low: Num  # Wilson 95 %
    acceptance_high: Num
    operating_h: Num
    accepted_per_operating_h: Num
    generation_tokens: int
    generation_tokens_per_accepted_task: Num
    losses: Losses
    tool_error_low: Num
    tool_error_high: Num
    over_retry_policy: int
    over_retry_policy_tasks: tuple[str, ...]  # the first ones, by id
    retry_policy_max_retries: int
    task_set: tuple[str, ...]
    outside_task_set: dict[str, int]  # tasks of other categories, by category: counted, never delivered
    outside_window: Clipping
    task_log_coverage: Num
    min_sample_tasks: int
    shown: bool
    not_shown_because: tuple[str, ...]


# --- 3. self-hosted vs API ----------------------------------------------------------------------------------------

class PathFigures(_M):
    tasks: int
    accepted: int
    acceptance_rate: Num
    acceptance_low: Num
    acceptance_high: Num
    over_retry_policy: int
    delivery_median_s: Num
    delivery_p95_s: Num
    retries_per_task: Num
    tool_error_share: Num
    manual_correction_share: Num
    human_monitoring_h: Num


class ComparisonResult(_M):
    basis: Literal["paired", "all"]
    paired_tasks: int
    task_set: tuple[str, ...]
    self_hosted: PathFigures = Field(alias="self-hosted")
    api: PathFigures
    min_sample_tasks: int
    api_tasks: int  # every API task of the set (what the bill covers)
    api_accepted: int
    api_tasks_not_on_both: int
    api_tasks_outside_task_set: int = 0  # API tasks of the log the bill covers but the task set leaves out
    difference: Num  # self-hosted − API acceptance on the shared tasks, Newcombe 95 %
    difference_low: Num
    difference_high: Num
    tool_error_difference_high: Num  # API − self-hosted share with malformed tool calls, upper bound
    api_equivalent: bool | None  # None: too few shared tasks, or an interval straddling the gap


# --- 4. full cost -------------------------------------------------------------------------------------------------

class CostItem(_M):
    item: str
    amount: Num  # None: blank in the cost sheet


class SelfHostedCost(_M):
    items: tuple[CostItem, ...]
    blank_items: tuple[str, ...]
    known_subtotal: Num
    total: Num
    accepted_tasks: int
    per_accepted_task: Num
    per_accepted_task_low: Num  # from the acceptance rate's 95 % interval
    per_accepted_task_high: Num


class ApiCost(_M):
    bill_same_tasks: Num
    tasks: int | None
    accepted_tasks: int
    per_accepted_task: Num
    per_accepted_task_low: Num
    per_accepted_task_high: Num
    self_hosted_accepted_on_same_set: int


class CreditLine(_M):
    amount: float  # as the bill writes it (a credit is negative)
    item: str
    description: str
    charge_category: str | None
    recurring: bool
    accepted_by: str | None
    netted: bool  # True only when recurring and accepted: netted into its item


class CostResult(_M):
    currency: str | None  # every amount below is in it
    self_hosted: SelfHostedCost
    api: ApiCost
    delivered_tasks_value: Num
    hourly_rate: Num
    credits: tuple[CreditLine, ...] = ()  # listed apart; not netted unless recurring and accepted
    routed_to_api_tasks: int = 0  # self-hosted tasks the API finished: failures, their API cost an item
    not_comparable_because: tuple[str, ...]
    self_hosted_cheaper_per_task: bool | None  # None: a blank, not the same tasks, or overlapping intervals
    total_within_delivered_value: bool | None


# --- 5. stability and the drill -----------------------------------------------------------------------------------

class IncidentClass(_M):
    category: str
    incidents: int
    median_minutes_to_recover: Num
    max_minutes_to_recover: Num
    not_measured: int


class QuestionCounts(_M):
    yes: int
    no: int
    unknown: int  # blank in the incident log


class FiveCounts(_M):
    detected_automatically: QuestionCounts
    previous_version_restored: QuestionCounts
    in_flight_resumed_or_cancelled: QuestionCounts
    api_failover_without_contract_change: QuestionCounts
    fields_preserved: QuestionCounts


class DrillAnswer(_M):
    question: str
    answer: Answer
    evidence: str


class FiveAnswers(_M):
    detected_automatically: DrillAnswer
    previous_version_restored: DrillAnswer
    in_flight_resumed_or_cancelled: DrillAnswer
    api_failover_without_contract_change: DrillAnswer
    fields_preserved: DrillAnswer


class DrillVersions(_M):
    before: str | None
    after_restore: str | None
    expected_previous: str | None


class PipelineCheck(_M):
    check: str
    status: str
    message: str
    evidence: Any = None


class DrillTarget(_M):
    """Whether the drill touched the reviewed deployment; only then do its answers speak for it."""

    is_deployment: bool
    why: str
    observed: FiveAnswers | None = None  # what the drill saw on its target when that was not the deployment


class RenewalDrillResult(_M):
    target: str
    api: str | None
    answers: FiveAnswers  # about the reviewed deployment ("not shown" when the drill did not touch it)
    deployment: DrillTarget
    served_models: tuple[str, ...] = ()  # the target's /v1/models ids
    in_flight_at_kill: bool | None = None  # a streamed request was observed in flight when the kill ran
    steps: tuple[str, ...]
    recovery_s: float
    went_down: bool
    versions: DrillVersions
    summary: str
    api_note: str | None = None
    pipeline: tuple[PipelineCheck, ...] | None = None


class StabilityResult(_M):
    incidents: int
    by_category: tuple[IncidentClass, ...]
    questions: FiveCounts
    slow_or_unrecovered: tuple[str, ...]
    recovered_within_rule_share: Num
    drill: RenewalDrillResult | None
    outside_window: Clipping
    not_shown: tuple[str, ...]
    recoverable: bool | None  # None: nothing failed but a question was never shown
    incidents_without_evidence: tuple[str, ...] = ()  # an incident with a blank answer: unknown, never yes
    not_recoverable_because: tuple[str, ...]


# --- 6. operations ------------------------------------------------------------------------------------------------

class HoursRow(_M):
    category: str
    hours: Num


class WeekRow(_M):
    week: str
    hours: Num


class RenewalOperationsResult(_M):
    total_h: Num
    per_week_h: Num  # None: the hours cover too little of the window
    weeks: Num  # the window's length in weeks (the hours are divided by it)
    by_category: tuple[HoursRow, ...]
    by_week: tuple[WeekRow, ...]
    delivery_gain_h: Num
    gain_basis: str
    effort_contained: bool | None  # the weekly rule alone; the decision also weighs effort_exceeds_gain
    effort_exceeds_gain: bool | None  # None: the delivery gain is unknown
    hours_coverage: Num
    outside_window: Clipping
    not_shown_because: tuple[str, ...]
    unclassified_h: Num = None  # hours of no category: counted in the effort, listed apart


AxisResult = (LoadResult | ProductionResult | ComparisonResult | CostResult | StabilityResult
              | RenewalOperationsResult)  # one of RESULTS' models
RESULTS: dict[str, type[AxisResult]] = {
    "load": LoadResult, "production": ProductionResult, "comparison": ComparisonResult, "cost": CostResult,
    "stability": StabilityResult, "operations": RenewalOperationsResult}
SCHEMA_VERSION = 3  # 1: untyped dicts; 2: before one deployment, one window and intervals (issue 39)
SCHEMA_DIR = Path(__file__).resolve().parents[2] / "schemas" / "renewal"


def schema_id(axis: str) -> str:
    return f"k3kit/renewal/{axis}/{SCHEMA_VERSION}"


def typed(axis: str, result: Any, *, source: str | None = None) -> AxisResult:
    """`result` (a dict from the analysis or read back from a record, or already typed) as the axis' model; what
    does not fit is refused with one line naming the source and the first field."""
    model = RESULTS[axis]
    if isinstance(result, model):
        return result
    try:
        return model.model_validate(result)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err.get("loc", ())) or "(top level)"
        more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
        raise ArtifactError(f"not this kit's {axis} result: {where}: {err.get('msg')}{more}",
                            source=source or f"the {axis} result") from None


def record_data(axis: str, result: Any) -> dict[str, Any]:
    """What an axis record's `data` holds: the validated result and its schema id."""
    return {"schema": schema_id(axis), "result": typed(axis, result).model_dump(mode="json", by_alias=True)}


def read_record_data(axis: str, data: Any, source: str) -> AxisResult:
    """The typed result of a record read back from disk; another kit version's record is refused (one line)."""
    found = data.get("schema") if isinstance(data, dict) else None
    if found != schema_id(axis):
        raise ArtifactError(f"written by another kit version (result schema {found or 'none'}, expected "
                            f"{schema_id(axis)}); re-run the review's analyses to rewrite it", source=source)
    return typed(axis, data.get("result"), source=source)


def schemas() -> dict[str, dict[str, Any]]:
    out = {}
    for axis, model in RESULTS.items():
        schema = model.model_json_schema(by_alias=True)
        out[axis] = {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": schema_id(axis), **schema}
    return out


def write_schemas(folder: Path = SCHEMA_DIR) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for axis, schema in schemas().items():
        p = folder / f"{axis}.schema.json"
        p.write_text(json.dumps(schema, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        paths.append(p)
    return paths


#: the review axes whose analysis builds its typed model (the load and the comparison are still read as their
#: cached JSON): what the report's tables and figures take
TypedAxis = ProductionResult | CostResult | StabilityResult | RenewalOperationsResult
