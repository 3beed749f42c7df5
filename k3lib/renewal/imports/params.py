"""`k3 import`'s parameters: a top-level `imports:` section in its own YAML file (see
parameters/imports.example.yaml), layered with `extends:` and `--set` like every parameters file, unknown keys
refused; the command line's options fill or override it. The window may come from the review's own parameters
(`--review FILE`: its `review.series` window and `review.currency`)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ...core.errors import BadInputError
from ...core.layering import _provenance, layer, validate_model
from ..costsources import CurrencyConversion
from ..inputs import HoursCategory, IncidentCategory
from ..shapes import ParamTree

REFERENCE = "parameters/imports.example.yaml"
CostItem = Literal["capacity", "storage", "network", "monitoring", "none"]


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def _zone(v: str) -> str:
    try:
        ZoneInfo(v)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {v!r}; expected an IANA name such as Europe/Paris or UTC") from None
    return v


class ReviewWindowParams(_M):
    start: dt.datetime
    end: dt.datetime


class Commitment(_M):
    """A one-time purchase (a reservation, a capacity block, an upfront invoice) spread evenly over its term."""

    id: str  # the commitment, reservation or resource id its lines carry
    start: dt.datetime
    end: dt.datetime


class CostParams(_M):
    tags: dict[str, str] = {}  # every pair must match (keys compared without a `user:` prefix)
    resources: tuple[str, ...] = ()  # resource ids or glob patterns (fnmatch), e.g. arn:aws:ec2:*:instance/i-0ab*
    services: tuple[str, ...] = ()  # restrict to these service names (case-insensitive)
    all_rows: bool = False  # the whole export is the deployment's (a dedicated account)
    basis: Literal["amortised", "billed"] = "amortised"  # FOCUS EffectiveCost / CUR amortised vs what was invoiced
    items: dict[str, CostItem] = {}  # service name (or category) → item; `none` leaves its lines out
    commitments: tuple[Commitment, ...] = ()
    # invoices with dates, not times: the provider's billing day D closes at this local time on D
    timezone: str = "UTC"
    day_closes_at: dt.time = dt.time(0, 0)

    _tz = field_validator("timezone")(classmethod(lambda cls, v: _zone(v)))


class IncidentParams(_M):
    # pagerduty: created_at → resolved_at (trigger → resolve: the only clock it has); opsgenie: impact dates when
    # given, else created → resolved; `trigger-resolve` forces the latter for both
    clock: Literal["impact", "trigger-resolve"] = "impact"
    postmortems: str | None = None  # CSV: id, category and the drill answers, from the postmortems
    classes: dict[str, IncidentCategory] = {}  # service name, tag or title word → class, stated by the team
    services: tuple[str, ...] = ()  # keep only incidents of these services (none: all)
    timezone: str = "UTC"  # the responders' zone, for off-hours effort
    business_hours: tuple[int, int] = (8, 18)  # [start, end), Monday to Friday: PagerDuty's own definition

    _tz = field_validator("timezone")(classmethod(lambda cls, v: _zone(v)))


# a category, or `none`: the operator's word that the work is not the deployment's (hiring, another team's
# project): listed with its hours, not counted. Work no mapping names is counted as `unclassified`, never dropped.
HoursMapping = HoursCategory | Literal["none"]


class HoursParams(_M):
    labels: dict[str, HoursMapping] = {}
    components: dict[str, HoursMapping] = {}
    issues: dict[str, HoursMapping] = {}  # issue key → category (wins over components and labels)
    projects: dict[str, HoursMapping] = {}  # project key (the key's prefix) → category (loses to the rest)
    issues_export: str | None = None  # Jira's issues (search JSON or CSV): resolves worklogs that carry an issue id
    timezone: str = "UTC"  # worklog times without an offset are in this zone (the exporting user's)
    date_formats: tuple[str, ...] = ("%d/%b/%y %I:%M %p", "%d/%b/%Y %I:%M %p", "%Y-%m-%d %H:%M", "%Y-%m-%d")

    _tz = field_validator("timezone")(classmethod(lambda cls, v: _zone(v)))


class Prices(_M):
    input_per_mtok: Annotated[float, Field(ge=0)]
    output_per_mtok: Annotated[float, Field(ge=0)]
    cached_input_per_mtok: Annotated[float, Field(ge=0)] | None = None  # None: cache hits priced as input
    cache_write_input_per_mtok: Annotated[float, Field(ge=0)] | None = None  # Anthropic's cache writes; None: input
    currency: Annotated[str, Field(pattern=r"^[A-Z]{3}$")] = "USD"


class UsageParams(_M):
    prices: dict[str, Prices] = {}  # model name (or `default`) → prices
    task_field: str | None = None  # dotted path of the task id in a log line, e.g. metadata.task_id
    tasks: str | None = None  # the review's task log: only the API path's tasks are billed
    batch: ReviewWindowParams | None = None  # a batch's own dates (created_at, ended_at): place lines without a time
    all_rows: bool = False  # lines without a time are the window's, on the operator's word


class ImportSection(_M):
    window: ReviewWindowParams | None = None
    currency: Annotated[str, Field(pattern=r"^[A-Z]{3}$")] | None = None
    conversions: tuple[CurrencyConversion, ...] = ()
    costs: CostParams = CostParams()
    incidents: IncidentParams = IncidentParams()
    hours: HoursParams = HoursParams()
    usage: UsageParams = UsageParams()


class ImportParams(_M):
    imports: ImportSection = ImportSection()


def _relative(merged: ParamTree, prov: dict[str, str]) -> None:
    """File paths in the parameters are relative to the file that set them."""
    for section, key in (("incidents", "postmortems"), ("usage", "tasks"), ("hours", "issues_export")):
        imports = merged.get("imports")
        node = imports.get(section) if isinstance(imports, dict) else None  # not a mapping: the model says so
        value = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict) and isinstance(value, str):
            p = Path(value).expanduser()
            origin = _provenance(("imports", section, key), prov, "")
            if not p.is_absolute():
                base = Path(origin).parent if origin and not origin.startswith("--set") else Path.cwd()
                p = base / p
            node[key] = str(p.resolve())


def load_import_params(files: Sequence[str | Path], sets: Sequence[str] = ()) -> ImportParams:
    merged, prov = layer(files, list(sets))
    if merged and "imports" not in merged:
        raise BadInputError("expected a top-level imports: section (see parameters/imports.example.yaml)",
                            source=str(files[-1]) if files else "--set")
    _relative(merged, prov)
    return validate_model(ImportParams, merged, source=str(files[-1]) if files else "parameters", prov=prov,
                          reference=REFERENCE)
