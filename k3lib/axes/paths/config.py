"""The live comparison's parameters: the task set, the named endpoints, one request format, one retry policy, the
bounds and the currency — one pydantic model under a top-level `paths:` key (its own file, not the run's parameter
set), unknown keys refused, layered with `extends:` and `--set` like every parameters file of the kit; plus the
comparison's fixed settings."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ...core.errors import BadInputError
from ...core.layering import _provenance, layer, validate_model
from ...core.params import _check_url
from ...core.retry import RetryPolicy

REFERENCE = "parameters/paths.example.yaml"
#: After a path's deadline, how long in-flight requests get to hand back their (cancelled) records.
CANCEL_GRACE_S = 5.0


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Endpoint(_Model):
    """One path: an OpenAI-compatible server, how it is paid, how much it may take at once."""

    base_url: str
    model: str | None = None  # None: the first card of /v1/models
    api_key_env: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")] | None = None  # the variable's NAME
    price_input_per_mtok: Annotated[float, Field(ge=0)] | None = None  # in the review's currency; None: unknown
    price_output_per_mtok: Annotated[float, Field(ge=0)] | None = None
    # cache-hit input (`usage.prompt_tokens_details.cached_tokens`); None: cache hits priced as input
    price_cached_input_per_mtok: Annotated[float, Field(ge=0)] | None = None
    concurrency: Annotated[int, Field(ge=1, le=256)] = 4
    connect_timeout_s: Annotated[float, Field(gt=0)] = 10.0

    _url = field_validator("base_url")(classmethod(lambda cls, v: _check_url(v)))


class RequestFormat(_Model):
    """How every task is sent, identically on every path (OpenAI chat completions, tools executed locally)."""

    stream: bool = True  # TTFT needs a stream
    temperature: Annotated[float, Field(ge=0, le=2)] = 0.0
    max_tokens: Annotated[int, Field(gt=0)] = 1024  # a task's own max_tokens, when lower, wins
    max_tool_rounds: Annotated[int, Field(ge=1, le=10)] = 4


class PathsSection(_Model):
    task_set: str = "builtin"  # a YAML/JSONL file (relative to the parameters file) or `builtin`
    endpoints: dict[Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,40}$")], Endpoint]
    request: RequestFormat = RequestFormat()
    retry: RetryPolicy = RetryPolicy(timeout_s=120.0)  # one request's timeout lives in the retry policy
    currency: Annotated[str, Field(pattern=r"^[A-Z]{3}$")] = "EUR"
    max_requests: Annotated[int, Field(ge=1)] = 500  # per path, retries included
    max_duration_s: Annotated[float, Field(gt=0)] = 1800.0  # per path
    allow_remote: bool = False  # a non-loopback endpoint is refused unless this is true
    label: str = "paths"

    @model_validator(mode="after")
    def _some(self) -> "PathsSection":
        if not self.endpoints:
            raise ValueError("expected at least one endpoint (e.g. self_hosted: and api:)")
        return self


class PathsParams(_Model):
    paths: PathsSection
    origins: dict[str, str] = {}  # the file or override that set each fixed element

    def origin(self, key: str) -> str:
        return self.origins.get(key, "built-in default")


FIXED_KEYS = {"task_set": "paths.task_set", "request_format": "paths.request", "retry_policy": "paths.retry",
              "quality_rule": "paths.task_set"}


def load_paths_params(files: Sequence[str | Path], sets: Sequence[str] = ()) -> PathsParams:
    """Layer YAML `files`, apply `sets`, resolve the task set path, validate. Raises BadInputError (one line)."""
    if not files:
        raise BadInputError("no parameters file given; expected -p FILE (see parameters/paths.example.yaml)",
                            source="k3 paths")
    merged, prov = layer(files, list(sets))
    source = str(files[-1])
    section = merged.get("paths")
    if not isinstance(section, dict):
        raise BadInputError("expected a top-level paths: section (task_set, endpoints, request, retry)",
                            source=source)
    ts = section.get("task_set")
    if isinstance(ts, str) and ts != "builtin":
        p = Path(ts).expanduser()
        if not p.is_absolute():
            origin = _provenance(("paths", "task_set"), prov, "")
            base = Path(origin).parent if origin and not origin.startswith("--set") else Path.cwd()
            p = base / p
        section["task_set"] = str(p.resolve())
    merged["origins"] = {k: _provenance(tuple(v.split(".")), prov, "built-in default")
                         for k, v in FIXED_KEYS.items()}
    return validate_model(PathsParams, merged, source=source, prov=prov, reference=REFERENCE)
