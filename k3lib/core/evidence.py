"""Evidence records: what one axis found, as data a summary notebook and a reviewer can read back.

One record per axis in `evidence/<axis>.json`: the axis status (pass, fail, warn, not-run), findings with rule
ids (jsonschema-style: findings are values, not exceptions), the raw data or a pointer to it. Records read back
from disk are untrusted, so they are validated with the same models that wrote them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from .attested import AttestationRecord
from .errors import EvidenceError
from .jsonvalue import JsonObject

if TYPE_CHECKING:
    from .store import RunStore

AxisStatus = Literal["pass", "fail", "warn", "not-run"]
FindingStatus = Literal["pass", "fail", "warn", "info", "not-observable"]
Decision = Literal["production", "limited-observation", "capacity-extension", "environment-rebuild"]
# 2: each acceptance axis' `data` is typed (the models below); 3: every key declared (extra keys refused), capacity
# steps and the operations axis typed; 4: the environment axis' rule ids are environment.* (were compat.*, which
# the decision table no longer names: read as-is they would decide differently and fail the raw-data re-judgement),
# so a schema-3 record of any other axis means what it meant and is read. A record of another schema is refused in
# one line, never guessed at.
SCHEMA_VERSION = 4
_STILL_READ = {3: lambda axis: axis != "environment"}  # earlier schemas whose records mean the same, by axis


def _readable(version: Any, axis: Any) -> bool:
    return version == SCHEMA_VERSION or (version in _STILL_READ and _STILL_READ[version](axis))
SCHEMAS_DIR = Path(__file__).resolve().parents[2] / "schemas"


# -- the typed `data` of each acceptance axis, checked when a record is written and when it is read back. Every
# -- key an axis writes is declared (extra keys are refused): the fields other parts of the kit read are typed to
# -- the leaf; an axis' raw tables and series are declared as such (lists of rows, mappings) and ride along.

Row = dict[str, Any]


class _Data(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TrafficCap(_Data):
    max_concurrency: int | None
    saturation_point: int | None = None
    planned_concurrency: int | None = None
    basis: str


class CapacityStep(_Data):
    """One closed-loop load step at a fixed concurrency, built and written as this record by
    k3lib.axes.capacity.concurrency: client counts and percentiles, the server's window numbers, its settled gauges,
    the calibration gate and the held/why judgement."""

    concurrency: int
    label: str | None = None
    status: str | None = None  # done | stopped | skipped
    note: str = ""
    out_of_contract: bool = False
    held: bool | None = None
    why: list[str] = Field(default_factory=list)
    prompt_tokens: int | None = None
    sized_by: str | None = None
    output_tokens: int | None = None
    start_wall: float | None = None
    end_wall: float | None = None
    engine_alive_after: bool | None = None
    # client side (k3lib.axes.capacity.window.record_stats)
    sent: int | None = None
    ok: int | None = None
    server_errors: int | None = None
    refused: int | None = None
    timeouts: int | None = None
    unreachable: int | None = None
    cancelled: int | None = None
    error_statuses: dict[str, int] | None = None  # HTTP status → count, among the requests that did not complete
    ttft_p50_ms: float | None = None
    ttft_p95_ms: float | None = None
    e2e_p95_ms: float | None = None
    ttft_p95_interval: dict[str, float] | None = None  # bootstrap interval of the p95 over the step's requests
    e2e_p95_interval: dict[str, float] | None = None
    prompt_tokens_mean: float | None = None
    completion_tokens_mean: float | None = None
    # server window (k3lib.axes.capacity.window.window_numbers)
    preemptions: float | None = None
    server_ttft_p95_ms: float | None = None
    queue_p95_ms: float | None = None
    queue_p95_low_ms: float | None = None
    queue_p95_high_ms: float | None = None
    queue_p95_basis: str | None = None
    queue_p95_text: str | None = None
    queue_mean_ms: float | None = None
    queue_count: float | None = None
    # settled gauges (k3lib.axes.capacity.analysis.settled_stats)
    samples: int | None = None
    waiting_mean: float | None = None
    waiting_max: float | None = None
    running_mean: float | None = None
    running_max: float | None = None
    kv_usage_mean: float | None = None
    kv_usage_max: float | None = None
    preemptions_sampled: float | None = None
    admit_limit: int | None = None
    waiting_full_mean: float | None = None
    # trust (k3lib.axes.capacity.trust.gate_step, cross_check_data)
    latency_valid: bool | None = None
    invalid_reason: str | None = None
    calibrated_at: int | None = None
    loop_lag_p99_ms: float | None = None
    cross_check: Row | None = None
    # every pair of measurements of one quantity compared (k3lib.axes.capacity.agreement.window_agreement)
    agreement: Row | None = None
    # load over worker processes (k3lib.io.workers): how many sent the step, and why it sent less than planned when
    # one ended before its share did (such a step is not held)
    workers: int | None = None
    degraded: str | None = None
    # per DP rank (k3lib.axes.capacity.ranks.rank_window), None with one rank
    ranks: list[Row] | None = None


class CapacityPhase(_Data):
    """One bounded phase of the capacity run as k3lib.axes.capacity.run records it (cold load, long context, concurrency,
    soak, sessions): its wall-clock window, how it ended (done, cut, failed, skipped, running) and why."""

    phase: str
    start_wall: float | None = None
    end_wall: float | None = None
    status: str
    note: str = ""


class CapacityData(_Data):
    saturation_point: int | None = None
    traffic_cap: TrafficCap | None = None
    implied_decision: Decision | None = None
    planned_concurrency: int | None = None
    steps: list[CapacityStep] = Field(default_factory=list)
    oom: Row | None = None
    configuration: Row = Field(default_factory=dict)
    plan: Row | None = None
    phases: list[CapacityPhase] | None = None
    calibration: Row | None = None
    cross_check: dict[str, Row | None] = Field(default_factory=dict)
    long_context: list[Row] | None = None
    refusal: Row | None = None
    ready: Row | None = None
    soak: Row | None = None
    claims: dict[str, Row] = Field(default_factory=dict)  # what its sources say of the deployment (k3lib.io.claims)
    sessions: Row | None = None  # the session phase: levels and turns (k3lib.axes.capacity.sessionjudge)

    def step_at(self, concurrency: int | None) -> tuple[int, CapacityStep] | None:
        """The (last) step run at `concurrency`, with its index in `steps`."""
        found = [(i, s) for i, s in enumerate(self.steps) if concurrency is not None and s.concurrency == concurrency]
        return found[-1] if found else None


class ObservedEnvironment(_Data):
    vllm: str | None = None
    cuda_build: str | None = None
    driver: str | None = None
    driver_can_run_cuda: str | None = None
    gpus_visible: int | None = None
    image: str | None = None
    image_digest: str | None = None
    fingerprint: str | None = None
    tool_choice_auto: str | None = None


class Topology(_Data):
    gpu_count: int | None = None
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    data_parallel_size: int | None = None


class EnvironmentData(_Data):
    build: Literal["official", "custom"] | None = None
    mismatch: bool | None = None
    experimental: bool = False
    sheet: str | None = None
    observed: ObservedEnvironment | None = None
    topology: Topology | None = None
    rows: list[Row] = Field(default_factory=list)
    sources: dict[str, Row] = Field(default_factory=dict)
    claims: dict[str, Row] = Field(default_factory=dict)  # what each source says of the deployment (k3lib.io.claims)


class ServedModel(_Data):
    """The fields of a /v1/models card the kit reads; the whole body is kept in `endpoints` and attached."""

    id: str | None = None
    root: str | None = None
    owned_by: str | None = None
    max_model_len: int | None = None


class ProbeData(_Data):
    model: str | None = None
    vllm_version: str | None = None
    served_models: list[ServedModel] = Field(default_factory=list)
    endpoints: dict[str, Row] = Field(default_factory=dict)
    claims: dict[str, Row] = Field(default_factory=dict)  # the target's identity (k3lib.io.claims.target_claims)
    # what the target is (k3lib.axes.probe.target_kind): the kit's own emulator (started by the kit, or declaring
    # itself in /version) makes the run a demo, never an acceptance
    target_kind: Literal["embedded-emulator", "external-emulator", "engine"] | None = None
    target_kind_basis: str | None = None


class PrefixPair(_Data):
    """One cold/warm pair as reconciled (k3lib.axes.prefix_cache.judge.PairReconciliation.to_dict): designed vs observed
    hits, both TTFTs, and the named cause of any gap."""

    session: int
    prefix_target: int
    warm_prompt_tokens: int | None = None
    cold_ttft_ms: float | None = None
    warm_ttft_ms: float | None = None
    intended_hits: int | None = None
    designed_hits: int | None = None
    observed_hits: int | None = None
    cached_tokens: int | None = None
    cold_designed_hits: int | None = None
    cold_observed_hits: int | None = None
    divergence_at: int | None = None
    clean: bool
    cause: str
    explanation: str
    ttft_gain_pct: float | None = None
    matches: bool | None = None
    identical_prefix: bool | None = None
    sighting: int | None = None  # the sighting of the prefix the judged request was: 2 (warm) or 3 (hybrid retention)


class PrefixCacheData(_Data):
    gain_counted: bool | None = None
    designed_hit_tokens: int | None = None
    observed_hit_tokens: int | None = None
    warm_prompt_tokens: int | None = None
    ttft_gain_pct: float | None = None
    ttft_gain_interval: dict[str, float] | None = None
    hit_unit_tokens: int | None = None
    hit_unit_source: str | None = None
    cache_config: dict[str, str] | None = None
    isolation: str | None = None
    warm_change: str | None = None
    sized_by: str | None = None
    pairs: list[PrefixPair] = Field(default_factory=list)
    # hybrid models' retention (cache on the second hit): the settings read and the sighting reuse first showed on
    retention: Row = Field(default_factory=dict)
    reuse_sighting: int | None = None


class AgentRate(_Data):
    level: int
    check: str
    passed: int
    failed: int | None = None
    total: int
    rate: float | None = None


class AgentData(_Data):
    rates: list[AgentRate] = Field(default_factory=list)
    max_clean_concurrency: int | None = None
    settings: Row = Field(default_factory=dict)
    sample: Row = Field(default_factory=dict)
    levels: list[Row] = Field(default_factory=list)
    skipped: list[dict[str, str]] = Field(default_factory=list)
    cases: list[Row] = Field(default_factory=list)
    # the tool-turn series (its plan, how it ran, the failure rate with its interval), the vendor contract check's
    # results (one row per item and mode: seed item, blocking or not) and the streams' longest silence
    tool_turns: Row = Field(default_factory=dict)
    contract: list[Row] = Field(default_factory=list)
    longest_silence_s: float | None = None

    def validity(self, check: str) -> tuple[int, int]:
        """(passed, total) of one check summed over every concurrency level."""
        mine = [r for r in self.rates if r.check == check]
        return sum(r.passed for r in mine), sum(r.total for r in mine)


class ServedData(_Data):
    """What the target served at one moment of the drill (k3lib.axes.attestation.Served)."""

    vllm_version: str | None = None
    image: str | None = None
    digest: str | None = None
    error: str | None = None


class ForwardData(_Data):
    command: str
    detail: str | None = None
    serving: bool
    error: str | None = None
    served: ServedData | None = None


class DrillData(_Data):
    """The rollback drill as run (k3lib.axes.attestation.DrillResult)."""

    command: str
    check_url: str
    command_ok: bool
    command_detail: str
    health_status: int | None = None
    chat_ok: bool
    error: str | None = None
    duration_s: float
    before: ServedData | None = None
    after: ServedData | None = None
    rollback_to: str | None = None
    forward: ForwardData | None = None


class OperationsData(_Data):
    attestation_file: str | None = None
    attestation: AttestationRecord | None = None
    drill: DrillData | None = None


DATA_MODELS: dict[str, type[_Data]] = {"capacity": CapacityData, "environment": EnvironmentData,
                                       "probe": ProbeData, "prefix_cache": PrefixCacheData, "agent": AgentData,
                                       "operations": OperationsData}
# A renewal review's records ({"schema": "k3kit/renewal/<axis>/<n>", "result": …}) are typed by k3lib.renewal.results
# (schemas/renewal/); its `operations` axis is not the acceptance one.
RENEWAL_SCHEMA_PREFIX = "k3kit/renewal/"


def data_model(axis: str, data: Any) -> type[_Data] | None:
    """The acceptance model typing an axis' `data`; None for a renewal record or an axis without one."""
    if isinstance(data, dict) and str(data.get("schema", "")).startswith(RENEWAL_SCHEMA_PREFIX):
        return None
    return DATA_MODELS.get(axis)


class Finding(BaseModel):
    """One rule applied to what was observed. `rule` is a stable id such as `probe.health`."""

    model_config = ConfigDict(extra="forbid")

    rule: str
    status: FindingStatus
    message: str
    observed: Any = None
    expected: Any = None
    evidence: dict[str, Any] = Field(default_factory=dict)


class EvidenceRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    axis: str
    title: str
    status: AxisStatus
    summary: str = ""
    started_at: str | None = None
    finished_at: str | None = None
    duration_s: float | None = None
    target: str | None = None
    findings: list[Finding] = Field(default_factory=list)
    data: dict[str, Any] = Field(default_factory=dict)
    attachments: list[str] = Field(default_factory=list)  # files in the run folder holding raw data
    error: str | None = None  # set when the axis could not complete (its notebook failed)
    # (the `data` object, its typed model) as validated last: typed() answers from it while `data` is that same
    # object (a record copied with new data, or given a new dict, is validated again); a frozen model
    _typed_cache: tuple[dict[str, Any], _Data] | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _typed_data(self) -> "EvidenceRecord":
        if not _readable(self.schema_version, self.axis):
            raise ValueError(f"written by another kit version (evidence schema {self.schema_version}, this kit reads "
                             f"{SCHEMA_VERSION}): re-run the axis with this kit")
        self._typed_cache = None
        model = data_model(self.axis, self.data)
        if model is not None:
            self._typed_cache = (self.data, model.model_validate(self.data))
        return self

    def typed(self) -> Any:
        """The axis' data as its typed (frozen) model; the raw dict for an axis without one. Validated once per
        `data` object, not on every call."""
        cached = self._typed_cache
        if cached is not None and cached[0] is self.data:
            return cached[1]
        model = data_model(self.axis, self.data)
        if model is None:
            return self.data
        typed = model.model_validate(self.data)
        self._typed_cache = (self.data, typed)
        return typed

    def failed(self) -> list[Finding]:
        return [f for f in self.findings if f.status == "fail"]

    def by_rule(self, rule: str) -> Finding | None:
        return next((f for f in self.findings if f.rule == rule), None)


def axis_status(findings: list[Finding]) -> AxisStatus:
    """fail if any finding fails; warn if any warns or cannot be observed; pass otherwise."""
    statuses = {f.status for f in findings}
    if "fail" in statuses:
        return "fail"
    if statuses & {"warn", "not-observable"}:
        return "warn"
    return "pass" if findings else "not-run"


def parse_record(data: Any, source: str) -> EvidenceRecord:
    if isinstance(data, dict) and not _readable(data.get("schema_version", SCHEMA_VERSION), data.get("axis")):
        raise EvidenceError(f"{source}: written by another kit version (evidence schema {data.get('schema_version')}, "
                            f"this kit reads {SCHEMA_VERSION}): re-run the axis with this kit")
    if isinstance(data, dict) and "schema" in data and "axis" not in data:
        raise EvidenceError(f"{source}: declares schema {data['schema']!r}, not an evidence record of this kit "
                            f"(expected an axis record, evidence schema {SCHEMA_VERSION}, or a `k3 paths` record)")
    try:
        return EvidenceRecord.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err.get("loc", ()))
        raise EvidenceError(f"{source}: not an evidence record ({field}: {err.get('msg')})") from None


def json_schemas() -> dict[str, JsonObject]:
    """File name → JSON Schema: the evidence record, and the typed data of each acceptance axis."""
    out = {"evidence-record.schema.json": EvidenceRecord.model_json_schema()}
    out.update({f"{axis}-data.schema.json": model.model_json_schema() for axis, model in DATA_MODELS.items()})
    return out


def write_schemas(folder: Path = SCHEMAS_DIR) -> list[Path]:
    """Write the JSON Schemas into `folder` (the repository's schemas/): `k3 schemas`."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, schema in json_schemas().items():
        path = folder / name
        path.write_text(json.dumps(schema, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        paths.append(path)
    return paths


# Kit documents a run folder keeps under evidence/ beside its axis records, each read by its own reader: `k3 paths`
# writes its record there ({"schema": "k3kit/renewal/paths/<n>", "result": …}, k3lib.axes.paths.record). A file declaring
# one of these is not an axis record; any other file under evidence/ must be one.
OTHER_DOCUMENTS: tuple[str, ...] = ("k3kit/renewal/paths/",)


def other_document(data: Any) -> str | None:
    """The schema a file under evidence/ declares when it is one of the kit's OTHER_DOCUMENTS, else None (then it
    must parse as an evidence record: a broken or foreign one is refused, never dropped)."""
    if not isinstance(data, dict) or "axis" in data or "schema_version" in data:
        return None
    schema = data.get("schema")
    return schema if isinstance(schema, str) and schema.startswith(OTHER_DOCUMENTS) else None


def read_records(store: "RunStore") -> dict[str, EvidenceRecord]:
    """Every `evidence/<axis>.json` of a run folder, parsed and checked, by axis. A kit document that declares its
    own schema (a `k3 paths` record) is left to its reader; any other file that is not a valid evidence record of
    this kit is refused with one line (no axis is dropped silently)."""
    out = {}
    for path in sorted(store.path("evidence").glob("*.json")):
        rel = f"evidence/{path.name}"
        data = store.read_json(rel)
        if other_document(data) is None:
            out[path.stem] = parse_record(data, rel)
    return out
