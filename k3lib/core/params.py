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
from .roles import CONTRACT, CUT, EMULATOR, NAME, SOURCE, STOPS, Cosmetic, Judged

PositiveSeconds = Annotated[float, Field(gt=0)]
PositiveInt = Annotated[int, Field(gt=0)]
EXPLORE = "the OOM explorer's burst (notebooks/explore), not in the acceptance"
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

    temperature: Annotated[Annotated[float, Field(ge=0, le=2)] | None, Judged("other", "recipe")] = None
    top_p: Annotated[Annotated[float, Field(gt=0, le=1)] | None, Judged("other", "recipe")] = None
    # room for the reasoning and the answer; capped by contract.max_output_tokens
    max_tokens: Annotated[
        PositiveInt | None,
        Cosmetic("a reply cut by it is truncated and fails its checks: a shorter one can only fail")] = None
    # sent as chat_template_kwargs.thinking; true: every reply must carry its reasoning
    thinking: Annotated[bool | None, Judged("false", "recipe")] = None


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
    spec_decode_min_acceptance_length: Annotated[Annotated[float, Field(ge=1)] | None, Judged("lower", "recipe")] = None

    @field_validator("vllm_min", "vllm_max")
    @classmethod
    def _version(cls, v: str | None) -> str | None:
        from .versions import parse_version

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
    max_error_share: Annotated[Annotated[float, Field(ge=0, le=1)], Judged("higher", "defaults")] = 0.0
    images_served: Annotated[bool, Cosmetic(CONTRACT)] = False
    # agents: the tool-call failure rate the clients tolerate (a pass needs its Wilson 95 % upper bound at or below
    # it, which sets how many tool turns the agent axis sends), the stream modes the clients use, the reasoning
    # field they read (null: either), whether the deployment promises pinned sampling (Moonshot's API rejects other
    # values), and the clients' idle (no byte) and gateway (whole request) timeouts
    max_tool_call_failure_rate: Annotated[Annotated[float, Field(gt=0, lt=1)], Judged("higher", "defaults")] = 0.01
    client_stream_modes: Annotated[
        Annotated[tuple[Literal["non-stream", "stream"], ...], Field(min_length=1)],
        Cosmetic(CONTRACT)] = \
        ("non-stream", "stream")
    client_reasoning_field: Annotated[Literal["reasoning", "reasoning_content"] | None, Cosmetic(CONTRACT)] = None
    sampling_pinned: Annotated[bool, Cosmetic(CONTRACT)] = False
    client_idle_timeout_s: Annotated[PositiveSeconds | None, Cosmetic(CONTRACT)] = None
    gateway_timeout_s: Annotated[PositiveSeconds | None, Cosmetic(CONTRACT)] = None

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
    timeout_s: Annotated[PositiveSeconds, Cosmetic(CUT)] = 10.0


class EnvironmentParams(_Model):
    """Where the compatibility chain's proofs come from. Each source is a file path or an http(s) URL;
    `{base_url}` in a value is replaced by the target's base URL. A source left null is "not observable"."""

    # `vllm collect-env` / `python collect_env.py` output, run in the container
    collect_env: Annotated[str | None, Cosmetic(SOURCE)] = None
    # `nvidia-smi` and/or `nvidia-smi -q` output from the host
    nvidia_smi: Annotated[str | None, Cosmetic(SOURCE)] = None
    server_log: Annotated[str | None, Cosmetic(SOURCE)] = None  # the vLLM server log from its start
    # `docker inspect` / `crictl inspect` JSON of the running container
    image_inspect: Annotated[
        str | None,
        Cosmetic(SOURCE + "; one served by the target under any name is refused")] = None
    # null: tensor × pipeline × data parallel sizes from the log
    gpus_required: Annotated[
        PositiveInt | None,
        Cosmetic("a floor on the GPUs the host must show; the environment rule takes the larger of it and the server "
                 "log's TP × PP × DP, so it can only raise the requirement")] = None
    # null: inferred from the GPU model (HGX H100/H200/B200 boards have NVSwitch)
    nvswitch: Annotated[bool | None, Judged("false", "defaults")] = None
    timeout_s: Annotated[
        PositiveSeconds,
        Cosmetic("a source not fetched in time is not observable: its items stay open")] = 15.0


class AgentParams(_Model):
    """Axis 2, the reference agent scenario: how often and how hard the tool-call contract is exercised."""

    # a YAML/JSON sample file replacing the packaged reference sample
    sample: Annotated[str | None, Judged("other", "defaults")] = None
    # the whole scenario N times at each concurrency level
    repetitions: Annotated[PositiveInt, Judged("lower", "defaults")] = 10
    # null: [1, contract.planned_concurrency]
    concurrency_levels: Annotated[tuple[PositiveInt, ...] | None, Judged("lower", "contract")] = None
    # null: every stream mode of contract.client_stream_modes; true/false: only streamed / only whole replies
    stream: Annotated[bool | None, Judged("lower", "contract")] = None
    # independent tool turns at production sampling; null: as many as contract.max_tool_call_failure_rate needs
    tool_turns: Annotated[PositiveInt | None, Judged("lower", "contract")] = None
    # Moonshot's vendor contract (tool_choice, response_format, schemas, history)
    contract_check: Annotated[bool, Judged("false", "defaults")] = True
    # what goes back of each reply in later turns: "full" (as received, the contract) or, to show what a client
    # that loses part of the previous reply gets from the server, "drop-reasoning" / "drop-tool-calls"
    history: Annotated[Literal["full", "drop-reasoning", "drop-tool-calls"], Judged("other", "defaults")] = "full"
    # per concurrency level; the level stops by itself beyond it
    max_requests: Annotated[PositiveInt, Cosmetic(STOPS)] = 2000
    max_duration_s: Annotated[PositiveSeconds, Cosmetic(STOPS)] = 900.0  # per concurrency level
    request_timeout_s: Annotated[PositiveSeconds, Cosmetic(CUT)] = 300.0
    # tool-call round trips allowed in one turn before the client gives up
    max_tool_rounds: Annotated[PositiveInt, Judged("higher", "defaults")] = 4
    # the long exchange grows to this share
    long_context_fraction: Annotated[Annotated[float, Field(gt=0, le=0.8)], Judged("lower", "defaults")] = 0.5
    # a check passes at a level at or above this rate
    min_pass_rate: Annotated[Annotated[float, Field(ge=0, le=1)], Judged("lower", "defaults")] = 1.0


class PrefixCacheParams(_Model):
    """Axis 4, prefix caching: cold then warm requests per session and prefix length, counters scraped around each."""

    # repeat the cold/warm pair this many times per prefix length (rules out luck)
    sessions: Annotated[PositiveInt, Judged("lower", "defaults")] = 3
    # whole cold prompt sizes, measured with /tokenize; empty: a quarter of the contract's typical prompt and the
    # typical prompt itself (k3lib.core.thresholds.prefix_floor_tokens)
    prefix_tokens: Annotated[tuple[PositiveInt, ...], Judged("lower", "contract")] = ()
    # only TTFT matters; a short answer keeps each window short
    max_tokens: Annotated[
        PositiveInt,
        Cosmetic("only the first token is timed: the answer's length enters no judgement")] = 16
    # a unique cache_salt per session (vLLM mixes it into block 0) and/or a never-sent nonce heading the prompt
    isolation: Annotated[
        Literal["salt+fresh-prefix", "salt", "fresh-prefix"],
        Judged("other", "defaults")] = "salt+fresh-prefix"
    # "early-token" changes one word at the head of the system prompt: a negative control for the diagnosis
    warm_change: Annotated[Literal["last-turn", "early-token"], Judged("other", "defaults")] = "last-turn"
    # null: from vllm:cache_config_info (prefix_match_unit, block_size)
    block_size_tokens: Annotated[
        PositiveInt | None,
        Cosmetic("overrides vllm:cache_config_info's block size, named as the source of every reconciliation; a wrong "
                 "one leaves the pairs unreconciled")] = None
    # warm TTFT this much below cold (median)
    min_ttft_gain_pct: Annotated[Annotated[float, Field(ge=0, lt=100)], Judged("lower", "defaults")] = 10.0
    # while the gain's 95 % interval straddles min_ttft_gain_pct, up to this many more cold/warm pairs are measured
    max_extra_sessions: Annotated[
        Annotated[int, Field(ge=0)],
        Cosmetic("fewer extra pairs can only leave the gain inconclusive (a warning)")] = 12
    request_timeout_s: Annotated[PositiveSeconds, Cosmetic(CUT)] = 120.0
    # wait at most this long for counters to take a finished request
    settle_s: Annotated[
        PositiveSeconds,
        Cosmetic("counters not settled in time leave a pair unreconciled (not observable)")] = 2.0
    max_duration_s: Annotated[PositiveSeconds, Cosmetic(STOPS)] = 900.0  # the whole protocol stops by itself after this


class RooflineParams(_Model):
    """The memory-bandwidth bound of decoding (k3lib.axes.capacity.roofline): HBM bandwidth per GPU from the kit's table by
    GPU name unless set here, bytes read per token from the active parameters and their dtype."""

    # null: the GPU name the GPU samples show (nvidia-smi/dcgm modelName)
    gpu: Annotated[str | None, Judged("other", "defaults")] = None
    # per GPU, overriding the table; say where it comes from in hbm_source
    hbm_tb_s: Annotated[PositiveSeconds | None, Judged("lower", "defaults")] = None
    hbm_source: Annotated[str, Cosmetic(NAME + " (where hbm_tb_s comes from, printed beside it)")] = ""
    # billions of parameters read per token (a MoE: active, not total)
    active_params_b: Annotated[PositiveSeconds | None, Judged("higher", "recipe")] = None
    active_params_source: Annotated[str, Cosmetic(NAME + " (where active_params_b comes from, printed beside it)")] = ""
    weight_dtype: Annotated[
        Literal["fp32", "bf16", "fp16", "fp8", "int8", "mxfp4", "nvfp4", "int4"] | None,
        Judged("higher", "recipe")] = None
    # at concurrency 1, below this share of the per-sequence bound is a probable misconfiguration (eager mode, a
    # wrong parallel layout); a TP-sharded model at batch 1 waits on its all-reduces, so it is set low
    min_share: Annotated[Annotated[float, Field(gt=0, lt=1)], Judged("lower", "defaults")] = 0.05


class CapacityParams(_Model):
    """Axis 3, memory capacity: cold load, long context, progressive concurrency and soak, each bounded in
    requests and seconds. Empty lengths/steps are derived from the contract; defaults suit a real deployment."""

    # /metrics and GPU memory sampling period, one clock for all phases
    sample_interval_s: Annotated[PositiveSeconds, Judged("higher", "contract")] = 1.0
    request_timeout_s: Annotated[PositiveSeconds, Cosmetic(CUT)] = 600.0
    # cold load: poll /health from "not ready" to ready (a real model load takes minutes)
    ready_timeout_s: Annotated[
        PositiveSeconds,
        Cosmetic("a server not ready in time fails the cold load: a shorter one can only fail")] = 1800.0
    health_interval_s: Annotated[
        PositiveSeconds,
        Cosmetic("the cold load's polling period: no threshold judges the load time")] = 2.0
    # long context: one request at a time; empty = 25/50/75/100 % of (contract context − output)
    context_lengths_tokens: Annotated[tuple[PositiveInt, ...], Judged("lower", "contract")] = ()
    long_context_output_tokens: Annotated[
        PositiveInt,
        Cosmetic("judged through the lengths it derives (the floor of "
                 "axes.capacity.context_lengths_tokens counts it)")] = 64
    long_context_repeats: Annotated[PositiveInt, Judged("lower", "defaults")] = 1
    # the refused probe: contract context + this many tokens
    out_of_contract_extra_tokens: Annotated[
        PositiveInt,
        Cosmetic("sizes the probe beyond the contract that must be refused: any positive value is beyond it")] = 256
    # progressive concurrency: empty = 1, 2, 4, … up to contract.planned_concurrency, plus one step beyond
    concurrency_steps: Annotated[
        tuple[PositiveInt, ...],
        Cosmetic("the plan always adds contract.planned_concurrency and a step beyond it "
                 "(k3lib.axes.capacity.shape.plan_capacity)")] = ()
    # null: the contract's typical sizes (contract.typical_prompt_tokens, else half of max_context_tokens;
    # contract.typical_output_tokens, else max_output_tokens); below them the run is listed as loosened
    prompt_tokens: Annotated[PositiveInt | None, Judged("lower", "contract")] = None
    output_tokens: Annotated[PositiveInt | None, Judged("lower", "contract")] = None
    # each step is held this long so running/waiting settle
    step_duration_s: Annotated[PositiveSeconds, Judged("lower", "defaults")] = 120.0
    step_max_requests: Annotated[PositiveInt, Judged("lower", "contract")] = 5000
    # the head of a step not judged (ramp-up)
    settle_fraction: Annotated[Annotated[float, Field(ge=0, lt=1)], Judged("higher", "defaults")] = 0.3
    # mean settled waiting above this = queueing
    waiting_tolerance: Annotated[Annotated[float, Field(ge=0)], Judged("higher", "defaults")] = 0.5
    # client self-calibration before the steps, at the planned and the highest concurrency, against a local
    # known-timing server ("process": its own interpreter, so it does not steal the client's GIL; "thread": fast)
    calibrate: Annotated[bool, Judged("false", "defaults")] = True
    # client TTFT/ITL/delivery error p99 above this: not trusted
    calibration_max_error_ms: Annotated[PositiveSeconds, Judged("higher", "defaults")] = 10.0
    calibration_server: Annotated[
        Literal["process", "thread"],
        Cosmetic("where the known-timing server runs: the client error it measures is what calibration_max_error_ms "
                 "judges")] = "process"
    # sustained operation at the planned concurrency
    soak_duration_s: Annotated[PositiveSeconds, Judged("lower", "defaults")] = 1800.0
    soak_max_requests: Annotated[PositiveInt, Judged("lower", "contract")] = 200_000
    # fitted growth over the soak, per GPU, that is a finding
    memory_growth_min_mib: Annotated[PositiveSeconds, Judged("higher", "defaults")] = 1024.0
    # rise of settled KV usage, first → last third
    kv_trend_max: Annotated[Annotated[float, Field(gt=0, le=1)], Judged("higher", "defaults")] = 0.15
    # fall of the prefix hit rate, first → last third
    hit_rate_drop_max: Annotated[Annotated[float, Field(gt=0, le=1)], Judged("higher", "defaults")] = 0.2
    # share of samples: usage ≥ 0.9, few running
    fragmentation_share_max: Annotated[Annotated[float, Field(gt=0, le=1)], Judged("higher", "defaults")] = 0.2
    # the OOM explorer's headless burst (notebooks/explore/oom_explorer.ipynb)
    # null: the long-context phase's largest length
    explore_context_tokens: Annotated[PositiveInt | None, Cosmetic(EXPLORE)] = None
    explore_concurrency: Annotated[PositiveInt | None, Cosmetic(EXPLORE)] = None  # null: contract.planned_concurrency
    # null: contract.typical_output_tokens, else max_output_tokens
    explore_output_tokens: Annotated[PositiveInt | None, Cosmetic(EXPLORE)] = None
    explore_max_requests: Annotated[PositiveInt, Cosmetic(EXPLORE)] = 64
    explore_duration_s: Annotated[PositiveSeconds, Cosmetic(EXPLORE)] = 60.0
    roofline: RooflineParams = RooflineParams()


class OperationsParams(_Model):
    """What the kit cannot observe: an attestation file (who, when, how, link) and a rollback drill it runs.
    Without either, checklist items C15/C16 stay open: never a pass."""

    # YAML, see parameters/attestation.example.yaml
    attestation: Annotated[
        str | None,
        Cosmetic(SOURCE + " (C15); one served by the target under any name is refused")] = None
    # argv, a command line, or 'http:METHOD:URL[:JSON]'; {base_url}
    rollback_drill: Annotated[
        str | list[str] | None,
        Cosmetic("proven by its effect: the drill passes only when the target serves another release after it (C16); "
                 "unset, C16 stays open")] = None
    # the previous release the drill must restore: a vLLM version, an image reference or a sha256 digest; unset,
    # the drill must at least show a different version/image served after the command than before it
    rollback_to: Annotated[
        str | None,
        Cosmetic("set, the drill must restore this release; unset, it must at least show another one served: either is"
                 " checked by effect")] = None
    # back to the accepted release; checked to serve it again
    roll_forward: Annotated[
        str | list[str] | None,
        Cosmetic("checked by effect: the accepted release served again")] = None
    drill_timeout_s: Annotated[PositiveSeconds, Cosmetic("a drill cut by it fails")] = 300.0


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
