"""The review's parameters: input files (relative to the file that names them), the series source, the four
elements fixed before any result is read, the rules, the currency, the declared benefits, the incident drill and
the drill's target — one pydantic model, unknown keys refused.

Layering, `extends:` and `--set` work as for the acceptance parameters (the same loader helpers). The loader
records where every rule, fixed element and benefit came from (`review.origins`: the file or override that set
it, or "built-in default"), so the report prints each with its origin and the decision names what it was decided
on. An acceptance parameters file (`k3 validate`) given to the review is named as such.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..axes.paths.record import read_paths_record
from ..core.errors import ArtifactError, BadInputError
from ..core.layering import COMMAND_SECTIONS, _provenance, layer, validate_model
from ..core.params import RunParams, TargetParams, _check_url
from ..core.yamlsafe import safe_load as yaml_load
from .rules import DEFAULT, DeclaredBenefits, FixedElements, RenewalRules, is_looser
from .shapes import ParamTree, RenewalLoosened

INPUT_KEYS = ("tasks", "costs", "incidents", "hours")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class InputFiles(_Model):
    tasks: str
    costs: str
    incidents: str
    hours: str


class SeriesSource(_Model):
    """A history file (OpenMetrics with timestamps) or a Prometheus server, over one window."""

    history_file: str | None = None
    prometheus_url: str | None = None
    selector: str = ""  # extra PromQL label matchers on every query, e.g. job="vllm" (the deployment's own are added)
    start: dt.datetime  # the review window: every input is clipped to [start, end)
    end: dt.datetime
    # each slot is the mean over its step (avg_over_time), never one instant; bounded so that a slot stays shorter
    # than the idle stretches it must show (a coarser step than the default is a loosened setting)
    step_s: Annotated[float, Field(ge=15, le=900)] = 300.0

    _url = field_validator("prometheus_url")(classmethod(lambda cls, v: _check_url(v)))

    @property
    def location(self) -> str:
        """Where the series are read: the history file, else the Prometheus server's URL."""
        return self.history_file or self.prometheus_url or ""

    @model_validator(mode="after")
    def _one_source(self) -> "SeriesSource":
        if (self.history_file is None) == (self.prometheus_url is None):
            raise ValueError("expected exactly one of history_file or prometheus_url")
        if self.start.tzinfo is None or self.end.tzinfo is None:
            raise ValueError("expected start and end with a UTC offset, e.g. 2026-07-24T00:00:00Z")
        if self.end <= self.start:
            raise ValueError("expected end after start")
        return self


class DeploymentLabels(_Model):
    """The one deployment the review counts: its series are selected by these labels (series of other hosts,
    GPUs or models are left out and counted), the drill and the live run must have touched it. Named here, or read
    from an accepted acceptance run (`acceptance_run`: its served model and GPU count, checked against what is
    named here)."""

    model_name: Annotated[str, Field(min_length=1)] | None = None  # vLLM's model_name label (the served model)
    instances: tuple[str, ...] = ()  # the vLLM scrapes' instance labels (host:port); empty: any instance of the model
    hostnames: tuple[str, ...] = ()  # dcgm-exporter's Hostname label of each node of the deployment
    gpu_uuids: tuple[str, ...] = ()  # dcgm-exporter's UUID label of each GPU (needed when a node has others)
    gpus: Annotated[int, Field(gt=0)] | None = None  # the GPUs the capacity reserves (stated, checked)
    acceptance_run: str | None = None  # an accepted `k3 validate` run folder of this deployment

    @model_validator(mode="after")
    def _consistent(self) -> "DeploymentLabels":
        if self.gpu_uuids and self.gpus is not None and len(set(self.gpu_uuids)) != self.gpus:
            raise ValueError(f"{len(set(self.gpu_uuids))} gpu_uuids named but gpus is {self.gpus}; expected one UUID "
                             "per reserved GPU")
        return self

    def missing(self) -> list[str]:
        """What the review still needs to select the deployment's series (after the acceptance run is read)."""
        out = [] if self.model_name else ["model_name"]
        out += [] if self.gpus else ["gpus"]
        return out + ([] if self.hostnames or self.gpu_uuids else ["hostnames or gpu_uuids"])


class HttpStep(_Model):
    method: Literal["GET", "POST", "PUT", "DELETE"] = "POST"
    path: str  # relative to the target's base URL (or an absolute http URL)
    json_body: Any = Field(default=None, alias="json")
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class CommandStep(_Model):
    """One step of a kill or restore command: an HTTP call or a shell command (argv, no shell expansion)."""

    http: HttpStep | None = None
    argv: tuple[str, ...] | None = None
    wait_s: Annotated[float, Field(ge=0)] = 0.0  # pause after the step

    @model_validator(mode="after")
    def _one(self) -> "CommandStep":
        if (self.http is None) == (self.argv is None):
            raise ValueError("expected exactly one of http or argv in a command step")
        return self


class DrillParams(_Model):
    enabled: bool = True
    kill: tuple[CommandStep, ...] = ()
    restore: tuple[CommandStep, ...] = ()
    # the version the restore rolls back to, as GET /version reports it; null: any older release than the one
    # served before the drill counts as the previous version (the same version back is a restart, not a rollback)
    previous_version: str | None = None
    api_base_url: str | None = None  # the API path for the fail-over question; null: not configured
    recovery_timeout_s: Annotated[float, Field(gt=0)] = 60.0
    request_timeout_s: Annotated[float, Field(gt=0)] = 30.0
    artifacts_manifest: str | None = None  # a creative pipeline's manifest.json, checked when given

    _url = field_validator("api_base_url")(classmethod(lambda cls, v: _check_url(v)))


class AcceptedLoosening(_Model):
    """A loosened setting accepted before the review, by someone, with the reason: it then no longer forbids
    `renew` (it is still listed). It accepts the setting only at the very value written here."""

    name: str  # as the decision lists it, e.g. "fixed.task_set.categories", "rules.business_hours"
    value: Any
    by: Annotated[str, Field(min_length=1)]
    why: Annotated[str, Field(min_length=1)]


def _same(a: Any, b: Any) -> bool:
    norm = (lambda v: sorted(v) if isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v)
            else list(v) if isinstance(v, tuple) else v)
    return bool(norm(a) == norm(b))


class ReviewParams(_Model):
    inputs: InputFiles | None = None  # None only with `demo`: generated into the run folder
    series: SeriesSource | None = None
    deployment: DeploymentLabels = DeploymentLabels()  # the one deployment reviewed (required with series)
    fixed: FixedElements = FixedElements()  # task set, request format, retry policy, quality rule
    rules: RenewalRules = RenewalRules()
    # ISO 4217 code of every amount in the costs file (which may state it too; the two must agree)
    currency: str | None = None
    benefits: DeclaredBenefits = DeclaredBenefits()
    drill: DrillParams = DrillParams()
    demo: Literal["steady", "idle-heavy", "spiky", "poor"] | None = None  # a generated demo scenario
    # a `k3 paths` run folder or its evidence/paths.json (the same task set live on both paths), relative to the file
    # that names it: shown in 13_api_comparison's live section and read by the decision; null: the comparison rests
    # on the task log only (an open item of the decision)
    live_paths: str | None = None
    # loosened settings (see loosened()) accepted before the review: each by name and value, who and why
    accepted_loosened: tuple[AcceptedLoosening, ...] = ()
    origins: dict[str, str] = {}  # written by the loader: "review.rules.x" → the file that set it, or the default

    def origin(self, key: str) -> str:
        """Where `key` was set; a key inside a tracked one (review.fixed.task_set.categories) takes its origin."""
        parts = key.split(".")
        for n in range(len(parts), 1, -1):
            hit = self.origins.get(".".join(parts[:n]))
            if hit is not None:
                return hit
        return DEFAULT

    def defaulted(self) -> list[str]:
        """The thresholds and fixed elements this review would decide on built-in defaults."""
        return [k for k in tracked_keys() if k.startswith(("review.fixed.", "review.rules."))
                and self.origin(k) == DEFAULT]

    def loosened(self) -> list[RenewalLoosened]:
        """Each threshold (and the series step) set past its built-in default toward renew, with its origin: the
        decision lists them in its reasons and its condition, and the terminal output prints both."""
        out: list[RenewalLoosened] = []
        values = [(f"rules.{k}", getattr(self.rules, k), f.default) for k, f in RenewalRules.model_fields.items()]
        if self.series is not None:
            values.append(("series.step_s", self.series.step_s, SeriesSource.model_fields["step_s"].default))
        for name, value, default in values:
            if not isinstance(value, (int, float)) or not isinstance(default, (int, float)):
                continue
            # a coarser step averages a short burst over a longer slot: fewer idle slots, shorter idle stretches
            looser = value > default if name == "series.step_s" else is_looser(name.removeprefix("rules."), value,
                                                                             default)
            if looser:
                out.append({"name": name, "value": value, "default": default, "origin": self.origin(f"review.{name}")})
        out += self._scope_loosened()
        for x in out:
            hit = next((a for a in self.accepted_loosened if a.name == x["name"] and _same(a.value, x["value"])), None)
            x["accepted_by"], x["accepted_why"] = (hit.by, hit.why) if hit else (None, None)
        return out

    def _scope_loosened(self) -> list[RenewalLoosened]:
        """Scopes that differ from the reference review (the built-in defaults): a narrower task set (the other
        categories' failures no longer count), other business hours or another time zone (which slots must be
        busy), a laxer retry policy — whichever way they differ, a reviewer cannot tell that they do not favour
        renew."""
        out: list[RenewalLoosened] = []
        ref_rules, ref_fixed = RenewalRules(), FixedElements()
        scopes = [("fixed.task_set.categories", list(self.fixed.task_set.categories),
                   list(ref_fixed.task_set.categories)),
                  ("rules.business_hours", list(self.rules.business_hours), list(ref_rules.business_hours)),
                  ("rules.timezone", self.rules.timezone, ref_rules.timezone)]
        for name, value, default in scopes:
            if not _same(value, default):
                out.append({"name": name, "value": value, "default": default, "origin": self.origin(f"review.{name}")})
        retries, ref_retries = self.fixed.retry_policy.max_retries, ref_fixed.retry_policy.max_retries
        if retries > ref_retries:
            out.append({"name": "fixed.retry_policy.max_retries", "value": retries, "default": ref_retries,
                        "origin": self.origin("review.fixed.retry_policy.max_retries")})
        return out

    @field_validator("currency")
    @classmethod
    def _iso_4217(cls, v: str | None) -> str | None:
        if v is not None and not (len(v) == 3 and v.isascii() and v.isalpha() and v.isupper()):
            raise ValueError("expected an ISO 4217 currency code such as EUR or USD")
        return v

    @field_validator("live_paths")
    @classmethod
    def _live_paths(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                read_paths_record(v)
            except ArtifactError as exc:
                raise ValueError(exc.one_line()) from None
        return v

    @model_validator(mode="after")
    def _inputs_or_demo(self) -> "ReviewParams":
        if self.demo is None and (self.inputs is None or self.series is None):
            raise ValueError("expected review.inputs and review.series (or review.demo: steady|idle-heavy|spiky|poor)")
        if self.series is not None:
            days = (self.series.end - self.series.start).total_seconds() / 86400
            if days < self.rules.min_window_days:
                raise ValueError(f"review.series: a window of {days:.3g} days; expected at least "
                                 f"{self.rules.min_window_days:g} days (review.rules.min_window_days: seed 004 reviews "
                                 "three weeks; a shorter minimum is a loosened rule, listed in the decision)")
            d = self.deployment
            if d.acceptance_run is None and d.missing():
                raise ValueError("review.deployment: expected the deployment under review, whose series alone are "
                                 f"counted — missing {', '.join(d.missing())} (or acceptance_run: an accepted k3 "
                                 "validate run giving its model and GPU count)")
        return self


class RenewalParams(_Model):
    """The whole, resolved parameter set of one review."""

    review: ReviewParams
    target: TargetParams = TargetParams()  # the drill's target; base_url null: the embedded emulator
    run: RunParams = RunParams()

    def public_dict(self) -> ParamTree:
        return self.model_dump(mode="json", by_alias=True)


def tracked_keys() -> list[str]:
    """The parameters printed on top of the report with their origin."""
    return ([f"review.fixed.{k}" for k in FixedElements.model_fields] + [f"review.rules.{k}" for k in
            RenewalRules.model_fields] + [f"review.benefits.{k}" for k in DeclaredBenefits.model_fields]
            + ["review.currency", "review.series.step_s"]
            + [f"review.deployment.{k}" for k in DeploymentLabels.model_fields])


def _origin(key: str, merged: ParamTree, prov: dict[str, str], before: dict[str, str]) -> str:
    """Which file or override set `key`: the deepest provenance at or above it, else one below it (a fixed element
    set in part), else what the resolved parameters this run started from recorded; absent: the default."""
    node: Any = merged
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return DEFAULT
        node = node[part]
    parts = key.split(".")
    for n in range(len(parts), 0, -1):
        if hit := prov.get(".".join(parts[:n])):
            return hit
    deeper = [origin for path, origin in prov.items() if path.startswith(key + ".")]
    return deeper[-1] if deeper else before.get(key, DEFAULT)


def _record_origins(merged: ParamTree, prov: dict[str, str]) -> None:
    review = merged.get("review")
    if not isinstance(review, dict):
        return
    recorded = review.get("origins")
    before: dict[str, str] = {}
    if isinstance(recorded, dict) and all(isinstance(v, str) for v in recorded.values()):
        before = {k: v for k, v in recorded.items() if isinstance(v, str)}
    if any(path.startswith("review.origins") for path in prov):
        before = {}  # origins are the loader's record, never taken from a file or an override
    review["origins"] = {k: _origin(k, merged, prov, before) for k in tracked_keys()}


ACCEPTANCE_SECTIONS = COMMAND_SECTIONS["k3 validate"]  # the sections that make a file the acceptance command's


def _refuse_other_command(merged: ParamTree, source: str) -> None:
    if "review" not in merged and any(k in merged for k in ACCEPTANCE_SECTIONS):
        raise BadInputError("this is an acceptance parameters file (k3 validate), not a review file; expected a "
                            "top-level review: section (see parameters/renewal-demo.yaml)", source=source)


def _resolve_paths(merged: ParamTree, prov: dict[str, str]) -> None:
    """Input paths are relative to the file that set them (or to the current folder for --set)."""
    review = merged.get("review")
    if not isinstance(review, dict):
        return
    slots = [("inputs", k) for k in INPUT_KEYS] + [("series", "history_file"), ("drill", "artifacts_manifest"),
                                                   ("deployment", "acceptance_run")]
    for section, key in [*slots, ("", "live_paths")]:
        node = review.get(section) if section else review
        value = node.get(key) if isinstance(node, dict) else None
        if not isinstance(node, dict) or not isinstance(value, str):
            continue
        p = Path(value).expanduser()
        if not p.is_absolute():
            origin = _provenance(("review", *([section] if section else []), key), prov, "")
            base = Path(origin).parent if origin and not origin.startswith("--set") else Path.cwd()
            p = base / p
        node[key] = str(p.resolve())


def validate_review(data: ParamTree, prov: dict[str, str] | None = None, *,
                    default_source: str = "parameters") -> RenewalParams:
    return validate_model(RenewalParams, data, source=default_source, prov=prov,
                          reference="parameters/renewal-demo.yaml")


def load_review_params(files: Sequence[str | Path], sets: Sequence[str] = (), *,
                       base: ParamTree | None = None) -> RenewalParams:
    """Layer YAML `files`, apply `sets`, resolve input paths, validate. Raises BadInputError (one line)."""
    merged, prov = layer(files, sets, base=base)
    source = str(files[-1]) if files else "parameters"
    _refuse_other_command(merged, source)
    _resolve_paths(merged, prov)
    _record_origins(merged, prov)
    return validate_review(merged, prov, default_source=str(files[-1]) if files else "parameters")


def load_any_review(path: str | Path, sets: Sequence[str] = ()) -> RenewalParams:
    """A notebook's `params_file`: review YAML, or a review run's resolved params.json."""
    p = Path(path)
    if p.suffix == ".json":
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise BadInputError(f"cannot read resolved parameters: {exc}", source=str(p)) from None
        if isinstance(data, dict):
            _refuse_other_command(data, str(p))
        return load_review_params([], list(sets), base=data) if sets else validate_review(data, default_source=str(p))
    return load_review_params([p], list(sets))


def is_review_file(path: str | Path) -> bool:
    """True when a YAML parameters file (or a resolved params.json) is a review's: it has a top-level `review:`."""

    try:
        data = yaml_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    return isinstance(data, dict) and "review" in data
