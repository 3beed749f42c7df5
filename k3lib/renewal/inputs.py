"""The review's input files — task log, costs, incidents, operations hours — read and validated row by row.

Each bad value raises one `BadInputError` line naming the file, the line, the column and what is expected.
A blank cost stays `None` everywhere downstream: an unknown amount is never replaced by a guess.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import re
from pathlib import Path
from typing import Annotated, Any, Iterator, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import ErrorDetails

from ..core.errors import BadInputError
from ..core.yamlsafe import safe_load as yaml_load
from .costsources import CostSource, Credit, CurrencyConversion, mismatched_items

LoadCategory = Literal["batch", "agent", "peak", "test", "maintenance"]
TaskPath = Literal["self-hosted", "api"]
IncidentCategory = Literal["node/accelerator", "vllm-engine", "memory-cache", "tool-call-format",
                           "business-connector", "network-timeout", "version-dependency", "human-upgrade"]
HoursCategory = Literal["install", "vllm-tuning", "monitoring", "upgrades", "failed-task-diagnosis",
                        "documentation", "product-communication", "out-of-hours", "api-comparison",
                        # worked hours no label maps to a category (`k3 import jira`'s unmapped worklogs): counted in
                        # the effort and listed, never dropped
                        "unclassified"]
NonNegInt = Annotated[int, Field(ge=0)]
# finite: `.inf` or `nan` is no amount, no duration and no number of hours (YAML reads `.inf` as a float)
NonNegFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Money = Annotated[float, Field(ge=0, allow_inf_nan=False)] | None

TASK_COLUMNS = ("task_id", "category", "path", "submitted_at", "started_at", "finished_at", "accepted", "retries",
                "tool_call_errors", "timed_out", "manual_correction", "routed_to_api", "wait_s")
INCIDENT_COLUMNS = ("id", "started_at", "category", "detected_automatically", "previous_version_restored",
                    "in_flight_resumed_or_cancelled", "api_failover_without_contract_change", "fields_preserved",
                    "minutes_to_recover")
FIVE_QUESTIONS = INCIDENT_COLUMNS[3:8]
HOURS_COLUMNS = ("week", "category", "hours")
COST_ITEMS = ("capacity", "storage", "network", "monitoring", "install_upgrade_rollback_hours", "on_call",
              "failed_requests", "tasks_transferred_to_api", "teams_waiting_time", "api_bill_same_tasks",
              "delivered_tasks_value", "hourly_rate")

_TRUE, _FALSE = frozenset({"true"}), frozenset({"false"})


def _bool(v: Any) -> Any:
    if isinstance(v, str):
        low = v.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise ValueError("expected true or false")
    return v


def _blank_none(v: Any) -> Any:
    return None if isinstance(v, str) and not v.strip() else v


def _utc(v: Any) -> Any:
    """ISO 8601; a time without offset is read as UTC (logs exported from Prometheus-fed tools usually are)."""
    if isinstance(v, str):
        try:
            v = dt.datetime.fromisoformat(v.strip().replace("Z", "+00:00"))
        except ValueError:
            raise ValueError("expected an ISO 8601 time such as 2026-07-24T09:30:00Z") from None
    if isinstance(v, dt.datetime) and v.tzinfo is None:
        v = v.replace(tzinfo=dt.timezone.utc)
    return v


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TaskRecord(_Row):
    task_id: Annotated[str, Field(min_length=1)]
    category: LoadCategory
    path: TaskPath
    submitted_at: dt.datetime
    started_at: dt.datetime | None = None  # blank: never started (cancelled in the queue)
    finished_at: dt.datetime | None = None
    accepted: bool
    retries: NonNegInt
    tool_call_errors: NonNegInt
    timed_out: bool
    manual_correction: bool
    routed_to_api: bool
    wait_s: NonNegFloat

    _b = field_validator("accepted", "timed_out", "manual_correction", "routed_to_api", mode="before")(
        classmethod(lambda cls, v: _bool(v)))
    _t = field_validator("submitted_at", mode="before")(classmethod(lambda cls, v: _utc(v)))
    _to = field_validator("started_at", "finished_at", mode="before")(
        classmethod(lambda cls, v: _utc(_blank_none(v))))


def _incident_class(v: Any) -> Any:
    """Blank: not classified yet (an imported incident before its postmortem), shown as such and never counted as
    recoverable; `node-accelerator` (the spelling an earlier README used) is read as `node/accelerator`."""
    v = _blank_none(v)
    return "node/accelerator" if isinstance(v, str) and v.strip() == "node-accelerator" else v


class IncidentRecord(_Row):
    id: Annotated[str, Field(min_length=1)]
    started_at: dt.datetime
    category: IncidentCategory | None = None  # blank: not classified (never favourable)
    # blank: not established for this incident (shown as unknown, never counted as yes)
    detected_automatically: bool | None = None
    previous_version_restored: bool | None = None
    in_flight_resumed_or_cancelled: bool | None = None
    api_failover_without_contract_change: bool | None = None
    fields_preserved: bool | None = None
    minutes_to_recover: NonNegFloat | None = None  # blank: not recovered, or not measured

    _b = field_validator(*FIVE_QUESTIONS, mode="before")(classmethod(lambda cls, v: _bool(_blank_none(v))))
    _t = field_validator("started_at", mode="before")(classmethod(lambda cls, v: _utc(v)))
    _m = field_validator("minutes_to_recover", mode="before")(classmethod(lambda cls, v: _blank_none(v)))
    _c = field_validator("category", mode="before")(classmethod(lambda cls, v: _incident_class(v)))


# --- ISO weeks: the hours file's week column -----------------------------------------------------------------------

ISO_WEEK = re.compile(r"^(?P<year>[0-9]{4})-W(?P<week>[0-9]{2})$")


def iso_week_start(week: str) -> dt.datetime:
    """Monday 00:00 UTC of an ISO week written YYYY-Www (e.g. 2026-W31)."""
    m = ISO_WEEK.match(week)
    if m is None:
        raise ValueError(f"expected an ISO week such as 2026-W31 (year, W, two-digit week), got {week!r}")
    try:
        day = dt.date.fromisocalendar(int(m["year"]), int(m["week"]), 1)
    except ValueError:
        raise ValueError(f"{week!r} is not a week of {m['year']}; expected an ISO week such as 2026-W31") from None
    return dt.datetime.combine(day, dt.time(), tzinfo=dt.timezone.utc)


def _iso_week(v: Any) -> Any:
    # a week without its year (`W31`, `31`) would be placed in no window: refused rather than guessed
    if isinstance(v, str):
        iso_week_start(v.strip())
        return v.strip()
    return v


class HoursRecord(_Row):
    week: str  # an ISO week, YYYY-Www: the hours are clipped to the review window by it
    category: HoursCategory
    hours: NonNegFloat

    _w = field_validator("week", mode="before")(classmethod(lambda cls, v: _iso_week(v)))


class CostsInput(BaseModel):
    """Amounts for the three weeks, one currency; every item may be blank (None) and stays blank."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    currency: Annotated[str, Field(pattern=r"^[A-Z]{3}$")] | None = None  # ISO 4217, e.g. EUR; or review.currency
    capacity: Money = None  # rental or reservation of the capacity
    storage: Money = None  # weights and logs
    network: Money = None
    monitoring: Money = None  # supervision and metric collection
    install_upgrade_rollback_hours: Money = None  # hours, priced with hourly_rate
    on_call: Money = None
    failed_requests: Money = None
    tasks_transferred_to_api: Money = None
    teams_waiting_time: Money = None
    api_bill_same_tasks: Money = None  # the API bill for the same task set
    delivered_tasks_value: Money = None
    hourly_rate: Money = None
    # written by `k3 import`: the rates applied to bills in another currency, and what each export gave per item
    conversions: tuple[CurrencyConversion, ...] = ()
    sources: tuple[CostSource, ...] = ()
    # credits and refunds, apart from the items: listed, netted into their item only when recurring and accepted
    credits: tuple[Credit, ...] = ()
    # the nodes the capacity bill (or the inventory) reserves, as dcgm-exporter's Hostname names them: each must be
    # one of review.deployment.hostnames (a billed node is reviewed, never left out); empty: not stated
    capacity_nodes: tuple[str, ...] = ()

    _blank = field_validator(*COST_ITEMS, mode="before")(classmethod(lambda cls, v: _blank_none(v)))

    @model_validator(mode="after")
    def _sources_agree(self) -> "CostsInput":
        if self.conversions and self.currency is None:
            raise ValueError("conversions: a rate without the currency it converts to; expected currency: EUR")
        same = [c.from_currency for c in self.conversions if c.from_currency == self.currency]
        if same:
            raise ValueError(f"conversions: a rate from {same[0]} to itself; expected rates from other currencies")
        bad = mismatched_items({k: getattr(self, k) for k in COST_ITEMS}, self.sources)
        if bad:
            raise ValueError(f"sources: {bad[0]}; expected the amounts the imports wrote (re-run k3 import, or "
                             "remove that source to set the amount by hand)")
        return self


# ---------------------------------------------------------------------------------------------------------------

def _read_text(path: Path, what: str) -> str:
    try:
        return path.read_bytes().decode("utf-8-sig")
    except FileNotFoundError:
        raise BadInputError(f"file not found; expected {what}", source=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInputError(f"cannot read ({exc}); expected {what}", source=str(path)) from None


def _expected(err: ErrorDetails) -> str:
    msg = str(err.get("msg", "")).removeprefix("Value error, ")
    given = err.get("input")
    if err.get("type") == "literal_error":
        return msg.replace("Input should be", "expected one of")
    return f"{msg} (got {given!r})" if isinstance(given, (str, int, float)) else msg


def _csv_lines(reader: Any, p: Path, what: str) -> Iterator[list[str]]:
    """The reader's rows, with what the csv module cannot read (a bare CR, a field over its size limit) as one
    BadInputError line instead of a traceback."""
    try:
        yield from reader
    except csv.Error as exc:
        raise BadInputError(f"line {reader.line_num}: not readable as {what} ({exc})", source=str(p)) from None


def _blank_leading_comments(text: str) -> str:
    """The `#` lines before the header (an importer's provenance header) blanked, so line numbers stay the file's."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if line.startswith("#"):
            lines[i] = ""
        elif line.strip():
            break
    return "\n".join(lines)


def read_csv_rows(path: str | Path, columns: tuple[str, ...], model: type[_Row], what: str) -> list[tuple[int, Any]]:
    """(line number, row) of a CSV with exactly `columns` (any order, whitespace tolerated) validated by `model`;
    `#` lines and blank lines before the header are skipped."""
    p = Path(path)
    text = _blank_leading_comments(_read_text(p, what))
    reader = csv.reader(io.StringIO(text))
    lines = _csv_lines(reader, p, what)
    header = next((row for row in lines if row and any(c.strip() for c in row)), None)
    if header is None:
        raise BadInputError(f"line 1: empty file; expected a header with {', '.join(columns)}", source=str(p))
    names = [h.strip() for h in header]
    missing = [c for c in columns if c not in names]
    unknown = [c for c in names if c not in columns]
    if missing or unknown:
        problem = f"missing column {missing[0]!r}" if missing else f"unknown column {unknown[0]!r}"
        raise BadInputError(f"line {reader.line_num} (header): {problem}; expected the columns {', '.join(columns)}",
                            source=str(p))
    rows = []
    for cells in lines:
        line = reader.line_num
        if not cells or all(not c.strip() for c in cells):
            continue
        if len(cells) != len(names):
            raise BadInputError(f"line {line}: {len(cells)} cells, expected {len(names)} ({', '.join(names)})",
                                source=str(p))
        data = {n: c.strip() for n, c in zip(names, cells)}
        try:
            rows.append((line, model.model_validate(data)))
        except ValidationError as exc:
            err = exc.errors()[0]
            column = str(err["loc"][0]) if err.get("loc") else "(row)"
            raise BadInputError(f"line {line}, column {column}: {_expected(err)}", source=str(p)) from None
    return rows


def contradiction(t: TaskRecord) -> str | None:
    """What makes a task row contradict itself, or None: such a row is refused with its line, never averaged in."""
    if t.accepted and t.timed_out:
        return "column timed_out: true on an accepted task; expected a timed-out task not accepted (or not timed out)"
    if t.accepted and t.finished_at is None:
        return "column finished_at: blank on an accepted task; expected the time the accepted task finished"
    if t.finished_at is not None and t.started_at is None:
        return "column started_at: blank on a task that finished; expected the time it started"
    return None


def read_tasks(path: str | Path) -> list[TaskRecord]:
    rows = read_csv_rows(path, TASK_COLUMNS, TaskRecord, "a task log CSV")
    seen: set[tuple[str, str]] = set()
    for line, t in rows:
        problem = contradiction(t)
        if problem is not None:
            raise BadInputError(f"line {line}, {problem}", source=str(path))
        if (t.task_id, t.path) in seen:
            # the same task may run once per path (the API comparison); twice on one path is a duplicated export
            raise BadInputError(f"line {line}, column task_id: {t.task_id!r} appears twice on path {t.path}; "
                                "expected one row per task and path", source=str(path))
        seen.add((t.task_id, t.path))
        for a, b in (("submitted_at", "started_at"), ("started_at", "finished_at")):
            va, vb = getattr(t, a), getattr(t, b)
            if va is not None and vb is not None and vb < va:
                raise BadInputError(f"line {line}, column {b}: earlier than {a}; expected {a} ≤ {b}",
                                    source=str(path))
    return [t for _, t in rows]


def read_incidents(path: str | Path) -> list[IncidentRecord]:
    return [r for _, r in read_csv_rows(path, INCIDENT_COLUMNS, IncidentRecord, "an incidents CSV")]


def read_hours(path: str | Path) -> list[HoursRecord]:
    return [r for _, r in read_csv_rows(path, HOURS_COLUMNS, HoursRecord, "an operations hours CSV")]


def _key_lines(text: str) -> dict[str, int]:
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return {}
    if not isinstance(node, yaml.MappingNode):
        return {}
    return {k.value: k.start_mark.line + 1 for k, _ in node.value if isinstance(k, yaml.ScalarNode)}


def read_costs(path: str | Path) -> CostsInput:
    p = Path(path)
    text = _read_text(p, "a costs YAML file")
    try:
        data = yaml_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "YAML"
        raise BadInputError(f"{where}: not valid YAML ({getattr(exc, 'problem', None) or exc})", source=str(p)) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise BadInputError(f"line 1: expected a mapping of cost items ({', '.join(COST_ITEMS)}), got "
                            f"{type(data).__name__}", source=str(p))
    try:
        return CostsInput.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = str(err["loc"][0]) if err.get("loc") else "(top level)"
        if key in ("conversions", "sources", "credits", "capacity_nodes") or not err.get("loc"):
            where = ".".join(str(x) for x in err.get("loc", ())) or "(top level)"
            raise BadInputError(f"key {where}: {_expected(err)}", source=str(p)) from None
        line = _key_lines(text).get(key)
        where = f"line {line}, " if line else ""
        if key == "currency":
            msg = f"expected an ISO 4217 code such as EUR or USD (got {err.get('input')!r})"
        elif err.get("type") == "extra_forbidden":
            msg = (f"unknown cost item; expected one of currency, {', '.join(COST_ITEMS)}, conversions, sources, "
                   "credits, capacity_nodes")
        else:
            msg = f"{_expected(err)}; expected an amount ≥ 0 or blank"
        raise BadInputError(f"{where}key {key}: {msg}", source=str(p)) from None


def resolve_currency(stated: str | None, costs: CostsInput, path: str | Path) -> CostsInput:
    """The costs with the one currency of the review: the parameters' `review.currency` and the costs file's
    `currency:` must agree; amounts with neither are refused (an amount without its currency is not evidence)."""
    if stated and costs.currency and stated != costs.currency:
        raise BadInputError(f"key currency: {costs.currency} here but review.currency is {stated}; expected one "
                            "currency for every amount", source=str(path))
    currency = stated or costs.currency
    amounts = [k for k in COST_ITEMS if k != "install_upgrade_rollback_hours" and getattr(costs, k) is not None]
    if currency is None and amounts:
        raise BadInputError(f"key {amounts[0]}: an amount without a currency; expected currency: EUR (an ISO 4217 "
                            "code) in this file or review.currency in the parameters", source=str(path))
    return costs.model_copy(update={"currency": currency})
