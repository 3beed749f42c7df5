"""The settings table: every parameter that shapes what the acceptance measures or how leniently it judges, each
with the floor the contract or the seeds set for it; and the check that a run set below a floor says so.

**A row** is a `Setting(path, looser, low, high, basis, unit, kind, floor, measure)`:

- `path` — the dotted parameter (`axes.capacity.prompt_tokens`);
- `looser` — the direction in which a value judges more leniently: "higher", "lower", or "false" (turning it off);
- `low`/`high` — the hard bounds on the lenient side: beyond them the parameters are refused when they load (one
  line, exit 2); the strict side is never bounded (a tighter setting cannot steer the verdict to production);
- `basis` — the seed's rule the bounds and the floor follow; `unit` for display; `kind` — what the setting is
  (threshold, size, length, level, duration, repetitions, bound, mode);
- `floor(resolved) -> (value, basis)` — the strictest-lenient value a run may take without saying so, derived from
  the resolved parameters (the contract's context limit, planned concurrency, typical request sizes). None: the
  kit's default is the floor (a judgement threshold);
- `measure(value, resolved) -> value` — the value compared with the floor: a list reduced to what the floor is
  about (the longest context length, the highest level), a null filled in the way the axis derives it from the
  contract. None: the value as set.

A value inside the bounds but looser than its floor is *loosened*: the decision, the sheet and the index list it,
and it forbids `production` unless the operator's attestation accepts it by path and value, with who and why
(`items.thresholds_accepted`). Tightening is always allowed.

**Every leaf declares its role** where it is declared, on its pydantic field (`k3lib.core.roles`: `Judged(looser,
basis)` or `Cosmetic(why)`), whatever its type (bool, string, null, list, command, number). A judged leaf has its
row here (its floor and basis; the recipe's build requirements are `k3lib.core.recipes.weaker_fields`'); a cosmetic
one says why it cannot loosen. `unclassified(Params)` walks every leaf; `tests/test_settings_table.py` fails on a leaf
without a role, or judged without a floor. `NOT_JUDGED` lists cosmetic numeric fields only (the reasons older
readers print).
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Callable, Iterable, Literal, Mapping

from pydantic import BaseModel

from .errors import BadInputError
from .floors import (  # noqa: F401
    _SAMPLE,
    DTYPE_BYTES,
    SERVED,
    Floor,
    Measure,
    _context_floor,
    _dtype_bytes,
    _fmt,
    _get,
    _gpu_floor,
    _hbm_floor,
    _highest,
    _longest_context,
    _longest_prefix,
    _modes_floor,
    _modes_run,
    _nvswitch_floor,
    _or_floor,
    _or_served,
    _output_floor,
    _planned,
    _prefix_floor,
    _prompt_floor,
    _recipe_floor,
    _requests_floor,
    _sample_ceiling,
    _tool_turns_floor,
    prefix_floor_tokens,
    typical_output_tokens,
    typical_prompt_tokens,
)
from .record import Record
from .roles import Judged, role_of

Looser = Literal["higher", "lower", "false", "other"]
Kind = Literal["threshold", "size", "length", "level", "duration", "repetitions", "bound", "mode"]


@dataclasses.dataclass(frozen=True)
class Setting:
    """One row of the settings table (see the module docstring)."""

    path: str
    looser: Looser
    low: float | None
    high: float | None
    basis: str
    unit: str = ""
    kind: Kind = "threshold"
    floor: Floor | None = None
    measure: Measure | None = None
    for_axis: str | None = None  # the axis a contract.* setting shapes, when it is not the load steps
    null_looser: bool = False  # a null (the check it feeds dropped) is looser than a floor that is set
    order: Callable[[Any], Any] | None = None  # what is compared, for a value not ordered by itself (a dtype)

    @property
    def axis(self) -> str:
        """The evidence axis the setting shapes (its sheet items show it)."""
        if self.for_axis:
            return self.for_axis
        section, _, rest = self.path.partition(".")
        if section == "axes":
            return rest.partition(".")[0]
        if section == "recipe":
            return "environment"
        return "capacity"  # contract.* and load.* settings shape the load steps

    def bounds_text(self) -> str:
        if self.looser == "false":
            return "true (false only when attested)"
        if self.looser == "other":
            return "the reference's value (another only when attested)"
        lo = "" if self.low is None else _fmt(self.low)
        hi = "" if self.high is None else _fmt(self.high)
        if lo and hi:
            return f"{lo} to {hi}{self.unit}"
        if not lo and not hi:
            return "no hard bound (its floor follows the contract)"
        return f"at least {lo}{self.unit}" if lo else f"at most {hi}{self.unit}"

    def is_looser(self, value: Any, floor: Any) -> bool:
        if floor is None:
            return False
        if value is None:
            return self.null_looser
        if self.looser == "false":
            return bool(floor) and not bool(value)
        if self.looser == "other":
            return not _same(value, floor)
        if self.order is not None:
            value, floor = self.order(value), self.order(floor)
        return value > floor if self.looser == "higher" else value < floor

    def in_bounds(self, value: Any) -> bool:
        if self.looser in ("false", "other") or value is None or not isinstance(value, (int, float)):
            return True
        return (self.low is None or value >= self.low) and (self.high is None or value <= self.high)

    def floor_of(self, resolved: Mapping[str, Any], defaults: Mapping[str, Any]) -> tuple[Any, str | None]:
        """(the floor, the words saying where it comes from; None for the kit's default)."""
        if self.floor is None:
            return _get(defaults, self.path), None
        got = self.floor(resolved)
        return (None, None) if got is None else got

    def measured(self, resolved: Mapping[str, Any]) -> Any:
        value = _get(resolved, self.path)
        return self.measure(value, resolved) if self.measure is not None else value


Threshold = Setting  # the name the judgement thresholds had before the table held every setting


# -- the table ---------------------------------------------------------------------------------------------------

_TOOLS = ("seed 000: the tool-call test passes only if every condition holds, and repeating the scenario must give "
          "a compatible structure")
_STABLE = "seed 000: production needs a stable load test; a saturation at nominal load forbids it"
_SOAK = ("seed 000, phase 4: traffic held for a representative duration to reveal accumulation, eviction or "
         "fragmentation")
_CLIENT = "seed 000: a conclusion carries the load parameters and results; a client whose own error is unknown " \
          "cannot measure the server's latency"
_CACHE = ("seed 000: a latency drop without a consistent rise in cached tokens does not conclude; the test is "
          "repeated over several sessions")
_LOAD = ("seed 000, phase 3: concurrency rises to the planned level with requests of the planned sizes; a test "
         "smaller than the contract does not accept the contract")
_LONG = "seed 000, phase 2: long contexts near the planned traffic, up to the context limit the contract promises"
_AGENTS = ("seed 000: the long exchange grows the cache and the queue, at the concurrency the agents will run; "
           "tool arguments that break only when requests overlap must show")
_RATE = ("seed 000: unstable tool calls block the agents concerned; K3's tool-call failures are stochastic "
         "(vllm#53246), so a rate is proven only by its interval over enough independent tool turns")
_ROOF = ("seed 000: a figure the configuration cannot explain is a misconfiguration (eager mode, a wrong parallel "
         "layout), not a capacity")

SETTINGS: tuple[Setting, ...] = (
    Setting("contract.max_error_share", "higher", None, 0.05,
            _STABLE + " — a step that refuses, times out or loses requests did not hold"),
    # -- the agent axis
    Setting("axes.agent.min_pass_rate", "lower", 0.9, None, _TOOLS),
    Setting("axes.agent.repetitions", "lower", 1, None, "seed 000: a single demonstration success is not enough — "
            "the scenarios are repeated (one run compares no repetitions: listed, and never enough)", " runs",
            kind="repetitions"),
    Setting("axes.agent.concurrency_levels", "lower", None, None, _AGENTS, kind="level",
            floor=_planned, measure=_highest),
    Setting("axes.agent.max_tool_rounds", "higher", None, 8, _TOOLS + "; a client that allows more tool round "
            "trips in one turn accepts a model that loops", " rounds", kind="bound"),
    Setting("axes.agent.long_context_fraction", "lower", 0.1, None, _AGENTS, kind="length"),
    Setting("axes.agent.tool_turns", "lower", 1, None, _RATE, " turns", kind="repetitions", floor=_tool_turns_floor,
            measure=_or_floor(_tool_turns_floor)),
    Setting("axes.agent.stream", "lower", None, None, "seed 000: the agent sample is played as production sends it; "
            "K3's parsers fail differently streamed and whole (vllm#51399, #53246)", " modes", kind="mode",
            floor=_modes_floor, measure=_modes_run),
    Setting("axes.agent.contract_check", "false", None, None, "seed 000: tool calls and structured outputs meet the "
            "client's contract — for K3, Moonshot's vendor contract (Kimi-Vendor-Verifier's pre-flight)",
            kind="mode"),
    Setting("contract.max_tool_call_failure_rate", "higher", None, 0.1, _RATE, for_axis="agent"),
    # -- the capacity axis: what the load looks like
    Setting("axes.capacity.context_lengths_tokens", "lower", None, None, _LONG, " tokens", kind="length",
            floor=_context_floor, measure=_longest_context),
    Setting("axes.capacity.prompt_tokens", "lower", None, None, _LOAD, " tokens", kind="size",
            floor=_prompt_floor, measure=_or_floor(_prompt_floor)),
    Setting("axes.capacity.output_tokens", "lower", None, None, _LOAD, " tokens", kind="size",
            floor=_output_floor, measure=_or_floor(_output_floor)),
    Setting("axes.capacity.step_max_requests", "lower", None, None, _LOAD, " requests", kind="bound",
            floor=_requests_floor),
    Setting("axes.capacity.soak_max_requests", "lower", None, None, _SOAK, " requests", kind="bound",
            floor=_requests_floor),
    Setting("axes.capacity.sample_interval_s", "higher", None, None, "seed 000: running, waiting and preemptions "
            "are read while each step holds; a figure from fewer than three samples is not observable", " s",
            kind="bound", floor=_sample_ceiling),
    Setting("axes.capacity.long_context_repeats", "lower", 1, None, _LONG, " runs", kind="repetitions"),
    # -- the capacity axis: how it judges
    Setting("axes.capacity.waiting_tolerance", "higher", None, 2.0,
            "seed 000: a queue that is not controlled at nominal concurrency is a saturation", " requests"),
    Setting("axes.capacity.settle_fraction", "higher", None, 0.5,
            "seed 000: running, waiting and preemptions are watched while concurrency rises; at most half a step "
            "is ramp-up left unjudged"),
    Setting("axes.capacity.step_duration_s", "lower", 0.1, None,
            "seed 000, phase 3: each concurrency step is held long enough for running and waiting to settle",
            " s", kind="duration"),
    Setting("axes.capacity.soak_duration_s", "lower", 0.1, None, _SOAK, " s", kind="duration"),
    Setting("axes.capacity.memory_growth_min_mib", "higher", None, 8192.0,
            "seed 000: a continuous memory growth forbids production", " MiB"),
    Setting("axes.capacity.kv_trend_max", "higher", None, 0.5, _SOAK),
    Setting("axes.capacity.hit_rate_drop_max", "higher", None, 0.5, _SOAK),
    Setting("axes.capacity.fragmentation_share_max", "higher", None, 0.5, _SOAK),
    Setting("axes.capacity.calibrate", "false", None, None, _CLIENT, kind="mode"),
    Setting("axes.capacity.calibration_max_error_ms", "higher", None, 250.0, _CLIENT, " ms"),
    Setting("axes.capacity.roofline.min_share", "lower", 0.005, None, _ROOF),
    Setting("axes.capacity.session_duration_s", "lower", 0.1, None, _AGENTS, " s", kind="duration"),
    Setting("axes.capacity.session_trace", "other", None, None, _AGENTS + "; sessions generated from the contract "
            "grow to its longest exchange, another trace is another test", kind="mode",
            floor=lambda r: ("generated", "sessions generated from the contract"),
            measure=lambda v, r: v or "generated"),
    # -- the prefix-cache axis
    Setting("axes.prefix_cache.min_ttft_gain_pct", "lower", 1.0, None, _CACHE, " %"),
    Setting("axes.prefix_cache.sessions", "lower", 1, None, _CACHE + " (one session rules out no local luck: "
            "listed, and never enough)", " sessions", kind="repetitions"),
    Setting("axes.prefix_cache.prefix_tokens", "lower", None, None, _CACHE, " tokens", kind="size",
            floor=_prefix_floor, measure=_longest_prefix),
    Setting("axes.prefix_cache.isolation", "other", None, None, _CACHE + "; a cold request must be cold (a unique "
            "salt and a fresh prefix)", kind="mode"),
    Setting("axes.prefix_cache.warm_change", "other", None, None, _CACHE + "; early-token is the diagnosis' "
            "negative control, not the test", kind="mode"),
    # -- every other type: modes, files, nulls (issue 43)
    Setting("axes.agent.sample", "other", None, None, "seed 000: the reference agent scenario; another sample is "
            "another test", kind="mode", floor=lambda r: (_SAMPLE, "the kit's reference sample"),
            measure=lambda v, r: v or _SAMPLE),
    Setting("axes.agent.history", "other", None, None, _TOOLS + "; the history goes back as received (the vendor "
            "contract)", kind="mode"),
    Setting("axes.environment.nvswitch", "false", None, None, "seed 000: the host's interconnect is part of the "
            "compatibility chain (a fabric manager down leaves NVSwitch GPUs unable to talk)", kind="mode",
            floor=_nvswitch_floor, measure=lambda v, r: True if v is None else v),
    Setting("recipe.sampling.temperature", "other", None, None, _RATE + "; the agent axis samples as production "
            "does (a lower temperature hides stochastic failures)", kind="mode",
            floor=_recipe_floor("recipe.sampling.temperature"), for_axis="agent", null_looser=True),
    Setting("recipe.sampling.top_p", "other", None, None, _RATE + "; the agent axis samples as production does",
            kind="mode", floor=_recipe_floor("recipe.sampling.top_p"), for_axis="agent", null_looser=True),
    Setting("recipe.sampling.thinking", "false", None, None, "seed 000: the deployment is tested as its recipe "
            "runs it; the served model's recipe turns thinking on, so every reply must carry its reasoning (off or "
            "unset, the thinking checks are dropped)", kind="mode",
            floor=_recipe_floor("recipe.sampling.thinking"), for_axis="agent", null_looser=True),
    Setting("recipe.spec_decode_min_acceptance_length", "lower", None, None, "seed 000: the deployment is tested "
            "as its recipe runs it; the served model's recipe sets DSpark's mean acceptance length (null: reported, "
            "not judged)", " tokens",
            floor=_recipe_floor("recipe.spec_decode_min_acceptance_length"), for_axis="agent", null_looser=True),
    Setting("axes.capacity.roofline.hbm_tb_s", "lower", None, None, _ROOF + "; a lower bandwidth lowers the bound",
            " TB/s", kind="bound", floor=_hbm_floor, measure=_or_served(_hbm_floor)),
    Setting("axes.capacity.roofline.gpu", "other", None, None, _ROOF + "; the bound is the GPU's the target runs on",
            kind="mode", floor=_gpu_floor, measure=_or_served(_gpu_floor)),
    Setting("axes.capacity.roofline.active_params_b", "higher", None, None, _ROOF + "; more bytes per token lowers "
            "the bound (null: no bound known)", " B", kind="bound",
            floor=_recipe_floor("axes.capacity.roofline.active_params_b"), null_looser=True),
    Setting("axes.capacity.roofline.weight_dtype", "higher", None, None, _ROOF + "; wider weights lower the bound "
            "(null: no bound known)", kind="mode", floor=_recipe_floor("axes.capacity.roofline.weight_dtype"),
            null_looser=True, order=_dtype_bytes),
)
THRESHOLDS = SETTINGS
BY_PATH: dict[str, Setting] = {t.path: t for t in SETTINGS}

_CUT = "a request cut by it counts as not completed: a shorter one can only fail a judgement, never pass one"
# Numeric parameters that cannot make a judgement more lenient, and why (the settings-table test reads this).
NOT_JUDGED: dict[str, str] = {
    "axes.probe.timeout_s": _CUT,
    "axes.environment.timeout_s": "a source not fetched in time is not observable: its items stay open",
    "axes.environment.gpus_required": "a floor on the GPUs the host must show; the environment rule takes the "
                                      "larger of it and the server log's TP × PP × DP, so it can only raise the "
                                      "requirement",
    "axes.capacity.request_timeout_s": _CUT,
    "axes.capacity.session_think_s": "paces a generated session's turns (longer or shorter): no judgement reads it",
    "axes.capacity.ready_timeout_s": "a server not ready in time fails the cold load: a shorter one can only fail",
    "axes.capacity.health_interval_s": "the cold load's polling period: no threshold judges the load time",
    "axes.capacity.long_context_output_tokens": "judged through the lengths it derives (the floor of "
                                                "axes.capacity.context_lengths_tokens counts it)",
    "axes.capacity.out_of_contract_extra_tokens": "sizes the probe beyond the contract that must be refused: any "
                                                  "positive value is beyond it",
    "axes.capacity.concurrency_steps": "the plan always adds contract.planned_concurrency and a step beyond it "
                                       "(k3lib.axes.capacity.shape.plan_capacity)",
    "axes.capacity.explore_context_tokens": "the OOM explorer's burst (notebooks/explore), not in the acceptance",
    "axes.capacity.explore_concurrency": "the OOM explorer's burst (notebooks/explore), not in the acceptance",
    "axes.capacity.explore_output_tokens": "the OOM explorer's burst (notebooks/explore), not in the acceptance",
    "axes.capacity.explore_max_requests": "the OOM explorer's burst (notebooks/explore), not in the acceptance",
    "axes.capacity.explore_duration_s": "the OOM explorer's burst (notebooks/explore), not in the acceptance",
    "axes.agent.max_requests": "a level it stops early warns (agent.budget): never a pass",
    "axes.agent.max_duration_s": "a level it stops early warns (agent.budget): never a pass",
    "axes.agent.request_timeout_s": _CUT,
    "axes.prefix_cache.max_tokens": "only the first token is timed: the answer's length enters no judgement",
    "axes.prefix_cache.block_size_tokens": "overrides vllm:cache_config_info's block size, named as the source of "
                                           "every reconciliation; a wrong one leaves the pairs unreconciled",
    "axes.prefix_cache.max_extra_sessions": "fewer extra pairs can only leave the gain inconclusive (a warning)",
    "axes.prefix_cache.request_timeout_s": _CUT,
    "axes.prefix_cache.settle_s": "counters not settled in time leave a pair unreconciled (not observable)",
    "axes.prefix_cache.max_duration_s": "a protocol it stops early warns (prefix_cache.coverage): never a pass",
    "axes.operations.drill_timeout_s": "a drill cut by it fails",
    "load.workers": "how the load is sent, not how much: the client's self-calibration judges its timing",
}


def _numeric(annotation: Any) -> bool:
    """Whether a field's annotation holds a number (int or float, alone, optional or in a tuple; bool is not)."""
    if annotation is bool:
        return False
    if annotation in (int, float):
        return True
    return any(_numeric(a) for a in typing.get_args(annotation) if a is not Ellipsis)


def numeric_paths(model: Any, prefix: str = "") -> list[str]:
    """Every numeric field of a parameters model (`k3lib.core.params.Params`, passed in: the model imports this
    module), as dotted paths."""

    out = []
    for name, field in model.model_fields.items():
        ann = field.annotation
        sub = [a for a in (ann, *typing.get_args(ann)) if isinstance(a, type) and issubclass(a, BaseModel)]
        if sub:
            out += numeric_paths(sub[0], f"{prefix}{name}.")
        elif _numeric(ann):
            out.append(f"{prefix}{name}")
    return out


def leaves(model: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Every leaf of a parameters model (`k3lib.core.params.Params`, passed in: the model imports this module) —
    bool, string, null, list, command, number — as (dotted path, its pydantic `FieldInfo`)."""

    out: list[tuple[str, Any]] = []
    for name, field in model.model_fields.items():
        ann = field.annotation
        sub = [a for a in (ann, *typing.get_args(ann)) if isinstance(a, type) and issubclass(a, BaseModel)]
        out += leaves(sub[0], f"{prefix}{name}.") if sub else [(f"{prefix}{name}", field)]
    return out


def roles(model: Any) -> dict[str, Any]:
    """Each leaf's declared role (`k3lib.core.roles`; None where it declares none)."""

    return {path: role_of(field) for path, field in leaves(model)}


def unclassified(model: Any, judged_elsewhere: Iterable[str] = ()) -> list[str]:
    """The leaves that could loosen the test without anyone saying so: a leaf of any type that declares no role,
    and a leaf declared judged that no row of the table (nor `judged_elsewhere`: the recipe's build requirements,
    `k3lib.core.recipes.RECIPE_FIELDS`) gives a floor."""

    elsewhere = set(judged_elsewhere)
    return [p for p, r in roles(model).items()
            if r is None or (isinstance(r, Judged) and p not in BY_PATH and p not in elsewhere)]


# -- loosened settings -------------------------------------------------------------------------------------------


class Loosened(Record):
    """A setting looser than its floor (the kit's default, or what the contract sets), and who accepted it (None:
    nobody did). `decision.json` lists them as `model_dump(mode="json")`; `model_validate` reads one back."""

    path: str
    value: Any
    default: Any  # the floor: the kit's default for a judgement threshold, else what the contract sets
    bounds: str
    basis: str
    source: str | None = None  # the parameters file or --set that set it
    accepted_by: str | None = None
    accepted_on: str | None = None
    why: str | None = None
    floor_basis: str | None = None  # where a contract-derived floor comes from; None: the kit's default

    @property
    def accepted(self) -> bool:
        return bool(self.accepted_by and self.why)

    def text(self) -> str:
        where = f" (set by {self.source})" if self.source else ""
        if self.floor_basis:
            return f"{self.path} = {_fmt(self.value)}, looser than its floor {_fmt(self.default)} — " \
                   f"{self.floor_basis}{where}"
        return f"{self.path} = {_fmt(self.value)}, looser than the default {_fmt(self.default)}{where}"

    def short(self) -> str:
        """`path = value (default x)`, or `(floor x)` for a floor the contract sets."""
        return f"{self.path} = {_fmt(self.value)} ({'floor' if self.floor_basis else 'default'} {_fmt(self.default)})"



def check_bounds(resolved: Mapping[str, Any], prov: Mapping[str, str] | None = None, *,
                 default_source: str = "parameters") -> None:
    """Refuse (one BadInputError line) a setting outside the bounds the seeds allow."""
    for t in SETTINGS:
        value = _get(resolved, t.path)
        if not t.in_bounds(value):
            raise BadInputError(f"{_fmt(value)} is outside the bounds the acceptance allows ({t.bounds_text()}; "
                                f"{t.basis})", source=(prov or {}).get(t.path, default_source), field=t.path)


def loosened(resolved: Mapping[str, Any], defaults: Mapping[str, Any], prov: Mapping[str, str] | None = None,
             accepted: Iterable[Any] = (), who: str | None = None, when: str | None = None,
             served: Mapping[str, Any] | None = None) -> list[Loosened]:
    """Every setting of `resolved` looser than its floor — the value in `defaults`
    (`k3lib.core.params.default_tree()`) for a judgement threshold, what the contract sets for the others — each
    with the attestation entry that accepted it (the same path and the same value), if any. `accepted` holds the
    attestation's `thresholds_accepted` entries. A key `resolved` leaves out takes its default (a partial tree, as
    the sheet's configuration column passes, judges as the defaults would). `served` is what the target showed of
    itself (`SERVED`): without it, the floors that rest on it are unknown and judge nothing."""
    resolved = {**_with_defaults(resolved, defaults), SERVED: dict(served or {})}
    by_path = {str(getattr(a, "path", "")): a for a in accepted}
    out = []
    for t in SETTINGS:
        floor, floor_basis = t.floor_of(resolved, defaults)
        if not t.is_looser(t.measured(resolved), floor):
            continue
        value = _get(resolved, t.path)
        entry = by_path.get(t.path)
        ok = entry is not None and _same(getattr(entry, "value", None), value)
        out.append(Loosened(path=t.path, value=value, default=floor, bounds=t.bounds_text(), basis=t.basis,
                            source=(prov or {}).get(t.path), accepted_by=who if ok else None,
                            accepted_on=when if ok else None, why=getattr(entry, "why", None) if ok else None,
                            floor_basis=floor_basis))
    return out


def _with_defaults(tree: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """`tree` over `defaults`, section by section (a value of `tree` wins; a section it lacks is the default's)."""
    out = dict(defaults)
    for key, value in tree.items():
        base = defaults.get(key)
        out[key] = _with_defaults(value, base) if isinstance(value, Mapping) and isinstance(base, Mapping) else value
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b) and all(
            _same(x, y) for x, y in zip(a, b))
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return a == b


def check(resolved: Mapping[str, Any], prov: Mapping[str, str] | None = None, *,
          default_source: str = "parameters") -> None:
    """The settings' bounds, as the parameters load (the recipe's requirements: `k3lib.core.recipes.check_recipe`)."""
    check_bounds(resolved, prov, default_source=default_source)
