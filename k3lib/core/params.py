"""Validated parameters: the pydantic model of a run's parameter set, and `load_params`, which layers the YAML
files left to right and `--set key.path=value` last (`k3lib.core.layering`), then validates them into that model.

Untrusted input lands here, so every model forbids unknown keys, and a validation failure becomes one
`BadInputError` line naming the file that set the field, the field's path and what is expected.
Secrets are referenced by environment-variable *name* only (`api_key_env`); no field holds a secret value.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from .errors import BadInputError
from .layering import check_command, layer, validate_model
from .params_axes import (  # noqa: F401 - public here
    AgentParams,
    AxesParams,
    CapacityParams,
    EnvironmentParams,
    OperationsParams,
    PrefixCacheParams,
    ProbeParams,
    RooflineParams,
)
from .params_base import ENV_NAME, PositiveInt, PositiveSeconds, _check_url, _Model  # noqa: F401 - public here
from .recipes import check_recipe
from .roles import CONTRACT, CUT, EMULATOR, NAME, RATE, SOURCE, STABLE, Cosmetic, Judged, check_bounds
from .versions import parse_version


class EmulatorParams(_Model):
    """The embedded vLLM-compatible emulator the kit starts when no `target.base_url` is given."""

    profile: Annotated[str, Cosmetic(EMULATOR)] = "demo"
    faults: Annotated[tuple[str, ...], Cosmetic(EMULATOR)] = ()
    vllm_version: Annotated[str | None, Cosmetic(EMULATOR)] = None
    time_scale: Annotated[PositiveSeconds, Cosmetic(EMULATOR)] = 0.05  # modeled durations × this; 1.0 is real time
    # processes standing for nodes; null: the nodes the profile's GPUs span (gpu_count / gpus_per_node)
    nodes: Annotated[PositiveInt | None, Cosmetic(EMULATOR)] = None


class GpuMetricsParams(_Model):
    """Where per-GPU memory comes from: local NVML, a dcgm-exporter endpoint, or Prometheus (multi-node)."""

    source: Annotated[Literal["none", "nvml", "dcgm", "prometheus"], Cosmetic(SOURCE)] = "none"
    url: Annotated[str | None, Cosmetic(SOURCE)] = None  # dcgm-exporter /metrics URL, or the Prometheus base URL
    # dcgm: one exporter per node, scraped together (url is then the first)
    urls: Annotated[tuple[str, ...], Cosmetic(SOURCE)] = ()
    # extra PromQL label matchers for the prometheus source, e.g. 'Hostname=~"gpu-node-.*"'
    selector: Annotated[
        str,
        Cosmetic("narrows the Prometheus source; the GPUs it returns are tied to the target by their UUIDs and count "
                 "(k3lib.verdict.identity), else their items stay open")] = ""

    _url = field_validator("url")(classmethod(lambda cls, v: _check_url(v)))

    @field_validator("urls")
    @classmethod
    def _urls(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(_check_url(u) for u in v)  # type: ignore[misc]

    @model_validator(mode="after")
    def _url_needed(self) -> "GpuMetricsParams":
        if self.source in ("dcgm", "prometheus") and not self.url:
            raise ValueError(f"gpu_metrics.source {self.source!r} needs gpu_metrics.url")
        return self


class TargetParams(_Model):
    """The deployment under test. `base_url: null` means: start the embedded emulator."""

    base_url: Annotated[
        str | None,
        Cosmetic("the target under test: every other source is tied to what it serves (k3lib.verdict.identity)")] = None
    # one per data-parallel rank or node; default: base_url + /metrics
    metrics_urls: Annotated[
        tuple[str, ...],
        Cosmetic(SOURCE + "; each is tied to the target by the models and start time it states")] = ()
    gpu_metrics: GpuMetricsParams = GpuMetricsParams()
    # served model name; null: the first card of /v1/models
    model: Annotated[
        str | None,
        Cosmetic("the model asked for; the recipe of the model the target serves applies whatever is named")] = None
    # NAME of the environment variable holding the key, never the key
    api_key_env: Annotated[str | None, Cosmetic("the NAME of the variable holding the key: authentication only")] = None
    timeout_s: Annotated[PositiveSeconds, Cosmetic(CUT)] = 30.0
    # load phases refuse non-loopback targets unless this is true
    allow_remote_load: Annotated[bool, Cosmetic("a safety gate on where load may go: it enters no judgement")] = False
    # How the operator restarts the SAME deployment (argv, a command line, or 'http:METHOD:URL[:JSON]' with
    # {base_url}). Between batch stages, an engine found dead (an axis OOMed it) is restarted with it, so the
    # next axis starts from a serving target; without it, the next axes meet the dead engine.
    restart: Annotated[
        str | list[str] | None,
        Cosmetic("proven by its effect: a restart counts only when /health left 200 or the server's process start time"
                 " changed; a command with no effect leaves the cold load not observed "
                 "(k3lib.axes.capacity.coldload)")] = None
    restart_timeout_s: Annotated[
        PositiveSeconds,
        Cosmetic("a restart not ready in time fails the cold load: a shorter one can only fail")] = 600.0
    emulator: EmulatorParams = EmulatorParams()

    @field_validator("base_url")
    @classmethod
    def _base_url(cls, v: str | None) -> str | None:
        v = _check_url(v)
        if v is not None and urlsplit(v).path.rstrip("/").endswith("/v1"):
            root = v.rstrip("/")[: -len("/v1")]
            # the OpenAI SDK's habit: the kit adds /v1/… itself and reads /health, /metrics, /version beside /v1
            raise ValueError(f"ends in /v1: give the server root {root} (the kit adds /v1/… itself and reads "
                             "/health, /metrics and /version beside it)")
        return v

    @field_validator("metrics_urls")
    @classmethod
    def _metrics_urls(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(_check_url(u) for u in v)  # type: ignore[misc]

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, v: str | None) -> str | None:
        if v is not None and not ENV_NAME.match(v):
            raise ValueError("expected the NAME of an environment variable (e.g. VLLM_API_KEY), not a key value")
        return v

    @property
    def uses_emulator(self) -> bool:
        return self.base_url is None


class SamplingParams(_Model):
    """How the model is used in production (its recipe's request defaults): what the agent axis samples with. Unset
    fields are the agent sample's (`defaults:` of k3lib/data/agent_sample.yaml) or the server's."""

    temperature: Annotated[Annotated[float, Field(ge=0, le=2)] | None, Judged(
        "other", "recipe", RATE + "; the agent axis samples as production does (a lower temperature hides "
        "stochastic failures)", kind="mode", for_axis="agent", null_looser=True)] = None
    top_p: Annotated[Annotated[float, Field(gt=0, le=1)] | None, Judged(
        "other", "recipe", RATE + "; the agent axis samples as production does", kind="mode", for_axis="agent",
        null_looser=True)] = None
    # room for the reasoning and the answer; capped by contract.max_output_tokens
    max_tokens: Annotated[
        PositiveInt | None,
        Cosmetic("a reply cut by it is truncated and fails its checks: a shorter one can only fail")] = None
    # sent as chat_template_kwargs.thinking; true: every reply must carry its reasoning
    thinking: Annotated[bool | None, Judged(
        "false", "recipe", "seed 000: the deployment is tested as its recipe runs it; the served model's recipe turns "
        "thinking on, so every reply must carry its reasoning (off or unset, the thinking checks are dropped)",
        kind="mode", for_axis="agent", null_looser=True)] = None


class RecipeParams(_Model):
    """The recipe profile: what the deployment must be built from and started with."""

    name: Annotated[
        str,
        Cosmetic("the recipe of the model the target serves applies whatever the name says "
                 "(k3lib.core.recipes)")] = "generic"
    vllm_min: Annotated[str | None, Judged("lower", "recipe")] = None
    # exclusive upper bound, if any
    vllm_max: Annotated[str | None, Cosmetic("an upper bound can only refuse a version: it tightens")] = None
    cuda_major: Annotated[PositiveInt | None, Judged("other", "recipe")] = None
    driver_branch_min: Annotated[PositiveInt | None, Judged("lower", "recipe")] = None
    driver_branches_compatible: Annotated[tuple[int, ...], Judged("lower", "recipe")] = ()
    required_flags: Annotated[tuple[str, ...], Judged("lower", "recipe")] = ()  # e.g. "--tool-call-parser kimi_k3"
    prefix_caching: Annotated[bool, Judged("false", "recipe")] = True
    build: Annotated[
        Literal["official", "custom"],
        Cosmetic("official or custom: two products, two sheets; the decision and the environment "
                 "items name it")] = "official"
    image: Annotated[
        str | None,
        Cosmetic("the image the sheet is for: unset, the image item rests on the inspect alone; "
                 "set, a mismatch fails")] = None
    image_digest: Annotated[
        str | None,
        Cosmetic("the signed digest: set, a mismatch fails; unset, the item rests on the inspect alone")] = None
    note: Annotated[str, Cosmetic(NAME)] = ""
    sampling: SamplingParams = SamplingParams()
    # speculative decoding (DSpark for Kimi K3): when the spec-decode counters move, the mean acceptance length
    # (1 + accepted tokens per draft) must reach this; null: reported, not judged
    spec_decode_min_acceptance_length: Annotated[Annotated[float, Field(ge=1)] | None, Judged(
        "lower", "recipe", "seed 000: the deployment is tested as its recipe runs it; the "
        "served model's recipe sets DSpark's mean acceptance length (null: reported, not judged)", unit=" tokens",
        for_axis="agent", null_looser=True)] = None

    @field_validator("vllm_min", "vllm_max")
    @classmethod
    def _version(cls, v: str | None) -> str | None:
        if v is not None and parse_version(v) is None:
            raise ValueError(f"expected a PEP 440 version such as 0.27.1, got {v!r}")
        return None if v is None else str(v)


class ContractParams(_Model):
    """The service contract the deployment is accepted against."""

    max_context_tokens: Annotated[PositiveInt, Cosmetic(CONTRACT)] = 32768
    planned_concurrency: Annotated[PositiveInt, Cosmetic(CONTRACT)] = 5
    max_output_tokens: Annotated[PositiveInt, Cosmetic(CONTRACT)] = 1024
    # the sizes of a typical request: the floor of the load's request sizes (k3lib.core.thresholds); null: half of
    # the context limit for the prompt, max_output_tokens for the answer
    typical_prompt_tokens: Annotated[PositiveInt | None, Cosmetic(CONTRACT)] = None
    typical_output_tokens: Annotated[PositiveInt | None, Cosmetic(CONTRACT)] = None
    ttft_p95_ms: Annotated[PositiveSeconds | None, Cosmetic(CONTRACT)] = None
    e2e_p95_ms: Annotated[PositiveSeconds | None, Cosmetic(CONTRACT)] = None
    queue_p95_ms: Annotated[PositiveSeconds | None, Cosmetic(CONTRACT)] = None
    # the share of a load window's requests that may end without completing (refused by status, timed out,
    # unreachable, cut, failed on the server) while the window still holds; 0: every request must complete (bounds
    # in k3lib.core.thresholds)
    max_error_share: Annotated[Annotated[float, Field(ge=0, le=1)], Judged(
        "higher", "defaults", STABLE + " — a step that refuses, times out or loses requests did not hold",
        high=0.05)] = 0.0
    images_served: Annotated[bool, Cosmetic(CONTRACT)] = False
    # agents: the tool-call failure rate the clients tolerate (a pass needs its Wilson 95 % upper bound at or below
    # it, which sets how many tool turns the agent axis sends), the stream modes the clients use, the reasoning
    # field they read (null: either), whether the deployment promises pinned sampling (Moonshot's API rejects other
    # values), and the clients' idle (no byte) and gateway (whole request) timeouts
    max_tool_call_failure_rate: Annotated[Annotated[float, Field(gt=0, lt=1)], Judged(
        "higher", "defaults", RATE, high=0.1, for_axis="agent")] = 0.01
    client_stream_modes: Annotated[
        Annotated[tuple[Literal["non-stream", "stream"], ...], Field(min_length=1)],
        Cosmetic(CONTRACT)] = \
        ("non-stream", "stream")
    client_reasoning_field: Annotated[Literal["reasoning", "reasoning_content"] | None, Cosmetic(CONTRACT)] = None
    sampling_pinned: Annotated[bool, Cosmetic(CONTRACT)] = False
    client_idle_timeout_s: Annotated[PositiveSeconds | None, Cosmetic(CONTRACT)] = None
    gateway_timeout_s: Annotated[PositiveSeconds | None, Cosmetic(CONTRACT)] = None
    # agent sessions held at once (the capacity axis' session phase steps up to it); null: planned_concurrency,
    # its floor (k3lib.axes.capacity.sessions)
    planned_sessions: Annotated[PositiveInt | None, Cosmetic(CONTRACT)] = None

    @model_validator(mode="after")
    def _typical_fits(self) -> "ContractParams":
        if self.typical_prompt_tokens is not None and self.typical_prompt_tokens >= self.max_context_tokens:
            raise ValueError(f"typical_prompt_tokens {self.typical_prompt_tokens} must be below max_context_tokens "
                             f"{self.max_context_tokens}")
        if self.typical_output_tokens is not None and self.typical_output_tokens > self.max_output_tokens:
            raise ValueError(f"typical_output_tokens {self.typical_output_tokens} must be at most max_output_tokens "
                             f"{self.max_output_tokens}")
        return self


class LoadParams(_Model):
    """Where the kit's load is sent from. `workers`: how many processes spread a load phase's streams (each with
    its own event loop and client, see k3lib.io.workers); null: one per core available, leaving one for the kit;
    1: all in the kit's own process, as before. Bounded by k3lib.io.workers.WORKERS_MAX."""

    workers: Annotated[
        Annotated[int, Field(ge=1, le=64)] | None,
        Cosmetic("how the load is sent, not how much: the client's self-calibration judges its timing")] = None


class RunParams(_Model):
    label: Annotated[str, Cosmetic(NAME)] = ""
    reviewer: Annotated[str | None, Cosmetic(NAME + " (who reviews the sheet)")] = None
    notebook_timeout_s: Annotated[
        PositiveSeconds,
        Cosmetic("a notebook cut by it fails its axis: a shorter one can only fail")] = 900.0


class Params(_Model):
    """The whole, resolved parameter set of one run."""

    target: TargetParams
    recipe: RecipeParams = RecipeParams()
    contract: ContractParams = ContractParams()
    axes: AxesParams = AxesParams()
    load: LoadParams = LoadParams()
    run: RunParams = RunParams()

    def public_dict(self) -> dict[str, Any]:
        """JSON-ready dict. Holds no secret by construction: keys are referenced by variable name."""
        return self.model_dump(mode="json")


def default_tree() -> dict[str, Any]:
    """Every parameter at the kit's default, as `public_dict` writes it (what a loosened threshold is against)."""
    return Params(target=TargetParams()).public_dict()


# ---------------------------------------------------------------------------------------------------------------
# Loading: the files layered (k3lib.core.layering), then the model and the thresholds' bounds.


def load_params(files: Sequence[str | Path], sets: Sequence[str] = (), *, base: dict[str, Any] | None = None) -> Params:
    """Layer the YAML `files` left to right, apply `sets` last, validate. Raises BadInputError (one line)."""
    check_command(list(files), "k3 validate")
    merged, prov = layer(files, sets, base=base)
    return validate_params(merged, prov, default_source=str(files[-1]) if files else "parameters")


def validate_params(data: dict[str, Any], prov: dict[str, str] | None = None, *,
                    default_source: str = "parameters") -> Params:
    """The model, then what a model cannot say alone: a threshold outside the bounds the acceptance allows, or a
    recipe named for a known model that drops one of its requirements (`k3lib.core.thresholds`)."""

    params = validate_model(Params, data, source=default_source, prov=prov)
    resolved = params.public_dict()
    check_recipe(resolved.get("recipe") or {}, prov, default_source=default_source)
    check_bounds(Params, resolved, prov, default_source=default_source)
    _check_prefix_fits(params, prov or {}, default_source)
    return params


def _check_prefix_fits(params: Params, prov: dict[str, str], default_source: str) -> None:
    """Every prefix length set explicitly leaves room for its answer in the contract's context (else vLLM answers
    400 to every pair); unset, the lengths follow the contract (k3lib.core.floors.prefix_floor_tokens)."""
    p, limit = params.axes.prefix_cache, params.contract.max_context_tokens
    room = limit - p.max_tokens
    over = [n for n in p.prefix_tokens if n > room]
    if over:
        key = "axes.prefix_cache.prefix_tokens"
        raise BadInputError(f"{over} do not fit the contract's {limit}-token context with max_tokens {p.max_tokens}: "
                            f"each must be at most {room} (or leave the key out: the lengths then follow the "
                            "contract)", source=prov.get(key) or prov.get("contract.max_context_tokens")
                            or default_source, field=key)


def load_params_json(path: str | Path) -> Params:
    """Read back a run's resolved `params.json` (evidence read back from disk is untrusted too)."""

    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BadInputError(f"cannot read resolved parameters: {exc}", source=str(p)) from None
    return validate_params(data, default_source=str(p))


def load_any(path: str | Path, sets: Sequence[str] = ()) -> Params:
    """A notebook's `params_file`: YAML parameters or a run's resolved params.json."""
    p = Path(path)
    if p.suffix == ".json":
        params = load_params_json(p)
        if sets:
            return load_params([], sets, base=params.public_dict())
        return params
    return load_params([p], sets)
