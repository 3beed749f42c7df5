"""What a finished run accepted: the levels later checks derive from its evidence records and `params.json`.

The ONE place that reads what the axes write into `evidence/<axis>.json` `data`, through each axis' typed model
(k3lib.core.evidence.DATA_MODELS: declared fields only, checked when the record was read). Each level is a function
returning a `Level` whose value is None with a reason when the evidence does not hold it; never a guess.
"""

from __future__ import annotations

import dataclasses
import json
import re
import typing
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from pydantic import BaseModel

from ..core.errors import BadInputError, EvidenceError
from ..core.evidence import (
    AgentData,
    CapacityData,
    CapacityStep,
    EvidenceRecord,
    PrefixCacheData,
    other_document,
    parse_record,
)
from ..core.store import MANIFEST

# Where each level is written, tried in order: (axis or "params", dotted path of fields in the axis' typed data,
# scale to the level's unit). Every axis path names fields its model declares (k3lib.core.evidence: ProbeData,
# EnvironmentData; `declared_path` checks it, and a test checks every path here); params paths read the run's own
# params.json. A level with no path here is computed from the axis' own typed tables below (capacity steps, prefix
# token sums, agent rates). Nothing is guessed: a key an axis does not declare is never looked for.
Candidate = tuple[str, str, float]
CANDIDATES: dict[str, tuple[Candidate, ...]] = {
    "vllm_version": (("probe", "vllm_version", 1), ("environment", "observed.vllm", 1)),
    "served_model": (("probe", "model", 1), ("probe", "served_models.0.id", 1)),
    "driver_version": (("environment", "observed.driver", 1),),
    # inspected only: a digest typed into the parameters proves nothing about the running image
    "image_digest": (("environment", "observed.image_digest", 1),),
    "gpu_count": (("environment", "topology.gpu_count", 1), ("environment", "observed.gpus_visible", 1)),
    "tensor_parallel_size": (("environment", "topology.tensor_parallel_size", 1),),
    "pipeline_parallel_size": (("environment", "topology.pipeline_parallel_size", 1),),
    "data_parallel_size": (("environment", "topology.data_parallel_size", 1),),
    # The server's limit (max_model_len), not the contract's: both reopen the sheet when they change.
    "context_limit_tokens": (("probe", "served_models.0.max_model_len", 1),),
    "contract_context_tokens": (("params", "contract.max_context_tokens", 1),),
    "planned_concurrency": (("params", "contract.planned_concurrency", 1),),
    "build": (("environment", "build", 1), ("params", "recipe.build", 1)),
}
# Per-load-step fields of k3lib.axes.capacity's `data.steps[]` (CapacityStep), at the planned concurrency.
STEP_KEYS: dict[str, tuple[tuple[str, float], ...]] = {
    "queue_time_p95_s": (("queue_p95_ms", 1e-3),),
    "kv_usage_at_planned": (("kv_usage_max", 1),),
}
# The count each step figure rests on: the settled /metrics samples for a gauge, the requests for a histogram.
SAMPLED_BY = {"kv_usage_max": "samples", "queue_p95_ms": "queue_count"}
MIN_SAMPLES = 3
# The agent check that says "this tool call's arguments are valid JSON, valid against the tool's schema".
AGENT_VALIDITY_CHECK = "arguments_valid"
FRACTIONS = ("kv_usage_at_planned", "prefix_hit_rate", "tool_call_validity", "error_ratio")
ACCEPTING_STATUSES = ("pass", "warn")  # an axis that failed or did not run accepted nothing


@dataclasses.dataclass(frozen=True)
class Level:
    """One derived value, where it came from, or why it is unknown."""

    name: str
    value: Any
    source: str | None = None  # e.g. "evidence/capacity.json: data.planned.queue_p95_ms"
    reason: str | None = None  # set when value is None
    axis_status: str | None = None  # status of the axis record it came from (None for params)

    @property
    def known(self) -> bool:
        return self.value is not None

    @property
    def accepted(self) -> bool:
        """Known, and from an axis that passed (or from the run's own parameters)."""
        return self.known and (self.axis_status is None or self.axis_status in ACCEPTING_STATUSES)


@dataclasses.dataclass(frozen=True)
class RunEvidence:
    """A run folder read back: raw params, the axis records that parse, and why the others did not."""

    root: Path
    params: Mapping[str, Any]
    records: Mapping[str, EvidenceRecord]
    unreadable: Mapping[str, str]
    decision: Mapping[str, Any] | None

    @property
    def run_id(self) -> str:
        return self.root.name


def read_run(run_dir: str | Path) -> RunEvidence:
    """Read a run folder without judging it. Not a run folder → BadInputError; a broken record is kept aside."""
    root = Path(run_dir).resolve()
    if not (root / MANIFEST).is_file():
        raise BadInputError("not a k3kit run folder (no manifest.json)", source=str(run_dir))
    records: dict[str, EvidenceRecord] = {}
    unreadable: dict[str, str] = {}
    for path in sorted((root / "evidence").glob("*.json")):
        try:
            data = _load_json(path)
            if other_document(data) is None:  # a `k3 paths` record beside the axis records is not one of them
                records[path.stem] = parse_record(data, f"evidence/{path.name}")
        except EvidenceError as exc:
            unreadable[path.stem] = str(exc)
    params = _load_json_or_none(root / "params.json")
    decision = _load_json_or_none(root / "decision.json")
    return RunEvidence(root, params if isinstance(params, dict) else {}, records, unreadable,
                       decision if isinstance(decision, dict) else None)


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise EvidenceError(f"{path.name}: not readable JSON ({exc})") from None


def _load_json_or_none(path: Path) -> Any:
    try:
        return _load_json(path)
    except EvidenceError:
        return None


def declared_path(model: type[BaseModel], dotted: str) -> bool:
    """Every step of `dotted` names a field the typed model declares (list steps by index)."""

    node: Any = model
    for part in dotted.split("."):
        if part.isdigit():
            continue
        while typing.get_origin(node) is not None:  # Optional[...] / list[...]: the model inside
            node = next(a for a in typing.get_args(node) if a is not type(None))
        if not (isinstance(node, type) and issubclass(node, BaseModel)) or part not in node.model_fields:
            return False
        node = node.model_fields[part].annotation
    return True


def _typed(rec: EvidenceRecord | None, model: type[BaseModel]) -> Any:
    """The record's data as its axis' typed model (the record parsed, so this cannot fail); None without one."""
    if rec is None:
        return None
    data = rec.typed()
    return data if isinstance(data, model) else None


def _dig(data: Any, dotted: str) -> Any:
    node = data
    for part in dotted.split("."):
        if isinstance(node, BaseModel):
            node = getattr(node, part, None)
        elif isinstance(node, Mapping):
            node = node.get(part)
        elif isinstance(node, (list, tuple)) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
        if node is None:
            return None
    return node


def _scaled(value: Any, scale: float) -> Any:
    if scale == 1 or isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    return value * scale


def _lookup(run: RunEvidence, name: str) -> Level:
    tried: list[str] = []
    for where, dotted, scale in CANDIDATES.get(name, ()):
        if where == "params":
            value = _dig(run.params, dotted)
            if value is not None:
                return Level(name, _scaled(value, scale), f"params.json: {dotted}")
            tried.append(f"params.json {dotted}")
            continue
        rec = run.records.get(where)
        if rec is None:
            tried.append(f"evidence/{where}.json ({run.unreadable.get(where, 'absent')})")
            continue
        value = _dig(rec.typed(), dotted)  # fields of the axis' model (DATA_MODELS), checked by declared_path
        if value is not None:
            return Level(name, _scaled(value, scale), f"evidence/{where}.json: data.{dotted}", axis_status=rec.status)
        tried.append(f"evidence/{where}.json data.{dotted}")
    return Level(name, None, reason="not recorded; looked in " + ", ".join(dict.fromkeys(tried)))


def _planned_step(run: RunEvidence) -> tuple[int, CapacityStep, EvidenceRecord] | None:
    """The capacity step run at the planned concurrency (k3lib.axes.capacity's `data.steps[]`), if any."""
    rec = run.records.get("capacity")
    data = _typed(rec, CapacityData)
    if rec is None or data is None:
        return None
    planned = _dig(run.params, "contract.planned_concurrency")
    if planned is None:
        planned = data.planned_concurrency
    found = data.step_at(planned)
    return (found[0], found[1], rec) if found else None


def _from_steps(run: RunEvidence, name: str) -> Level | None:
    found = _planned_step(run)
    if found is None:
        return None
    idx, step, rec = found
    for key, scale in STEP_KEYS.get(name, ()):
        value = getattr(step, key)
        count_key = SAMPLED_BY.get(key)
        count = getattr(step, count_key) if count_key else None
        if value is not None and count is not None and count < MIN_SAMPLES:
            # a figure from fewer than three samples is not observable: no band can be drawn around it
            return Level(name, None, reason=f"evidence/capacity.json: data.steps.{idx}.{key} rests on "
                                            f"{count:g} sample(s) ({count_key}), fewer than "
                                            f"{MIN_SAMPLES}: not observable")
        if value is not None:
            return Level(name, _scaled(value, scale), f"evidence/capacity.json: data.steps.{idx}.{key}",
                         axis_status=rec.status)
    return None


def _step_ratio(run: RunEvidence, name: str, num_keys: tuple[str, ...], den: str | tuple[str, str]) -> Level | None:
    """A rate or share computed from the planned step: a count over its duration (end − start) or over `sent`."""
    found = _planned_step(run)
    if found is None:
        return None
    idx, step, rec = found
    num_key = next((k for k in num_keys if getattr(step, k) is not None), None)
    if num_key is None:
        return None
    if isinstance(den, tuple):
        start, end = getattr(step, den[0]), getattr(step, den[1])
        value = (end - start) if start is not None and end is not None else None
        den_text = f"({den[1]} − {den[0]})"
    else:
        value, den_text = getattr(step, den), den
    if value is None or value <= 0:
        return None
    return Level(name, float(getattr(step, num_key)) / float(value),
                 f"evidence/capacity.json: data.steps.{idx}.{num_key} / {den_text}", axis_status=rec.status)


def _number(level: Level, *, fraction: bool = False) -> Level:
    """Numbers only; a percentage (0–100) written where a fraction is expected is brought back to 0–1."""
    if not level.known:
        return level
    value = level.value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            value = float(str(value).strip().rstrip("%"))
        except ValueError:
            return dataclasses.replace(level, value=None, reason=f"{level.source} holds {level.value!r}, not a number")
    if fraction and 1 < value <= 100:
        value = value / 100
    if value < 0 or (fraction and value > 1):
        return dataclasses.replace(level, value=None, reason=f"{level.source} holds {level.value!r}, out of range")
    return dataclasses.replace(level, value=value)


def _text(level: Level) -> Level:
    if level.known:
        return dataclasses.replace(level, value=str(level.value).strip() or None,
                                   reason=None if str(level.value).strip() else f"{level.source} is empty")
    return level


def _not_measured(run: RunEvidence, name: str, where: str) -> Level:
    axis = where.split(".")[0]
    why = run.unreadable.get(axis) or ("absent" if axis not in run.records else f"no {where}")
    return Level(name, None, reason=f"not recorded; looked in evidence/{axis}.json ({why})")


def _measured(run: RunEvidence, name: str) -> Level:
    level = _from_steps(run, name) or _not_measured(run, name, "capacity.steps at the planned concurrency")
    return _number(level, fraction=name in FRACTIONS)


# -- identity of the deployment: a change reopens the acceptance sheet ---------------------------------------------

def vllm_version(run: RunEvidence) -> Level:
    return _text(_lookup(run, "vllm_version"))


def served_model(run: RunEvidence) -> Level:
    """The model name the accepted deployment served (what vLLM labels its series with, `model_name`)."""
    return _text(_lookup(run, "served_model"))


def driver_version(run: RunEvidence) -> Level:
    return _text(_lookup(run, "driver_version"))


def image_digest(run: RunEvidence) -> Level:
    return _text(_lookup(run, "image_digest"))


def gpu_count(run: RunEvidence) -> Level:
    return _number(_lookup(run, "gpu_count"))


def parallelism(run: RunEvidence) -> Level:
    """TP/PP/DP sizes as a dict; a size not recorded is left out (1 is never assumed)."""
    parts = {key: _number(_lookup(run, key)) for key in
             ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size")}
    known = {k: int(v.value) for k, v in parts.items() if v.known}
    if not known:
        return Level("parallelism", None, reason="no parallel sizes recorded (environment topology)")
    sources = ", ".join(dict.fromkeys(v.source for v in parts.values() if v.known and v.source))
    return Level("parallelism", known, sources)


def context_limit_tokens(run: RunEvidence) -> Level:
    return _number(_lookup(run, "context_limit_tokens"))


def contract_context_tokens(run: RunEvidence) -> Level:
    return _number(_lookup(run, "contract_context_tokens"))


def planned_concurrency(run: RunEvidence) -> Level:
    return _number(_lookup(run, "planned_concurrency"))


def build(run: RunEvidence) -> Level:
    """official | custom: the environment record first, then the recipe, then the decision."""
    level = _text(_lookup(run, "build"))
    if not level.known and run.decision and run.decision.get("build"):
        level = Level("build", str(run.decision["build"]), "decision.json: build")
    return level


# -- accepted behaviour at planned load: alert thresholds and drift bands -----------------------------------------

def queue_time_p95_s(run: RunEvidence) -> Level:
    return _measured(run, "queue_time_p95_s")


def kv_usage_at_planned(run: RunEvidence) -> Level:
    """Peak KV-cache usage (fraction 0–1) at the planned concurrency."""
    return _measured(run, "kv_usage_at_planned")


def preemptions_per_s(run: RunEvidence) -> Level:
    """Preemptions over the planned step's duration (end − start)."""
    level = _step_ratio(run, "preemptions_per_s", ("preemptions", "preemptions_sampled"), ("start_wall", "end_wall"))
    return _number(level or _not_measured(run, "preemptions_per_s", "capacity.steps at the planned concurrency"))


def error_ratio(run: RunEvidence) -> Level:
    """Requests that failed on the server (5xx) over the requests sent at planned load: client aborts not counted."""
    level = _step_ratio(run, "error_ratio", ("server_errors",), "sent")
    return _number(level or _not_measured(run, "error_ratio", "capacity.steps at the planned concurrency"),
                   fraction=True)


def prefix_hit_rate(run: RunEvidence) -> Level:
    """Token hit rate of the controlled warm requests: hit tokens over warm prompt tokens (k3lib.axes.prefix_cache writes both
    sums, over clean pairs, as `observed_hit_tokens` and `warm_prompt_tokens`)."""
    rec = run.records.get("prefix_cache")
    data = _typed(rec, PrefixCacheData)
    hits, prompts = (data.observed_hit_tokens, data.warm_prompt_tokens) if data is not None else (None, None)
    if rec is not None and hits is not None and prompts:
        return _number(Level("prefix_hit_rate", float(hits) / float(prompts),
                             "evidence/prefix_cache.json: data.observed_hit_tokens / data.warm_prompt_tokens",
                             axis_status=rec.status), fraction=True)
    return _not_measured(run, "prefix_hit_rate", "prefix_cache.observed_hit_tokens / warm_prompt_tokens")


def tool_call_validity(run: RunEvidence) -> Level:
    """Share of tool calls whose arguments were valid JSON valid against the tool's schema, over every level of the
    reference agent scenario (k3lib.axes.agent writes per-level, per-check counts in `data.rates`)."""
    rec = run.records.get("agent")
    data = _typed(rec, AgentData)
    passed, total = data.validity(AGENT_VALIDITY_CHECK) if data is not None else (0, 0)
    if rec is not None and total > 0:
        return Level("tool_call_validity", passed / total,
                     f"evidence/agent.json: data.rates[check={AGENT_VALIDITY_CHECK}] (sum passed / sum total)",
                     axis_status=rec.status)
    return _not_measured(run, "tool_call_validity", f"agent.rates[check={AGENT_VALIDITY_CHECK}]")


_METRIC_NAME = re.compile(r"^\s*([A-Za-z_:][A-Za-z0-9_:]*)(?:\{|\s)")


def observed_metric_names(run: RunEvidence) -> Level:
    """Sample names in the exposition the probe kept (`evidence/probe/metrics.txt` or an attachment ending so)."""
    rec = run.records.get("probe")
    kept = [a for a in (rec.attachments if rec else []) if a.endswith("metrics.txt")]
    candidates = kept or ["evidence/probe/metrics.txt"]
    for rel in candidates:
        path = run.root / rel
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        names = frozenset(m.group(1) for line in text.splitlines() if not line.lstrip().startswith("#")
                          for m in [_METRIC_NAME.match(line)] if m)
        if names:
            return Level("observed_metric_names", names, rel, axis_status=rec.status if rec else None)
    return Level("observed_metric_names", None, reason="no metrics exposition kept by the probe")


IDENTITY: tuple[tuple[str, str, Callable[[RunEvidence], Level]], ...] = (
    ("image_digest", "image digest", image_digest),
    ("driver_version", "host driver", driver_version),
    ("vllm_version", "vLLM version", vllm_version),
    ("gpu_count", "GPU count", gpu_count),
    ("parallelism", "parallelism (TP/PP/DP)", parallelism),
    ("context_limit_tokens", "server context limit (max_model_len)", context_limit_tokens),
    ("contract_context_tokens", "contract context limit", contract_context_tokens),
)


def levels(run: RunEvidence, funcs: Iterable[Callable[[RunEvidence], Level]]) -> dict[str, Level]:
    return {lv.name: lv for lv in (f(run) for f in funcs)}
