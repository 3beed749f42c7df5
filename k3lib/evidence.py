"""Evidence records: what one axis found, as data a summary notebook and a reviewer can read back.

One record per axis in `evidence/<axis>.json`: the axis status (pass, fail, warn, not-run), findings with rule
ids (jsonschema-style: findings are values, not exceptions), the raw data or a pointer to it. Records read back
from disk are untrusted, so they are validated with the same models that wrote them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .errors import EvidenceError

if TYPE_CHECKING:
    from .store import RunStore

AxisStatus = Literal["pass", "fail", "warn", "not-run"]
FindingStatus = Literal["pass", "fail", "warn", "info", "not-observable"]
Decision = Literal["production", "limited-observation", "capacity-extension", "environment-rebuild"]
# 2: each acceptance axis' `data` is typed (the models below); a record of schema 1 is refused, never guessed at.
SCHEMA_VERSION = 2
SCHEMAS_DIR = Path(__file__).resolve().parents[1] / "schemas"


# -- the typed `data` of each acceptance axis: the fields other parts of the kit read are typed and checked when
# -- a record is written and when it is read back; the rest of an axis' data (tables, raw series) rides along.

class _Data(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class TrafficCap(_Data):
    max_concurrency: int | None
    saturation_point: int | None = None
    planned_concurrency: int | None = None
    basis: str


class CapacityData(_Data):
    saturation_point: int | None = None
    traffic_cap: TrafficCap | None = None
    implied_decision: Decision | None = None
    planned_concurrency: int | None = None
    steps: list[dict[str, Any]] = Field(default_factory=list)


class Observed(_Data):
    vllm: str | None = None
    driver: str | None = None
    image: str | None = None
    image_digest: str | None = None
    gpus_visible: int | None = None


class Topology(_Data):
    gpu_count: int | None = None
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    data_parallel_size: int | None = None


class EnvironmentData(_Data):
    build: Literal["official", "custom"] | None = None
    mismatch: bool | None = None
    observed: Observed | None = None
    topology: Topology | None = None


class ServedModel(_Data):
    id: str | None = None
    max_model_len: int | None = None


class ProbeData(_Data):
    vllm_version: str | None = None
    served_models: list[ServedModel] = Field(default_factory=list)


class PrefixCacheData(_Data):
    gain_counted: bool | None = None
    observed_hit_tokens: int | None = None
    warm_prompt_tokens: int | None = None
    ttft_gain_pct: float | None = None
    ttft_gain_interval: dict[str, float] | None = None


class AgentRate(_Data):
    level: int
    check: str
    passed: int
    total: int


class AgentData(_Data):
    rates: list[AgentRate] = Field(default_factory=list)
    max_clean_concurrency: int | None = None


DATA_MODELS: dict[str, type[_Data]] = {"capacity": CapacityData, "environment": EnvironmentData,
                                       "probe": ProbeData, "prefix_cache": PrefixCacheData, "agent": AgentData}


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

    @model_validator(mode="after")
    def _typed_data(self) -> "EvidenceRecord":
        if self.schema_version != SCHEMA_VERSION:
            raise ValueError(f"written by another kit version (evidence schema {self.schema_version}, this kit reads "
                             f"{SCHEMA_VERSION}): re-run the axis with this kit")
        model = DATA_MODELS.get(self.axis)
        if model is not None:
            model.model_validate(self.data)
        return self

    def typed(self) -> Any:
        """The axis' data as its typed (frozen) model; the raw dict for an axis without one."""
        model = DATA_MODELS.get(self.axis)
        return model.model_validate(self.data) if model is not None else self.data

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
    if isinstance(data, dict) and data.get("schema_version", SCHEMA_VERSION) != SCHEMA_VERSION:
        raise EvidenceError(f"{source}: written by another kit version (evidence schema {data.get('schema_version')}, "
                            f"this kit reads {SCHEMA_VERSION}): re-run the axis with this kit")
    try:
        return EvidenceRecord.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err.get("loc", ()))
        raise EvidenceError(f"{source}: not an evidence record ({field}: {err.get('msg')})") from None


def json_schemas() -> dict[str, dict[str, Any]]:
    """File name → JSON Schema: the evidence record, and the typed data of each acceptance axis."""
    out = {"evidence-record.schema.json": EvidenceRecord.model_json_schema()}
    out.update({f"{axis}-data.schema.json": model.model_json_schema() for axis, model in DATA_MODELS.items()})
    return out


def write_schemas(folder: Path = SCHEMAS_DIR) -> list[Path]:
    """Write the JSON Schemas into `folder` (the repository's schemas/): `python -m k3lib.evidence`."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, schema in json_schemas().items():
        path = folder / name
        path.write_text(json.dumps(schema, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        paths.append(path)
    return paths


if __name__ == "__main__":
    for written in write_schemas():
        print(f"wrote {written}")


def read_records(store: "RunStore") -> dict[str, EvidenceRecord]:
    """Every `evidence/<axis>.json` of a run folder, parsed and checked, by axis."""
    out = {}
    for path in sorted(store.path("evidence").glob("*.json")):
        rel = f"evidence/{path.name}"
        out[path.stem] = parse_record(store.read_json(rel), rel)
    return out
