"""Every parameter declares its role where it is declared: on its pydantic field, as `Annotated` metadata
(`k3lib.core.params`), read back by `role_of` and walked by `k3lib.core.thresholds.roles`.

- `Judged(looser, basis)` — the value shapes what the acceptance measures or how leniently it judges: one side of a
  reference tightens the test, the other loosens it. The reference (the floor) is the served model's recipe
  (`recipe`), the contract (`contract`) or the kit's defaults (`defaults`); the floor itself and the words that say
  where it comes from are the settings table's row (`k3lib.core.thresholds.SETTINGS`), or, for the recipe's build
  requirements, `k3lib.core.recipes.weaker_fields`. A value looser than its floor forbids `production` unless an
  operator's attestation accepts it (path and value).
- `Cosmetic(why)` — the value cannot make a judgement more lenient, and `why` says why (a cut that can only fail, a
  source whose absence leaves its items open, a name, a term of the contract itself).

A leaf without a role fails `tests/test_settings_table.py`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

Basis = Literal["recipe", "contract", "defaults"]
# "higher"/"lower": the direction that loosens; "false": off (or unset where the reference is on) loosens;
# "other": any value but the reference's loosens (a mode, a file, a name); "null" is handled by each row's measure
LooserWay = Literal["higher", "lower", "false", "other"]


@dataclasses.dataclass(frozen=True)
class Judged:
    """A setting that tightens on one side of its floor and loosens on the other (see the module docstring)."""

    looser: LooserWay
    basis: Basis

    role = "judged"


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
