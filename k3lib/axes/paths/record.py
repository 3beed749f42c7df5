"""The `paths` evidence record: typed, frozen, its JSON Schema in `schemas/renewal/paths.schema.json`
(`python -m k3lib.axes.paths.record` rewrites it; a test keeps it in step). Built from per-task outcomes alone, so a
re-read record gives the same figures; two records compared flag any change in a fixed element's hash."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from ...core.errors import ArtifactError
from ...core.stats import paired_difference_interval, percentile_rounded, wilson_interval
from .shapes import JsonObject, RecordFile

SCHEMA_ID = "k3kit/renewal/paths/1"
SCHEMA_FILE = Path(__file__).resolve().parents[3] / "schemas" / "renewal" / "paths.schema.json"
RECORD_FILE = "evidence/paths.json"
REQUESTS_FILE = "paths/requests.jsonl"
REVIEW_COPY = "live/paths.json"  # a review's copy of the live run it reads (outside evidence/: not an axis record)
Num = float | None  # None: not computable from the data (shown blank, never 0)
TaskStatus = Literal["answered", "failed", "not-run"]


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FixedElement(_M):
    name: Literal["task_set", "request_format", "retry_policy", "quality_rule"]
    sha256: str
    origin: str  # the file or override that set it, or "built-in default"
    summary: str
    value: Any  # the element itself, canonical JSON (what the hash is over)


class EndpointInfo(_M):
    name: str
    base_url: str
    model: str | None
    api_key_env: str | None  # the variable's name; its value is never recorded
    price_input_per_mtok: Num
    price_output_per_mtok: Num
    concurrency: int
    price_cached_input_per_mtok: Num = None  # None: cache hits priced as input (records before it existed too)


class TaskOutcome(_M):
    path: str
    task: str
    category: str
    status: TaskStatus  # failed: no usable answer (down, 5xx, timeout, unusable reply)
    accepted: bool
    reasons: tuple[str, ...]  # why not accepted (empty when accepted)
    requests: int  # chat requests sent, retries included
    attempts_max: int  # the most attempts one request of the task needed (1: no retry)
    retries: int
    retried_statuses: tuple[int, ...]  # HTTP statuses that were retried
    tool_calls: int
    tool_call_errors: int  # malformed tool calls (unknown tool, arguments not valid JSON / against the schema)
    timeouts: int
    errors: tuple[str, ...]  # final request errors (after the retry policy)
    ttft_ms: Num  # of the task's first answered request
    latency_ms: Num  # the whole task, first send to final answer, retries and tool rounds included
    prompt_tokens: int | None
    cached_tokens: int | None
    completion_tokens: int | None
    cost: Num  # at the path's prices; None when a price or the usage is unknown


class PathSummary(_M):
    path: str
    tasks_planned: int
    tasks_run: int
    answered: int
    accepted: int
    acceptance_rate: Num
    acceptance_low: Num  # Wilson 95 % interval
    acceptance_high: Num
    failed_requests: int
    timeouts: int
    retries: int
    accepted_after_retry: int  # accepted tasks that needed at least one retry: what the retry policy bought
    tool_call_errors: int
    tasks_with_tool_call_errors: int
    ttft_p50_ms: Num
    ttft_p95_ms: Num
    latency_p50_ms: Num
    latency_p95_ms: Num
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    cost: Num
    cost_per_accepted_task: Num
    stopped_by: str | None  # max_requests / max_duration_s when the bounds cut the run
    duration_s: float


class PairedDifference(_M):
    a: str
    b: str
    pairs: int  # tasks run on both paths
    both: int
    a_only: int
    b_only: int
    neither: int
    difference: Num  # A's acceptance rate − B's, on the paired tasks
    low: Num  # Newcombe 95 % interval of the paired difference
    high: Num
    verdict: Literal["a-better", "b-better", "inconclusive", "no-pairs"]
    only_a_tasks: tuple[str, ...]
    only_b_tasks: tuple[str, ...]


class PathsResult(_M):
    started: str
    finished: str
    currency: str
    task_set: str  # its name and source
    fixed: tuple[FixedElement, ...]
    endpoints: tuple[EndpointInfo, ...]
    paths: tuple[PathSummary, ...]
    pairs: tuple[PairedDifference, ...]
    tasks: tuple[TaskOutcome, ...]


# --- figures --------------------------------------------------------------------------------------------------------

def canonical_hash(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
                          .encode("utf-8")).hexdigest()


def _sum(values: list[int | None]) -> int:
    return sum(v for v in values if v is not None)


def summarise(path: str, planned: int, rows: list[TaskOutcome], stopped_by: str | None,
              duration_s: float) -> PathSummary:
    run = [r for r in rows if r.status != "not-run"]
    accepted = sum(r.accepted for r in run)
    ci = wilson_interval(accepted, len(run))
    costs = [r.cost for r in run]
    cost = None if not run or any(c is None for c in costs) else round(sum(costs), 6)  # type: ignore[arg-type]
    ttft = [r.ttft_ms for r in run if r.ttft_ms is not None]
    lat = [r.latency_ms for r in run if r.status == "answered" and r.latency_ms is not None]
    return PathSummary(
        path=path, tasks_planned=planned, tasks_run=len(run), answered=sum(r.status == "answered" for r in run),
        accepted=accepted, acceptance_rate=round(accepted / len(run), 4) if run else None,
        acceptance_low=round(ci[0], 4) if ci else None, acceptance_high=round(ci[1], 4) if ci else None,
        failed_requests=sum(len(r.errors) for r in run), timeouts=sum(r.timeouts for r in run),
        retries=sum(r.retries for r in run), accepted_after_retry=sum(r.accepted and r.retries > 0 for r in run),
        tool_call_errors=sum(r.tool_call_errors for r in run),
        tasks_with_tool_call_errors=sum(r.tool_call_errors > 0 for r in run),
        ttft_p50_ms=percentile_rounded(ttft, 50), ttft_p95_ms=percentile_rounded(ttft, 95),
        latency_p50_ms=percentile_rounded(lat, 50), latency_p95_ms=percentile_rounded(lat, 95),
        prompt_tokens=_sum([r.prompt_tokens for r in run]), cached_tokens=_sum([r.cached_tokens for r in run]),
        completion_tokens=_sum([r.completion_tokens for r in run]), cost=cost,
        cost_per_accepted_task=round(cost / accepted, 6) if cost is not None and accepted else None,
        stopped_by=stopped_by, duration_s=round(duration_s, 3))


def paired(a: str, b: str, rows: list[TaskOutcome]) -> PairedDifference:
    """Per-task differences between two paths over the tasks both ran."""
    by_a = {r.task: r for r in rows if r.path == a and r.status != "not-run"}
    by_b = {r.task: r for r in rows if r.path == b and r.status != "not-run"}
    common = [t for t in by_a if t in by_b]
    cells = {"both": 0, "a_only": 0, "b_only": 0, "neither": 0}
    only_a: list[str] = []
    only_b: list[str] = []
    for t in common:
        x, y = by_a[t].accepted, by_b[t].accepted
        key = "both" if x and y else "a_only" if x else "b_only" if y else "neither"
        cells[key] += 1
        (only_a if key == "a_only" else only_b if key == "b_only" else []).append(t)
    ci = paired_difference_interval(cells["both"], cells["a_only"], cells["b_only"], cells["neither"])
    if ci is None:
        verdict = "no-pairs"
    elif ci[1] > 0:
        verdict = "a-better"
    elif ci[2] < 0:
        verdict = "b-better"
    else:
        verdict = "inconclusive"
    return PairedDifference(a=a, b=b, pairs=len(common), **cells,
                            difference=round(ci[0], 4) if ci else None, low=round(ci[1], 4) if ci else None,
                            high=round(ci[2], 4) if ci else None, verdict=verdict,  # type: ignore[arg-type]
                            only_a_tasks=tuple(only_a), only_b_tasks=tuple(only_b))


# --- on disk --------------------------------------------------------------------------------------------------------

def record_data(result: PathsResult) -> RecordFile:
    return {"schema": SCHEMA_ID, "result": result.model_dump(mode="json")}


def read_paths_record(path: str | Path) -> PathsResult:
    """A `paths` record (a run folder or its evidence/paths.json); another kit version's is refused, one line."""
    p = Path(path)
    if p.is_dir():
        p = p / RECORD_FILE
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ArtifactError("no paths record here; expected a `k3 paths` run folder", source=str(p)) from None
    except (OSError, ValueError) as exc:
        raise ArtifactError(f"cannot read the paths record: {exc}", source=str(p)) from None
    found = data.get("schema") if isinstance(data, dict) else None
    if found != SCHEMA_ID:
        raise ArtifactError(f"written by another kit version (schema {found or 'none'}, expected {SCHEMA_ID})",
                            source=str(p))
    try:
        return PathsResult.model_validate(data.get("result"))
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err.get("loc", ())) or "(top level)"
        raise ArtifactError(f"not this kit's paths record: {where}: {err.get('msg')}", source=str(p)) from None


def compare_fixed(before: PathsResult, after: PathsResult) -> list[str]:
    """One line per fixed element whose hash differs between two runs (empty: the same four elements)."""
    old = {f.name: f for f in before.fixed}
    lines = []
    for f in after.fixed:
        prev = old.get(f.name)
        if prev is None:
            lines.append(f"{f.name}: absent from the earlier run")
        elif prev.sha256 != f.sha256:
            lines.append(f"{f.name} changed: sha256 {prev.sha256[:12]}… → {f.sha256[:12]}… "
                         f"(was {prev.summary}; now {f.summary}): the runs do not compare the same thing")
    return lines


def schema() -> JsonObject:
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID,
            **PathsResult.model_json_schema()}


def write_schema(path: Path = SCHEMA_FILE) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(schema(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path

