"""The settings table: every parameter that shapes what the acceptance measures or how leniently it judges, each
with the floor the contract or the seeds set for it; and the check that a run set below a floor says so.

**A row is declared on its field**: the parameter's `Judged` role (`k3lib.core.roles`) carries it whole — which way
loosens, the seed's rule, the hard bounds on the lenient side, the unit and kind, the floor derived from the resolved
parameters and the measure compared with it. This module walks the parameters model (`k3lib.core.params.Params`) and
makes each judged leaf with a rule a `Setting(path, role)`: `SETTINGS`, in the model's order, and `BY_PATH`. No
dotted path is written here.

A value inside the bounds but looser than its floor is *loosened*: the decision, the sheet and the index list it,
and it forbids `production` unless the operator's attestation accepts it by path and value, with who and why
(`items.thresholds_accepted`). Tightening is always allowed. The bounds themselves are checked as the parameters
load (`k3lib.core.roles.check_bounds`: beyond them, one line, exit 2).

**Every leaf declares its role** where it is declared, whatever its type (bool, string, null, list, command,
number): judged with its row (the recipe's build requirements: `k3lib.core.recipes.weaker_fields`), or cosmetic with
why it cannot loosen. `unclassified(Params)` walks every leaf; `tests/test_settings_table.py` fails on a leaf without
a role, or judged without a floor. `NOT_JUDGED` lists the cosmetic numeric fields with their reasons.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Iterable, Mapping

from pydantic import BaseModel

from .floors import SERVED, Floor, Measure, _get, recipe_floor
from .params import Params
from .roles import Cosmetic, Judged, Loosened, leaves, role_of, same


@dataclasses.dataclass(frozen=True)
class Setting:
    """One row of the settings table: a judged parameter's dotted path and the role its field declares."""

    path: str
    role: Judged

    @property
    def looser(self) -> str:
        return self.role.looser

    @property
    def basis(self) -> str:
        """The seed's rule the bounds and the floor follow."""
        return self.role.rule or ""

    @property
    def floor(self) -> Floor | None:
        """The floor as a function of the resolved parameters; None: the kit's default is the floor."""
        if self.role.floor is None and self.role.basis == "recipe":
            return recipe_floor(self.path)
        return self.role.floor

    @property
    def axis(self) -> str:
        """The evidence axis the setting shapes (its sheet items show it)."""
        if self.role.for_axis:
            return self.role.for_axis
        section, _, rest = self.path.partition(".")
        if section == "axes":
            return rest.partition(".")[0]
        if section == "recipe":
            return "environment"
        return "capacity"  # contract.* and load.* settings shape the load steps

    def bounds_text(self) -> str:
        return self.role.bounds_text()

    def in_bounds(self, value: Any) -> bool:
        return self.role.in_bounds(value)

    def is_looser(self, value: Any, floor: Any) -> bool:
        if floor is None:
            return False
        if value is None:
            return self.role.null_looser
        if self.looser == "false":
            return bool(floor) and not bool(value)
        if self.looser == "other":
            return not same(value, floor)
        if self.role.order is not None:
            value, floor = self.role.order(value), self.role.order(floor)
        return bool(value > floor if self.looser == "higher" else value < floor)

    def floor_of(self, resolved: Mapping[str, Any], defaults: Mapping[str, Any]) -> tuple[Any, str | None]:
        """(the floor, the words saying where it comes from; None for the kit's default)."""
        floor = self.floor
        if floor is None:
            return _get(defaults, self.path), None
        got = floor(resolved)
        return (None, None) if got is None else got

    def measured(self, resolved: Mapping[str, Any]) -> Any:
        value = _get(resolved, self.path)
        measure: Measure | None = self.role.measure
        return measure(value, resolved) if measure is not None else value


Threshold = Setting  # the name the judgement thresholds had before the table held every setting


def settings(model: Any) -> tuple[Setting, ...]:
    """The table of a parameters model: each judged leaf whose role carries its rule, in the model's order."""
    return tuple(Setting(path, role) for path, field in leaves(model)
                 if isinstance(role := role_of(field), Judged) and role.rule is not None)


SETTINGS: tuple[Setting, ...] = settings(Params)
THRESHOLDS = SETTINGS
BY_PATH: dict[str, Setting] = {t.path: t for t in SETTINGS}


def _numeric(annotation: Any) -> bool:
    """Whether a field's annotation holds a number (int or float, alone, optional or in a tuple; bool is not)."""
    if annotation is bool:
        return False
    if annotation in (int, float):
        return True
    return any(_numeric(a) for a in typing.get_args(annotation) if a is not Ellipsis)


def numeric_paths(model: Any, prefix: str = "") -> list[str]:
    """Every numeric field of a parameters model, as dotted paths."""

    out = []
    for name, field in model.model_fields.items():
        ann = field.annotation
        sub = [a for a in (ann, *typing.get_args(ann)) if isinstance(a, type) and issubclass(a, BaseModel)]
        if sub:
            out += numeric_paths(sub[0], f"{prefix}{name}.")
        elif _numeric(ann):
            out.append(f"{prefix}{name}")
    return out


# Numeric parameters that cannot make a judgement more lenient, and why: each one's cosmetic role.
_NUMERIC = set(numeric_paths(Params))
NOT_JUDGED: dict[str, str] = {path: role.why for path, field in leaves(Params)
                              if path in _NUMERIC and isinstance(role := role_of(field), Cosmetic)}


def roles(model: Any) -> dict[str, Any]:
    """Each leaf's declared role (`k3lib.core.roles`; None where it declares none)."""

    return {path: role_of(field) for path, field in leaves(model)}


def unclassified(model: Any, judged_elsewhere: Iterable[str] = ()) -> list[str]:
    """The leaves that could loosen the test without anyone saying so: a leaf of any type that declares no role,
    and a leaf declared judged whose role carries no row (no rule, so no floor) and that `judged_elsewhere` (the
    recipe's build requirements, `k3lib.core.recipes.RECIPE_FIELDS`) does not name."""

    elsewhere = set(judged_elsewhere)
    return [p for p, r in roles(model).items()
            if r is None or (isinstance(r, Judged) and r.rule is None and p not in elsewhere)]


# -- loosened settings -------------------------------------------------------------------------------------------


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
        ok = entry is not None and same(getattr(entry, "value", None), value)
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
