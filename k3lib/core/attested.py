"""What an operator attests (the attestation file): who, when, how, a link to check it, and the items attested.

The operations axis' evidence (`k3lib.core.evidence.OperationsData`) carries this record, so the model sits with the
foundation; `k3lib.axes.attestation` reads it, runs the rollback drill and turns both into findings.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Annotated, Any, Mapping

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, model_validator

from .errors import BadInputError
from .layering import read_yaml, validate_model
from .recipes import RECIPE_FIELDS
from .thresholds import BY_PATH
from .yamlsafe import safe_load as yaml_load

Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
PositiveInt = Annotated[int, Field(gt=0)]

# A field a reviewer can act on, not a placeholder. The minimal rule: it is not one of these fill-ins (nor one
# character repeated, "xxx", "---"), it holds at least 3 letters, and a description (`how`, a result, a signal)
# holds at least 3 words of 2+ letters. A link is a URL, a ticket id or a path with at least 3 characters.
PLACEHOLDERS = frozenset({
    "x", "-", "?", "...", "…", "tbd", "tba", "todo", "fixme", "n/a", "na", "none", "null", "nil", "test", "testing",
    "foo", "bar", "baz", "asdf", "qwerty", "lorem ipsum", "someone", "somebody", "me", "anonymous", "unknown", "name",
    "who", "how", "link", "url", "changeme", "change me", "placeholder", "example", "same", "ok", "yes", "done",
    "fill in", "fill me", "your name", "see above", "see link"})


def _placeholder(text: str) -> bool:
    low = " ".join(text.lower().split()).strip(" .!?:;,")
    return low in PLACEHOLDERS or len(set(low.replace(" ", ""))) <= 1


def _meaningful(min_words: int, what: str):  # type: ignore[no-untyped-def]
    def check(text: str) -> str:
        if _placeholder(text):
            raise ValueError(f"{text!r} is a placeholder, not {what}")
        if sum(c.isalpha() for c in text) < 3:
            raise ValueError(f"{text!r} is too short to be {what} (at least 3 letters)")
        if len(re.findall(r"[^\W\d_]{2,}", text)) < min_words:
            raise ValueError(f"{text!r} does not say enough to be {what} (at least {min_words} words)")
        return text
    return AfterValidator(check)


Who = Annotated[Text, _meaningful(1, "the person who attests (a name and role)")]
Described = Annotated[Text, _meaningful(3, "a description a reviewer can check")]


def _link(text: str) -> str:
    if _placeholder(text) or len(text) < 3 or not any(c.isalnum() for c in text):
        raise ValueError(f"{text!r} is not a link a reviewer can follow (a URL, a ticket id or a path)")
    return text


def _image_ref(text: str) -> str:
    """An image reference with a tag or a digest, or a bare digest: what a rollback restores."""
    if re.fullmatch(r"sha256:[0-9a-f]{64}", text) or re.fullmatch(
            r"[a-z0-9][a-z0-9._/:-]*(?::[\w][\w.-]{0,127})?(?:@sha256:[0-9a-f]{64})?", text) and (
            "@sha256:" in text or ":" in text.rsplit("/", 1)[-1]):
        return text
    raise ValueError(f"{text!r} is not an image reference with a tag or a digest (e.g. "
                     "vllm/vllm-openai:v0.32.1@sha256:…)")


Link = Annotated[Text, AfterValidator(_link)]
ImageRef = Annotated[Text, AfterValidator(_image_ref)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LimitsKnownItem(_Model):
    """The limits the operator states they run the service under, compared with the accepted contract."""

    context_limit_tokens: PositiveInt
    concurrency_limit: PositiveInt
    rollback_signal: Described  # e.g. "K3QueueTimeAboveAccepted firing, or an OOM line in the server log"


class RollbackRehearsedItem(_Model):
    previous_image: ImageRef  # the image (ideally by digest) the rehearsal rolled back to
    result: Described  # what was seen once rolled back, e.g. "/health 200 and a chat completion in 4 min"
    duration_s: Annotated[float, Field(gt=0)] | None = None


class ThresholdAccepted(_Model):
    """A setting the operator accepts looser than its floor (`k3lib.core.thresholds`: the kit's default for a
    judgement threshold, what the contract sets for a size, length or level): the same path and value as the
    parameters, and why. The attestation's `who` is who accepted it."""

    path: Text
    value: bool | int | float | str | tuple[int, ...] | tuple[str, ...] | None
    why: Text

    @model_validator(mode="after")
    def _known(self) -> "ThresholdAccepted":
        if self.path not in BY_PATH and self.path not in {f"recipe.{f}" for f in RECIPE_FIELDS}:
            raise ValueError(f"{self.path!r} is not a judgement threshold or a setting of the table; expected one of "
                             + ", ".join(BY_PATH))
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
    who: Who
    when: dt.date  # ISO date, e.g. 2026-11-28
    how: Described
    link: Link  # ticket, wiki page or recording where the attestation can be checked
    items: AttestedItems


def parse_attestation(data: Any, source: str) -> AttestationRecord:
    if not isinstance(data, Mapping):
        raise BadInputError(f"expected a mapping with who, when, how, link, items; got {type(data).__name__}",
                            source=source)
    return validate_model(AttestationRecord, data, source=source, reference="parameters/attestation.example.yaml")


def parse_attestation_text(text: str, source: str) -> AttestationRecord:
    """An attestation fetched as text (from a URL); invalid YAML is one BadInputError line naming the source."""

    try:
        data = yaml_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "YAML"
        raise BadInputError(f"{where}: not valid YAML ({getattr(exc, 'problem', None) or 'unreadable'})",
                            source=source) from None
    return parse_attestation(data, source)


def read_attestation(path: str | Path) -> AttestationRecord:
    """Read an attestation YAML file; anything wrong is one BadInputError line naming the file and the field."""
    p = Path(path)
    return parse_attestation(read_yaml(p, "an attestation YAML file"), str(p))


# -- the rollback drill ---------------------------------------------------------------------------------------------
