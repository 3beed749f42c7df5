"""Validated parameters: the pydantic model of a run's parameter set, and `load_params`, which layers the YAML
files left to right and `--set key.path=value` last (`k3lib.core.layering`), then validates them into that model.

Untrusted input lands here, so every model forbids unknown keys, and a validation failure becomes one
`BadInputError` line naming the file that set the field, the field's path and what is expected.
Secrets are referenced by environment-variable *name* only (`api_key_env`); no field holds a secret value.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .errors import BadInputError
from .layering import check_command, layer, validate_model

PositiveSeconds = Annotated[float, Field(gt=0)]
PositiveInt = Annotated[int, Field(gt=0)]
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_url(value: str | None) -> str | None:
    if value is None:
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"expected an http(s) URL such as http://127.0.0.1:8000, got {value!r}")
    try:
        parts.port  # noqa: B018 - reading the port validates it
    except ValueError:
        raise ValueError(f"the port in {value!r} is not a number between 0 and 65535") from None
    return value.rstrip("/")


class EmulatorParams(_Model):
    """The embedded vLLM-compatible emulator the kit starts when no `target.base_url` is given."""

    profile: str = "demo"
    faults: tuple[str, ...] = ()
    vllm_version: str | None = None
    time_scale: PositiveSeconds = 0.05  # modeled durations × this; 1.0 is real time
    # processes standing for nodes; null: the nodes the profile's GPUs span (gpu_count / gpus_per_node)
    nodes: PositiveInt | None = None


class GpuMetricsParams(_Model):
    """Where per-GPU memory comes from: local NVML, a dcgm-exporter endpoint, or Prometheus (multi-node)."""

    source: Literal["none", "nvml", "dcgm", "prometheus"] = "none"
    url: str | None = None  # dcgm-exporter /metrics URL, or the Prometheus base URL
    urls: tuple[str, ...] = ()  # dcgm: one exporter per node, scraped together (url is then the first)
    selector: str = ""  # extra PromQL label matchers for the prometheus source, e.g. 'Hostname=~"gpu-node-.*"'

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

    base_url: str | None = None
    metrics_urls: tuple[str, ...] = ()  # one per data-parallel rank or node; default: base_url + /metrics
    gpu_metrics: GpuMetricsParams = GpuMetricsParams()
    model: str | None = None  # served model name; null: the first card of /v1/models
    api_key_env: str | None = None  # NAME of the environment variable holding the key, never the key
    timeout_s: PositiveSeconds = 30.0
    allow_remote_load: bool = False  # load phases refuse non-loopback targets unless this is true
    # How the operator restarts the SAME deployment (argv, a command line, or 'http:METHOD:URL[:JSON]' with
    # {base_url}). Between batch stages, an engine found dead (an axis OOMed it) is restarted with it, so the
    # next axis starts from a serving target; without it, the next axes meet the dead engine.
    restart: str | list[str] | None = None
    restart_timeout_s: PositiveSeconds = 600.0
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

    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(gt=0, le=1)] | None = None
    max_tokens: PositiveInt | None = None  # room for the reasoning and the answer; capped by contract.max_output_tokens
    thinking: bool | None = None  # sent as chat_template_kwargs.thinking; true: every reply must carry its reasoning


class RecipeParams(_Model):
    """The recipe profile: what the deployment must be built from and started with."""

    name: str = "generic"
    vllm_min: str | None = None
    vllm_max: str | None = None  # exclusive upper bound, if any
    cuda_major: PositiveInt | None = None
    driver_branch_min: PositiveInt | None = None
    driver_branches_compatible: tuple[int, ...] = ()
    required_flags: tuple[str, ...] = ()  # e.g. "--tool-call-parser kimi_k3"
    prefix_caching: bool = True
    build: Literal["official", "custom"] = "official"
    image: str | None = None
    image_digest: str | None = None
    note: str = ""
    sampling: SamplingParams = SamplingParams()
    # speculative decoding (DSpark for Kimi K3): when the spec-decode counters move, the mean acceptance length
    # (1 + accepted tokens per draft) must reach this; null: reported, not judged
    spec_decode_min_acceptance_length: Annotated[float, Field(ge=1)] | None = None

    @field_validator("vllm_min", "vllm_max")
    @classmethod
    def _version(cls, v: str | None) -> str | None:
        from .versions import parse_version

        if v is not None and parse_version(v) is None:
            raise ValueError(f"expected a PEP 440 version such as 0.27.1, got {v!r}")
        return None if v is None else str(v)


class ContractParams(_Model):
    """The service contract the deployment is accepted against."""

    max_context_tokens: PositiveInt = 32768
    planned_concurrency: PositiveInt = 5
    max_output_tokens: PositiveInt = 1024
    # the sizes of a typical request: the floor of the load's request sizes (k3lib.core.thresholds); null: half of
    # the context limit for the prompt, max_output_tokens for the answer
    typical_prompt_tokens: PositiveInt | None = None
    typical_output_tokens: PositiveInt | None = None
    ttft_p95_ms: PositiveSeconds | None = None
    e2e_p95_ms: PositiveSeconds | None = None
    queue_p95_ms: PositiveSeconds | None = None
    # the share of a load window's requests that may end without completing (refused by status, timed out,
    # unreachable, cut, failed on the server) while the window still holds; 0: every request must complete (bounds
    # in k3lib.core.thresholds)
    max_error_share: Annotated[float, Field(ge=0, le=1)] = 0.0
    images_served: bool = False
    # agents: the tool-call failure rate the clients tolerate (a pass needs its Wilson 95 % upper bound at or below
    # it, which sets how many tool turns the agent axis sends), the stream modes the clients use, the reasoning
    # field they read (null: either), whether the deployment promises pinned sampling (Moonshot's API rejects other
    # values), and the clients' idle (no byte) and gateway (whole request) timeouts
    max_tool_call_failure_rate: Annotated[float, Field(gt=0, lt=1)] = 0.01
    client_stream_modes: Annotated[tuple[Literal["non-stream", "stream"], ...], Field(min_length=1)] = \
        ("non-stream", "stream")
    client_reasoning_field: Literal["reasoning", "reasoning_content"] | None = None
    sampling_pinned: bool = False
    client_idle_timeout_s: PositiveSeconds | None = None
    gateway_timeout_s: PositiveSeconds | None = None
    # agent sessions held at once (the capacity axis' session phase steps up to it); null: planned_concurrency,
    # its floor (k3lib.axes.capacity.sessions)
    planned_sessions: PositiveInt | None = None

    @model_validator(mode="after")
    def _typical_fits(self) -> "ContractParams":
        if self.typical_prompt_tokens is not None and self.typical_prompt_tokens >= self.max_context_tokens:
            raise ValueError(f"typical_prompt_tokens {self.typical_prompt_tokens} must be below max_context_tokens "
                             f"{self.max_context_tokens}")
        if self.typical_output_tokens is not None and self.typical_output_tokens > self.max_output_tokens:
            raise ValueError(f"typical_output_tokens {self.typical_output_tokens} must be at most max_output_tokens "
                             f"{self.max_output_tokens}")
        return self


class ProbeParams(_Model):
    timeout_s: PositiveSeconds = 10.0


class EnvironmentParams(_Model):
    """Where the compatibility chain's proofs come from. Each source is a file path or an http(s) URL;
    `{base_url}` in a value is replaced by the target's base URL. A source left null is "not observable"."""

    collect_env: str | None = None  # `vllm collect-env` / `python collect_env.py` output, run in the container
    nvidia_smi: str | None = None  # `nvidia-smi` and/or `nvidia-smi -q` output from the host
    server_log: str | None = None  # the vLLM server log from its start
    image_inspect: str | None = None  # `docker inspect` / `crictl inspect` JSON of the running container
    gpus_required: PositiveInt | None = None  # null: tensor × pipeline × data parallel sizes from the log
    nvswitch: bool | None = None  # null: inferred from the GPU model (HGX H100/H200/B200 boards have NVSwitch)
    timeout_s: PositiveSeconds = 15.0


class AgentParams(_Model):
    """Axis 2, the reference agent scenario: how often and how hard the tool-call contract is exercised."""

    sample: str | None = None  # a YAML/JSON sample file replacing the packaged reference sample
    repetitions: PositiveInt = 10  # the whole scenario N times at each concurrency level
    concurrency_levels: tuple[PositiveInt, ...] | None = None  # null: [1, contract.planned_concurrency]
    # null: every stream mode of contract.client_stream_modes; true/false: only streamed / only whole replies
    stream: bool | None = None
    # independent tool turns at production sampling; null: as many as contract.max_tool_call_failure_rate needs
    tool_turns: PositiveInt | None = None
    contract_check: bool = True  # Moonshot's vendor contract (tool_choice, response_format, schemas, history)
    # what goes back of each reply in later turns: "full" (as received, the contract) or, to show what a client
    # that loses part of the previous reply gets from the server, "drop-reasoning" / "drop-tool-calls"
    history: Literal["full", "drop-reasoning", "drop-tool-calls"] = "full"
    max_requests: PositiveInt = 2000  # per concurrency level; the level stops by itself beyond it
    max_duration_s: PositiveSeconds = 900.0  # per concurrency level
    request_timeout_s: PositiveSeconds = 300.0
    max_tool_rounds: PositiveInt = 4  # tool-call round trips allowed in one turn before the client gives up
    long_context_fraction: Annotated[float, Field(gt=0, le=0.8)] = 0.5  # the long exchange grows to this share
    min_pass_rate: Annotated[float, Field(ge=0, le=1)] = 1.0  # a check passes at a level at or above this rate


class PrefixCacheParams(_Model):
    """Axis 4, prefix caching: cold then warm requests per session and prefix length, counters scraped around each."""

    sessions: PositiveInt = 3  # repeat the cold/warm pair this many times per prefix length (rules out luck)
    # whole cold prompt sizes, measured with /tokenize; empty: a quarter of the contract's typical prompt and the
    # typical prompt itself (k3lib.core.thresholds.prefix_floor_tokens)
    prefix_tokens: tuple[PositiveInt, ...] = ()
    max_tokens: PositiveInt = 16  # only TTFT matters; a short answer keeps each window short
    # a unique cache_salt per session (vLLM mixes it into block 0) and/or a never-sent nonce heading the prompt
    isolation: Literal["salt+fresh-prefix", "salt", "fresh-prefix"] = "salt+fresh-prefix"
    # "early-token" changes one word at the head of the system prompt: a negative control for the diagnosis
    warm_change: Literal["last-turn", "early-token"] = "last-turn"
    block_size_tokens: PositiveInt | None = None  # null: from vllm:cache_config_info (prefix_match_unit, block_size)
    min_ttft_gain_pct: Annotated[float, Field(ge=0, lt=100)] = 10.0  # warm TTFT this much below cold (median)
    # while the gain's 95 % interval straddles min_ttft_gain_pct, up to this many more cold/warm pairs are measured
    max_extra_sessions: Annotated[int, Field(ge=0)] = 12
    request_timeout_s: PositiveSeconds = 120.0
    settle_s: PositiveSeconds = 2.0  # wait at most this long for counters to take a finished request
    max_duration_s: PositiveSeconds = 900.0  # the whole protocol stops by itself after this


class RooflineParams(_Model):
    """The memory-bandwidth bound of decoding (k3lib.axes.capacity.roofline): HBM bandwidth per GPU from the kit's table by
    GPU name unless set here, bytes read per token from the active parameters and their dtype."""

    gpu: str | None = None  # null: the GPU name the GPU samples show (nvidia-smi/dcgm modelName)
    hbm_tb_s: PositiveSeconds | None = None  # per GPU, overriding the table; say where it comes from in hbm_source
    hbm_source: str = ""
    active_params_b: PositiveSeconds | None = None  # billions of parameters read per token (a MoE: active, not total)
    active_params_source: str = ""
    weight_dtype: Literal["fp32", "bf16", "fp16", "fp8", "int8", "mxfp4", "nvfp4", "int4"] | None = None
    # at concurrency 1, below this share of the per-sequence bound is a probable misconfiguration (eager mode, a
    # wrong parallel layout); a TP-sharded model at batch 1 waits on its all-reduces, so it is set low
    min_share: Annotated[float, Field(gt=0, lt=1)] = 0.05


class CapacityParams(_Model):
    """Axis 3, memory capacity: cold load, long context, progressive concurrency and soak, each bounded in
    requests and seconds. Empty lengths/steps are derived from the contract; defaults suit a real deployment."""

    sample_interval_s: PositiveSeconds = 1.0  # /metrics and GPU memory sampling period, one clock for all phases
    request_timeout_s: PositiveSeconds = 600.0
    # cold load: poll /health from "not ready" to ready (a real model load takes minutes)
    ready_timeout_s: PositiveSeconds = 1800.0
    health_interval_s: PositiveSeconds = 2.0
    # long context: one request at a time; empty = 25/50/75/100 % of (contract context − output)
    context_lengths_tokens: tuple[PositiveInt, ...] = ()
    long_context_output_tokens: PositiveInt = 64
    long_context_repeats: PositiveInt = 1
    out_of_contract_extra_tokens: PositiveInt = 256  # the refused probe: contract context + this many tokens
    # progressive concurrency: empty = 1, 2, 4, … up to contract.planned_concurrency, plus one step beyond
    concurrency_steps: tuple[PositiveInt, ...] = ()
    # null: the contract's typical sizes (contract.typical_prompt_tokens, else half of max_context_tokens;
    # contract.typical_output_tokens, else max_output_tokens); below them the run is listed as loosened
    prompt_tokens: PositiveInt | None = None
    output_tokens: PositiveInt | None = None
    step_duration_s: PositiveSeconds = 120.0  # each step is held this long so running/waiting settle
    step_max_requests: PositiveInt = 5000
    settle_fraction: Annotated[float, Field(ge=0, lt=1)] = 0.3  # the head of a step not judged (ramp-up)
    waiting_tolerance: Annotated[float, Field(ge=0)] = 0.5  # mean settled waiting above this = queueing
    # client self-calibration before the steps, at the planned and the highest concurrency, against a local
    # known-timing server ("process": its own interpreter, so it does not steal the client's GIL; "thread": fast)
    calibrate: bool = True
    calibration_max_error_ms: PositiveSeconds = 10.0  # client TTFT/ITL/delivery error p99 above this: not trusted
    calibration_server: Literal["process", "thread"] = "process"
    # sustained operation at the planned concurrency
    soak_duration_s: PositiveSeconds = 1800.0
    soak_max_requests: PositiveInt = 200_000
    memory_growth_min_mib: PositiveSeconds = 1024.0  # fitted growth over the soak, per GPU, that is a finding
    kv_trend_max: Annotated[float, Field(gt=0, le=1)] = 0.15  # rise of settled KV usage, first → last third
    hit_rate_drop_max: Annotated[float, Field(gt=0, le=1)] = 0.2  # fall of the prefix hit rate, first → last third
    fragmentation_share_max: Annotated[float, Field(gt=0, le=1)] = 0.2  # share of samples: usage ≥ 0.9, few running
    # the OOM explorer's headless burst (notebooks/explore/oom_explorer.ipynb)
    explore_context_tokens: PositiveInt | None = None  # null: the long-context phase's largest length
    explore_concurrency: PositiveInt | None = None  # null: contract.planned_concurrency
    explore_output_tokens: PositiveInt | None = None  # null: contract.typical_output_tokens, else max_output_tokens
    explore_max_requests: PositiveInt = 64
    explore_duration_s: PositiveSeconds = 60.0
    roofline: RooflineParams = RooflineParams()
    # agent sessions (docs/sessions.md): each level of concurrent sessions runs this long; a session trace (null:
    # sessions generated from the contract) in the kit's format or a public shape (copilot, bailian, azure, weka)
    session_duration_s: PositiveSeconds = 300.0
    session_think_s: Annotated[float, Field(ge=0)] = 5.0  # mean think time between turns (generated sessions)
    session_trace: str | None = None
    session_trace_format: Literal["k3", "copilot", "bailian", "azure", "weka"] = "k3"


class OperationsParams(_Model):
    """What the kit cannot observe: an attestation file (who, when, how, link) and a rollback drill it runs.
    Without either, checklist items C15/C16 stay open: never a pass."""

    attestation: str | None = None  # YAML, see parameters/attestation.example.yaml
    rollback_drill: str | list[str] | None = None  # argv, a command line, or 'http:METHOD:URL[:JSON]'; {base_url}
    # the previous release the drill must restore: a vLLM version, an image reference or a sha256 digest; unset,
    # the drill must at least show a different version/image served after the command than before it
    rollback_to: str | None = None
    roll_forward: str | list[str] | None = None  # back to the accepted release; checked to serve it again
    drill_timeout_s: PositiveSeconds = 300.0


class AxesParams(_Model):
    """Per-axis knobs. Each later axis adds its own section here."""

    probe: ProbeParams = ProbeParams()
    environment: EnvironmentParams = EnvironmentParams()
    capacity: CapacityParams = CapacityParams()
    agent: AgentParams = AgentParams()
    prefix_cache: PrefixCacheParams = PrefixCacheParams()
    operations: OperationsParams = OperationsParams()


class LoadParams(_Model):
    """Where the kit's load is sent from. `workers`: how many processes spread a load phase's streams (each with
    its own event loop and client, see k3lib.io.workers); null: one per core available, leaving one for the kit;
    1: all in the kit's own process, as before. Bounded by k3lib.io.workers.WORKERS_MAX."""

    workers: Annotated[int, Field(ge=1, le=64)] | None = None


class RunParams(_Model):
    label: str = ""
    reviewer: str | None = None
    notebook_timeout_s: PositiveSeconds = 900.0


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
    from .recipes import check_recipe
    from .thresholds import check

    params = validate_model(Params, data, source=default_source, prov=prov)
    resolved = params.public_dict()
    check_recipe(resolved.get("recipe") or {}, prov, default_source=default_source)
    check(resolved, prov, default_source=default_source)
    _check_prefix_fits(params, prov or {}, default_source)
    return params


def _check_prefix_fits(params: Params, prov: dict[str, str], default_source: str) -> None:
    """Every prefix length set explicitly leaves room for its answer in the contract's context (else vLLM answers
    400 to every pair); unset, the lengths follow the contract (k3lib.core.thresholds.prefix_floor_tokens)."""
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
    import json

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
