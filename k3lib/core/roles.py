"""Every parameter declares its role where it is declared: on its pydantic field, as `Annotated` metadata
(`k3lib.core.params`), read back by `role_of` and walked by `k3lib.core.thresholds.roles`.

- `Judged(looser, basis, rule, ...)` — the value shapes what the acceptance measures or how leniently it judges: one
  side of a reference tightens the test, the other loosens it. The reference (the floor) is the served model's recipe
  (`recipe`), the contract (`contract`) or the kit's defaults (`defaults`). The role carries its row of the settings
  table whole: `rule`, the seed's rule the bounds and the floor follow; `low`/`high`, the hard bounds on the lenient
  side (beyond them the parameters are refused as they load); `unit` and `kind` for display; `floor(resolved) ->
  (value, words)`, the floor derived from the resolved parameters (None: the kit's default; for a `recipe` basis, the
  served model's recipe); `measure(value, resolved)`, the value compared with it (a list reduced to what the floor is
  about, a null filled in as the axis fills it); `for_axis`, `null_looser`, `order`. `k3lib.core.thresholds` walks the
  model for its table (`SETTINGS`); a judged leaf without a rule has no row (the recipe's build requirements:
  `k3lib.core.recipes.weaker_fields`). A value looser than its floor forbids `production` unless an operator's
  attestation accepts it (path and value).
- `Cosmetic(why)` — the value cannot make a judgement more lenient, and `why` says why (a cut that can only fail, a
  source whose absence leaves its items open, a name, a term of the contract itself).

A leaf without a role fails `tests/test_settings_table.py`.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Callable, Literal, Mapping

from pydantic import BaseModel

from .errors import BadInputError
from .floors import Floor, Measure, _fmt, _get
from .record import Record

Basis = Literal["recipe", "contract", "defaults"]
# "higher"/"lower": the direction that loosens; "false": off (or unset where the reference is on) loosens;
# "other": any value but the reference's loosens (a mode, a file, a name); "null" is handled by each row's measure
LooserWay = Literal["higher", "lower", "false", "other"]
Kind = Literal["threshold", "size", "length", "level", "duration", "repetitions", "bound", "mode"]


@dataclasses.dataclass(frozen=True)
class Judged:
    """A setting that tightens on one side of its floor and loosens on the other, with its row of the settings table
    (see the module docstring; `rule` None: no row)."""

    looser: LooserWay
    basis: Basis
    rule: str | None = None  # the seed's rule the bounds and the floor follow (a loosened setting's `basis`)
    unit: str = ""
    kind: Kind = "threshold"
    low: float | None = None
    high: float | None = None
    floor: Floor | None = None
    measure: Measure | None = None
    for_axis: str | None = None  # the axis a contract.* or recipe.* setting shapes, when it is not the load steps
    null_looser: bool = False  # a null (the check it feeds dropped) is looser than a floor that is set
    order: Callable[[Any], Any] | None = None  # what is compared, for a value not ordered by itself (a dtype)

    role = "judged"

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

    def in_bounds(self, value: Any) -> bool:
        if self.looser in ("false", "other") or value is None or not isinstance(value, (int, float)):
            return True
        return (self.low is None or value >= self.low) and (self.high is None or value <= self.high)


@dataclasses.dataclass(frozen=True)
class Cosmetic:
    """A setting that cannot make a judgement more lenient, and why."""

    why: str

    role = "cosmetic"


Role = Judged | Cosmetic


def role_of(field: Any) -> Role | None:
    """The role a pydantic `FieldInfo` declares in its metadata, if any."""
    found = [m for m in getattr(field, "metadata", ()) or () if isinstance(m, (Judged, Cosmetic))]
    return found[0] if len(found) == 1 else None


# reasons shared by many fields
CUT = "a request cut by it counts as not completed: a shorter one can only fail a judgement, never pass one"
SOURCE = "a source left unset or unread is not observable: the items resting on it stay open, never pass"
NAME = "a name or a label: it enters no judgement"
CONTRACT = ("a term of the contract: the reference the other settings' floors follow; the decision is production "
            "under this contract, which it prints")
EMULATOR = ("the embedded emulator only: a run against it is a demo (decision.json's target kind), never "
            "production, and `k3 sign` refuses it")
STOPS = "a phase it stops early warns (a budget finding): never a pass"

# seeds' rules shared by many judged fields (each row's `rule`)
TOOLS = ("seed 000: the tool-call test passes only if every condition holds, and repeating the scenario must give "
         "a compatible structure")
STABLE = "seed 000: production needs a stable load test; a saturation at nominal load forbids it"
SOAK = ("seed 000, phase 4: traffic held for a representative duration to reveal accumulation, eviction or "
        "fragmentation")
CLIENT = "seed 000: a conclusion carries the load parameters and results; a client whose own error is unknown " \
         "cannot measure the server's latency"
CACHE = ("seed 000: a latency drop without a consistent rise in cached tokens does not conclude; the test is "
         "repeated over several sessions")
LOAD = ("seed 000, phase 3: concurrency rises to the planned level with requests of the planned sizes; a test "
        "smaller than the contract does not accept the contract")
LONG = "seed 000, phase 2: long contexts near the planned traffic, up to the context limit the contract promises"
AGENTS = ("seed 000: the long exchange grows the cache and the queue, at the concurrency the agents will run; "
          "tool arguments that break only when requests overlap must show")
RATE = ("seed 000: unstable tool calls block the agents concerned; K3's tool-call failures are stochastic "
        "(vllm#53246), so a rate is proven only by its interval over enough independent tool turns")
ROOF = ("seed 000: a figure the configuration cannot explain is a misconfiguration (eager mode, a wrong parallel "
        "layout), not a capacity")


# -- walking a model's leaves --------------------------------------------------------------------------------------


def leaves(model: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Every leaf of a parameters model (`k3lib.core.params.Params`) — bool, string, null, list, command, number —
    as (dotted path, its pydantic `FieldInfo`)."""

    out: list[tuple[str, Any]] = []
    for name, field in model.model_fields.items():
        ann = field.annotation
        sub = [a for a in (ann, *typing.get_args(ann)) if isinstance(a, type) and issubclass(a, BaseModel)]
        out += leaves(sub[0], f"{prefix}{name}.") if sub else [(f"{prefix}{name}", field)]
    return out


def check_bounds(model: Any, resolved: Mapping[str, Any], prov: Mapping[str, str] | None = None, *,
                 default_source: str = "parameters") -> None:
    """Refuse (one BadInputError line) a judged setting of `model` outside the bounds the seeds allow."""
    for path, field in leaves(model):
        role, value = role_of(field), _get(resolved, path)
        if isinstance(role, Judged) and role.rule is not None and not role.in_bounds(value):
            raise BadInputError(f"{_fmt(value)} is outside the bounds the acceptance allows ({role.bounds_text()}; "
                                f"{role.rule})", source=(prov or {}).get(path, default_source), field=path)


# -- a setting looser than its floor -------------------------------------------------------------------------------


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


def same(a: Any, b: Any) -> bool:
    """Whether a setting's value is the one named (an attestation's entry, a recipe's): numbers by value, lists
    item by item, a bool only by a bool."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b) and all(
            same(x, y) for x, y in zip(a, b))
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return a == b
