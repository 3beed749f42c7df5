"""The renewal rules, the four elements fixed before any result is read, and the declared benefits — printed on
top of the report with where each value came from (the operator's file or a built-in default).

Every threshold a decision uses lives here with its unit in its name, so a reader can check each reason against
the figure it cites. Defaults are illustrative, not recommendations: a team writes its own before the review, and
a review decided on built-in defaults says so in its decision and its exit condition.
"""

from __future__ import annotations

from typing import Annotated, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..core.retry import RetryPolicy

Fraction = Annotated[float, Field(ge=0, le=1)]
NonNegative = Annotated[float, Field(ge=0)]


class RenewalRules(BaseModel):
    """What counts as regular load, a large idle period, acceptable acceptance, retries and effort."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    timezone: str = "UTC"  # business hours, nights and weekends are read in this zone
    business_hours: tuple[int, int] = (9, 18)  # [start, end) local hours, Monday to Friday
    idle_util_max: Fraction = 0.10  # a 5-minute slot under this mean GPU utilisation is idle
    peak_util_min: Fraction = 0.80  # a slot at or above this is a peak slot
    large_idle_min_h: NonNegative = 4.0  # an idle stretch at least this long is a "large idle period"
    large_idle_share_max: Fraction = 0.40  # more of the window than this in large idle periods → capacity too big
    regular_busy_share_min: Fraction = 0.50  # regular load: business-hour slots busy at least this share …
    regular_daily_cv_max: NonNegative = 0.50  # … and weekday GPU-hours vary (coefficient of variation) at most this
    peak_to_mean_min: NonNegative = 8.0  # hourly arrivals p99 / mean at or above this → spiky, unpredictable
    min_acceptance_rate: Fraction = 0.80  # self-hosted accepted / finished tasks
    max_retries_per_task: NonNegative = 0.50
    max_tool_error_rate: Fraction = 0.10  # share of tasks with at least one malformed tool call
    max_recovery_min: NonNegative = 60.0  # an incident recovered later than this is not "recoverable"
    max_ops_hours_per_week: NonNegative = 20.0  # operations effort considered contained
    # the API reaches equivalent quality on the same tasks when its acceptance rate is at most this below the
    # self-hosted one and its share of tasks with malformed tool calls at most this above; with a live run
    # (review.live_paths) the acceptance gap is the paired difference's 95 % interval on the run's same tasks
    api_equivalent_gap_max: Fraction = 0.02
    # exit-to-api needs the API path to meet the quality rule on the same tasks run live (`k3 paths`,
    # review.live_paths): the 95 % Wilson lower bound of its acceptance rate at or above this; null: at or above
    # the self-hosted path's own lower bound on those tasks
    live_api_acceptance_low_min: Fraction | None = None
    queue_wait_p95_max_s: NonNegative = 600.0  # business threshold on the queue (reduce/dual exit condition)
    business_deadline_s: NonNegative = 3600.0  # a task delivered later than this missed its business deadline
    reexamine_after_days: Annotated[int, Field(gt=0)] = 21  # the next billing cycle
    # --- what counts as evidence (issue 39): one window long enough, sources that cover it, samples large enough
    min_window_days: Annotated[float, Field(gt=0)] = 21.0  # seed 004 reviews three weeks; shorter is a loosened rule
    # a source (GPU series, vLLM series, task log, hours) covering less of the window than this is "not shown":
    # never read as idle, never as busy
    min_coverage_share: Fraction = 0.90
    # regular load also needs the reserved GPUs used on average at least this much (slot means, not instants) …
    min_utilisation: Fraction = 0.25
    # … and at most this share of the covered window idle for lack of demand (GPUs idle, no task waiting)
    idle_demand_share_max: Fraction = 0.40
    # a rate (acceptance, tool-call errors, the same tasks on both paths, a live run) on fewer tasks than this is
    # inconclusive, whatever its value; above it, its 95 % interval decides, never the point estimate
    min_sample_tasks: Annotated[int, Field(ge=1)] = 30

    @field_validator("timezone")
    @classmethod
    def _zone(cls, v: str) -> str:
        try:
            ZoneInfo(v)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"expected an IANA time zone such as UTC or Europe/Paris, got {v!r}") from None
        return v

    @field_validator("business_hours")
    @classmethod
    def _hours(cls, v: tuple[int, int]) -> tuple[int, int]:
        if not 0 <= v[0] < v[1] <= 24:
            raise ValueError(f"expected [start, end) hours with 0 ≤ start < end ≤ 24, got {list(v)}")
        return v


# The direction in which each threshold moves the decision toward `renew`. A value set past its built-in default in
# that direction is a *loosened* rule: listed in the decision's reasons, its condition and the terminal output.
# Thresholds that only shape the exit condition, the dual circuit or the API comparison are not listed.
LOOSER: dict[str, Literal["lower", "higher"]] = {
    "idle_util_max": "lower", "large_idle_min_h": "higher", "large_idle_share_max": "higher",
    "regular_busy_share_min": "lower", "regular_daily_cv_max": "higher", "peak_to_mean_min": "higher",
    "min_acceptance_rate": "lower", "max_retries_per_task": "higher", "max_tool_error_rate": "higher",
    "max_recovery_min": "higher", "max_ops_hours_per_week": "higher", "min_window_days": "lower",
    "min_coverage_share": "lower", "min_utilisation": "lower", "idle_demand_share_max": "higher",
    "min_sample_tasks": "lower",
}


def is_looser(name: str, value: float, default: float) -> bool:
    """`value` of the rule `name` moves the decision toward renew compared with `default`."""
    way = LOOSER.get(name)
    return (way == "lower" and value < default) or (way == "higher" and value > default)


class DeclaredBenefits(BaseModel):
    """Benefits that are not costs; they decide whether rare extreme tasks still justify a capacity."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    data_control: bool = False
    residency_requirement: bool = False
    internal_latency: bool = False
    deep_customisation: bool = False
    note: str = ""

    def declared(self) -> list[str]:
        return [name for name in ("data_control", "residency_requirement", "internal_latency", "deep_customisation")
                if getattr(self, name)]


DEFAULT = "built-in default"
LoadCategory = Literal["batch", "agent", "peak", "test", "maintenance"]


class RenewalTaskSet(BaseModel):
    """The representative task set both paths run: which load categories of the task log it covers."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    description: str = "every task of the log on both paths (no representative set declared)"
    categories: tuple[LoadCategory, ...] = ("batch", "agent", "peak", "test", "maintenance")
    # the sha256 of the task set a live `k3 paths` run sent (printed on top of that run): the review reads a live run
    # only when it ran this very set; null: no live run is tied to the review (one named is not read)
    live_sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] | None = None

    @field_validator("categories")
    @classmethod
    def _some(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if not v:
            raise ValueError("expected at least one task category")
        return v


class RenewalQualityRule(BaseModel):
    """What a successful (accepted) task is, applied identically to both paths."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    description: str = "the task log's `accepted` column, as the team recorded it"
    # false: a task that needed a manual correction is not counted as accepted (seed 004: a human takeover is
    # not a delivery)
    manual_correction_is_accepted: bool = True
    # false: a task with a malformed tool call is not counted as accepted even if it was later accepted
    tool_call_error_is_accepted: bool = True


class FixedElements(BaseModel):
    """Seed 004's four elements fixed before any result is read: the task set, one request format for both paths,
    one retry policy, one quality rule."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task_set: RenewalTaskSet = RenewalTaskSet()
    request_format: str = "not declared"  # e.g. "OpenAI chat completions, same tools and system prompt, full history"
    retry_policy: RetryPolicy = RetryPolicy()
    quality_rule: RenewalQualityRule = RenewalQualityRule()


def accepted(task, quality: RenewalQualityRule) -> bool:
    """One task under the fixed quality rule (the same function for both paths)."""
    return bool(task.accepted) and (quality.manual_correction_is_accepted or not task.manual_correction) \
        and (quality.tool_call_error_is_accepted or task.tool_call_errors == 0)
