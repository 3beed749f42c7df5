"""The incident drill's shapes, as `TypedDict`s (they change nothing at run time): its result as recorded (the
stability axis holds it), the pipeline check it may carry, and the OpenAI chat bodies it sends and reads back."""

from __future__ import annotations

from typing import Any, Literal, NotRequired

from typing_extensions import TypedDict

from ..io.shapes import ChatChoice
from .results import Answer


class DrillAnswerData(TypedDict):
    question: str
    answer: Answer
    evidence: str


class DrillTargetData(TypedDict):
    is_deployment: bool
    why: str
    observed: NotRequired[dict[str, DrillAnswerData]]


class DrillVersionsData(TypedDict):
    before: str | None
    after_restore: str | None
    expected_previous: str | None


class PipelineCheckData(TypedDict):
    """One check of the release pipeline's manifest (`artifacts.check_pipeline`)."""

    check: str
    status: str
    message: str
    evidence: dict[str, list[str]]  # the files (or names) the check found at fault, by kind


class RenewalDrillData(TypedDict):
    """The drill's result as it is recorded (`drill.run_drill`, `for_deployment`, `not_run`)."""

    target: str
    api: str | None
    answers: dict[str, DrillAnswerData]
    deployment: DrillTargetData
    served_models: NotRequired[list[str]]
    in_flight_at_kill: NotRequired[bool | None]
    steps: list[str]
    recovery_s: float
    went_down: bool
    versions: DrillVersionsData
    summary: str
    api_note: NotRequired[str | None]
    pipeline: NotRequired[list[PipelineCheckData] | None]


# --- the OpenAI chat bodies ------------------------------------------------------------------------------------------


class ToolChoice(TypedDict):
    type: Literal["function"]
    function: dict[str, str]


class ChatReply(TypedDict, total=False):
    """A chat completion's reply as far as the drill reads it, or `{"error": ...}` when none came back."""

    choices: list[ChatChoice]
    error: Any  # the server's error object, or the kit's one word (the exception's name, "not JSON")


class FailoverData(TypedDict):
    """The fail-over to the API: each request's HTTP status and which fields its reply carried."""

    call: tuple[int, dict[str, bool]]
    answer: tuple[int, dict[str, bool]]
