"""The per-axis sections of the parameters (`axes.*` of `k3lib.core.params.Params`): the probe, the compatibility
chain's sources, the agent scenario, the prefix-cache protocol, the capacity phases and their roofline, the
operations. Each leaf declares its role on its field (`k3lib.core.roles`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field

from .params_base import PositiveInt, PositiveSeconds, _Model
from .floors import (_fmt, _get, context_floor, dtype_bytes, generated_floor, generated_run, gpu_floor, hbm_floor,
                     highest, longest_context, longest_prefix, modes_floor, modes_run, nvswitch_floor, nvswitch_run,
                     or_floor, or_served, output_floor, planned_floor, prefix_floor, prompt_floor, requests_floor,
                     sample_floor, sample_run, tool_turns_floor)
from .roles import (AGENTS, CACHE, CLIENT, CUT, LOAD, LONG, NAME, RATE, ROOF, SOAK, SOURCE, STOPS, TOOLS, Cosmetic,
                    Judged)

EXPLORE = "the OOM explorer's burst (notebooks/explore), not in the acceptance"


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
    nvswitch: Annotated[bool | None, Judged(
        "false", "defaults", "seed 000: the host's interconnect is part of the compatibility chain (a fabric manager "
        "down leaves NVSwitch GPUs unable to talk)", kind="mode", floor=nvswitch_floor, measure=nvswitch_run)] = None
    timeout_s: Annotated[
        PositiveSeconds,
        Cosmetic("a source not fetched in time is not observable: its items stay open")] = 15.0


class AgentParams(_Model):
    """Axis 2, the reference agent scenario: how often and how hard the tool-call contract is exercised."""

    # a YAML/JSON sample file replacing the packaged reference sample
    sample: Annotated[str | None, Judged(
        "other", "defaults", "seed 000: the reference agent scenario; another sample is another test", kind="mode",
        floor=sample_floor, measure=sample_run)] = None
    # the whole scenario N times at each concurrency level
    repetitions: Annotated[PositiveInt, Judged(
        "lower", "defaults", "seed 000: a single demonstration success is not enough — the scenarios are repeated "
        "(one run compares no repetitions: listed, and never enough)", unit=" runs", kind="repetitions", low=1)] = 10
    # null: [1, contract.planned_concurrency]
    concurrency_levels: Annotated[tuple[PositiveInt, ...] | None, Judged(
        "lower", "contract", AGENTS, kind="level", floor=planned_floor, measure=highest)] = None
    # null: every stream mode of contract.client_stream_modes; true/false: only streamed / only whole replies
    stream: Annotated[bool | None, Judged(
        "lower", "contract", "seed 000: the agent sample is played as production sends it; K3's parsers fail "
        "differently streamed and whole (vllm#51399, #53246)", unit=" modes", kind="mode", floor=modes_floor,
        measure=modes_run)] = None
    # independent tool turns at production sampling; null: as many as contract.max_tool_call_failure_rate needs
    tool_turns: Annotated[PositiveInt | None, Judged(
        "lower", "contract", RATE, unit=" turns", kind="repetitions", low=1, floor=tool_turns_floor,
        measure=or_floor(tool_turns_floor))] = None
    # Moonshot's vendor contract (tool_choice, response_format, schemas, history)
    contract_check: Annotated[bool, Judged(
        "false", "defaults", "seed 000: tool calls and structured outputs meet the client's contract — for K3, "
        "Moonshot's vendor contract (Kimi-Vendor-Verifier's pre-flight)", kind="mode")] = True
    # what goes back of each reply in later turns: "full" (as received, the contract) or, to show what a client
    # that loses part of the previous reply gets from the server, "drop-reasoning" / "drop-tool-calls"
    history: Annotated[Literal["full", "drop-reasoning", "drop-tool-calls"], Judged(
        "other", "defaults", TOOLS + "; the history goes back as received (the vendor contract)",
        kind="mode")] = "full"
    # per concurrency level; the level stops by itself beyond it
    max_requests: Annotated[PositiveInt, Cosmetic(STOPS)] = 2000
    max_duration_s: Annotated[PositiveSeconds, Cosmetic(STOPS)] = 900.0  # per concurrency level
    request_timeout_s: Annotated[PositiveSeconds, Cosmetic(CUT)] = 300.0
    # tool-call round trips allowed in one turn before the client gives up
    max_tool_rounds: Annotated[PositiveInt, Judged(
        "higher", "defaults", TOOLS + "; a client that allows more tool round trips in one turn accepts a model that "
        "loops", unit=" rounds", kind="bound", high=8)] = 4
    # the long exchange grows to this share
    long_context_fraction: Annotated[Annotated[float, Field(gt=0, le=0.8)], Judged(
        "lower", "defaults", AGENTS, kind="length", low=0.1)] = 0.5
    # a check passes at a level at or above this rate
    min_pass_rate: Annotated[Annotated[float, Field(ge=0, le=1)], Judged(
        "lower", "defaults", TOOLS, low=0.9)] = 1.0


class PrefixCacheParams(_Model):
    """Axis 4, prefix caching: cold then warm requests per session and prefix length, counters scraped around each."""

    # repeat the cold/warm pair this many times per prefix length (rules out luck)
    sessions: Annotated[PositiveInt, Judged(
        "lower", "defaults", CACHE + " (one session rules out no local luck: listed, and never enough)",
        unit=" sessions", kind="repetitions", low=1)] = 3
    # whole cold prompt sizes, measured with /tokenize; empty: a quarter of the contract's typical prompt and the
    # typical prompt itself (k3lib.core.floors.prefix_floor_tokens)
    prefix_tokens: Annotated[tuple[PositiveInt, ...], Judged(
        "lower", "contract", CACHE, unit=" tokens", kind="size", floor=prefix_floor, measure=longest_prefix)] = ()
    # only TTFT matters; a short answer keeps each window short
    max_tokens: Annotated[
        PositiveInt,
        Cosmetic("only the first token is timed: the answer's length enters no judgement")] = 16
    # a unique cache_salt per session (vLLM mixes it into block 0) and/or a never-sent nonce heading the prompt
    isolation: Annotated[
        Literal["salt+fresh-prefix", "salt", "fresh-prefix"],
        Judged("other", "defaults", CACHE + "; a cold request must be cold (a unique salt and a fresh prefix)",
               kind="mode")] = "salt+fresh-prefix"
    # "early-token" changes one word at the head of the system prompt: a negative control for the diagnosis
    warm_change: Annotated[Literal["last-turn", "early-token"], Judged(
        "other", "defaults", CACHE + "; early-token is the diagnosis' negative control, not the test",
        kind="mode")] = "last-turn"
    # null: from vllm:cache_config_info (prefix_match_unit, block_size)
    block_size_tokens: Annotated[
        PositiveInt | None,
        Cosmetic("overrides vllm:cache_config_info's block size, named as the source of every reconciliation; a wrong "
                 "one leaves the pairs unreconciled")] = None
    # warm TTFT this much below cold (median)
    min_ttft_gain_pct: Annotated[Annotated[float, Field(ge=0, lt=100)], Judged(
        "lower", "defaults", CACHE, unit=" %", low=1.0)] = 10.0
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
    gpu: Annotated[str | None, Judged(
        "other", "defaults", ROOF + "; the bound is the GPU's the target runs on", kind="mode", floor=gpu_floor,
        measure=or_served(gpu_floor))] = None
    # per GPU, overriding the table; say where it comes from in hbm_source
    hbm_tb_s: Annotated[PositiveSeconds | None, Judged(
        "lower", "defaults", ROOF + "; a lower bandwidth lowers the bound", unit=" TB/s", kind="bound",
        floor=hbm_floor, measure=or_served(hbm_floor))] = None
    hbm_source: Annotated[str, Cosmetic(NAME + " (where hbm_tb_s comes from, printed beside it)")] = ""
    # billions of parameters read per token (a MoE: active, not total)
    active_params_b: Annotated[PositiveSeconds | None, Judged(
        "higher", "recipe", ROOF + "; more bytes per token lowers the bound (null: no bound known)",
        unit=" B", kind="bound", null_looser=True)] = None
    active_params_source: Annotated[str, Cosmetic(NAME + " (where active_params_b comes from, printed beside it)")] = ""
    weight_dtype: Annotated[
        Literal["fp32", "bf16", "fp16", "fp8", "int8", "mxfp4", "nvfp4", "int4"] | None,
        Judged("higher", "recipe", ROOF + "; wider weights lower the bound (null: no bound known)", kind="mode",
               null_looser=True, order=dtype_bytes)] = None
    # at concurrency 1, below this share of the per-sequence bound is a probable misconfiguration (eager mode, a
    # wrong parallel layout); a TP-sharded model at batch 1 waits on its all-reduces, so it is set low
    min_share: Annotated[Annotated[float, Field(gt=0, lt=1)], Judged(
        "lower", "defaults", ROOF, low=0.005)] = 0.05


def sample_ceiling(resolved: Mapping[str, Any]) -> tuple[float, str]:
    """The ceiling of `sample_interval_s`: three /metrics samples in a step's settled part, from the resolved
    capacity section read as the model below (as resolved, not validated again)."""
    cap = CapacityParams.model_construct(**(_get(resolved, "axes.capacity") or {}))
    step, settle = float(cap.step_duration_s), float(cap.settle_fraction)
    most = step * (1 - settle) / 3
    return round(most, 6), (f"three /metrics samples in a step's settled part: axes.capacity.step_duration_s "
                            f"{_fmt(step)} s × (1 − settle_fraction {_fmt(settle)}) ÷ 3")


class CapacityParams(_Model):
    """Axis 3, memory capacity: cold load, long context, progressive concurrency and soak, each bounded in
    requests and seconds. Empty lengths/steps are derived from the contract; defaults suit a real deployment."""

    # /metrics and GPU memory sampling period, one clock for all phases
    sample_interval_s: Annotated[PositiveSeconds, Judged(
        "higher", "contract", "seed 000: running, waiting and preemptions are read while each step holds; a figure "
        "from fewer than three samples is not observable", unit=" s", kind="bound", floor=sample_ceiling)] = 1.0
    request_timeout_s: Annotated[PositiveSeconds, Cosmetic(CUT)] = 600.0
    # cold load: poll /health from "not ready" to ready (a real model load takes minutes)
    ready_timeout_s: Annotated[
        PositiveSeconds,
        Cosmetic("a server not ready in time fails the cold load: a shorter one can only fail")] = 1800.0
    health_interval_s: Annotated[
        PositiveSeconds,
        Cosmetic("the cold load's polling period: no threshold judges the load time")] = 2.0
    # long context: one request at a time; empty = 25/50/75/100 % of (contract context − output)
    context_lengths_tokens: Annotated[tuple[PositiveInt, ...], Judged(
        "lower", "contract", LONG, unit=" tokens", kind="length", floor=context_floor,
        measure=longest_context)] = ()
    long_context_output_tokens: Annotated[
        PositiveInt,
        Cosmetic("judged through the lengths it derives (the floor of "
                 "axes.capacity.context_lengths_tokens counts it)")] = 64
    long_context_repeats: Annotated[PositiveInt, Judged(
        "lower", "defaults", LONG, unit=" runs", kind="repetitions", low=1)] = 1
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
    prompt_tokens: Annotated[PositiveInt | None, Judged(
        "lower", "contract", LOAD, unit=" tokens", kind="size", floor=prompt_floor,
        measure=or_floor(prompt_floor))] = None
    output_tokens: Annotated[PositiveInt | None, Judged(
        "lower", "contract", LOAD, unit=" tokens", kind="size", floor=output_floor,
        measure=or_floor(output_floor))] = None
    # each step is held this long so running/waiting settle
    step_duration_s: Annotated[PositiveSeconds, Judged(
        "lower", "defaults", "seed 000, phase 3: each concurrency step is held long enough for running and waiting to "
        "settle", unit=" s", kind="duration", low=0.1)] = 120.0
    step_max_requests: Annotated[PositiveInt, Judged(
        "lower", "contract", LOAD, unit=" requests", kind="bound", floor=requests_floor)] = 5000
    # the head of a step not judged (ramp-up)
    settle_fraction: Annotated[Annotated[float, Field(ge=0, lt=1)], Judged(
        "higher", "defaults", "seed 000: running, waiting and preemptions are watched while concurrency rises; at most "
        "half a step is ramp-up left unjudged", high=0.5)] = 0.3
    # mean settled waiting above this = queueing
    waiting_tolerance: Annotated[Annotated[float, Field(ge=0)], Judged(
        "higher", "defaults", "seed 000: a queue that is not controlled at nominal concurrency is a saturation",
        unit=" requests", high=2.0)] = 0.5
    # client self-calibration before the steps, at the planned and the highest concurrency, against a local
    # known-timing server ("process": its own interpreter, so it does not steal the client's GIL; "thread": fast)
    calibrate: Annotated[bool, Judged(
        "false", "defaults", CLIENT, kind="mode")] = True
    # client TTFT/ITL/delivery error p99 above this: not trusted
    calibration_max_error_ms: Annotated[PositiveSeconds, Judged(
        "higher", "defaults", CLIENT, unit=" ms", high=250.0)] = 10.0
    calibration_server: Annotated[
        Literal["process", "thread"],
        Cosmetic("where the known-timing server runs: the client error it measures is what calibration_max_error_ms "
                 "judges")] = "process"
    # sustained operation at the planned concurrency
    soak_duration_s: Annotated[PositiveSeconds, Judged(
        "lower", "defaults", SOAK, unit=" s", kind="duration", low=0.1)] = 1800.0
    soak_max_requests: Annotated[PositiveInt, Judged(
        "lower", "contract", SOAK, unit=" requests", kind="bound", floor=requests_floor)] = 200_000
    # fitted growth over the soak, per GPU, that is a finding
    memory_growth_min_mib: Annotated[PositiveSeconds, Judged(
        "higher", "defaults", "seed 000: a continuous memory growth forbids production", unit=" MiB",
        high=8192.0)] = 1024.0
    # rise of settled KV usage, first → last third
    kv_trend_max: Annotated[Annotated[float, Field(gt=0, le=1)], Judged(
        "higher", "defaults", SOAK, high=0.5)] = 0.15
    # fall of the prefix hit rate, first → last third
    hit_rate_drop_max: Annotated[Annotated[float, Field(gt=0, le=1)], Judged(
        "higher", "defaults", SOAK, high=0.5)] = 0.2
    # share of samples: usage ≥ 0.9, few running
    fragmentation_share_max: Annotated[Annotated[float, Field(gt=0, le=1)], Judged(
        "higher", "defaults", SOAK, high=0.5)] = 0.2
    # the OOM explorer's headless burst (notebooks/explore/oom_explorer.ipynb)
    # null: the long-context phase's largest length
    explore_context_tokens: Annotated[PositiveInt | None, Cosmetic(EXPLORE)] = None
    explore_concurrency: Annotated[PositiveInt | None, Cosmetic(EXPLORE)] = None  # null: contract.planned_concurrency
    # null: contract.typical_output_tokens, else max_output_tokens
    explore_output_tokens: Annotated[PositiveInt | None, Cosmetic(EXPLORE)] = None
    explore_max_requests: Annotated[PositiveInt, Cosmetic(EXPLORE)] = 64
    explore_duration_s: Annotated[PositiveSeconds, Cosmetic(EXPLORE)] = 60.0
    roofline: RooflineParams = RooflineParams()
    # agent sessions (docs/sessions.md): each level of concurrent sessions runs this long; a session trace (null:
    # sessions generated from the contract) in the kit's format or a public shape (copilot, bailian, azure, weka)
    session_duration_s: Annotated[PositiveSeconds, Judged(
        "lower", "defaults", AGENTS, unit=" s", kind="duration", low=0.1)] = 300.0
    # mean think time between turns (generated sessions)
    session_think_s: Annotated[Annotated[float, Field(ge=0)],
                               Cosmetic("paces a generated session's turns (longer or shorter): no judgement reads "
                                        "it")] = 5.0
    session_trace: Annotated[str | None, Judged(
        "other", "defaults", AGENTS + "; sessions generated from the contract grow to its longest exchange, another "
        "trace is another test", kind="mode", floor=generated_floor, measure=generated_run)] = None
    session_trace_format: Annotated[Literal["k3", "copilot", "bailian", "azure", "weka"],
                                    Cosmetic("names the shape of session_trace's file, read or refused as it is")] = "k3"


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
