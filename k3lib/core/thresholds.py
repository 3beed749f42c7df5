"""Every judgement threshold of the acceptance batch, with the bounds the source documents allow and the default
the kit judges at; and the recipes the kit knows by name, whose requirements a parameters file may tighten but
never drop.

A value beyond its bound on the lenient side is refused when the parameters load (one line, exit 2); the
strict side is never bounded (a tighter threshold cannot steer the verdict to production). A value inside them but looser
than the default (a shorter soak, a laxer pass rate, a wider calibration error) is *loosened*: the decision, the
sheet and the index list it, and it forbids `production` unless the operator's attestation names who accepted it
and why (`items.thresholds_accepted` of the attestation file). Tightening a threshold is always allowed.

The seeds give few numbers; each bound below says which rule of theirs it follows (`basis`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Literal, Mapping

from .errors import BadInputError

Looser = Literal["higher", "lower", "false"]


@dataclasses.dataclass(frozen=True)
class Threshold:
    """One judgement threshold: `path` in the parameters, the direction in which it loosens the judgement, the
    bounds it may take, and the seed's rule the bounds follow."""

    path: str
    looser: Looser  # "higher": a larger value judges more leniently; "lower": a smaller one; "false": turning it off
    low: float | None
    high: float | None
    basis: str
    unit: str = ""

    @property
    def axis(self) -> str:
        """The evidence axis the threshold judges (its sheet items show it)."""
        section, _, rest = self.path.partition(".")
        if section == "axes":
            return rest.partition(".")[0]
        return "capacity"  # contract.* thresholds judge the load steps

    def bounds_text(self) -> str:
        if self.looser == "false":
            return "true (false only when attested)"
        lo = "" if self.low is None else _fmt(self.low)
        hi = "" if self.high is None else _fmt(self.high)
        if lo and hi:
            return f"{lo} to {hi}{self.unit}"
        return f"at least {lo}{self.unit}" if lo else f"at most {hi}{self.unit}"

    def is_looser(self, value: Any, default: Any) -> bool:
        if value is None or default is None:
            return False
        if self.looser == "false":
            return bool(default) and not bool(value)
        return value > default if self.looser == "higher" else value < default

    def in_bounds(self, value: Any) -> bool:
        if self.looser == "false" or value is None:
            return True
        return (self.low is None or value >= self.low) and (self.high is None or value <= self.high)


def _fmt(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    return f"{value:g}"


_TOOLS = ("seed 000: the tool-call test passes only if every condition holds, and repeating the scenario must give "
          "a compatible structure")
_STABLE = "seed 000: production needs a stable load test; a saturation at nominal load forbids it"
_SOAK = ("seed 000, phase 4: traffic held for a representative duration to reveal accumulation, eviction or "
         "fragmentation")
_CLIENT = "seed 000: a conclusion carries the load parameters and results; a client whose own error is unknown " \
          "cannot measure the server's latency"
_CACHE = ("seed 000: a latency drop without a consistent rise in cached tokens does not conclude; the test is "
          "repeated over several sessions")

THRESHOLDS: tuple[Threshold, ...] = (
    Threshold("contract.max_error_share", "higher", None, 0.05,
              _STABLE + " — a step that refuses, times out or loses requests did not hold"),
    Threshold("axes.agent.min_pass_rate", "lower", 0.9, None, _TOOLS),
    Threshold("axes.agent.repetitions", "lower", 1, None, "seed 000: a single demonstration success is not "
              "enough — the scenarios are repeated (one run compares no repetitions: listed, and never enough)",
              " runs"),
    Threshold("axes.capacity.waiting_tolerance", "higher", None, 2.0,
              "seed 000: a queue that is not controlled at nominal concurrency is a saturation", " requests"),
    Threshold("axes.capacity.settle_fraction", "higher", None, 0.5,
              "seed 000: running, waiting and preemptions are watched while concurrency rises; at most half a step "
              "is ramp-up left unjudged"),
    Threshold("axes.capacity.step_duration_s", "lower", 0.1, None,
              "seed 000, phase 3: each concurrency step is held long enough for running and waiting to settle",
              " s"),
    Threshold("axes.capacity.soak_duration_s", "lower", 0.1, None, _SOAK, " s"),
    Threshold("axes.capacity.memory_growth_min_mib", "higher", None, 8192.0,
              "seed 000: a continuous memory growth forbids production", " MiB"),
    Threshold("axes.capacity.kv_trend_max", "higher", None, 0.5, _SOAK),
    Threshold("axes.capacity.hit_rate_drop_max", "higher", None, 0.5, _SOAK),
    Threshold("axes.capacity.fragmentation_share_max", "higher", None, 0.5, _SOAK),
    Threshold("axes.capacity.calibrate", "false", None, None, _CLIENT),
    Threshold("axes.capacity.calibration_max_error_ms", "higher", None, 250.0, _CLIENT, " ms"),
    Threshold("axes.prefix_cache.min_ttft_gain_pct", "lower", 1.0, None, _CACHE, " %"),
    Threshold("axes.prefix_cache.sessions", "lower", 1, None, _CACHE + " (one session rules out no local luck: "
              "listed, and never enough)", " sessions"),
)
BY_PATH: dict[str, Threshold] = {t.path: t for t in THRESHOLDS}


@dataclasses.dataclass(frozen=True)
class Loosened:
    """A threshold set looser than the kit's default, and who accepted it (None: nobody did)."""

    path: str
    value: Any
    default: Any
    bounds: str
    basis: str
    source: str | None = None  # the parameters file or --set that set it
    accepted_by: str | None = None
    accepted_on: str | None = None
    why: str | None = None

    @property
    def accepted(self) -> bool:
        return bool(self.accepted_by and self.why)

    def text(self) -> str:
        where = f" (set by {self.source})" if self.source else ""
        return f"{self.path} = {_fmt(self.value)}, looser than the default {_fmt(self.default)}{where}"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Loosened":
        fields: dict[str, Any] = {f.name: d.get(f.name) for f in dataclasses.fields(cls)}
        return cls(**fields)


def _get(tree: Mapping[str, Any], path: str) -> Any:
    node: Any = tree
    for key in path.split("."):
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    return node


def check_bounds(resolved: Mapping[str, Any], prov: Mapping[str, str] | None = None, *,
                 default_source: str = "parameters") -> None:
    """Refuse (one BadInputError line) a threshold outside the bounds the seeds allow."""
    for t in THRESHOLDS:
        value = _get(resolved, t.path)
        if not t.in_bounds(value):
            raise BadInputError(f"{_fmt(value)} is outside the bounds the acceptance allows ({t.bounds_text()}; "
                                f"{t.basis})", source=(prov or {}).get(t.path, default_source), field=t.path)


def loosened(resolved: Mapping[str, Any], defaults: Mapping[str, Any], prov: Mapping[str, str] | None = None,
             accepted: Iterable[Any] = (), who: str | None = None, when: str | None = None) -> list[Loosened]:
    """Every threshold of `resolved` looser than in `defaults` (`k3lib.core.params.default_tree()`), each with the
    attestation entry that accepted it (the same path and the same value), if any. `accepted` holds the
    attestation's `thresholds_accepted` entries."""
    by_path = {str(getattr(a, "path", "")): a for a in accepted}
    out = []
    for t in THRESHOLDS:
        value, default = _get(resolved, t.path), _get(defaults, t.path)
        if not t.is_looser(value, default):
            continue
        entry = by_path.get(t.path)
        ok = entry is not None and _same(getattr(entry, "value", None), value)
        out.append(Loosened(t.path, value, default, t.bounds_text(), t.basis, (prov or {}).get(t.path),
                            who if ok else None, when if ok else None, getattr(entry, "why", None) if ok else None))
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return a == b


# -- recipes known by name -----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class KnownRecipe:
    """What the source documents require of a model's deployment; a recipe of this name keeps every one."""

    name: str
    vllm_min: str
    cuda_major: int
    driver_branch_min: int
    required_flags: tuple[str, ...]
    prefix_caching: bool
    basis: str


KNOWN_RECIPES: dict[str, KnownRecipe] = {
    "kimi-k3": KnownRecipe(
        "kimi-k3", vllm_min="0.27.1", cuda_major=13, driver_branch_min=580,
        required_flags=("--enable-auto-tool-choice", "--tool-call-parser kimi_k3", "--reasoning-parser kimi_k3",
                        "--enable-prefix-caching", "--trust-remote-code"),
        prefix_caching=True,
        basis="seed 000: Kimi K3 runs vLLM 0.27.1+, a CUDA 13 build on a host driver R580 or newer, with "
              "--enable-auto-tool-choice, the kimi_k3 parsers and prefix caching; vLLM's K3 recipe and blog: "
              "--trust-remote-code, and --enable-prefix-caching passed explicitly (off by default for K3)"),
}


def _version_tuple(v: str) -> tuple[int, ...]:
    parts = []
    for p in str(v).split("."):
        digits = "".join(ch for ch in p if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def check_recipe(recipe: Mapping[str, Any], prov: Mapping[str, str] | None = None, *,
                 default_source: str = "parameters") -> None:
    """A recipe named for a known model may raise its requirements, never drop or lower one (one line, exit 2):
    to judge another build, name another recipe — whose unset requirements then leave their sheet items open."""
    known = KNOWN_RECIPES.get(str(recipe.get("name") or ""))
    if known is None:
        return
    prov = prov or {}
    hint = f"name another recipe (recipe.name) to judge another build ({known.basis})"

    def refuse(field: str, what: str) -> None:
        raise BadInputError(f"the {known.name} recipe requires {what}; {hint}",
                            source=prov.get(f"recipe.{field}", prov.get("recipe", default_source)),
                            field=f"recipe.{field}")

    vmin = recipe.get("vllm_min")
    if vmin is None or _version_tuple(vmin) < _version_tuple(known.vllm_min):
        refuse("vllm_min", f"vLLM {known.vllm_min} or newer (got {vmin!r})")
    if recipe.get("cuda_major") != known.cuda_major:
        refuse("cuda_major", f"a CUDA {known.cuda_major} build (got {recipe.get('cuda_major')!r})")
    driver = recipe.get("driver_branch_min")
    if driver is None or driver < known.driver_branch_min:
        refuse("driver_branch_min", f"a host driver branch R{known.driver_branch_min} or newer (got {driver!r})")
    below = [b for b in recipe.get("driver_branches_compatible") or () if b < known.driver_branch_min]
    if below:
        refuse("driver_branches_compatible", f"a host driver branch R{known.driver_branch_min} or newer (a CUDA "
               f"{known.cuda_major} build runs on no older branch; got R{below[0]})")
    flags = {" ".join(str(f).split()) for f in recipe.get("required_flags") or ()}
    missing = [f for f in known.required_flags if f not in flags]
    if missing:
        refuse("required_flags", "the server flags " + ", ".join(missing))
    if known.prefix_caching and not recipe.get("prefix_caching"):
        refuse("prefix_caching", "prefix caching on")


def check(resolved: Mapping[str, Any], prov: Mapping[str, str] | None = None, *,
          default_source: str = "parameters") -> None:
    """Both checks, as the parameters load."""
    check_recipe(resolved.get("recipe") or {}, prov, default_source=default_source)
    check_bounds(resolved, prov, default_source=default_source)

