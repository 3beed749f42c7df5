"""What an operator attests (the attestation file): who, when, how, a link to check it, and the items attested.

The operations axis' evidence (`k3lib.evidence.OperationsData`) carries this record, so the model sits with the
foundation; `k3lib.attestation` reads it, runs the rollback drill and turns both into findings.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Annotated, Any, Mapping

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from .errors import BadInputError
from .params import read_yaml, validate_model

Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
PositiveInt = Annotated[int, Field(gt=0)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LimitsKnownItem(_Model):
    """The limits the operator states they run the service under, compared with the accepted contract."""

    context_limit_tokens: PositiveInt
    concurrency_limit: PositiveInt
    rollback_signal: Text  # e.g. "K3QueueTimeAboveAccepted firing, or an OOM line in the server log"


class RollbackRehearsedItem(_Model):
    previous_image: Text  # the image (ideally by digest) the rehearsal rolled back to
    result: Text  # what was seen once rolled back, e.g. "/health 200 and a chat completion in 4 min"
    duration_s: Annotated[float, Field(gt=0)] | None = None


class ThresholdAccepted(_Model):
    """A judgement threshold the operator accepts looser than the kit's default (`k3lib.thresholds`): the same
    path and value as the parameters, and why. The attestation's `who` is who accepted it."""

    path: Text
    value: float | int | bool
    why: Text

    @model_validator(mode="after")
    def _known(self) -> "ThresholdAccepted":
        from .thresholds import BY_PATH

        if self.path not in BY_PATH:
            raise ValueError(f"{self.path!r} is not a judgement threshold; expected one of " + ", ".join(BY_PATH))
        return self


class AttestedItems(_Model):
    operator_knows_limits: LimitsKnownItem | None = None
    rollback_rehearsed: RollbackRehearsedItem | None = None
    thresholds_accepted: tuple[ThresholdAccepted, ...] = ()

    @model_validator(mode="after")
    def _one_at_least(self) -> "AttestedItems":
        if self.operator_knows_limits is None and self.rollback_rehearsed is None and not self.thresholds_accepted:
            raise ValueError("attest at least one item: operator_knows_limits, rollback_rehearsed or "
                             "thresholds_accepted")
        return self


class AttestationRecord(_Model):
    who: Text
    when: dt.date  # ISO date, e.g. 2026-11-28
    how: Text
    link: Text  # ticket, wiki page or recording where the attestation can be checked
    items: AttestedItems


def parse_attestation(data: Any, source: str) -> AttestationRecord:
    if not isinstance(data, Mapping):
        raise BadInputError(f"expected a mapping with who, when, how, link, items; got {type(data).__name__}",
                            source=source)
    return validate_model(AttestationRecord, data, source=source, reference="parameters/attestation.example.yaml")


def read_attestation(path: str | Path) -> AttestationRecord:
    """Read an attestation YAML file; anything wrong is one BadInputError line naming the file and the field."""
    p = Path(path)
    return parse_attestation(read_yaml(p, "an attestation YAML file"), str(p))


# -- the rollback drill ---------------------------------------------------------------------------------------------
