"""The JSON shapes the verdict writes and the report reads back: a row of the acceptance sheet, the traffic cap, a
loosened setting and the target's identity as `decision.json` holds them, and `decision.json` itself as the report
and `k3 verify` read it (an acceptance's or a review's).

TypedDicts: they change nothing at run time. The three the decision's record validates (`ChecklistRow`,
`DecisionCap`) allow keys they do not name and declare theirs in the order the verdict writes them, so that
`decision.json` keeps its keys, their order and their values (a number is `int | float`: never coerced)."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, with_config
from typing_extensions import TypedDict

from ..io.claims import Claims

__all__ = ["ChecklistRow", "DecisionCap", "DecisionDoc", "IdentityDoc", "LoosenedDoc", "RecipeSection",
           "ServedFacts", "TieDoc"]


@with_config(ConfigDict(extra="allow"))
class ChecklistRow(TypedDict, total=False):
    """One row of the acceptance sheet (k3lib.verdict.sheet.sheet_rows; `axis_checklist` writes the first five)."""

    id: str
    title: str
    status: str
    test: str
    configuration: str
    observed: str
    evidence: str | None
    notebook: str
    rules: list[str]
    reviewer: str | None


@with_config(ConfigDict(extra="allow"))
class DecisionCap(TypedDict, total=False):
    """The traffic cap of a limited observation (k3lib.verdict.decision.traffic_cap_from)."""

    max_concurrency: int
    saturation_point: int | None
    planned_concurrency: int | None
    basis: str
    source: str | None
    agents_max_concurrency: int
    agents_blocked: bool


class LoosenedDoc(TypedDict, total=False):
    """A loosened setting as `decision.json` lists it (`k3lib.core.thresholds.Loosened.model_dump(mode="json")`)."""

    path: str
    value: Any  # the setting's value: whatever JSON the parameters hold
    default: Any
    bounds: str
    basis: str
    source: str | None
    accepted_by: str | None
    accepted_on: str | None
    why: str | None
    floor_basis: str | None


class TieDoc(TypedDict):
    """How one source stands to the target (k3lib.verdict.identity.SourceTie)."""

    status: str
    via: list[str]
    mismatches: list[str]


class IdentityDoc(TypedDict):
    """The target's identity and each source's tie to it (k3lib.verdict.identity.SourceTies)."""

    target: Claims
    sources: dict[str, TieDoc]
    target_changed: list[str]


class DecisionDoc(TypedDict, total=False):
    """`decision.json` as it is read back: the acceptance's (k3lib.verdict.decision.AcceptanceDecision) or a
    review's (k3lib.renewal.decision.RenewalDecision: `rule`, `findings`, `condition`, `routing`)."""

    decision: str
    reasons: list[str]
    checklist: list[ChecklistRow]
    traffic_cap: DecisionCap | None
    reexamine_on: str | None
    build: str
    agents_blocked: bool
    cache_gain_counted: bool
    loosened_thresholds: list[LoosenedDoc]
    identity: IdentityDoc | None
    target_kind: str | None
    rule: str | None
    findings: list[Any]  # the review's findings (k3lib.renewal.findings.RenewalFinding), read by the renewal
    condition: str
    routing: Any  # the dual circuit's routing (k3lib.renewal.live.category_routing), shown as it is


class RecipeSection(TypedDict, total=False):
    """The parameters' `recipe` subtree as the sheet reads it (k3lib.core.params.RecipeParams)."""

    name: str | None
    vllm_min: str | None
    vllm_max: str | None
    cuda_major: int | None
    driver_branch_min: int | None
    build: str
    image: str | None


class ServedFacts(TypedDict, total=False):
    """What the target showed of itself, as the served-basis floors read it (k3lib.verdict.served.served_facts)."""

    recipe: dict[str, float | str | bool | None]  # the served model's recipe, dotted path: value (Recipe.judged)
    recipe_name: str
    recipe_model: str
    gpu: str
    hbm_tb_s: float | None
