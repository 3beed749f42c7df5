"""The JSON shapes the renewal review builds and reads, as `TypedDict`s: each analysis' figures before its typed
model (`results.py`) validates them (an analysis that builds its model itself has no shape here: the useful
production, the cost, the stability, the operations), the review's axes and their cache, the decision's checklist
and routing, and the JSON and YAML values of the files the review reads (the drill's shapes: `drillshapes.py`). They
change nothing at run time: the dicts stay the dicts that are written (same keys, same order).

A key that is no identifier (`self-hosted`) is declared with the functional syntax.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal, NotRequired

from typing_extensions import TypedDict  # pydantic validates a model's TypedDict field only from here before 3.12

from .results import AxisResult, CostResult, Num, ProductionResult, RenewalOperationsResult, StabilityResult

# a value as a JSON file gives it (an export's row, a reply's body: k3lib.core.jsonvalue), and as a YAML file does
# (dates too)
YamlValue = str | int | float | bool | None | dt.date | list["YamlValue"] | dict[str, "YamlValue"]
ParamTree = dict[str, YamlValue]  # parameters files layered, before their model validates them
AxisId = Literal["load", "production", "comparison", "cost", "stability", "operations"]


# --- windows, clipping, the deployment ------------------------------------------------------------------------------

class WindowData(TypedDict):
    start: str
    end: str
    days: float


class WindowStep(WindowData):
    step_s: float


class SelectorData(TypedDict):
    model_name: str | None
    instances: list[str]
    hostnames: list[str]
    gpu_uuids: list[str]
    gpus: int | None


class LeftOutData(TypedDict):
    name: str
    reason: str
    series: int


class DeploymentData(SelectorData):
    gpus_in_series: int
    acceptance_run: str | None
    left_out: list[LeftOutData]


# --- 1. load --------------------------------------------------------------------------------------------------------

class CategoryUseData(TypedDict):
    category: str
    hours: Num
    used_gpu_h: Num
    share_of_reserved: Num


class PeriodUseData(TypedDict):
    period: str
    hours: Num
    mean_util: Num
    busy_share: Num
    idle_demand_share: Num
    idle_scheduling_share: Num
    mean_waiting: Num


class PeriodSlots(TypedDict):
    """One period's running sums over its shown slots (load.py's `_per_period`)."""

    slots: int
    busy: int
    util_sum: float
    idle_demand: int
    idle_scheduling: int
    waiting_sum: float


class SlotCountsData(TypedDict):
    busy: int
    idle_demand: int
    idle_scheduling: int
    not_shown: int


class SourceCoverage(TypedDict):
    gpu_util: Num
    vllm: Num


class CoverageData(SourceCoverage):
    by_period: dict[str, Num]


class LoadCoverageData(CoverageData):
    min_share: float


class WorstCaseData(TypedDict):
    utilisation: Num
    idle_demand_share: Num
    large_idle_share: Num
    business_busy_share: Num


class WaitingCausesData(TypedDict):
    gauge_only_idle_slots: int
    log_only_idle_slots: int
    long_waiting_tasks: list[str]
    long_waiting_count: int


class LoadFigures(TypedDict):
    """What `analyse_load` computes from the frame; the review adds the deployment and the window (`LoadData`)."""

    gpus: int
    window_h: Num
    step_s: float
    reserved_gpu_h: Num
    used_gpu_h: Num
    utilisation: Num
    by_category: list[CategoryUseData]
    by_period: list[PeriodUseData]
    idle_share: Num
    idle_demand_share: Num
    idle_scheduling_share: Num
    large_idle_share: Num
    business_busy_share: Num
    weekday_gpu_h_cv: Num
    arrivals_per_h_mean: Num
    arrivals_per_h_p99: Num
    peak_to_mean: Num
    slots: SlotCountsData
    coverage: LoadCoverageData
    worst_case: WorstCaseData
    waiting_causes: WaitingCausesData
    shown: bool
    not_shown_because: list[str]


class LoadData(LoadFigures):
    deployment: DeploymentData
    window: WindowStep


# --- 3. self-hosted vs API ------------------------------------------------------------------------------------------

class PathFiguresData(TypedDict):
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


class PathData(PathFiguresData):
    human_monitoring_h: Num


class EquivalenceData(TypedDict):
    difference: Num
    difference_low: Num
    difference_high: Num
    tool_error_difference_high: Num
    api_equivalent: bool | None


ComparisonData = TypedDict("ComparisonData", {
    "basis": Literal["paired", "all"],
    "paired_tasks": int,
    "task_set": list[str],
    "min_sample_tasks": int,
    "self-hosted": PathData,
    "api": PathData,
    "api_tasks": int,
    "api_accepted": int,
    "api_tasks_not_on_both": int,
    "api_tasks_outside_task_set": int,
    "difference": Num,
    "difference_low": Num,
    "difference_high": Num,
    "tool_error_difference_high": Num,
    "api_equivalent": bool | None,
})


# --- the declared benefits ------------------------------------------------------------------------------------------

class BenefitsData(TypedDict):
    declared: list[str]
    note: str | None


class AxesData(TypedDict, total=False):
    """The review's axes by id, as `review.analyse` computes them and `review/axes.json` caches them (an axis that
    its analysis builds as its typed model is held as that model, and validated back when the cache is read); an
    axis read back from its record is its typed model (`records.axes_from_records`)."""

    load: LoadData
    production: ProductionResult
    comparison: ComparisonData
    cost: CostResult
    stability: StabilityResult
    operations: RenewalOperationsResult
    benefits: BenefitsData


AxisData = LoadData | ProductionResult | ComparisonData | CostResult | StabilityResult | RenewalOperationsResult  # one axis


class HourlyLoad(TypedDict):
    index: list[str]  # ISO 8601 UTC hours
    columns: dict[str, list[float | None]]  # gpu_util, waiting, running: each hour's mean (None: no sample)


class AxesCache(TypedDict):
    """`review/axes.json`: the axes computed once per run, from these inputs (`review.write_axes_cache`)."""

    inputs_sha256: str
    axes: AxesData
    load_hourly: HourlyLoad


TypedAxes = dict[str, AxisResult | None]  # each axis' typed result read back from its record (None: no evidence)
Axes = AxesData | TypedAxes  # what the decision reads: the analyses' dicts, or the records' typed results


# --- the decision --------------------------------------------------------------------------------------------------

class TaskLogComparison(TypedDict):
    """The task log's comparison of the two paths as the equivalence finding states it (`indicators`)."""

    paired_tasks: int
    min_sample_tasks: int
    api_equivalent_gap_max: float
    self_hosted_acceptance_rate: Num
    self_hosted_tool_error_share: Num
    self_hosted_delivery_median_s: Num
    api_acceptance_rate: Num
    api_tool_error_share: Num
    api_delivery_median_s: Num
    difference: Num
    difference_low: Num
    difference_high: Num
    api_equivalent: bool | None


class ChecklistItem(TypedDict):
    id: str
    status: str
    evidence: str | None


class CategoryFailures(TypedDict):
    category: str
    fail_on_api_only: list[str]
    fail_on_self_hosted_only: list[str]


class TaskCategories(TypedDict):
    """The task categories each path of a dual circuit takes, from a live run (`live.category_routing`)."""

    self_hosted: list[str]
    api: list[str]
    split: list[str]
    by_category: list[CategoryFailures]
    source: str | None


class TransferTrigger(TypedDict):
    trigger: str
    when: str


class RoutingData(TypedDict):
    """A dual circuit's routing, fixed with the decision (`decision.routing`)."""

    task_categories: TaskCategories | None
    self_hosted: str
    api: str
    transfer_triggers: list[TransferTrigger]
    exit_rules: list[str]
    exit_when_persisting_for_days: int


class RenewalLoosened(TypedDict):
    """A rule or scope set past its built-in default toward renew (`RenewalParams.loosened`)."""

    name: str
    value: Any  # the parameter's value as set: a number, a list of categories, ...
    default: Any
    origin: str
    accepted_by: NotRequired[str | None]  # who accepted it before the review (review.accepted_loosened); None: nobody
    accepted_why: NotRequired[str | None]
